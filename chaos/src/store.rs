//! The fenced store: a resource that accepts a write only with a token above the highest it has
//! accepted (a Lua script on a plain redis-server that no fault touches), and logs every attempt
//! in the order it processed them so the checker can replay its decisions.

use std::time::Duration;

const SCRIPT: &str = r#"
local top = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
local ok = 0
if token > top then
  redis.call('SET', KEYS[1], ARGV[1])
  ok = 1
end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ok)
return ok
"#;

const TOP_KEY: &str = "fence:top";
const LOG_KEY: &str = "fence:log";

/// One processed write: the token it carried, the hold (`worker:seq`), whether it was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub token: u64,
    pub hold: String,
    pub accepted: bool,
}

/// A connection to the fenced store.
pub struct FencedStore {
    conn: redis::Connection,
    script: redis::Script,
}

impl FencedStore {
    pub fn connect(url: &str) -> redis::RedisResult<FencedStore> {
        let conn = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(FencedStore {
            conn,
            script: redis::Script::new(SCRIPT),
        })
    }

    /// Writes with `token` on behalf of `hold`; true if the store accepted it.
    pub fn write(&mut self, token: u64, hold: &str) -> redis::RedisResult<bool> {
        let ok: i64 = self
            .script
            .key(TOP_KEY)
            .key(LOG_KEY)
            .arg(token)
            .arg(hold)
            .invoke(&mut self.conn)?;
        Ok(ok == 1)
    }

    /// Every attempt, in the order the store processed them.
    pub fn log(&mut self) -> redis::RedisResult<Vec<Attempt>> {
        let lines: Vec<String> = redis::cmd("LRANGE")
            .arg(LOG_KEY)
            .arg(0)
            .arg(-1)
            .query(&mut self.conn)?;
        Ok(lines
            .iter()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                Some(Attempt {
                    token: parts.next()?.parse().ok()?,
                    hold: parts.next()?.to_string(),
                    accepted: parts.next()? == "1",
                })
            })
            .collect())
    }
}
