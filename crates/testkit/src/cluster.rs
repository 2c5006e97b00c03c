//! A real Redis Cluster on loopback for tests: six `redis-server`s with the relock module
//! (three masters, three replicas), created with `redis-cli --cluster create`, on ports from
//! `free_port()`, each in its own directory behind the `common::Server` guard (killed on drop).

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{eventually, free_port, Server};

/// How long the cluster may take to agree on its slots and to finish replica syncs.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// Three masters, with one replica each unless started without.
pub struct Cluster {
    pub nodes: Vec<Server>,
    /// Replicas per master.
    replicas: usize,
}

/// The node that serves a hash slot, as seen in `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotOwner {
    pub master_port: u16,
    pub replica_ports: Vec<u16>,
}

impl Cluster {
    /// Starts six nodes, joins them into a 3-master / 3-replica cluster and waits until every
    /// node says `cluster_state:ok` and every replica's link to its master is up.
    pub fn start() -> Cluster {
        Cluster::start_with(1)
    }

    /// Starts three masters with `replicas` replicas each, joined into one cluster, and waits
    /// until it is healthy.
    pub fn start_with(replicas: usize) -> Cluster {
        let mut attempt = 1;
        let nodes = loop {
            let nodes: Vec<Server> = (0..3 * (1 + replicas)).map(|_| start_node()).collect();
            match create(&nodes, replicas) {
                Ok(()) => break nodes,
                Err(e) if attempt == 1 => {
                    eprintln!("cluster: a second attempt on new nodes after: {e}");
                    attempt += 1;
                }
                Err(e) => panic!("{e}"),
            }
        };
        let cluster = Cluster { nodes, replicas };
        cluster.wait_healthy();
        cluster
    }

    /// Waits until all nodes agree the cluster is ok, know all six nodes, and every replica is
    /// in sync with its master.
    pub fn wait_healthy(&self) {
        let ok = eventually(HEALTHY_WITHIN, || {
            self.nodes.iter().all(|n| {
                let Ok(mut c) = try_conn(n) else {
                    return false;
                };
                let info: String = match redis::cmd("CLUSTER").arg("INFO").query(&mut c) {
                    Ok(i) => i,
                    Err(_) => return false,
                };
                let known = format!("cluster_known_nodes:{}", self.nodes.len());
                if !info.contains("cluster_state:ok") || !info.contains(&known) {
                    return false;
                }
                let repl: String = match redis::cmd("INFO").arg("replication").query(&mut c) {
                    Ok(i) => i,
                    Err(_) => return false,
                };
                if repl.contains("role:slave") {
                    repl.contains("master_link_status:up")
                        && !repl.contains("master_sync_in_progress:1")
                } else {
                    repl.contains(&format!("connected_slaves:{}", self.replicas))
                }
            }) && self.slot_owners_agree()
        });
        assert!(ok, "cluster not healthy within {HEALTHY_WITHIN:?}");
    }

    /// Whether every node's `CLUSTER SLOTS` names the same three masters for all 16384 slots.
    fn slot_owners_agree(&self) -> bool {
        let views: Vec<Option<Vec<(u16, u16, u16)>>> = self
            .nodes
            .iter()
            .map(|n| {
                let mut c = try_conn(n).ok()?;
                let mut ranges: Vec<(u16, u16, u16)> = cluster_slots(&mut c)
                    .ok()?
                    .into_iter()
                    .map(|(s, e, o)| (s, e, o.master_port))
                    .collect();
                ranges.sort();
                Some(ranges)
            })
            .collect();
        let Some(Some(first)) = views.first() else {
            return false;
        };
        let covered: u32 = first.iter().map(|(s, e, _)| u32::from(e - s) + 1).sum();
        covered == 16384 && views.iter().all(|v| v.as_ref() == Some(first))
    }

    /// `redis://127.0.0.1:PORT/` of every node (seeds for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    pub fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The nodes whose `INFO replication` says `role:master`.
    pub fn masters(&self) -> Vec<&Server> {
        self.nodes.iter().filter(|n| role(n) == "master").collect()
    }

    /// The nodes whose `INFO replication` says `role:slave`.
    pub fn replicas(&self) -> Vec<&Server> {
        self.nodes.iter().filter(|n| role(n) == "slave").collect()
    }

    /// `CLUSTER SLOTS` of the first node that answers: a node a test stopped (or one a loaded
    /// machine starved into a failover, then stopped as a replica) is passed over, not waited
    /// for.
    fn slots(&self) -> Vec<(u16, u16, SlotOwner)> {
        let mut last = String::from("no node");
        for n in &self.nodes {
            match try_conn(n).and_then(|mut c| cluster_slots(&mut c)) {
                Ok(slots) => return slots,
                Err(e) => last = format!("{}: {e}", n.port),
            }
        }
        panic!("no node answers CLUSTER SLOTS (last: {last})");
    }

    /// Who serves `key`'s slot, asked of the first node that answers.
    pub fn owner_of(&self, key: &str) -> SlotOwner {
        let slot = key_slot(key);
        self.slots()
            .into_iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))
            .map(|(_, _, o)| o)
            .unwrap_or_else(|| panic!("no owner for slot {slot}"))
    }

    /// The master that serves `key`.
    pub fn master_of(&self, key: &str) -> &Server {
        self.node(self.owner_of(key).master_port)
    }

    /// The replica of the master that serves `key` (from the replicas' `INFO replication`:
    /// `CLUSTER SLOTS` leaves out a replica until gossip reports its offset).
    pub fn replica_of(&self, key: &str) -> &Server {
        let master = self.owner_of(key).master_port;
        self.replica_of_master(master)
    }

    /// The replica of the master on `port`.
    pub fn replica_of_master(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| {
                role(n) == "slave"
                    && try_conn(n).map(|mut c| master_port_of(&mut c)).ok() == Some(port)
            })
            .unwrap_or_else(|| panic!("no replica of the master on {port}"))
    }

    /// A key with `prefix` whose slot is served by the master on `port`.
    pub fn key_on(&self, port: u16, prefix: &str) -> String {
        let slots = self.slots();
        (0..100_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| {
                let slot = key_slot(k);
                slots
                    .iter()
                    .any(|(s, e, o)| o.master_port == port && (*s..=*e).contains(&slot))
            })
            .expect("some key lands on every master")
    }

    /// `CLUSTER FAILOVER` sent to `replica`; returns once `replica` is a master, its old
    /// master a replica, and the whole cluster healthy again. Returns how long it took.
    pub fn failover(&self, replica: &Server) -> Duration {
        let started = Instant::now();
        let mut c = replica.conn();
        let old_master = master_port_of(&mut c);
        let _: String = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut c)
            .expect("CLUSTER FAILOVER");
        let switched = eventually(HEALTHY_WITHIN, || {
            role(replica) == "master" && role(self.node(old_master)) == "slave"
        });
        assert!(switched, "roles did not switch after CLUSTER FAILOVER");
        self.wait_healthy();
        started.elapsed()
    }
}

/// How long `redis-cli --cluster create` may take, the join included.
const CREATED_WITHIN: Duration = Duration::from_secs(90);

/// `redis-cli --cluster create` of `nodes`, bounded in time. After its `CLUSTER MEET`s redis-cli
/// waits, with no bound, until every node knows every other (the rust lane of a make test
/// never ended, stop 44; the Node suite's create ran past 120 s at load 12): past
/// [`CREATED_WITHIN`] it is killed and the error says what it printed.
fn create(nodes: &[Server], replicas: usize) -> Result<(), String> {
    let mut child = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-cli --cluster create");
    let printed = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    for pipe in [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
    ] {
        let into = printed.clone();
        readers.push(std::thread::spawn(move || {
            let mut pipe = pipe;
            let mut buf = [0u8; 1024];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().expect("printed").extend_from_slice(&buf[..n]);
            }
        }));
    }
    let text = || String::from_utf8_lossy(&printed.lock().expect("printed")).into_owned();
    let status = crate::process::wait_until(&mut child, CREATED_WITHIN);
    for r in readers {
        let _ = r.join();
    }
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!(
            "redis-cli --cluster create failed ({s}):\n{}",
            text()
        )),
        None => Err(format!(
            "redis-cli --cluster create still running after {CREATED_WITHIN:?}, killed:\n{}",
            text()
        )),
    }
}

fn start_node() -> Server {
    // The cluster bus port is set explicitly: data port + 10000 may not exist.
    let mut last = String::new();
    for _ in 0..3 {
        let bus = free_port().to_string();
        let attempt = std::panic::catch_unwind(|| {
            Server::with_args(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &bus,
            ])
        });
        match attempt {
            Ok(server) => return server,
            Err(e) => last = format!("{:?}", e.downcast_ref::<String>()),
        }
    }
    panic!("cluster node did not start: {last}");
}

/// A probe's connection: a node that does not answer within 5 s (stopped, or starved) is one
/// that does not answer, not a wait for ever.
fn try_conn(n: &Server) -> redis::RedisResult<redis::Connection> {
    crate::connect_url_with(&n.url(), Duration::from_secs(2), Duration::from_secs(5))
}

/// `role:` of `INFO replication` ("master" or "slave"; "" when the node does not answer).
pub fn role(n: &Server) -> String {
    let Ok(mut c) = try_conn(n) else {
        return String::new();
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut c)
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn master_port_of(c: &mut redis::Connection) -> u16 {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(c)
        .expect("INFO replication");
    info.lines()
        .find_map(|l| l.strip_prefix("master_port:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("a replica knows its master's port")
}

/// `CLUSTER SLOTS` as (start, end, owner).
pub fn cluster_slots(c: &mut redis::Connection) -> redis::RedisResult<Vec<(u16, u16, SlotOwner)>> {
    let raw: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(c)?;
    let mut out = Vec::new();
    for range in raw {
        let start: u16 = redis::from_redis_value(&range[0])?;
        let end: u16 = redis::from_redis_value(&range[1])?;
        let mut ports = Vec::new();
        for node in &range[2..] {
            let fields: Vec<redis::Value> = redis::from_redis_value(node)?;
            ports.push(redis::from_redis_value::<u16>(&fields[1])?);
        }
        out.push((
            start,
            end,
            SlotOwner {
                master_port: ports[0],
                replica_ports: ports[1..].to_vec(),
            },
        ));
    }
    Ok(out)
}

/// The master port that `n`'s `CLUSTER SLOTS` names for `slot`.
pub fn slot_owner_seen_by(n: &Server, slot: u16) -> Option<u16> {
    let mut c = try_conn(n).ok()?;
    cluster_slots(&mut c)
        .ok()?
        .into_iter()
        .find(|(s, e, _)| (*s..=*e).contains(&slot))
        .map(|(_, _, o)| o.master_port)
}

/// The hash slot of `key` (CRC16/XMODEM of the hash tag or whole key, mod 16384), as
/// `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `INFO relock` fields of a node as a map (without the `relock_` prefix).
pub fn relock_info(n: &Server) -> HashMap<String, i64> {
    let info: String = redis::cmd("INFO")
        .arg("relock")
        .query(&mut n.conn())
        .expect("INFO relock");
    info.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            Some((k.strip_prefix("relock_")?.to_string(), v.parse().ok()?))
        })
        .collect()
}
