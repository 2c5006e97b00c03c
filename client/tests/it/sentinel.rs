//! Sentinel-managed masters (`redis+sentinel://`): relock-client against a real master, its
//! replica and two `redis-server --sentinel` processes (lockctl through a failover:
//! lockctl/tests/it/sentinel.rs).
use relock_testkit as common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{attach_replica, eventually, free_port, Server};
use relock_client::{Error, Options, Relock};
use relock_testkit::ask::holder;

const MASTER: &str = "relock-test";

/// A `redis-server --sentinel` monitoring one master (quorum 1), in its own directory;
/// killed on drop.
struct SentinelProcess {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelProcess {
    fn start(master: &Server) -> SentinelProcess {
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
            let mut sentinel = SentinelProcess {
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

    fn conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
            .get_connection_with_timeout(Duration::from_secs(2))
    }

    /// The master's port, as this sentinel says.
    fn ask_master(&self) -> Option<u16> {
        let mut c = self.conn().ok()?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut c)
            .ok()?;
        reply.map(|(_, port)| port)
    }

    /// Whether it knows the replica on `port` and finds it fit to be promoted.
    fn knows_replica(&self, port: u16) -> bool {
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
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A master, its replica (both with the module) and two sentinels watching them.
struct Setup {
    master: Server,
    /// Kept running for the sentinels to watch (this file fails over in lockctl's tests only).
    #[allow(dead_code)]
    replica: Server,
    sentinels: Vec<SentinelProcess>,
}

impl Setup {
    fn start() -> Setup {
        let master = Server::start();
        let replica = Server::start();
        attach_replica(&master, &replica);
        let sentinels: Vec<SentinelProcess> =
            (0..2).map(|_| SentinelProcess::start(&master)).collect();
        assert!(
            eventually(Duration::from_secs(30), || sentinels
                .iter()
                .all(|s| s.knows_replica(replica.port))),
            "the sentinels do not know the replica"
        );
        Setup {
            master,
            replica,
            sentinels,
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2/relock-test`.
    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }
}

/// relock-client through the sentinels: acquire on the master they name; a bad master name
/// is a permanent error; one sentinel down is not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relock_client_finds_the_master_through_the_sentinels() {
    let setup = tokio::task::block_in_place(Setup::start);
    let relock = Relock::with_options(
        &[setup.url()],
        Options {
            node_timeout: Duration::from_secs(1),
            ..Options::default()
        },
    )
    .expect("client");
    let lock = relock
        .acquire("s:one", Duration::from_secs(10))
        .await
        .expect("acquire");
    assert_eq!(
        tokio::task::block_in_place(|| holder(&setup.master, "s:one")).map(|h| h.0),
        Some(lock.owner().to_string())
    );
    let info = relock.info("s:one").await;
    assert_eq!(info[0].node, format!("127.0.0.1:{}", setup.master.port));
    lock.release().await.expect("release");

    let unknown = format!(
        "redis+sentinel://127.0.0.1:{}/no-such-master",
        setup.sentinels[0].port
    );
    let relock = Relock::new(&[unknown]).expect("client");
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        relock.acquire_wait("s:one", Duration::from_secs(10), None),
    )
    .await
    .expect("an unknown master name must not be retried forever")
    .expect_err("no such master");
    assert!(err.is_permanent(), "{err}");
    assert!(err.to_string().contains("no-such-master"), "{err}");

    // The same master by two URLs is one master.
    let twice = [setup.url(), setup.url()];
    assert!(matches!(
        Relock::new(&twice),
        Err(Error::DuplicateServer { .. })
    ));
}
