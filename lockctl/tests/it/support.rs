//! What lockctl's concerns share: the `lockctl` command with a clean environment, an
//! interactive shell that runs it, and the test kit's helpers under one name
//! (`support::Spawned`, `support::holder`, `support::proxy::Proxy`).

use std::process::{Command, Stdio};
use std::time::Duration;

use relock_testkit::Server;

pub use relock_testkit::ask::{acquire_as, calls, force_release, holder, rejected};
pub use relock_testkit::client::release_as;
pub use relock_testkit::process::*;
pub use relock_testkit::{proxy, pty};

/// `lockctl` with `RELOCK_SERVERS` set to `servers` and every other setting of the caller's
/// environment that would change its behaviour removed.
pub fn lockctl_at(servers: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.env("RELOCK_SERVERS", servers)
        .env_remove("RELOCK_LOG")
        .env_remove("RELOCK_CLUSTER")
        .env_remove("RELOCK_REPLICA_ACKS")
        .env_remove("RELOCK_TLS_CA")
        .env_remove("RELOCK_TLS_CERT")
        .env_remove("RELOCK_TLS_KEY")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    cmd
}

/// `lockctl` against `servers`.
pub fn lockctl(servers: &[&Server]) -> Command {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    lockctl_at(&urls.join(","))
}

/// An interactive shell on a terminal (`bash -i`, prompt `$ `, `TERM=dumb`), with `$LOCKCTL`
/// and `RELOCK_SERVERS` set to `server`, that runs lockctl as a foreground or background job
/// the way a person's shell does; returns once it prompts.
pub fn shell(server: &Server) -> pty::Pty {
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "-i"])
        .env("PS1", "$ ")
        .env("RELOCK_SERVERS", server.url())
        .env("LOCKCTL", env!("CARGO_BIN_EXE_lockctl"))
        .env_remove("RELOCK_LOG")
        .env_remove("RELOCK_CLUSTER")
        .env_remove("RELOCK_REPLICA_ACKS")
        .env("TERM", "dumb");
    let pty = pty::Pty::spawn(&mut cmd);
    pty.expect("$ ", Duration::from_secs(10));
    pty
}
