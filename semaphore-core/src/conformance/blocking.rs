//! The blocking API from plain threads, on every store (rule "Beyond the
//! basic model").

use std::time::Duration;

use super::Fixture;
use crate::error::Error;

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

/// Plain threads register, borrow, wait, renew and return through the
/// blocking API; a guard dropped there returns its lease and wakes a
/// blocked waiter; inside a runtime the blocking calls refuse clearly.
pub async fn blocking_api_serves_plain_threads_and_refuses_inside_a_runtime(f: Fixture) {
    let pool = f.pool("p");
    match pool.blocking().inspect() {
        Err(Error::BlockingInRuntime {
            operation: "inspect",
        }) => {}
        other => panic!("a blocking call inside a runtime gave {other:?}"),
    }
    let plain = pool.clone();
    std::thread::spawn(move || {
        assert_eq!(plain.blocking().register(2).unwrap().count, 2);
        let first = plain.blocking().borrow(TTL, Duration::ZERO).unwrap();
        let mut second = plain.blocking().borrow(TTL, Duration::ZERO).unwrap();
        assert_eq!((first.position, second.position), (0, 1));
        let waiter = {
            let pool = plain.clone();
            std::thread::spawn(move || pool.blocking().borrow(TTL, LONG).map(|g| g.forget()))
        };
        while plain.waiting().count != 1 {
            std::thread::yield_now();
        }
        drop(first); // returned from this plain thread; wakes the waiter
        let woken = waiter.join().unwrap().unwrap();
        assert_eq!(woken.position, 0);
        second.blocking_renew(TTL).unwrap();
        assert!(second.blocking_release().unwrap());
        assert!(plain.blocking().return_lease(woken.id).unwrap());
        assert_eq!(plain.blocking().inspect().unwrap().in_use, 0);
        assert!(plain.blocking().delete().unwrap());
    })
    .join()
    .expect("the blocking API on a plain thread");
    assert!(matches!(
        pool.inspect().await,
        Err(Error::PoolNotFound { .. })
    ));
}
