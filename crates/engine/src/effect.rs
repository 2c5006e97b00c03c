//! What replicas and the AOF receive for each change to a lock: its *effect* (the hold as it is
//! now, with its owner, token, count and absolute expiry; or its removal), never the command that
//! decided it, whose result depends on time and state. One type for every effect, and one
//! spelling of each as a command ([`Effect::argv`]); the hosts only carry the words out
//! (`src/redis/effects.rs` for replication and AOF rewrite alike).

use super::bounds;
use super::shared::Holder;

/// One change, as a command replicas and the AOF replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect<'a> {
    /// `LOCK.APPLY key owner token count [PXAT unix_ms] [GRANTED unix_ms]`: the exclusive hold
    /// as it is now.
    Hold {
        owner: &'a [u8],
        token: u64,
        count: u32,
        expires_at: Option<i64>,
        /// When it was granted (Unix ms; 0: unknown, not sent).
        granted_at: i64,
    },
    /// `LOCK.APPLY key owner token count PXAT lease_end [GRANTED unix_ms] SHARED [LIMIT n
    /// [PERMITS p]]`: one shared holder.
    Holder {
        limit: u32,
        owner: &'a [u8],
        holder: Holder,
    },
    /// `LOCK.DROP key owner`: one shared holder removed.
    Drop { owner: &'a [u8] },
    /// `PEXPIREAT key unix_ms`: a shared key capped at its latest lease.
    Expire { at: i64 },
    /// `DEL key`: the lock is gone.
    Delete,
    /// `LOCK.COUNTER token`: the token counter (no key).
    Counter { token: u64 },
}

/// One word of an effect's command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word<'a> {
    /// The key's name.
    Key,
    Bytes(&'a [u8]),
    Int(i64),
}

impl<'a> Effect<'a> {
    /// The command's name and its arguments: every number within the bounds `LOCK.APPLY` and
    /// the RDB loader keep ([`bounds`]), so a replica and an AOF take every effect a master
    /// sends.
    pub fn argv(&self) -> (&'static str, Vec<Word<'a>>) {
        use Word::{Bytes, Int, Key};
        let int = |n: u64| Int(i64::try_from(n).unwrap_or(i64::MAX));
        match *self {
            Effect::Hold {
                owner,
                token,
                count,
                expires_at,
                granted_at,
            } => {
                let mut words = vec![Key, Bytes(owner), int(token), Int(i64::from(count))];
                if let Some(at) = expires_at {
                    words.extend([Bytes(b"PXAT"), Int(bounds::expiry(at))]);
                }
                if granted_at > 0 {
                    words.extend([Bytes(b"GRANTED"), Int(bounds::grant_time(granted_at))]);
                }
                ("LOCK.APPLY", words)
            }
            Effect::Holder {
                limit,
                owner,
                holder,
            } => {
                let mut words = vec![
                    Key,
                    Bytes(owner),
                    int(holder.token),
                    Int(i64::from(holder.count)),
                    Bytes(b"PXAT"),
                    Int(bounds::lease_end(holder.lease_end)),
                ];
                if holder.granted_at > 0 {
                    words.extend([
                        Bytes(b"GRANTED"),
                        Int(bounds::grant_time(holder.granted_at)),
                    ]);
                }
                words.push(Bytes(b"SHARED"));
                if limit > 0 {
                    words.extend([Bytes(b"LIMIT"), Int(i64::from(limit))]);
                    if holder.permits != 1 {
                        words.extend([Bytes(b"PERMITS"), Int(i64::from(holder.permits))]);
                    }
                }
                ("LOCK.APPLY", words)
            }
            Effect::Drop { owner } => ("LOCK.DROP", vec![Key, Bytes(owner)]),
            Effect::Expire { at } => ("PEXPIREAT", vec![Key, Int(at)]),
            Effect::Delete => ("DEL", vec![Key]),
            Effect::Counter { token } => ("LOCK.COUNTER", vec![int(token)]),
        }
    }

    /// The whole command as text words with `key` in place: what the in-memory host records.
    pub fn words(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let (name, argv) = self.argv();
        std::iter::once(name.as_bytes().to_vec())
            .chain(argv.into_iter().map(|word| match word {
                Word::Key => key.to_vec(),
                Word::Bytes(bytes) => bytes.to_vec(),
                Word::Int(n) => n.to_string().into_bytes(),
            }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(effect: Effect<'_>) -> String {
        effect
            .words(b"k")
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn each_effect_is_spelled_as_the_command_replicas_replay() {
        let holder = Holder {
            count: 2,
            ..Holder::new(7, 1_000, 0)
        };
        let granted = Holder {
            permits: 2,
            ..Holder::new(7, 1_000, 500)
        };
        #[rustfmt::skip]
        let rows = [
            (Effect::Hold { owner: b"o", token: 7, count: 1, expires_at: Some(99), granted_at: 0 }, "LOCK.APPLY k o 7 1 PXAT 99"),
            (Effect::Hold { owner: b"o", token: 7, count: 1, expires_at: None, granted_at: 0 },     "LOCK.APPLY k o 7 1"),
            (Effect::Hold { owner: b"o", token: 7, count: 1, expires_at: Some(99), granted_at: 5 }, "LOCK.APPLY k o 7 1 PXAT 99 GRANTED 5"),
            (Effect::Holder { limit: 3, owner: b"o", holder: granted },                 "LOCK.APPLY k o 7 1 PXAT 1000 GRANTED 500 SHARED LIMIT 3 PERMITS 2"),
            (Effect::Holder { limit: 0, owner: b"o", holder },                        "LOCK.APPLY k o 7 2 PXAT 1000 SHARED"),
            (Effect::Holder { limit: 3, owner: b"o", holder },                        "LOCK.APPLY k o 7 2 PXAT 1000 SHARED LIMIT 3"),
            (Effect::Drop { owner: b"o" },                                            "LOCK.DROP k o"),
            (Effect::Expire { at: 5 },                                                "PEXPIREAT k 5"),
            (Effect::Delete,                                                          "DEL k"),
            (Effect::Counter { token: 9 },                                            "LOCK.COUNTER 9"),
        ];
        for (effect, expected) in rows {
            assert_eq!(text(effect), expected);
        }
    }

    /// What the encoder spells, `LOCK.APPLY`'s parser takes, whatever the value holds.
    #[test]
    fn every_hold_is_spelled_within_the_bounds_of_lock_apply() {
        use crate::args;
        let far = Holder {
            permits: 1,
            ..Holder::new(crate::MAX_TOKEN, i64::MAX, i64::MAX)
        };
        let effects = [
            Effect::Hold {
                owner: &[0xff; 256],
                token: crate::MAX_TOKEN,
                count: u32::MAX,
                expires_at: Some(i64::MAX),
                granted_at: i64::MAX,
            },
            Effect::Hold {
                owner: b"o",
                token: 1,
                count: 1,
                expires_at: Some(0),
                granted_at: 1,
            },
            Effect::Holder {
                limit: 0,
                owner: b"o",
                holder: far,
            },
        ];
        for effect in effects {
            let words = effect.words(b"k");
            let rest: Vec<&[u8]> = words[5..].iter().map(|w| w.as_slice()).collect();
            assert!(
                args::owner(&words[2]).is_ok()
                    && args::token(&words[3]).is_ok()
                    && args::count(&words[4]).is_ok()
                    && args::apply_tail(&rest).is_ok(),
                "{}",
                text(effect)
            );
        }
    }
}
