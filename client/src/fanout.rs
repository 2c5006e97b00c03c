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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use futures_util::future::BoxFuture;
    use futures_util::FutureExt;

    use super::*;
    use crate::round::fake::{reply, Fake, Fake::*};
    use crate::round::Until;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A fake master: answers `fake` after `after` ms, or (`None`) never.
    type Master = (u64, Option<Fake>);

    fn request(master: Master) -> BoxFuture<'static, Reply<u64>> {
        let (after, fake) = master;
        async move {
            tokio::time::sleep(ms(after)).await;
            match fake {
                Some(fake) => reply(fake),
                None => std::future::pending().await,
            }
        }
        .boxed()
    }

    async fn drive(masters: &[Master], until: Until, partial_hold: Option<u64>) -> Round<u64> {
        let names: Arc<[String]> = (0..masters.len()).map(|i| format!("m{i}")).collect();
        let state = RoundState::new(names, until, Instant::now());
        let requests = masters.iter().map(|&m| request(m)).collect();
        collect(state, requests, partial_hold.map(ms)).await
    }

    /// The driver returns as soon as the round is decided (or, for a round that waits for
    /// every master, once all answered; for a wait, once the partial hold is over), with
    /// what came in until then.
    #[tokio::test(start_paused = true)]
    async fn rounds_return_when_decided() {
        let d = Until::Decided;
        // (what, masters, until, partial hold ms, elapsed ms, tokens kept)
        let cases = vec![
            (
                "1: grant",
                vec![(3, Some(Grant(1)))],
                d,
                None,
                3,
                vec![Some(1)],
            ),
            (
                "1: refusal",
                vec![(3, Some(Refuse))],
                d,
                None,
                3,
                vec![None],
            ),
            (
                "1: timeout",
                vec![(100, Some(Timeout))],
                d,
                None,
                100,
                vec![None],
            ),
            (
                "3: quorum without the slowest",
                vec![
                    (10, Some(Grant(1))),
                    (20, Some(Grant(2))),
                    (1_000, Some(Grant(3))),
                ],
                d,
                None,
                20,
                vec![Some(1), Some(2), None],
            ),
            (
                "3: quorum without one that never answers",
                vec![(10, Some(Grant(1))), (30, Some(Grant(2))), (0, None)],
                d,
                None,
                30,
                vec![Some(1), Some(2), None],
            ),
            (
                "3: lost without waiting for one that never answers",
                vec![(5, Some(Refuse)), (0, None), (10, Some(NoModule))],
                d,
                None,
                10,
                vec![None, None, None],
            ),
            (
                "3: lost to timeouts",
                vec![
                    (100, Some(Timeout)),
                    (2, Some(Grant(2))),
                    (100, Some(Timeout)),
                ],
                d,
                None,
                100,
                vec![None, Some(2), None],
            ),
            (
                "3: the last reply decides",
                vec![(1, Some(Grant(1))), (2, Some(Refuse)), (50, Some(Grant(3)))],
                d,
                None,
                50,
                vec![Some(1), None, Some(3)],
            ),
            (
                "3: a release waits for every master",
                vec![
                    (1, Some(Grant(1))),
                    (2, Some(Grant(2))),
                    (300, Some(Refuse)),
                ],
                Until::AllAnswered,
                None,
                300,
                vec![Some(1), Some(2), None],
            ),
            (
                "5: quorum among errors",
                vec![
                    (1, Some(Busy)),
                    (2, Some(Grant(2))),
                    (3, Some(WrongType)),
                    (4, Some(Grant(4))),
                    (5, Some(Grant(5))),
                ],
                d,
                None,
                5,
                vec![None, Some(2), None, Some(4), Some(5)],
            ),
            (
                "5: lost at the third failure",
                vec![
                    (1, Some(Down)),
                    (2, Some(Grant(2))),
                    (3, Some(Timeout)),
                    (4, Some(Refuse)),
                    (5, Some(Grant(5))),
                ],
                d,
                None,
                4,
                vec![None, Some(2), None, None, None],
            ),
            (
                "3: a wait's minority is cut off after the partial hold",
                vec![(10, Some(Grant(1))), (0, None), (1_000, Some(Grant(3)))],
                d,
                Some(50),
                60,
                vec![Some(1), None, None],
            ),
            (
                "3: a wait's quorum within the partial hold",
                vec![(10, Some(Grant(1))), (0, None), (40, Some(Grant(3)))],
                d,
                Some(50),
                40,
                vec![Some(1), None, Some(3)],
            ),
            (
                "3: no partial hold before a first grant",
                vec![
                    (10, Some(Refuse)),
                    (500, Some(Grant(2))),
                    (900, Some(Grant(3))),
                ],
                d,
                Some(50),
                550,
                vec![None, Some(2), None],
            ),
        ];
        for (what, masters, until, partial_hold, elapsed, tokens) in cases {
            let started = Instant::now();
            let round = drive(&masters, until, partial_hold).await;
            assert_eq!(started.elapsed(), ms(elapsed), "{what}: returned after");
            assert_eq!(round.elapsed(), ms(elapsed), "{what}: elapsed");
            assert_eq!(round.answers(), tokens, "{what}: tokens");
        }
    }

    /// A fake master that says, by a flag, whether its request ran to its end.
    fn tracked(after: u64, fake: Fake, done: &Arc<AtomicBool>) -> BoxFuture<'static, Reply<u64>> {
        let done = done.clone();
        async move {
            tokio::time::sleep(ms(after)).await;
            done.store(true, Ordering::SeqCst);
            reply(fake)
        }
        .boxed()
    }

    /// A spawned request outlives its decided round (a late grant still lands, to be
    /// released); a plain one is dropped with it (a `LOCK.WAIT` connection closes).
    #[tokio::test(start_paused = true)]
    async fn spawned_requests_run_to_completion_plain_ones_are_dropped() {
        for spawn in [true, false] {
            let late = Arc::new(AtomicBool::new(false));
            let names: Arc<[String]> = ["a", "b", "c"].map(String::from).into();
            let state = RoundState::new(names, Until::Decided, Instant::now());
            let mut requests = vec![
                request((1, Some(Grant(1)))),
                request((2, Some(Grant(2)))),
                tracked(100, Grant(3), &late),
            ];
            if spawn {
                requests = requests.into_iter().map(|r| spawned(r).boxed()).collect();
            }
            let round = collect(state, requests, None).await;
            assert_eq!(round.answers(), [Some(1), Some(2), None]);
            assert!(!late.load(Ordering::SeqCst));
            tokio::time::sleep(ms(200)).await;
            assert_eq!(late.load(Ordering::SeqCst), spawn, "spawned: {spawn}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_task_that_panics_is_a_failed_master() {
        let names: Arc<[String]> = ["a"].map(String::from).into();
        let state = RoundState::new(names, Until::Decided, Instant::now());
        let panics = spawned(async { panic!("fake master bug") });
        let round: Round<u64> = collect(state, vec![panics.boxed()], None).await;
        let failures = round.into_failures();
        assert_eq!(failures.nodes(), ["a"]);
        assert!(
            matches!(&failures.0[0].failure, NodeFailure::Protocol(m) if m.contains("request task failed")),
            "{failures}"
        );
    }
}
