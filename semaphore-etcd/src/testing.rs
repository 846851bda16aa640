//! etcd for tests (feature `test-util`): the cluster that
//! `SEMAPHORE_ETCD_URL` names (endpoints separated by commas), or
//! throwaway `etcd` members started on this machine: one node
//! ([`TestCluster::start`]) or three ([`TestCluster::start_three`]), on
//! loopback ports of their own.
//!
//! Each member is a [`Throwaway`] of the core's test skeleton: a watchdog
//! stops it and removes its directory once the test process is gone,
//! however it ended. Each test takes its own key prefix
//! ([`TestCluster::fresh_prefix`]).
//!
//! With neither `etcd` on `PATH` nor a URL, [`TestCluster::shared`] panics
//! with the install step: a test that needs etcd fails, it never skips.
//!
//! ```no_run
//! use semaphore_etcd::testing::TestCluster;
//!
//! let cluster = TestCluster::shared();
//! let prefix = TestCluster::fresh_prefix(); // one per test
//! println!("{:?} / {prefix}", cluster.endpoints());
//! ```

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use semaphore_core::store::testing::{self as skeleton, Engine, Throwaway};

/// What to install when no cluster can be had.
const INSTALL: &str = "the etcd store's tests need etcd (on Debian or Ubuntu: apt-get install \
    etcd-server) or a cluster named by SEMAPHORE_ETCD_URL (http://host:port, comma-separated)";

/// An etcd cluster for tests.
#[derive(Debug)]
pub struct TestCluster {
    endpoints: Vec<String>,
    members: Vec<Throwaway<Member>>,
    /// The members' client ports (a throwaway cluster's).
    ports: Vec<u16>,
}

/// One etcd member of a cluster of `peers`, on loopback ports.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    client: u16,
    peer: u16,
    /// The peer port the others reach it at: `peer`, or a proxy's.
    advertised: u16,
    /// `name=http://127.0.0.1:advertised` of every member.
    cluster: String,
}

impl Engine for Member {
    const NAME: &'static str = "etcd";
    const INSTALL: &'static str = INSTALL;
    const DIR_PREFIX: &'static str = "semaphore-etcd-";
    const USER: Option<&'static str> = None;
    const LOG: &'static str = "etcd.log";
    const READY_WITHIN: Duration = Duration::from_secs(30);
    const POLL: Duration = Duration::from_millis(20);

    fn program(&self) -> PathBuf {
        "etcd".into()
    }

    fn args(&self, dir: &Path, command: &mut Command) {
        let client = format!("http://127.0.0.1:{}", self.client);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let advertised = format!("http://127.0.0.1:{}", self.advertised);
        command
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={advertised}"))
            .arg(format!("--initial-cluster={}", self.cluster))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=semaphore-test")
            // Tests write little; fsync-heavy defaults only slow them.
            .arg("--unsafe-no-fsync")
            .arg("--quota-backend-bytes=1073741824")
            .arg("--logger=zap")
            .arg("--log-level=warn");
    }

    /// The client port accepts connections (a member of three may not
    /// have a leader yet: the cluster waits for that as a whole).
    fn ready(&self, _dir: &Path) -> bool {
        let address = SocketAddr::from(([127, 0, 0, 1], self.client));
        TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
    }
}

/// How many times a throwaway cluster is started on fresh ports before
/// its start counts as failed.
const ATTEMPTS: usize = 3;

/// A free loopback port, as the kernel picks one.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free loopback port: {e}"))
}

impl TestCluster {
    /// The cluster this test process shares between its tests: the one
    /// `SEMAPHORE_ETCD_URL` names, or a throwaway node started on first
    /// use. Give each test its own prefix ([`fresh_prefix`](Self::fresh_prefix)).
    ///
    /// # Panics
    /// If neither a URL nor `etcd` is there, or it does not start, with a
    /// message that says what to install or what failed.
    pub fn shared() -> &'static TestCluster {
        static SHARED: OnceLock<TestCluster> = OnceLock::new();
        let named = |url: String| TestCluster {
            endpoints: url.split(',').map(|e| e.trim().to_owned()).collect(),
            members: Vec::new(),
            ports: Vec::new(),
        };
        skeleton::shared(&SHARED, "SEMAPHORE_ETCD_URL", named, Self::start)
    }

    /// A throwaway one-node cluster of the caller's own; stopped and
    /// removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start() -> Result<TestCluster, String> {
        Self::start_fresh(1)
    }

    /// A throwaway three-node cluster of the caller's own, on loopback;
    /// stopped and removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start_three() -> Result<TestCluster, String> {
        Self::start_fresh(3)
    }

    /// `n` members on loopback ports the kernel picked free, tried again
    /// on fresh ports (up to [`ATTEMPTS`] in all) when a start fails:
    /// another process may bind a port between its pick and etcd's bind.
    fn start_fresh(n: usize) -> Result<TestCluster, String> {
        let mut failed = Vec::new();
        for _ in 0..ATTEMPTS {
            match Self::start_nodes(n, &mut Ok) {
                Ok(cluster) => return Ok(cluster),
                // No etcd here: no port helps.
                Err(e) if e == INSTALL => return Err(e),
                Err(e) => failed.push(e),
            }
        }
        Err(format!(
            "etcd did not start in {ATTEMPTS} attempts, each on fresh ports:\n{}",
            failed.join("\n")
        ))
    }

    /// [`start_three`](Self::start_three), each member reached by its
    /// peers at the loopback port `route` gives for its own peer port: a
    /// proxy of the caller's that forwards there, which can partition the
    /// member from its peers (the fault suite's `node_partition`).
    ///
    /// # Errors
    /// What to install, or what failed (`route`'s error too), in words.
    pub fn start_three_routed(
        mut route: impl FnMut(u16) -> Result<u16, String>,
    ) -> Result<TestCluster, String> {
        Self::start_nodes(3, &mut route)
    }

    fn start_nodes(
        n: usize,
        route: &mut dyn FnMut(u16) -> Result<u16, String>,
    ) -> Result<TestCluster, String> {
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let peer = free_port()?;
            members.push(Member {
                name: format!("m{i}"),
                client: free_port()?,
                peer,
                advertised: route(peer)?,
                cluster: String::new(),
            });
        }
        let cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.advertised))
            .collect::<Vec<_>>()
            .join(",");
        let endpoints = members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect();
        let ports = members.iter().map(|m| m.client).collect();
        let mut started = Vec::with_capacity(n);
        for mut member in members {
            member.cluster.clone_from(&cluster);
            started.push(Throwaway::start(member)?);
        }
        let cluster = TestCluster {
            endpoints,
            members: started,
            ports,
        };
        // Every member has a leader: the cluster serves.
        let deadline = std::time::Instant::now() + Member::READY_WITHIN;
        while cluster
            .ports
            .iter()
            .any(|p| status(*p).is_none_or(|(_, leader)| leader == 0))
        {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "the {n}-member etcd cluster had no leader within {:?}",
                    Member::READY_WITHIN
                ));
            }
            std::thread::sleep(Member::POLL);
        }
        Ok(cluster)
    }

    /// The cluster's client endpoints, `http://127.0.0.1:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// A key prefix no other test of this run uses.
    pub fn fresh_prefix() -> String {
        skeleton::fresh_name()
    }

    /// Kills member `i` (`SIGKILL`) and starts it again on its data.
    ///
    /// # Panics
    /// On a cluster named by `SEMAPHORE_ETCD_URL`, or if the restart fails.
    pub fn restart(&self, i: usize) {
        let member = self
            .members
            .get(i)
            .expect("a member of a throwaway cluster (not one SEMAPHORE_ETCD_URL names)");
        member.restart().expect("the etcd member restarts");
    }

    /// The client port of each member, in member order.
    pub fn ports(&self) -> Vec<u16> {
        self.ports.clone()
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`...) to member `i`.
    ///
    /// # Panics
    /// On a cluster named by `SEMAPHORE_ETCD_URL`.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.pid(i);
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
    }

    /// The member that leads now, as the first member that answers says
    /// (etcd's gRPC gateway, `POST /v3/maintenance/status`); `None` if no
    /// member answers or none leads.
    pub fn leader(&self) -> Option<usize> {
        let statuses: Vec<(u64, u64)> = self.ports().iter().filter_map(|p| status(*p)).collect();
        let (_, leader) = statuses.iter().find(|(_, leader)| *leader != 0)?;
        self.ports()
            .iter()
            .position(|p| status(*p).is_some_and(|(member, _)| member == *leader))
    }

    /// The pid of member `i`, for a test that stops it (`SIGSTOP`).
    ///
    /// # Panics
    /// On a cluster named by `SEMAPHORE_ETCD_URL`.
    pub fn pid(&self, i: usize) -> u32 {
        self.members
            .get(i)
            .expect("a member of a throwaway cluster (not one SEMAPHORE_ETCD_URL names)")
            .pid()
    }
}

/// Member `port`'s id and the leader's id it knows, from etcd's gRPC
/// gateway; `None` if it does not answer within a second.
fn status(port: u16) -> Option<(u64, u64)> {
    use std::io::{Read, Write};
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let request = format!(
        "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let body = answer.split_once("\r\n\r\n")?.1;
    let body = body.get(body.find('{')?..)?;
    let json: serde_json::Value = serde_json::from_str(body.get(..=body.rfind('}')?)?).ok()?;
    let number = |v: &serde_json::Value| v.as_str()?.parse::<u64>().ok();
    Some((
        number(&json["header"]["member_id"])?,
        number(&json["leader"]).unwrap_or(0),
    ))
}
