//! A throwaway PgBouncer in transaction mode, in front of a test server
//! (feature `test-util`): the store's primitives must work through it
//! (rule "Stores"). A [`Throwaway`] of the core's test skeleton, like the
//! server.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use semaphore_core::store::testing::{Engine, Stop, Throwaway};
use tokio_postgres::config::Host;

/// What to install when PgBouncer is missing.
const INSTALL: &str = "the PgBouncer tests need PgBouncer (on Debian or Ubuntu: \
    apt-get install pgbouncer)";

/// A PgBouncer in transaction mode, started by the test, stopped when
/// dropped (and by a watchdog once the test process is gone).
#[derive(Debug)]
pub struct TestBouncer {
    url: String,
    _bouncer: Throwaway<Bouncer>,
}

/// `pgbouncer` in the foreground on a loopback port, with the
/// configuration file that [`prepare`](Engine::prepare) writes; stopped by
/// its pid file (as root the spawned process is `runuser`).
#[derive(Debug)]
struct Bouncer {
    bin: PathBuf,
    /// The `[databases]` line's connection settings, the server's.
    server: String,
    listen: u16,
}

impl Engine for Bouncer {
    const NAME: &'static str = "pgbouncer";
    const INSTALL: &'static str = INSTALL;
    const DIR_PREFIX: &'static str = "semaphore-pgbouncer-";
    const USER: Option<&'static str> = Some(super::USER);
    const LOG: &'static str = "pgbouncer.log";
    const READY_WITHIN: Duration = Duration::from_secs(10);

    /// Writes `pgbouncer.ini`.
    fn prepare(&self, dir: &Path) -> Result<(), String> {
        let ini = ini(dir);
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = {server}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {listen}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = transaction\n\
                 max_client_conn = 1000\n\
                 default_pool_size = 20\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 pidfile = {pidfile}\n",
                server = self.server,
                listen = self.listen,
                pidfile = pidfile(dir).display(),
            ),
        )
        .map_err(|e| format!("{}: {e}", ini.display()))
    }

    fn program(&self) -> PathBuf {
        self.bin.clone()
    }

    fn args(&self, dir: &Path, command: &mut Command) {
        command.arg(ini(dir));
    }

    /// Accepts a connection on its port.
    fn ready(&self, _dir: &Path) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.listen)).is_ok()
    }

    /// `SIGTERM` to the pid in its pid file.
    fn stop(&self, dir: &Path, _how: Stop) -> Option<String> {
        Some(format!(
            "kill $(cat '{}') 2>/dev/null",
            pidfile(dir).display()
        ))
    }
}

fn ini(dir: &Path) -> PathBuf {
    dir.join("pgbouncer.ini")
}

fn pidfile(dir: &Path) -> PathBuf {
    dir.join("pgbouncer.pid")
}

impl TestBouncer {
    /// Starts PgBouncer in transaction mode on a free port of 127.0.0.1,
    /// pooling connections to the server `server_url` names.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start(server_url: &str) -> Result<Self, String> {
        let bin = binary().ok_or_else(|| INSTALL.to_string())?;
        let config: tokio_postgres::Config = server_url
            .parse()
            .map_err(|e| format!("the server's URL: {e}"))?;
        let host = match config.get_hosts().first() {
            Some(Host::Unix(dir)) => dir.display().to_string(),
            Some(Host::Tcp(name)) => name.clone(),
            None => "/var/run/postgresql".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let user = config.get_user().unwrap_or("postgres").to_string();
        let dbname = config.get_dbname().unwrap_or(&user).to_string();
        let password = config
            .get_password()
            .map(|p| format!(" password={}", String::from_utf8_lossy(p)))
            .unwrap_or_default();
        let listen = free_port()?;
        let bouncer = Throwaway::start(Bouncer {
            bin,
            server: format!("host={host} port={port} user={user} dbname={dbname}{password}"),
            listen,
        })?;
        Ok(Self {
            url: format!("host=127.0.0.1 port={listen} user={user} dbname={dbname}"),
            _bouncer: bouncer,
        })
    }

    /// The connection string to reach the server through PgBouncer.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// `pgbouncer` on `PATH`, or where Debian puts it.
fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("pgbouncer"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/sbin/pgbouncer");
        debian.is_file().then_some(debian)
    })
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port for PgBouncer: {e}"))
}
