//! Sentinel-managed masters for the tests of `redis+sentinel://`: a master and its replica
//! (both with the module) watched by two `redis-server --sentinel` processes, each in its own
//! directory on a free port, killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cluster::role;
use crate::{attach_replica, eventually, free_port, Server};

pub const MASTER: &str = "relock-test";

/// A `redis-server --sentinel` monitoring one master (quorum 1), in its own directory;
/// killed on drop.
pub struct Sentinel {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    pub fn start(master: &Server) -> Sentinel {
        let mut last = String::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("relock-sentinel-")
                .tempdir()
                .expect("tempdir");
            let port = free_port();
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel.log\n\
                     sentinel monitor {MASTER} 127.0.0.1 {master} 1\n\
                     sentinel down-after-milliseconds {MASTER} 2000\n\
                     sentinel failover-timeout {MASTER} 10000\n",
                    dir = dir.path().display(),
                    master = master.port,
                ),
            )
            .expect("sentinel.conf");
            let child =
                Command::new(std::env::var("REDIS_SERVER").unwrap_or("redis-server".into()))
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel");
            let mut sentinel = Sentinel {
                child,
                port,
                _dir: dir,
            };
            let ready = eventually(Duration::from_secs(20), || {
                sentinel.ask_master().is_some_and(|p| p == master.port)
            });
            if ready {
                return sentinel;
            }
            last = std::fs::read_to_string(sentinel._dir.path().join("sentinel.log"))
                .unwrap_or_default();
            let _ = sentinel.child.kill();
        }
        panic!("no sentinel came up:\n{last}");
    }

    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        crate::connect_url_with(
            &format!("redis://127.0.0.1:{}/", self.port),
            Duration::from_secs(2),
            Duration::from_secs(5),
        )
    }

    /// The master's port, as this sentinel says.
    pub fn ask_master(&self) -> Option<u16> {
        let mut c = self.conn().ok()?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut c)
            .ok()?;
        reply.map(|(_, port)| port)
    }

    /// Whether it knows the replica on `port` and finds it fit to be promoted.
    pub fn knows_replica(&self, port: u16) -> bool {
        let Ok(mut c) = self.conn() else {
            return false;
        };
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg(MASTER)
            .query(&mut c)
            .unwrap_or_default();
        replicas.iter().any(|r| {
            r.get("port").is_some_and(|p| p == &port.to_string())
                && r.get("flags").is_some_and(|f| f == "slave")
                && r.get("master-link-status").is_some_and(|s| s == "ok")
        })
    }

    /// `SENTINEL FAILOVER` of [`MASTER`].
    pub fn failover(&self) {
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER)
            .query(&mut self.conn().expect("sentinel"))
            .expect("SENTINEL FAILOVER");
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A master, its replica (both with the module) and two sentinels watching them.
pub struct Sentinels {
    pub master: Server,
    pub replica: Server,
    pub sentinels: Vec<Sentinel>,
}

impl Sentinels {
    pub fn start() -> Sentinels {
        let master = Server::start();
        let replica = Server::start();
        attach_replica(&master, &replica);
        let sentinels: Vec<Sentinel> = (0..2).map(|_| Sentinel::start(&master)).collect();
        assert!(
            eventually(Duration::from_secs(30), || sentinels
                .iter()
                .all(|s| s.knows_replica(replica.port))),
            "the sentinels do not know the replica"
        );
        Sentinels {
            master,
            replica,
            sentinels,
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2/relock-test`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// Fails over to the replica and waits until it is the master, the sentinels say so,
    /// and the old master follows it.
    pub fn failover(&self) {
        self.sentinels[0].failover();
        assert!(
            eventually(Duration::from_secs(30), || role(&self.replica) == "master"
                && self
                    .sentinels
                    .iter()
                    .all(|s| s.ask_master() == Some(self.replica.port))),
            "the replica was not promoted"
        );
    }
}
