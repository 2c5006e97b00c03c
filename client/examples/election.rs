//! Campaigns for leadership of an election, writes under the term with `LOCK.FENCED`, and
//! resigns; another process can follow the leaders meanwhile (`lockctl leader --watch
//! example:leader`).
//!
//! ```sh
//! make run                                      # a server with the module on 127.0.0.1:6379
//! cargo run -p relock-client --example election # RELOCK_SERVERS=redis://host:port for another
//! ```
use std::time::Duration;

use relock_client::{Command, Error, Relock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("RELOCK_SERVERS")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
    let relock = Relock::new(&[server])?;
    let key = "{example:leader}";

    let mut observer = relock.observe(key)?;
    println!("leader before: {:?}", observer.next().await?.leader);

    // Waits in line (FIFO) until this process leads; renewed in the background from then on.
    let leading = relock
        .campaign(key, "example-worker", Duration::from_secs(10), None)
        .await?;
    println!(
        "leading as {:?} in term {}",
        leading.value(),
        leading.term()
    );
    let change = observer.next().await?;
    println!("an observer saw: {:?}", change.leader);

    // A write the server runs only while this term is the key's live hold (same hash tag, so
    // same slot in a cluster).
    let write = Command::new("SET")
        .arg("{example:leader}:config")
        .arg(format!("written in term {}", leading.term()));
    match leading.fenced(&write).await {
        Ok(reply) => println!("fenced write: {reply:?}"),
        // Another term began: this process no longer leads, and its write did not run.
        Err(Error::Fenced { message, .. }) => println!("refused: {message}"),
        Err(e) => return Err(e.into()),
    }

    let lost = leading.lost();
    tokio::select! {
        _ = lost.cancelled() => println!("leadership lost"),
        _ = tokio::time::sleep(Duration::from_millis(200)) => {
            leading.resign().await?; // the next candidate in line leads in the same step
            println!("resigned");
        }
    }
    Ok(())
}
