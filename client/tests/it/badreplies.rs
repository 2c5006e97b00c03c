//! A server that answers nonsense: relock-client reads every reply of the new commands
//! (`LOCK.HISTORY`, `TIME`, `LOCK.MACQUIRE`, `LOCK.MRENEW`, `LOCK.DOWNGRADE`) defensively: a
//! protocol failure, an unknown loss, never a panic or a hang.

use std::time::Duration;

use relock_client::{Error, LossReason, Options, Relock};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A fake server on a free port that answers each command (its name, upper case) with what
/// `answer` gives: raw RESP.
async fn fake(answer: fn(&str, &[String]) -> String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                loop {
                    let Some(args) = read_command(&mut read).await else {
                        return;
                    };
                    let name = args.first().map(|a| a.to_uppercase()).unwrap_or_default();
                    if write
                        .write_all(answer(&name, &args[1..]).as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}")
}

async fn read_command<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<Vec<String>> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        read.read_line(&mut line).await.ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        read.read_exact(&mut buf).await.ok()?;
        buf.truncate(len);
        args.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Some(args)
}

fn options() -> Options {
    Options {
        node_timeout: Duration::from_millis(500),
        retry_count: 0,
        ..Options::default()
    }
}

fn nonsense(name: &str, _args: &[String]) -> String {
    match name {
        "LOCK.ACQUIRE" => ":7\r\n".into(),
        // Gone at the first renewal.
        "LOCK.RENEW" => "$-1\r\n".into(),
        "LOCK.RELEASE" => "$-1\r\n".into(),
        "LOCK.HISTORY" => "+not a list\r\n".into(),
        "TIME" => ":12\r\n".into(),
        // One token for two keys.
        "LOCK.MACQUIRE" => "*1\r\n:5\r\n".into(),
        "LOCK.MRELEASE" => "+what\r\n".into(),
        "LOCK.DOWNGRADE" => "*2\r\n:1\r\n:2\r\n".into(),
        _ => "+OK\r\n".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonsense_is_a_failure_not_a_panic() {
    let url = fake(nonsense).await;
    let relock = Relock::with_options(&[&url], options()).expect("client");
    // The journal answers nonsense: the loss is unknown.
    let guard = relock
        .guard("k", Duration::from_secs(3))
        .await
        .expect("guard");
    assert!(guard.renew_now().await.is_err());
    let loss = tokio::time::timeout(Duration::from_secs(5), guard.hold().loss.explained())
        .await
        .expect("explained")
        .expect("a loss");
    assert_eq!(loss.reason, LossReason::Unknown, "{loss}");
    let _ = guard.release().await;
    // One token for two keys: not a grant.
    let err = relock
        .acquire_all(&["a", "b"], Duration::from_secs(3))
        .await
        .expect_err("nonsense");
    assert!(err.to_string().contains("1 tokens for 2 keys"), "{err}");
    // An array where a token belongs.
    let mut lock = relock
        .acquire("k", Duration::from_secs(3))
        .await
        .expect("lock");
    let err = lock.downgrade().await.expect_err("nonsense");
    assert!(!matches!(err, Error::Lost { .. }), "{err}");
    relock.settle().await;
}
