//! What relock-client's and lockctl's tests share and the module's tests do not (feature
//! `client`: the module's tests do not build the client): the options and clients they make
//! through relock-client, and the one request both suites send a server straight.
use std::borrow::Borrow;
use std::time::Duration;

use relock_client::{Options, Relock};

use crate::Server;

/// Defaults with a node timeout (1 s) that a busy machine running a debug build cannot mistake
/// for a failure, for the tests whose subject is not timing.
pub fn patient() -> Options {
    Options {
        node_timeout: Duration::from_secs(1),
        ..Options::default()
    }
}

/// Defaults with a per-node timeout that tolerates a busy debug build (500 ms), and one replica
/// acknowledgement per write (within 300 ms), for the tests of replica acknowledgements and
/// failovers.
pub fn acked_options() -> Options {
    Options {
        node_timeout: Duration::from_millis(500),
        replica_acks: 1,
        replica_ack_timeout: Duration::from_millis(300),
        ..Options::default()
    }
}

/// A client of `servers` (one server, or independent masters) with `options`.
pub fn relock_with<S: Borrow<Server>>(servers: &[S], options: Options) -> Relock {
    let urls: Vec<String> = servers.iter().map(|s| s.borrow().url()).collect();
    Relock::with_options(&urls, options).expect("client")
}

/// A client of `servers` with the [`patient`] options.
pub fn patient_client<S: Borrow<Server>>(servers: &[S]) -> Relock {
    relock_with(servers, patient())
}

/// `LOCK.RELEASE key owner` on `server`, straight to the server (not through a client), which
/// must end `owner`'s hold there.
pub fn release_as(server: &Server, key: &str, owner: &str) {
    let left: Option<u64> = crate::cmd!("LOCK.RELEASE", key, owner)
        .query(&mut server.conn())
        .expect("LOCK.RELEASE");
    assert_eq!(left, Some(0), "{owner} held {key}");
}
