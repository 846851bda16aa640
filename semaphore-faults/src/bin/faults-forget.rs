//! Borrows one slot with a 60 s ttl, forgets the lease, prints its id and
//! returns from `main` at once: a process that hands its lease on and
//! exits (the lease must live to its ttl).
//!
//! ```text
//! faults-forget postgres|redis|mysql URL NAMESPACE POOL SESSION_MS
//! ```

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::store::Store;
use semaphore_sqlite::{Pool, PoolId};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store, url, namespace, pool, session_ms] = &args[..] else {
        eprintln!("usage: faults-forget postgres|redis|mysql URL NAMESPACE POOL SESSION_MS");
        std::process::exit(64);
    };
    let session = Duration::from_millis(session_ms.parse()?);
    let store: Arc<dyn Store> = match store.as_str() {
        "postgres" => Arc::new(
            PostgresStore::connect_with(
                url,
                PostgresOptions::default()
                    .schema(namespace)
                    .session_timeout(session),
            )
            .await?,
        ),
        "redis" => Arc::new(
            RedisStore::connect_with(
                url,
                RedisOptions::default()
                    .prefix(namespace)
                    .restart_grace(Duration::ZERO)
                    .session_timeout(session),
            )
            .await?,
        ),
        "mysql" => Arc::new(
            semaphore_mysql::MysqlStore::connect_with(
                url,
                semaphore_mysql::MysqlOptions::default()
                    .table_prefix(namespace.clone())
                    .session_timeout(session),
            )
            .await?,
        ),
        "etcd" => Arc::new(
            semaphore_etcd::EtcdStore::connect_with(
                &[url.as_str()],
                semaphore_etcd::EtcdOptions::default()
                    .prefix(namespace.clone())
                    .session_timeout(session),
            )
            .await?,
        ),
        other => return Err(format!("unknown store {other}").into()),
    };
    let pool = Pool::new(store, PoolId::from_name(pool));
    pool.register(1).await?;
    let lease = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await?
        .forget();
    println!("{}", lease.id);
    Ok(())
}
