//! A client generated from the served OpenAPI document works (a
//! check that the document describes the API whole): openapi-python-client
//! (PyPI, pinned, in a virtualenv under the target directory) generates a
//! Python package from `/openapi.json`, and `scripts/python_client.py`
//! drives the real server with it: register, borrow, a two-phase wait,
//! returns. Needs `python3` with `venv` and `pip`, and PyPI reachable.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

/// The generator's version: a newer one may generate other code.
const GENERATOR: &str = "openapi-python-client==0.29.1";

fn run(what: &str, command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (this test needs python3 with venv and pip)"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A virtualenv with the generator, made once per target directory.
fn generator() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openapi-python-client-venv");
    let bin = venv.join("bin");
    let marker = venv.join(GENERATOR);
    if !marker.exists() {
        run(
            "python3 -m venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        );
        run(
            "pip install openapi-python-client",
            Command::new(bin.join("pip")).args(["install", "--quiet", GENERATOR]),
        );
        std::fs::write(&marker, b"").unwrap();
    }
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_generated_from_the_document_borrows_waits_two_phase_and_returns() {
    let bin = generator();
    let server = Server::start(&["--memory"]);
    let dir = tempfile::tempdir().unwrap();
    let document = dir.path().join("openapi.json");
    std::fs::write(&document, server.text("/openapi.json").await).unwrap();
    let config = dir.path().join("config.yaml");
    // No formatter runs after generating (ruff is not installed).
    std::fs::write(&config, "post_hooks: []\n").unwrap();
    run(
        "openapi-python-client generate",
        Command::new(bin.join("openapi-python-client"))
            .args(["generate", "--meta", "none", "--path"])
            .arg(&document)
            .arg("--config")
            .arg(&config)
            .arg("--output-path")
            .arg(dir.path().join("semaphore_client")),
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/python_client.py");
    // On the memory store the server keeps the ticket; on SQLite the store
    // does, and the ticket describes itself.
    let db = dir.path().join("python.db");
    let shared = Server::start(&["--sqlite", db.to_str().unwrap()]);
    for base in [server.base.clone(), shared.base.clone()] {
        let python = bin.join("python");
        let path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            run(
                "the generated client's script",
                Command::new(python)
                    .arg(script)
                    .arg(base)
                    .env("PYTHONPATH", path),
            );
        })
        .await
        .unwrap();
    }
}
