//! Takes a lock, uses its fencing token, and runs a body under a renewed lock.
//!
//! ```sh
//! make run                                   # a server with the module on 127.0.0.1:6379
//! cargo run -p relock-client --example basic # or RELOCK_SERVERS=redis://a,redis://b,redis://c
//! ```
use std::time::Duration;

use relock_client::Relock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers = std::env::var("RELOCK_SERVERS")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
    let urls: Vec<&str> = servers.split(',').collect();
    let relock = Relock::new(&urls)?;

    let lock = relock
        .acquire("example:orders", Duration::from_secs(10))
        .await?;
    println!(
        "held by {} with token {:?}, valid for {:?}",
        lock.owner(),
        lock.token(),
        lock.valid_until()
            .saturating_duration_since(tokio::time::Instant::now())
    );
    lock.release().await?;

    let answer = relock
        .with_lock(
            "example:orders",
            Duration::from_secs(2),
            |hold| async move {
                // Longer than the ttl: the guard renews it in the background.
                tokio::select! {
                    _ = hold.lost.cancelled() => None,
                    _ = tokio::time::sleep(Duration::from_secs(3)) => Some(hold.token),
                }
            },
        )
        .await?;
    println!(
        "with_lock body finished holding token {:?}",
        answer.flatten()
    );
    Ok(())
}
