//! The store's schema: names it refuses, and the migration from version 1
//! (issue 21, items 11 and 15).

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};
use semaphore_postgres::{Error, PostgresOptions, PostgresStore};

async fn open(schema: &str) -> Result<PostgresStore, Error> {
    let options = PostgresOptions::default().schema(schema);
    PostgresStore::connect_with(TestServer::shared().url(), options).await
}

#[tokio::test]
async fn the_servers_own_schemas_are_refused_before_anything_is_written() {
    for name in ["pg_catalog", "pg_toast", "pg_temp", "information_schema"] {
        match open(name).await {
            Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "schema"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_huge_schema_name_gives_a_short_error() {
    let name = "a".repeat(1 << 20);
    let e = open(&name)
        .await
        .expect_err("a 1 MB schema name was accepted");
    let shown = e.to_string();
    assert!(shown.len() < 400, "{} bytes", shown.len());
    assert!(shown.contains("1048576 bytes"), "{shown}");
}

#[tokio::test]
async fn a_missing_database_is_named_in_the_error() {
    let url = TestServer::shared().url();
    let url = match url.split_once("://") {
        // A URI (SEMAPHORE_PG_URL may be one): keep scheme, user and host.
        Some((scheme, rest)) => {
            let host = rest.split(['/', '?']).next().unwrap_or(rest);
            format!("{scheme}://{host}/no_such_database")
        }
        None => format!("{url} dbname=no_such_database"),
    };
    let e = PostgresStore::connect(&url).await.expect_err("connected");
    let shown = e.to_string();
    assert!(shown.contains("no_such_database"), "{shown}");
    assert!(shown.contains("3D000"), "{shown}");
}

/// A schema written at version 1 (the same tables, older functions) is
/// migrated in place when a store of this version connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated() {
    let schema = TestServer::fresh_schema();
    drop(open(&schema).await.unwrap());
    let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let version = format!("SELECT schema_version FROM \"{schema}\".semaphore_store");
    client
        .batch_execute(&format!(
            "UPDATE \"{schema}\".semaphore_store SET schema_version = 1;
             CREATE OR REPLACE FUNCTION \"{schema}\".semaphore_delete(p_pool uuid)
             RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;"
        ))
        .await
        .unwrap();
    let store = open(&schema)
        .await
        .expect("the version 1 schema was refused");
    let found: i32 = client.query_one(&version, &[]).await.unwrap().get(0);
    assert_eq!(found, 2);
    let pool = semaphore_postgres::Pool::new(
        std::sync::Arc::new(store),
        semaphore_postgres::PoolId::from_name("p"),
    );
    pool.register(1).await.unwrap();
    assert!(pool.delete().await.unwrap(), "the old function was kept");
}
