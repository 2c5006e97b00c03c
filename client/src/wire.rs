//! The client's `LOCK.*` commands as redis-rs sends them: each written by relock-protocol's
//! type for it (`relock_protocol::cmd`), the types the module parses with, so that a command's
//! wire shape is written once (issue 32).

use relock_protocol::Command;

/// `command` (its whole argv, the name first) as a [`redis::Cmd`].
pub(crate) fn cmd<'a>(command: &impl Command<'a>) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for arg in command.to_args() {
        cmd.arg(arg.as_slice());
    }
    cmd
}

#[cfg(test)]
mod tests {
    use relock_protocol::cmd::{MRelease, Reenter, Wait};
    use relock_protocol::Ask;

    use super::cmd;

    /// The bytes redis-rs sends for `argv`, each word one bulk string.
    fn sent(argv: &[&str]) -> Vec<u8> {
        let mut c = redis::Cmd::new();
        for word in argv {
            c.arg(*word);
        }
        c.get_packed_command()
    }

    #[test]
    fn each_word_is_one_bulk_string_in_order() {
        let wait = Wait {
            key: b"k",
            owner: b"o",
            ttl_ms: 30_000,
            timeout_ms: 0,
            ask: Ask::Shared {
                limit: 10,
                permits: 3,
            },
        };
        assert_eq!(
            cmd(&wait).get_packed_command(),
            sent(&[
                "LOCK.WAIT",
                "k",
                "o",
                "30000",
                "0",
                "SHARED",
                "LIMIT",
                "10",
                "PERMITS",
                "3"
            ])
        );
        let reenter = Reenter {
            key: b"k",
            owner: b"o",
            ttl_ms: 5,
            ask: Ask::Exclusive,
            from: Some(0),
        };
        assert_eq!(
            cmd(&reenter).get_packed_command(),
            sent(&["LOCK.REENTER", "k", "o", "5", "FROM", "0"])
        );
        let mrelease = MRelease {
            keys: vec![b"a", b"b"],
            owner: b"o",
            from: Some(1),
        };
        assert_eq!(
            cmd(&mrelease).get_packed_command(),
            sent(&["LOCK.MRELEASE", "2", "a", "b", "o", "FROM", "1"])
        );
    }
}
