//! `semaphore migrate`: the owner makes the PostgreSQL schema
//! and grants a runtime role; `semaphore run` as that role, with
//! `--postgres-no-migrate`, works; before the migration it is refused with
//! a message that names `semaphore migrate`.

mod common;

use std::process::Command;

use common::BIN;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_then_run_as_a_role_that_may_not_create() {
    let server = TestServer::start().unwrap();
    let schema = TestServer::fresh_schema();
    let (owner, connection) = tokio_postgres::connect(server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    owner
        .batch_execute("CREATE ROLE runner LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC;")
        .await
        .unwrap();
    let app_url = format!("{} user=runner", server.url());
    let run = || {
        Command::new(BIN)
            .args(["run", "--postgres", &app_url, "--postgres-schema", &schema])
            .args([
                "--postgres-no-migrate",
                "--pool",
                "p",
                "--count",
                "1",
                "--",
                "true",
            ])
            .output()
            .unwrap()
    };
    let refused = run();
    assert_eq!(refused.status.code(), Some(74), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("semaphore migrate"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let migrated = Command::new(BIN)
        .args([
            "migrate",
            "--postgres",
            server.url(),
            "--postgres-schema",
            &schema,
        ])
        .args(["--grant", "runner"])
        .output()
        .unwrap();
    assert_eq!(migrated.status.code(), Some(0), "{migrated:?}");
    let ran = run();
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}
