//! The store's schema: names it refuses, and the migrations from versions
//! 1 to 6.

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
    let shown = e.chain().to_string();
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
    let shown = e.chain().to_string();
    assert!(shown.contains("no_such_database"), "{shown}");
    assert!(shown.contains("3D000"), "{shown}");
}

/// Turns the version 11 schema `schema` into version `old`'s shape, with
/// pool `pool_id` (count 3) and one lease at position 0.
async fn downgrade(
    client: &tokio_postgres::Client,
    schema: &str,
    old: i32,
    pool_id: semaphore_postgres::PoolId,
) {
    if old >= 6 {
        // Versions 6 to 10 had the same tables, and functions of the same
        // arguments but two (8's `semaphore_handed`, which 9 replaced, and
        // the wake-up, `semaphore_returned`, which 11 replaced); one of
        // them stands in for the old ones here (9's `semaphore_leave_queue`
        // differs from 10's in its body only).
        client
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".semaphore_pools VALUES ('{p}', 3);
                 INSERT INTO \"{schema}\".semaphore_slots (pool, position, lease, token, expires_at)
                     VALUES ('{p}', 0, gen_random_uuid(), 1, 9000000000000);",
                p = pool_id.as_uuid(),
            ))
            .await
            .unwrap();
        as_version(client, schema, old).await;
        return;
    }
    if old == 5 {
        // Version 5 had the same tables, without the sessions' triggers.
        client
            .batch_execute(&format!(
                "UPDATE \"{schema}\".semaphore_store SET schema_version = 5;
                 ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN since, DROP COLUMN held;
                 DROP TRIGGER semaphore_session_deleted ON \"{schema}\".semaphore_sessions;
                 DROP TRIGGER semaphore_session_cut ON \"{schema}\".semaphore_sessions;
                 DROP FUNCTION \"{schema}\".semaphore_session_ended();
                 INSERT INTO \"{schema}\".semaphore_pools VALUES ('{p}', 3);
                 INSERT INTO \"{schema}\".semaphore_slots (pool, position, lease, token, expires_at)
                     VALUES ('{p}', 0, gen_random_uuid(), 1, 9000000000000),
                         ('{p}', 1, NULL, NULL, 0), ('{p}', 2, NULL, NULL, 0);",
                p = pool_id.as_uuid(),
            ))
            .await
            .unwrap();
        return;
    }
    client
        .batch_execute(&format!(
            "UPDATE \"{schema}\".semaphore_store SET schema_version = {old};
             ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN since, DROP COLUMN held;
             DROP TABLE \"{schema}\".semaphore_sessions;
             ALTER TABLE \"{schema}\".semaphore_slots DROP COLUMN session,
                 DROP COLUMN granted_to, ADD COLUMN holder integer,
                 ADD COLUMN holder_start bigint, ADD COLUMN granted_to uuid;
             ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN session,
                 ADD COLUMN holder integer, ADD COLUMN holder_start bigint;
             INSERT INTO \"{schema}\".semaphore_pools VALUES ('{}', 3);",
            pool_id.as_uuid(),
        ))
        .await
        .unwrap();
    if old == 4 {
        client
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".semaphore_slots
                     (pool, position, lease, token, expires_at, holder, holder_start)
                 VALUES ('{}', 0, gen_random_uuid(), 1, 9000000000000, 7, 7);",
                pool_id.as_uuid(),
            ))
            .await
            .unwrap();
    } else {
        client
            .batch_execute(&format!(
                "DROP TABLE \"{schema}\".semaphore_slots;
             ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN ttl, DROP COLUMN owner,
                 DROP COLUMN holder, DROP COLUMN holder_start;
             CREATE TABLE \"{schema}\".semaphore_leases (
                 pool uuid NOT NULL, position bigint NOT NULL, lease uuid NOT NULL,
                 token bigint NOT NULL, expires_at bigint NOT NULL, owner text,
                 borrow_key text, holder integer, holder_start bigint,
                 PRIMARY KEY (pool, position));
             CREATE INDEX semaphore_leases_lease ON \"{schema}\".semaphore_leases (lease);
             INSERT INTO \"{schema}\".semaphore_leases VALUES
                 ('{}', 0, gen_random_uuid(), 1, 9000000000000, NULL, NULL, 7, 7);",
                pool_id.as_uuid()
            ))
            .await
            .unwrap();
    }
    if old < 3 {
        client
            .batch_execute(&format!(
                "ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN slots;
                 ALTER TABLE \"{schema}\".semaphore_leases DROP COLUMN holder,
                     DROP COLUMN holder_start;
                 ALTER TABLE \"{schema}\".semaphore_pools DROP COLUMN draining;
                 DROP INDEX \"{schema}\".semaphore_leases_lease;
                 ALTER TABLE \"{schema}\".semaphore_leases
                     ADD CONSTRAINT semaphore_leases_lease_key UNIQUE (lease);
                 CREATE OR REPLACE FUNCTION \"{schema}\".semaphore_delete(p_pool uuid)
                 RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
                 DROP FUNCTION \"{schema}\".semaphore_renew;
                 CREATE FUNCTION \"{schema}\".semaphore_renew(
                     p_pool uuid, p_lease uuid, p_ttl bigint, p_now bigint)
                 RETURNS TABLE (o_status smallint, o_lease uuid, o_position bigint,
                     o_token bigint, o_expires_at bigint)
                 LANGUAGE sql AS $$ SELECT 1::smallint, NULL::uuid, NULL::bigint,
                     NULL::bigint, NULL::bigint $$;"
            ))
            .await
            .unwrap();
    }
}

/// Marks schema `schema` as version `old` (6 to 10), with a `semaphore_delete` that
/// deletes nothing standing in for that version's functions, which a
/// migration replaces.
async fn as_version(client: &tokio_postgres::Client, schema: &str, old: i32) {
    // Up to version 8, places recorded neither when they were taken nor
    // whether they were held.
    let columns = if old <= 8 {
        format!("ALTER TABLE \"{schema}\".semaphore_waiters DROP COLUMN since, DROP COLUMN held;")
    } else {
        String::new()
    };
    client
        .batch_execute(&format!(
            "UPDATE \"{schema}\".semaphore_store SET schema_version = {old};
             {columns}
             CREATE OR REPLACE FUNCTION \"{schema}\".semaphore_delete(p_pool uuid)
             RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
             DROP FUNCTION \"{schema}\".semaphore_returned(uuid, boolean, uuid);
             CREATE FUNCTION \"{schema}\".semaphore_returned(p_pool uuid, p_handed boolean)
             RETURNS void LANGUAGE sql AS $$ SELECT $$;"
        ))
        .await
        .unwrap();
}

/// A schema written at version 1 to 10 (up to 3 a row per held
/// slot in `semaphore_leases`; at 1 and 2 a lease id unique, queued heads
/// without a weight, older functions; up to 4 leases bound to backends, no
/// sessions; up to 5 no triggers on the sessions; up to 8 older functions;
/// one lease held) is migrated in place to version 11 when a store of this
/// version connects, keeping its lease, and then grants weighted leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_to_10_schema_is_migrated() {
    for old in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] {
        let schema = TestServer::fresh_schema();
        drop(open(&schema).await.unwrap());
        let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let version = format!("SELECT schema_version FROM \"{schema}\".semaphore_store");
        let pool_id = semaphore_postgres::PoolId::from_name("p");
        downgrade(&client, &schema, old, pool_id).await;
        let options = PostgresOptions::default().schema(&schema).migrate(false);
        let refused = PostgresStore::connect_with(TestServer::shared().url(), options).await;
        assert!(
            matches!(refused, Err(Error::SchemaMismatch { .. })),
            "version {old} opened with migrate(false): {refused:?}"
        );
        let store = open(&schema)
            .await
            .unwrap_or_else(|e| panic!("the version {old} schema was refused: {e}"));
        let found: i32 = client.query_one(&version, &[]).await.unwrap().get(0);
        assert_eq!(found, 11, "from version {old}");
        let old_wakes: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                     WHERE n.nspname = '{schema}' AND p.proname = 'semaphore_returned'
                         AND p.pronargs = 2"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(old_wakes, 0, "version {old}'s wake-up was left beside 11's");
        let pool = semaphore_postgres::Pool::new(std::sync::Arc::new(store), pool_id);
        assert_eq!(
            pool.inspect().await.unwrap().in_use,
            1,
            "the lease was kept"
        );
        let two = pool
            .borrow_with(
                std::time::Duration::from_secs(60),
                std::time::Duration::ZERO,
                semaphore_postgres::BorrowOptions::new().slots(2),
            )
            .await
            .unwrap();
        assert_eq!(&two.positions[..], &[1, 2]);
        pool.renew(two.lease(), std::time::Duration::from_secs(90))
            .await
            .expect("the old renew function was replaced");
        assert!(pool.delete().await.unwrap(), "the old function was kept");
    }
}

/// A version 6 schema in use, with a lease held and a borrower of
/// another store handle queued behind it, is migrated by a third handle
/// that connects: the lease stays held, the queued borrower is granted
/// its slot when the lease is returned after the migration, and the
/// functions are the new version's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_schema_in_use_is_migrated_under_its_leases_and_waiters() {
    use std::sync::Arc;
    use std::time::Duration;
    let schema = TestServer::fresh_schema();
    let pool_id = semaphore_postgres::PoolId::from_name("live");
    let holder = semaphore_postgres::Pool::new(Arc::new(open(&schema).await.unwrap()), pool_id);
    holder.register(1).await.unwrap();
    let held = holder
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let waiter = semaphore_postgres::Pool::new(Arc::new(open(&schema).await.unwrap()), pool_id);
    let waiting = tokio::spawn(async move {
        let granted = waiter
            .borrow(Duration::from_secs(60), Duration::from_secs(60))
            .await?;
        let positions = granted.positions.clone();
        granted.release().await?;
        Ok::<_, Error>(positions)
    });
    let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let places = format!("SELECT count(*) FROM \"{schema}\".semaphore_waiters");
    while client
        .query_one(&places, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    as_version(&client, &schema, 6).await;
    let migrating = semaphore_postgres::Pool::new(Arc::new(open(&schema).await.unwrap()), pool_id);
    let version = format!("SELECT schema_version FROM \"{schema}\".semaphore_store");
    let found: i32 = client.query_one(&version, &[]).await.unwrap().get(0);
    assert_eq!(found, 11);
    assert_eq!(
        migrating.inspect().await.unwrap().in_use,
        1,
        "the lease was kept"
    );
    assert!(held.is_held(), "the lease is still its holder's");
    held.release().await.unwrap();
    let positions = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the queued borrower was never granted")
        .unwrap()
        .expect("the queued borrower's borrow failed");
    assert_eq!(&positions[..], &[0]);
    assert!(
        migrating.delete().await.unwrap(),
        "the old function was kept"
    );
}

/// Several processes that find a version 4 schema at once each migrate it
/// or find it migrated: none fails (3 of 4
/// failed, on what another had already changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_schema_opened_by_four_at_once_is_migrated_once() {
    for _ in 0..3 {
        let schema = TestServer::fresh_schema();
        drop(open(&schema).await.unwrap());
        let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        downgrade(
            &client,
            &schema,
            4,
            semaphore_postgres::PoolId::from_name("p"),
        )
        .await;
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let schema = schema.clone();
                tokio::spawn(async move { open(&schema).await.map(drop) })
            })
            .collect();
        for opened in opens {
            opened.await.unwrap().expect("a concurrent open failed");
        }
    }
}
