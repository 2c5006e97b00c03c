//! The fan-out of a round: one request per master, all under way at once, each reply fed into
//! the round's [`RoundState`] as it comes, until the state has decided.
//!
//! The requests are plain futures, so the masters behind them can be real ones or fakes.

use std::future::Future;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::error::NodeFailure;
use crate::round::{Progress, Reply, Round, RoundState};

/// Feeds the reply of each of `requests` (one per master, in the masters' order) into `state`
/// and returns the round once `state` has decided, or once every request has answered.
///
/// With `partial_hold`, a round that got a first grant but is still undecided that long
/// afterwards is cut off there (a waiting contender holding a minority gives it back rather
/// than wait on the others forever).
///
/// Requests still running when this returns are dropped; use [`spawned`] for those that must
/// run to completion.
pub(crate) async fn collect<T, F>(
    mut state: RoundState<T>,
    requests: Vec<F>,
    partial_hold: Option<Duration>,
) -> Round<T>
where
    F: Future<Output = Reply<T>>,
{
    let mut pending: FuturesUnordered<_> = requests
        .into_iter()
        .enumerate()
        .map(|(master, request)| async move { (master, request.await) })
        .collect();
    let mut cut_off_at: Option<Instant> = None;
    loop {
        let next = match cut_off_at {
            None => pending.next().await,
            Some(at) => tokio::select! {
                next = pending.next() => next,
                () = tokio::time::sleep_until(at) => {
                    tracing::debug!(granted = state.agreed(), "no quorum within the partial-hold limit");
                    break;
                }
            },
        };
        let Some((master, reply)) = next else { break };
        if state.on_reply(master, reply) != Progress::Pending {
            break;
        }
        if let Some(limit) = partial_hold {
            if state.agreed() > 0 {
                cut_off_at.get_or_insert_with(|| Instant::now() + limit);
            }
        }
    }
    state.finish(Instant::now())
}

/// Runs `request` in a task of its own, so that it goes on to completion (a late grant still
/// lands, to be released by the paths that address every master) when the round that sent it
/// is decided without it. A task that panics or is cancelled counts as a failed request.
pub(crate) fn spawned<T, F>(request: F) -> impl Future<Output = Reply<T>>
where
    T: Send + 'static,
    F: Future<Output = Reply<T>> + Send + 'static,
{
    let task = tokio::spawn(request);
    async move {
        task.await
            .unwrap_or_else(|e| Err(NodeFailure::Protocol(format!("request task failed: {e}"))))
    }
}
