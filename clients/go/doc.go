// Package relock takes locks with the relock Redis module (LOCK.* commands) through go-redis
// v9: on one server or a Redis Cluster (New), or with Redlock over independent masters
// (NewRedlock).
//
//	locks := relock.New(rdb)
//	hold, err := locks.Acquire(ctx, "orders:7", relock.TTL(30*time.Second), relock.Wait(5*time.Second))
//	if errors.Is(err, relock.ErrNotAcquired) { ... }
//	defer hold.Release(context.Background())
//	// hold.Token() fences writes; hold.Done() is closed and hold.Context() cancelled on loss,
//	// and hold.Err() says why (from the server's journal, LOCK.HISTORY).
//
// A hold is renewed every ttl/3 in the background. Waits queue first-in, first-out on the
// server (LOCK.WAIT, no polling), on a connection of their own that go-redis neither times out
// nor retries. Shared locks (Shared), semaphores (Limit, Permits), several keys at once
// (AcquireAll), downgrade, a redsync-style Mutex, leader elections (Campaign, Leader,
// Observe) and fenced writes (Hold.Fenced, LOCK.FENCED) are here too. The client rules (the
// Redlock round, validity, which failures are permanent, the decoding of replies) are the
// shared ones of spec/client-cases/ in the relock repository; docs/go.md there is the guide.
package relock
