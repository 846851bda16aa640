//! The `tracing` and `metrics` features: what a subscriber and a recorder
//! see of borrows, returns, renewals, expiries, lost leases and batches.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use semaphore_core::store::Batches;
use semaphore_core::{ManualClock, Pool, PoolId};
use semaphore_memory::MemoryStore;
use tracing_subscriber::fmt::format::FmtSpan;

const TTL: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `job` under a subscriber that prints every span's close and every
/// event at debug and above; returns what it printed.
fn traced(job: impl AsyncFnOnce()) -> String {
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let out = out.clone();
            move || Printed(out.clone())
        })
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .finish();
    tracing::subscriber::with_default(subscriber, || runtime().block_on(job()));
    String::from_utf8(out.lock().unwrap().clone()).unwrap()
}

/// What the subscriber prints, kept for the test to read.
struct Printed(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Printed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_borrow_is_one_span_with_its_pool_position_token_and_outcome() {
    let id = PoolId::random();
    let printed = traced(async || {
        let pool = Pool::new(Arc::new(MemoryStore::new()), id).with_alias("gpus");
        pool.register(1).await.unwrap();
        let lease = pool.borrow(TTL, Duration::ZERO).await.unwrap();
        assert!(pool.borrow(TTL, Duration::ZERO).await.is_err());
        lease.release().await.unwrap();
    });
    let spans: Vec<&str> = printed.lines().filter(|l| l.contains("borrow{")).collect();
    assert_eq!(spans.len(), 2, "{printed}");
    for field in ["pool=\"gpus\"", "ttl_ms=30000", "wait_ms=0", "position=0"] {
        assert!(spans[0].contains(field), "{field} missing: {}", spans[0]);
    }
    assert!(spans[0].contains("token=1") && spans[0].contains("outcome=\"granted\""));
    assert!(spans[1].contains("outcome=\"exhausted\"") && !spans[1].contains("position"));
    assert!(printed.contains("lease returned"), "{printed}");
    assert!(
        !printed.contains(&id.to_string()),
        "the pool id leaked: {printed}"
    );
}

#[test]
fn a_pool_without_alias_is_named_by_a_hash_never_by_its_id() {
    let id = PoolId::random();
    let printed = traced(async || {
        let pool = Pool::new(Arc::new(MemoryStore::new()), id);
        pool.register(1).await.unwrap();
        drop(pool.borrow(TTL, Duration::ZERO).await.unwrap());
    });
    assert!(printed.contains("pool=\"pool-"), "{printed}");
    assert!(
        !printed.contains(&id.to_string()),
        "the pool id leaked: {printed}"
    );
}

#[test]
fn expiries_forced_returns_and_lost_leases_are_events() {
    let printed = traced(async || {
        tokio::time::pause();
        let clock = Arc::new(ManualClock::new());
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let pool = Pool::new(store, PoolId::from_name("jobs")).with_alias("jobs");
        pool.register(2).await.unwrap();

        let lease = pool.borrow(TTL, Duration::ZERO).await.unwrap();
        clock.advance(TTL);
        assert!(!lease.release().await.unwrap());

        let mut kept = pool.borrow(TTL, Duration::ZERO).await.unwrap();
        kept.keep_alive();
        pool.force_return(kept.position).await.unwrap();
        clock.advance(TTL / 2);
        kept.lost().await;
    });
    assert!(printed.contains("expired lease seen"), "{printed}");
    assert!(printed.contains("lease force-returned"), "{printed}");
    let lost = printed.lines().find(|l| l.contains("lease lost"));
    assert!(lost.is_some_and(|l| l.contains("WARN") && l.contains("pool=\"jobs\"")));
}

#[test]
fn a_recorder_sees_counters_gauges_and_the_wait_histogram() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::random()).with_alias("jobs");
            pool.register(2).await.unwrap();
            let first = pool.borrow(TTL, Duration::ZERO).await.unwrap();
            let second = pool.borrow(TTL, Duration::ZERO).await.unwrap();
            assert!(pool.borrow(TTL, Duration::ZERO).await.is_err());
            drop(first);
            assert!(second.release().await.unwrap());
        });
    });
    let seen: Vec<(MetricKind, String, Vec<String>, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let labels = key.labels().map(|l| format!("{}={}", l.key(), l.value()));
            (kind, key.name().to_owned(), labels.collect(), value)
        })
        .collect();
    let value = |name: &str| {
        let found = seen.iter().find(|(_, n, _, _)| n == name);
        let (_, _, labels, value) = found.unwrap_or_else(|| panic!("{name} missing: {seen:?}"));
        assert_eq!(labels, &["pool=jobs"]);
        value
    };
    assert_eq!(value("semaphore_grants_total"), &DebugValue::Counter(2));
    assert_eq!(value("semaphore_exhausted_total"), &DebugValue::Counter(1));
    assert_eq!(value("semaphore_returns_total"), &DebugValue::Counter(2));
    // Both leases were returned (one dropped, one released), and no borrow
    // is in progress.
    assert_eq!(value("semaphore_in_use"), &DebugValue::Gauge(0.0.into()));
    assert_eq!(value("semaphore_waiting"), &DebugValue::Gauge(0.0.into()));
    // Two grants and one refusal waited.
    match value("semaphore_borrow_wait_seconds") {
        DebugValue::Histogram(waits) => assert_eq!(waits.len(), 3),
        other => panic!("not a histogram: {other:?}"),
    }
}

#[test]
fn a_recorder_sees_each_batch_size_of_group_commit() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let batches = Batches::new();
        assert!(batches.push(1));
        assert!(!batches.push(2));
        assert_eq!(batches.next(), [1, 2]);
        assert!(!batches.push(3));
        assert_eq!(batches.next(), [3]);
        // The empty look that ends the flight is no batch.
        assert!(batches.next().is_empty());
    });
    let sizes: Vec<DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "semaphore_store_batch_size")
        .map(|(.., value)| value)
        .collect();
    match sizes.as_slice() {
        [DebugValue::Histogram(sizes)] => {
            let sizes: Vec<f64> = sizes.iter().map(|s| s.into_inner()).collect();
            assert_eq!(sizes, [2.0, 1.0]);
        }
        other => panic!("one histogram of batch sizes, not {other:?}"),
    }
}
