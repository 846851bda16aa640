//! A throwaway PgBouncer in transaction mode, in front of a test server
//! (feature `test-util`): the store's primitives must work through it
//! (rule "Stores").

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::config::Host;

/// What to install when PgBouncer is missing.
const INSTALL: &str = "the PgBouncer tests need PgBouncer (on Debian or Ubuntu: \
    apt-get install pgbouncer)";

/// A PgBouncer in transaction mode, started by the test, stopped when
/// dropped (and by a watchdog once the test process is gone).
#[derive(Debug)]
pub struct TestBouncer {
    url: String,
    dir: tempfile::TempDir,
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
        let dir = tempfile::Builder::new()
            .prefix("semaphore-pgbouncer-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for PgBouncer: {e}"))?;
        let as_postgres = super::is_root();
        if as_postgres {
            super::run(Command::new("chown").arg("postgres:").arg(dir.path()))?;
        }
        let listen = free_port()?;
        let ini = dir.path().join("pgbouncer.ini");
        let password = config
            .get_password()
            .map(|p| format!(" password={}", String::from_utf8_lossy(p)))
            .unwrap_or_default();
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={host} port={port} user={user} dbname={dbname}{password}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {listen}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = transaction\n\
                 max_client_conn = 1000\n\
                 default_pool_size = 20\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {dir}/pgbouncer.log\n\
                 pidfile = {dir}/pgbouncer.pid\n",
                dir = dir.path().display(),
            ),
        )
        .map_err(|e| format!("{}: {e}", ini.display()))?;
        let mut start = if as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        super::run(start.arg("-d").arg(&ini).stdout(Stdio::null()))
            .map_err(|e| format!("{e}; see {}/pgbouncer.log", dir.path().display()))?;
        let bouncer = Self {
            url: format!("host=127.0.0.1 port={listen} user={user} dbname={dbname}"),
            dir,
        };
        bouncer.watchdog()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "PgBouncer did not listen on 127.0.0.1:{listen}; see {}/pgbouncer.log",
                    bouncer.dir.path().display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(bouncer)
    }

    /// The connection string to reach the server through PgBouncer.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn pidfile(&self) -> PathBuf {
        self.dir.path().join("pgbouncer.pid")
    }

    /// A shell that stops PgBouncer once this process is gone.
    fn watchdog(&self) -> Result<(), String> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; kill $(cat '{pidfile}') 2>/dev/null",
            pid = std::process::id(),
            pidfile = self.pidfile().display(),
        );
        super::watchdog(&script, "PgBouncer")
    }
}

impl Drop for TestBouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.pidfile()) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
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
