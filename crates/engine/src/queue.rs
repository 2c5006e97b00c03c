//! The FIFO queue of waiters for one key.
//!
//! Hand-off pops the head in O(1). A waiter that leaves early (timeout, disconnect) is found by
//! binary search on its id, since ids only grow in push order, and marked gone; gone entries are
//! skipped at the head and swept out once they outnumber the live ones, so the queue's memory
//! stays proportional to its live waiters and every operation is O(1) amortised (O(log n) to
//! find a leaver).

use std::collections::VecDeque;

/// A waiter's place in its queue.
pub type WaiterId = u64;

#[derive(Debug)]
struct Entry<W> {
    id: WaiterId,
    waiter: Option<W>,
}

/// FIFO queue of waiters of type `W`.
#[derive(Debug)]
pub struct Queue<W> {
    entries: VecDeque<Entry<W>>,
    live: usize,
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Queue {
            entries: VecDeque::new(),
            live: 0,
        }
    }
}

impl<W> Queue<W> {
    /// An empty queue.
    pub fn new() -> Queue<W> {
        Queue::default()
    }

    /// Live waiters (those that have not left).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no live waiter is queued.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Appends a waiter. `id` must be greater than every id pushed before.
    pub fn push(&mut self, id: WaiterId, waiter: W) {
        debug_assert!(self.entries.back().is_none_or(|e| e.id < id));
        self.entries.push_back(Entry {
            id,
            waiter: Some(waiter),
        });
        self.live += 1;
    }

    /// Removes and returns the first live waiter.
    pub fn pop(&mut self) -> Option<(WaiterId, W)> {
        while let Some(entry) = self.entries.pop_front() {
            if let Some(waiter) = entry.waiter {
                self.live -= 1;
                return Some((entry.id, waiter));
            }
        }
        None
    }

    /// Removes the waiter `id` wherever it stands; `None` if it is not queued.
    pub fn remove(&mut self, id: WaiterId) -> Option<W> {
        let index = self.entries.binary_search_by_key(&id, |e| e.id).ok()?;
        let waiter = self.entries.get_mut(index)?.waiter.take()?;
        self.live -= 1;
        self.sweep();
        Some(waiter)
    }

    /// The first live waiter, without removing it.
    pub fn front(&mut self) -> Option<(WaiterId, &W)> {
        while self.entries.front().is_some_and(|e| e.waiter.is_none()) {
            self.entries.pop_front();
        }
        let entry = self.entries.front()?;
        entry.waiter.as_ref().map(|w| (entry.id, w))
    }

    /// The waiter `id`, if it is queued.
    pub fn get_mut(&mut self, id: WaiterId) -> Option<&mut W> {
        let index = self.entries.binary_search_by_key(&id, |e| e.id).ok()?;
        self.entries.get_mut(index)?.waiter.as_mut()
    }

    /// Drains every live waiter in queue order.
    pub fn drain(&mut self) -> impl Iterator<Item = (WaiterId, W)> + '_ {
        self.live = 0;
        self.entries
            .drain(..)
            .filter_map(|e| e.waiter.map(|w| (e.id, w)))
    }

    /// Live waiters in queue order.
    pub fn iter(&self) -> impl Iterator<Item = (WaiterId, &W)> {
        self.entries
            .iter()
            .filter_map(|e| e.waiter.as_ref().map(|w| (e.id, w)))
    }

    fn sweep(&mut self) {
        while self.entries.front().is_some_and(|e| e.waiter.is_none()) {
            self.entries.pop_front();
        }
        while self.entries.back().is_some_and(|e| e.waiter.is_none()) {
            self.entries.pop_back();
        }
        let gone = self.entries.len() - self.live;
        if gone > 16 && gone > self.live {
            self.entries.retain(|e| e.waiter.is_some());
        }
    }

    /// Entries kept in memory, live or gone (for tests of the sweeping).
    pub fn footprint(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_is_the_next_pop() {
        let mut q = Queue::new();
        assert!(q.front().is_none());
        for id in 1..=4 {
            q.push(id, id * 10);
        }
        q.remove(1);
        q.remove(2);
        assert_eq!(q.front(), Some((3, &30)));
        assert_eq!(q.pop(), Some((3, 30)));
        q.remove(4);
        assert!(q.front().is_none());
    }

    #[test]
    fn first_in_first_out() {
        let mut q = Queue::new();
        for id in 1..=5 {
            q.push(id, id * 10);
        }
        assert_eq!(q.len(), 5);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)]);
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn leavers_are_skipped_and_counted_out() {
        // (pushed ids, removed ids, expected pop order)
        #[rustfmt::skip]
        let rows: Vec<(&[u64], &[u64], &[u64])> = vec![
            (&[1, 2, 3], &[1],       &[2, 3]),
            (&[1, 2, 3], &[2],       &[1, 3]),
            (&[1, 2, 3], &[3],       &[1, 2]),
            (&[1, 2, 3], &[1, 2, 3], &[]),
            (&[1, 5, 9], &[5, 7],    &[1, 9]),
            (&[],        &[1],       &[]),
        ];
        for (pushed, removed, expected) in rows {
            let mut q = Queue::new();
            for &id in pushed {
                q.push(id, ());
            }
            for &id in removed {
                let was_there = pushed.contains(&id);
                assert_eq!(
                    q.remove(id).is_some(),
                    was_there,
                    "remove {id} from {pushed:?}"
                );
            }
            assert_eq!(q.len(), expected.len());
            let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(id, _)| id).collect();
            assert_eq!(order, expected, "pushed {pushed:?} removed {removed:?}");
        }
    }

    #[test]
    fn removing_twice_is_harmless() {
        let mut q = Queue::new();
        q.push(1, ());
        q.push(2, ());
        assert!(q.remove(1).is_some());
        assert!(q.remove(1).is_none());
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn memory_follows_live_waiters_under_churn() {
        // A long-held lock with waiters that keep timing out must not grow the queue.
        let mut q = Queue::new();
        q.push(0, ()); // one patient waiter at the head
        for id in 1..100_000u64 {
            q.push(id, ());
            if id > 1 {
                q.remove(id - 1);
            }
        }
        assert_eq!(q.len(), 2);
        assert!(q.footprint() < 64, "footprint {}", q.footprint());
    }

    #[test]
    fn gone_entries_are_swept_once_they_outnumber_the_live_ones() {
        let mut q = Queue::new();
        for id in 1..=100 {
            q.push(id, ());
        }
        // The head stays; 50 leave from the middle: as many gone as live, nothing swept.
        for id in 2..=51 {
            q.remove(id);
        }
        assert_eq!((q.len(), q.footprint()), (50, 100));
        // One more: the gone outnumber the live, and go.
        q.remove(52);
        assert_eq!((q.len(), q.footprint()), (49, 49));
        // A short queue keeps up to 16 gone entries before sweeping.
        let mut q = Queue::new();
        for id in 1..=18 {
            q.push(id, ());
        }
        for id in 2..=17 {
            q.remove(id);
        }
        assert_eq!((q.len(), q.footprint()), (2, 18));
        q.push(19, ());
        q.remove(18);
        assert_eq!((q.len(), q.footprint()), (2, 2));
    }

    #[test]
    fn drain_and_iter_yield_live_waiters_in_order() {
        let mut q = Queue::new();
        for id in 1..=4 {
            q.push(id, id);
        }
        q.remove(2);
        assert_eq!(
            q.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            vec![1, 3, 4]
        );
        assert_eq!(
            q.drain().map(|(id, _)| id).collect::<Vec<_>>(),
            vec![1, 3, 4]
        );
        assert!(q.is_empty());
    }
}
