//! The subcommands other than `serve`: open the store, name the pool, act.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use semaphore_memory::{Limits, Pool, PoolId, Store};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_sqlite::SqliteStore;

use crate::cli::{Command, PoolArgs, PoolName, StoreArgs};
use crate::exit::{Exit, code};

/// Runs a subcommand; the exit code.
pub(crate) async fn run(command: Command) -> Result<u8, Exit> {
    match command {
        Command::Serve(_) => Err(Exit::new(code::SOFTWARE, "serve is run by main")),
        Command::Run(args) => {
            let (pool, name) = pool(&args.store, &args.name).await?;
            crate::run::run(args, pool, name).await
        }
        Command::Register(args) => {
            let (pool, _) = pool(&args.pool.store, &args.pool.name).await?;
            let state = pool.register(args.count).await.map_err(Exit::from_store)?;
            print_state(&args.pool, state);
            Ok(0)
        }
        Command::Inspect(args) => {
            let (pool, _) = pool(&args.store, &args.name).await?;
            let state = pool.inspect().await.map_err(Exit::from_store)?;
            print_state(&args, state);
            Ok(0)
        }
        Command::Borrow(args) => {
            let (pool, name) = pool(&args.pool.store, &args.pool.name).await?;
            if let Some(count) = args.count {
                pool.register(count).await.map_err(Exit::from_store)?;
            }
            let lease = match pool.borrow(args.ttl, args.wait).await {
                Ok(guard) => guard.forget(),
                Err(semaphore_memory::Error::Exhausted { waited, .. }) => {
                    return Err(Exit::new(
                        args.exhausted_code.unwrap_or(code::TEMPFAIL),
                        format!("no slot of pool {name} freed up within {waited:?}"),
                    ));
                }
                Err(e) => return Err(Exit::from_store(e)),
            };
            println!("export SEMAPHORE_POSITION={}", lease.position);
            println!("export SEMAPHORE_TOKEN={}", lease.token);
            println!("export SEMAPHORE_LEASE_ID={}", lease.id);
            println!("export SEMAPHORE_POOL='{}'", name.replace('\'', "'\\''"));
            println!(
                "export SEMAPHORE_EXPIRES_AT_MS={}",
                semaphore_memory::unix_ms(lease.expires_at)
            );
            Ok(0)
        }
        Command::Return(args) => {
            let (pool, _) = pool(&args.pool.store, &args.pool.name).await?;
            let id = semaphore_memory::LeaseId::from_uuid(args.lease);
            let returned = pool.return_lease(id).await.map_err(Exit::from_store)?;
            println!(
                "{}",
                if args.pool.json {
                    format!("{{\"returned\":{returned}}}")
                } else {
                    format!("returned: {returned}")
                }
            );
            Ok(0)
        }
        Command::Renew(args) => {
            let (pool, _) = pool(&args.lease.pool.store, &args.lease.pool.name).await?;
            let id = semaphore_memory::LeaseId::from_uuid(args.lease.lease);
            let holders = pool.holders().await.map_err(Exit::from_store)?;
            let current = holders
                .into_iter()
                .find(|h| h.lease.id == id)
                .ok_or_else(|| {
                    Exit::new(
                        code::UNAVAILABLE,
                        format!(
                            "lease {id} is not active: returned, expired, or never this pool's"
                        ),
                    )
                })?;
            let renewed = pool
                .renew(&current.lease, args.ttl)
                .await
                .map_err(Exit::from_store)?;
            println!(
                "export SEMAPHORE_EXPIRES_AT_MS={}",
                semaphore_memory::unix_ms(renewed.expires_at)
            );
            Ok(0)
        }
        Command::Holders(args) => {
            let (pool, _) = pool(&args.store, &args.name).await?;
            for h in pool.holders().await.map_err(Exit::from_store)? {
                let expires = semaphore_memory::unix_ms(h.lease.expires_at);
                let owner = h.owner.unwrap_or_else(|| "-".into());
                if args.json {
                    println!(
                        "{{\"position\":{},\"token\":{},\"owner\":{:?},\"expires_at_ms\":{expires},\"lease\":\"{}\"}}",
                        h.lease.position, h.lease.token, owner, h.lease.id
                    );
                } else {
                    println!(
                        "{} {} {owner} {expires} {}",
                        h.lease.position, h.lease.token, h.lease.id
                    );
                }
            }
            Ok(0)
        }
        Command::Delete(args) => {
            let (pool, _) = pool(&args.store, &args.name).await?;
            let deleted = pool.delete().await.map_err(Exit::from_store)?;
            println!(
                "{}",
                if args.json {
                    format!("{{\"deleted\":{deleted}}}")
                } else {
                    format!("deleted: {deleted}")
                }
            );
            Ok(0)
        }
    }
}

fn print_state(args: &PoolArgs, s: semaphore_memory::PoolState) {
    if args.json {
        println!(
            "{{\"id\":\"{}\",\"count\":{},\"in_use\":{},\"available\":{}}}",
            s.id, s.count, s.in_use, s.available
        );
    } else {
        println!(
            "count {} in_use {} available {}",
            s.count, s.in_use, s.available
        );
    }
}

/// The pool a command names, on the store it names (no limit on the wait:
/// `--wait inf` means it), and the name to show.
async fn pool(store: &StoreArgs, name: &PoolName) -> Result<(Pool, String), Exit> {
    let store = open(store).await?;
    let (id, shown) = match (&name.pool, name.pool_id) {
        (Some(name), _) => (PoolId::from_name(name), name.clone()),
        (None, Some(id)) => (PoolId::from_uuid(id), id.to_string()),
        (None, None) => {
            return Err(Exit::new(
                code::USAGE,
                "name a pool: --pool NAME or --pool-id UUID",
            ));
        }
    };
    let limits = Limits::default().with_max_wait(Duration::MAX);
    Ok((Pool::new(store, id).with_limits(limits), shown))
}

async fn open(args: &StoreArgs) -> Result<Arc<dyn Store>, Exit> {
    if let Some(url) = &args.postgres {
        let options = PostgresOptions::default()
            .schema(&args.postgres_schema)
            .pool_size(2);
        let store = PostgresStore::connect_with(url, options)
            .await
            .map_err(Exit::from_store)?;
        return Ok(Arc::new(store));
    }
    let path = match &args.sqlite {
        Some(path) => path.clone(),
        None => default_db()?,
    };
    let store = SqliteStore::open(&path).map_err(Exit::from_store)?;
    Ok(Arc::new(store))
}

/// `semaphore.db` in the user's data directory ($XDG_DATA_HOME, else
/// ~/.local/share), created if need be.
fn default_db() -> Result<PathBuf, Exit> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .ok_or_else(|| {
            Exit::new(
                code::USAGE,
                "no --sqlite, $SEMAPHORE_DB, $XDG_DATA_HOME or $HOME to find the database",
            )
        })?;
    let dir = base.join("semaphore");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Exit::new(code::IOERR, format!("creating {}: {e}", dir.display())))?;
    Ok(dir.join("semaphore.db"))
}
