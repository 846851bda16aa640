//! A deployment with two roles: the owner migrates the schema
//! once (`PostgresStore::migrate`), and the application's role, with only
//! the grants `PostgresStore::grants` lists (no CREATE, owning nothing),
//! connects with `migrate(false)` and borrows, waits, renews and returns.

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};
use semaphore_postgres::{Error, Pool, PoolId, PostgresOptions, PostgresStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_role_with_only_the_grants_works_on_a_migrated_schema() {
    let server = TestServer::start().unwrap();
    let schema = TestServer::fresh_schema();
    let (owner, connection) = tokio_postgres::connect(server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    owner
        .batch_execute("CREATE ROLE app LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC;")
        .await
        .unwrap();
    let app_url = format!("{} user=app", server.url());
    let runtime = || PostgresOptions::default().schema(&schema).migrate(false);

    // Before the migration, the runtime role is refused, and told why.
    match PostgresStore::connect_with(&app_url, runtime()).await {
        Err(Error::SchemaMismatch { expected, .. }) => {
            assert!(expected.contains("semaphore migrate"), "{expected}");
        }
        other => panic!("an unmigrated schema was accepted: {other:?}"),
    }
    // Nor may it migrate.
    let refused =
        PostgresStore::migrate(&app_url, PostgresOptions::default().schema(&schema)).await;
    assert!(matches!(refused, Err(Error::Storage { .. })), "{refused:?}");

    let options = PostgresOptions::default().schema(&schema);
    PostgresStore::migrate(server.url(), options.clone())
        .await
        .unwrap();
    PostgresStore::migrate(server.url(), options).await.unwrap();
    owner
        .batch_execute(&PostgresStore::grants(&schema, "app").unwrap())
        .await
        .unwrap();

    let store = Arc::new(
        PostgresStore::connect_with(&app_url, runtime())
            .await
            .unwrap(),
    );
    let other = Arc::new(
        PostgresStore::connect_with(&app_url, runtime())
            .await
            .unwrap(),
    );
    let id = PoolId::from_name("roles");
    let (pool, theirs) = (Pool::new(store, id), Pool::new(other, id));
    pool.register(1).await.unwrap();
    let mut held = pool.try_borrow(Duration::from_secs(30)).await.unwrap();
    held.renew(Duration::from_secs(60)).await.unwrap();
    let waiting = theirs.clone();
    let waiter = tokio::spawn(async move {
        theirs
            .borrow(Duration::from_secs(30), Duration::from_secs(20))
            .await
            .map(|g| g.forget())
    });
    semaphore_core::conformance::until_waiting(&waiting, 1).await;
    assert!(held.release().await.unwrap());
    let next = waiter.await.unwrap().expect("the waiter was served");
    assert_eq!(next.position, 0);
    assert!(pool.holders().await.unwrap().len() == 1);

    // A role that may not write the sessions' table can never bind a
    // lease: it is refused at connect, not left to grant unbound leases
    // that outlive a killed process.
    owner
        .batch_execute(&format!(
            "REVOKE INSERT, UPDATE ON {schema}.semaphore_sessions FROM app"
        ))
        .await
        .unwrap();
    match PostgresStore::connect_with(&app_url, runtime()).await {
        Err(
            e @ Error::Storage {
                operation: "session",
                ..
            },
        ) => {
            assert!(e.to_string().contains("session"), "{e}");
        }
        other => panic!("a role that cannot keep a session was accepted: {other:?}"),
    }
}

#[test]
fn grants_refuse_a_role_that_would_need_quoting() {
    assert!(PostgresStore::grants("public", "app").is_ok());
    for role in ["", "App", "a;b", "x\"y"] {
        assert!(
            matches!(
                PostgresStore::grants("public", role),
                Err(Error::InvalidArgument { field: "role", .. })
            ),
            "{role:?}"
        );
    }
}
