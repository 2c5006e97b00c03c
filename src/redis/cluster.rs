//! Redis Cluster: whether this node still serves a key's slot. A key that leaves during
//! resharding (`MIGRATE`) is deleted on the source node; to the module that looks like any
//! other end of the lock, yet the hold lives on at the target. Waiters on the source must then
//! not be granted there: they get the redirect a fresh command would get (`ASK` while the slot
//! is migrating, `MOVED` once another node owns it) and retry where the key lives.

use redis_module::raw;

/// Slots in a cluster.
const SLOTS: u16 = 16384;

/// The hash slot of a key (CRC16/XMODEM of the key or of its `{hash tag}`, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Where a slot is served, as seen by this node.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// This node serves the slot and nothing is moving it away.
    Here,
    /// The slot is migrating to the node at this address (`ASK`).
    Migrating(String),
    /// Another node (at this address) owns the slot (`MOVED`).
    Elsewhere(String),
    /// Nobody is known to serve it (cluster down, slot unassigned).
    Unknown,
}

impl Route {
    /// The error a waiter gets instead of a grant, or `None` to grant here.
    pub fn redirect(&self, slot: u16) -> Option<String> {
        match self {
            Route::Here => None,
            Route::Migrating(addr) => Some(format!("ASK {slot} {addr}")),
            Route::Elsewhere(addr) => Some(format!("MOVED {slot} {addr}")),
            Route::Unknown => {
                Some("TRYAGAIN the key's slot is not served by this node; retry the command".into())
            }
        }
    }
}

/// Where `slot` is served, from `CLUSTER NODES` output.
pub fn route_in(nodes: &str, slot: u16) -> Route {
    let mut owner: Option<(bool, String)> = None;
    let mut migrating_to: Option<String> = None;
    let mut addresses = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, addr, flags, ..] = fields[..] else {
            continue;
        };
        // "ip:port@cport[,hostname]" -> "ip:port"
        let addr = addr.split(['@', ',']).next().unwrap_or(addr).to_string();
        let myself = flags.split(',').any(|f| f == "myself");
        addresses.push((id.to_string(), addr.clone()));
        for range in fields.iter().skip(8) {
            if let Some(inner) = range.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                // "[slot->-target_id]" on the node the slot migrates from.
                if let Some((s, target)) = inner.split_once("->-") {
                    if myself && s.parse::<u16>().ok() == Some(slot) {
                        migrating_to = Some(target.to_string());
                    }
                }
                continue;
            }
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (lo.parse::<u16>(), hi.parse::<u16>()),
                None => (range.parse::<u16>(), range.parse::<u16>()),
            };
            if let (Ok(lo), Ok(hi)) = (lo, hi) {
                if (lo..=hi).contains(&slot) {
                    owner = Some((myself, addr.clone()));
                }
            }
        }
    }
    let address_of = |id: &str| {
        addresses
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, a)| a.clone())
    };
    match (owner, migrating_to) {
        (Some((true, _)), Some(target)) => match address_of(&target) {
            Some(addr) => Route::Migrating(addr),
            None => Route::Unknown,
        },
        (Some((true, _)), None) => Route::Here,
        (Some((false, addr)), _) => Route::Elsewhere(addr),
        (None, _) => Route::Unknown,
    }
}

/// The redirect for waiters of `key`, if this node may no longer grant it (cluster mode only).
pub fn redirect(ctx: *mut raw::RedisModuleCtx, key: &[u8]) -> Option<String> {
    if !super::server::cluster_enabled(ctx) {
        return None;
    }
    let slot = key_slot(key);
    let nodes = cluster_nodes(ctx)?;
    route_in(&nodes, slot).redirect(slot)
}

/// `CLUSTER NODES`, read through the module API.
fn cluster_nodes(ctx: *mut raw::RedisModuleCtx) -> Option<String> {
    super::ffi::call_own(ctx, super::ffi::Own::ClusterNodes, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") % SLOTS);
        assert_eq!(key_slot(b""), 0);
    }

    const NODES: &str = "\
aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5000->-bbb]
bbb 127.0.0.1:7001@17001,host master - 0 0 2 connected 5461-10922 [5000-<-aaa]
ccc 127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383
ddd 127.0.0.1:7003@17003 slave aaa 0 0 1 connected
";

    #[test]
    fn routes() {
        assert_eq!(route_in(NODES, 0), Route::Here);
        assert_eq!(route_in(NODES, 5460), Route::Here);
        assert_eq!(
            route_in(NODES, 5000),
            Route::Migrating("127.0.0.1:7001".into())
        );
        assert_eq!(
            route_in(NODES, 5461),
            Route::Elsewhere("127.0.0.1:7001".into())
        );
        assert_eq!(
            route_in(NODES, 16383),
            Route::Elsewhere("127.0.0.1:7002".into())
        );
        let unassigned = "aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99\n";
        assert_eq!(route_in(unassigned, 100), Route::Unknown);
        assert_eq!(route_in("garbage", 1), Route::Unknown);
        assert_eq!(Route::Here.redirect(1), None);
        assert_eq!(
            Route::Migrating("h:1".into()).redirect(7).as_deref(),
            Some("ASK 7 h:1")
        );
        assert_eq!(
            Route::Elsewhere("h:1".into()).redirect(7).as_deref(),
            Some("MOVED 7 h:1")
        );
    }
}
