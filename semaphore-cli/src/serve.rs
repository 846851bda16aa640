//! `semaphore serve`: opens the store, binds, serves, and shuts down on
//! SIGTERM or Ctrl-C, answering every waiting borrow with 503.

use std::sync::Arc;
use std::time::Duration;

use semaphore_memory::{Limits, MemoryStore, Store};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_sqlite::SqliteStore;
use tokio::sync::watch;

use crate::api::{self, App};
use crate::cli::ServeArgs;

/// Why `serve` stopped, with the exit code it maps to (sysexits).
#[derive(Debug)]
pub(crate) enum ServeError {
    /// The store could not be opened.
    Store(semaphore_memory::Error),
    /// The address could not be bound, or serving failed.
    Io(std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Store(e) => write!(f, "opening the store: {e}"),
            ServeError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl ServeError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            ServeError::Store(semaphore_memory::Error::InvalidArgument { .. }) => 64,
            ServeError::Store(_) => 74,
            ServeError::Io(_) => 71,
        }
    }
}

async fn open(args: &ServeArgs) -> Result<(Arc<dyn Store>, String), semaphore_memory::Error> {
    if args.memory {
        return Ok((Arc::new(MemoryStore::new()), "memory".into()));
    }
    if let Some(url) = &args.postgres {
        let options = PostgresOptions::default().schema(&args.postgres_schema);
        let store = PostgresStore::connect_with(url, options).await?;
        return Ok((
            Arc::new(store),
            format!("postgres schema {}", args.postgres_schema),
        ));
    }
    let path = args.sqlite.clone().unwrap_or_else(|| "semaphore.db".into());
    let shown = format!("sqlite {}", path.display());
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(path))
        .await
        .map_err(|e| semaphore_memory::Error::Storage {
            operation: "open",
            retryable: false,
            source: Box::new(e),
        })??;
    Ok((Arc::new(store), shown))
}

pub(crate) async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let (store, shown) = open(&args).await.map_err(ServeError::Store)?;
    let limits = Limits::default()
        .with_max_count(args.max_count)
        .with_max_ttl(args.max_ttl)
        .with_max_wait(args.max_wait);
    let (down, shutdown) = watch::channel(false);
    let aliases = args
        .alias
        .iter()
        .map(|(name, id)| (name.clone(), semaphore_memory::PoolId::from_uuid(*id)))
        .collect();
    let app = App {
        store,
        limits,
        shutdown,
        metrics: crate::metrics::Metrics::new(aliases),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(ServeError::Io)?;
    let address = listener.local_addr().map_err(ServeError::Io)?;
    println!("listening on http://{address} ({shown})");
    let signal = async move {
        stop_signal().await;
        // Waiting borrows answer 503 at once; the server then stops.
        let _ = down.send(true);
    };
    let served = axum::serve(listener, api::router(app)).with_graceful_shutdown(signal);
    // Connections that stay open (keep-alive, slow clients) get 0.8 s, so
    // that the process is gone within 1 s of the signal.
    let mut stopped = std::pin::pin!(served.into_future());
    tokio::select! {
        result = &mut stopped => result.map_err(ServeError::Io),
        () = async {
            stop_signal().await;
            tokio::time::sleep(Duration::from_millis(800)).await;
        } => Ok(()),
    }
}

/// SIGTERM or Ctrl-C (SIGINT).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
