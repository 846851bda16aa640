//! The subcommands other than `serve`: open the store, name the pool, act.

use std::time::Duration;

use semaphore_core::{BorrowOptions, Limits, Pool, PoolId};

use crate::cli::{Command, PoolArgs, PoolName, StoreArgs};
use crate::exit::{Exit, code};

/// Runs a subcommand; the exit code.
pub(crate) async fn run(command: Command) -> Result<u8, Exit> {
    match command {
        Command::Serve(_) => Err(Exit::new(code::SOFTWARE, "serve is run by main")),
        Command::Run(args) => {
            let choice = choice(&args.store)?.with_default_session(crate::run::SESSION_TIMEOUT);
            let (pool, name) = pool_on(&choice, &args.name).await?;
            crate::run::run(args, pool, name, choice).await
        }
        Command::Migrate(args) => migrate(&args).await,
        Command::Register(args) => {
            let (pool, _) = pool(&args.pool.store, &args.pool.name).await?;
            let state = pool.register(args.count).await.map_err(Exit::from_store)?;
            print_state(&args.pool, state);
            Ok(0)
        }
        Command::Drain(args) => {
            let (pool, _) = pool(&args.pool.store, &args.pool.name).await?;
            let state = pool
                .set_draining(!args.off)
                .await
                .map_err(Exit::from_store)?;
            print_state(&args.pool, state);
            Ok(0)
        }
        Command::Inspect(args) => {
            let (pool, _) = pool_on(&choice(&args.store)?.for_reading()?, &args.name).await?;
            let state = pool.inspect().await.map_err(Exit::from_store)?;
            print_state(&args, state);
            Ok(0)
        }
        Command::Borrow(args) => {
            let (pool, name) = pool(&args.pool.store, &args.pool.name).await?;
            if let Some(count) = args.count {
                pool.register(count).await.map_err(Exit::from_store)?;
            }
            // The lease outlives this process (the script holds it): it is
            // not bound to it.
            let options = BorrowOptions::new().slots(args.slots).bound(false);
            let lease = match pool.borrow_with(args.ttl, args.wait, options).await {
                Ok(guard) => guard.forget(),
                Err(semaphore_core::Error::Exhausted { waited, .. }) => {
                    return Err(Exit::exhausted(&name, waited, args.exhausted_code));
                }
                Err(e) => return Err(Exit::from_store(e)),
            };
            println!("export SEMAPHORE_POSITION={}", lease.position);
            println!("export SEMAPHORE_POSITIONS={}", lease.positions);
            println!("export SEMAPHORE_TOKEN={}", lease.token);
            println!("export SEMAPHORE_LEASE_ID={}", lease.id);
            println!("export SEMAPHORE_POOL='{}'", name.replace('\'', "'\\''"));
            println!(
                "export SEMAPHORE_EXPIRES_AT_MS={}",
                semaphore_core::store::unix_ms(lease.expires_at)
            );
            Ok(0)
        }
        Command::Return(args) => {
            let (pool, _) = pool(&args.pool.store, &args.pool.name).await?;
            let id = semaphore_core::LeaseId::from_uuid(args.lease);
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
            let id = semaphore_core::LeaseId::from_uuid(args.lease.lease);
            let renewed = match pool.renew(id, args.ttl).await {
                Ok(renewed) => renewed,
                Err(semaphore_core::Error::LeaseNotFound { .. }) => {
                    return Err(Exit::new(
                        code::UNAVAILABLE,
                        format!(
                            "lease {id} is not active: returned, expired, or never this pool's"
                        ),
                    ));
                }
                Err(e) => return Err(Exit::from_store(e)),
            };
            println!(
                "export SEMAPHORE_EXPIRES_AT_MS={}",
                semaphore_core::store::unix_ms(renewed.expires_at)
            );
            Ok(0)
        }
        Command::Holders(args) => {
            let (pool, _) = pool(&args.store, &args.name).await?;
            for h in pool.holders().await.map_err(Exit::from_store)? {
                let expires = semaphore_core::store::unix_ms(h.lease.expires_at);
                if args.json {
                    let line = serde_json::json!({
                        "position": h.lease.position,
                        "positions": &h.lease.positions[..],
                        "token": h.lease.token,
                        "owner": h.owner,
                        "expires_at_ms": expires,
                        "lease": h.lease.id.to_string(),
                    });
                    println!("{line}");
                } else {
                    let owner = crate::shown::escaped(h.owner.as_deref().unwrap_or("-"));
                    // A lease of several slots shows them all: 0,1.
                    println!(
                        "{} {} {owner} {expires} {}",
                        h.lease.positions, h.lease.token, h.lease.id
                    );
                }
            }
            Ok(0)
        }
        Command::Pools(args) => pools(&args).await,
        Command::Status(args) => crate::status::status(args).await,
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

/// `semaphore pools`: the store's pools, a page of up to 1000 at a time,
/// each printed as it comes.
async fn pools(args: &crate::cli::PoolsArgs) -> Result<u8, Exit> {
    use semaphore_core::store::MAX_PAGE;
    let store = choice(&args.store)?
        .for_reading()?
        .open(Some(1))
        .await
        .map_err(Exit::from_store)?;
    let (mut after, mut left) = (args.after.map(PoolId::from_uuid), args.limit);
    if !args.json {
        println!(
            "{:<36} {:>5} {:>6} {:>9} {:>6} draining",
            "id", "count", "in_use", "available", "queued"
        );
    }
    loop {
        let limit = left.map_or(MAX_PAGE, |n| n.min(u64::from(MAX_PAGE)) as u32);
        let page = Pool::list(&store, after, limit)
            .await
            .map_err(Exit::from_store)?;
        for s in &page {
            if args.json {
                println!("{}", crate::status::state_json(s));
            } else {
                println!(
                    "{:<36} {:>5} {:>6} {:>9} {:>6} {}",
                    s.id.to_string(),
                    s.count,
                    s.in_use,
                    s.available,
                    s.queued,
                    if s.draining { "yes" } else { "no" }
                );
            }
        }
        left = left.map(|n| n - page.len() as u64);
        after = page.last().map(|s| s.id);
        if page.len() < limit as usize || left == Some(0) {
            return Ok(0);
        }
    }
}

fn print_state(args: &PoolArgs, s: semaphore_core::PoolState) {
    if args.json {
        println!(
            "{{\"id\":\"{}\",\"count\":{},\"in_use\":{},\"available\":{},\"draining\":{}}}",
            s.id, s.count, s.in_use, s.available, s.draining
        );
    } else {
        println!(
            "count {} in_use {} available {}{}",
            s.count,
            s.in_use,
            s.available,
            if s.draining { " draining" } else { "" }
        );
    }
}

/// `semaphore migrate`: makes or migrates the store's tables, and grants
/// the roles named (PostgreSQL).
async fn migrate(args: &crate::cli::MigrateArgs) -> Result<u8, Exit> {
    let choice = choice(&args.store)?;
    match &choice {
        crate::store::Choice::Postgres { url, schema, .. } => {
            let options = semaphore_postgres::PostgresOptions::default().schema(schema);
            semaphore_postgres::PostgresStore::migrate(url, options)
                .await
                .map_err(Exit::from_store)?;
            for role in &args.grant {
                let grants = semaphore_postgres::PostgresStore::grants(schema, role)
                    .map_err(|e| Exit::new(code::USAGE, e.to_string()))?;
                grant(url, &grants).await?;
                println!("granted {role} the store's run-time rights on schema {schema}");
            }
        }
        _ if !args.grant.is_empty() => {
            return Err(Exit::new(
                code::USAGE,
                "--grant is for PostgreSQL: other stores have no roles to grant",
            ));
        }
        other => {
            drop(other.open(Some(1)).await.map_err(Exit::from_store)?);
        }
    }
    println!("{}: the store's tables are at this version", choice.shown());
    Ok(0)
}

/// Runs `grants` on the PostgreSQL server at `url`, as one script.
async fn grant(url: &str, grants: &str) -> Result<(), Exit> {
    use semaphore_postgres::tokio_postgres::{self, NoTls};
    let storage = |e: tokio_postgres::Error| {
        Exit::from_store(semaphore_core::Error::Storage {
            operation: "migrate",
            retryable: false,
            source: Box::new(e),
        })
    };
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(storage)?;
    let driver = tokio::spawn(connection);
    let granted = client.batch_execute(grants).await.map_err(storage);
    drop(client);
    let _ = driver.await;
    granted
}

/// The pool a command names, on the store it names (no limit on the wait:
/// `--wait inf` means it), and the name to show.
async fn pool(store: &StoreArgs, name: &PoolName) -> Result<(Pool, String), Exit> {
    pool_on(&choice(store)?, name).await
}

/// The store the flags (or the environment) name.
fn choice(store: &StoreArgs) -> Result<crate::store::Choice, Exit> {
    crate::store::Choice::from(store.flags())
}

/// The pool `name` on the store `choice`, and the name to show.
async fn pool_on(choice: &crate::store::Choice, name: &PoolName) -> Result<(Pool, String), Exit> {
    // The name first: a usage error touches no store.
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
    let store = choice.open(Some(2)).await.map_err(Exit::from_store)?;
    let limits = Limits::default().with_max_wait(Duration::MAX);
    Ok((Pool::new(store, id).with_limits(limits), shown))
}
