package relock

// ReplicaAcks: a grant counts only once the configured replicas acknowledged it (WAIT on the
// same connection), against a real master with real replicas.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaOf starts a replica of master (with the module, as a replica of a relock master
// needs) and waits until master counts it among its connected replicas.
func replicaOf(t *testing.T, master *server, masterRdb *redis.Client, want int) *server {
	t.Helper()
	r := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	eventually(t, 30*time.Second, "the replica connected and in sync", func() bool {
		info := masterRdb.Info(bg(), "replication").Val()
		return containsLine(info, "connected_slaves:"+strconv.Itoa(want)) &&
			strings.Count(info, "state=online") == want
	})
	return r
}

func lockInfo(t *testing.T, rdb *redis.Client, key string) any {
	t.Helper()
	v, err := rdb.Do(bg(), "LOCK.INFO", key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// notAcked checks err: not acquired, naming the master and how many acknowledged.
func notAcked(t *testing.T, err error, master string, acked, wanted int, within time.Duration) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("want ErrNotAcquired, got %v", err)
	}
	want := master + ": only " + strconv.Itoa(acked) + " of " + strconv.Itoa(wanted) + " required replica acknowledgements within " + within.String()
	if !strings.Contains(e.Msg, want) || !strings.Contains(e.Msg, "released there again") {
		t.Fatalf("error %q does not say %q", e.Msg, want)
	}
}

func TestReplicaAcks(t *testing.T) {
	noLeaks(t)
	m := startServer(t)
	mrdb := m.client(t)
	r := replicaOf(t, m, mrdb, 1)
	rrdb := r.client(t)
	// Acknowledgements within 5 s where they must come (a replica on a busy machine can take
	// more than 200 ms to answer the master's GETACK), 200 ms where none can (c200). A node
	// timeout past the WAIT: the master's answer must arrive on a busy machine too (a write
	// cut by the node timeout is a failure of its own).
	c, _ := locksOn(t, m, ReplicaAcks(1, 5*time.Second), NodeTimeout(2*time.Second))
	c200, _ := locksOn(t, m, ReplicaAcks(1, 200*time.Millisecond), NodeTimeout(2*time.Second))

	// Acknowledged: the replica has the hold when Acquire returns (WAIT counted it).
	h := mustAcquire(t, c, "acks:a", TTL(30*time.Second))
	if n := rrdb.Exists(bg(), "acks:a").Val(); n != 1 {
		t.Fatalf("the replica has not the acknowledged hold (EXISTS %d)", n)
	}
	if err := h.Renew(bg()); err != nil {
		t.Fatalf("acknowledged renewal: %v", err)
	}
	lead, err := c.Campaign(bg(), "acks:e", "n1", TTL(30*time.Second), Wait(5*time.Second))
	if err != nil {
		t.Fatalf("acknowledged campaign: %v", err)
	}
	if n := rrdb.Exists(bg(), "acks:e").Val(); n != 1 {
		t.Fatalf("the replica has not the acknowledged term (EXISTS %d)", n)
	}
	if err := lead.Resign(bg()); err != nil {
		t.Fatal(err)
	}

	// The replica stopped: nothing is acknowledged any more.
	r.pause()
	defer r.resume()
	_, err = c200.Acquire(bg(), "acks:b", TTL(30*time.Second))
	notAcked(t, err, m.addr(), 0, 1, 200*time.Millisecond)
	if v := lockInfo(t, mrdb, "acks:b"); v != nil {
		t.Fatalf("the grant not acknowledged is still held on the master: %v", v)
	}
	// A campaign's grant comes from LOCK.WAIT: WAIT follows it on the same connection; not
	// acknowledged, it is released again and the campaign ends with its wait.
	start := time.Now()
	_, err = c200.Campaign(bg(), "acks:e", "n2", TTL(30*time.Second), Wait(500*time.Millisecond))
	notAcked(t, err, m.addr(), 0, 1, 200*time.Millisecond)
	if v := lockInfo(t, mrdb, "acks:e"); v != nil {
		t.Fatalf("the term not acknowledged is still held on the master: %v", v)
	}
	if ws := waiters(t, c200, "acks:e"); ws != 0 {
		t.Fatalf("%d waiters left on the master", ws)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the campaign took %v", took)
	}
	// A group's LOCK.MACQUIRE and a nested section are grants too.
	if _, err := c200.AcquireAll(bg(), []string{"acks:g1", "acks:g2"}); !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "only 0 of 1 required replica acknowledgements") {
		t.Fatalf("group not acknowledged: want ErrNotAcquired naming the acknowledgements, got %v", err)
	}
	for _, k := range []string{"acks:g1", "acks:g2"} {
		if v := lockInfo(t, mrdb, k); v != nil {
			t.Fatalf("the group's key %s not acknowledged is still held: %v", k, v)
		}
	}
	ran := false
	err = h.Reenter(bg(), func(ctx context.Context) error { ran = true; return nil })
	if !errors.Is(err, ErrNotAcquired) || ran || !strings.Contains(err.Error(), "only 0 of 1 required replica acknowledgements") {
		t.Fatalf("section not acknowledged: want ErrNotAcquired naming the acknowledgements and fn not run, got %v (ran %v)", err, ran)
	}
	if n := holdCount(t, c, "acks:a"); n != 1 {
		t.Fatalf("the section not acknowledged left count %d on the master, want 1", n)
	}
	// A renewal not acknowledged does not count: the hold stays, valid until its validity.
	until := h.Until()
	err = h.Renew(bg())
	if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "only 0 of 1 required replica acknowledgements") {
		t.Fatalf("renewal not acknowledged: want ErrNoQuorum naming the acknowledgements, got %v", err)
	}
	if !h.Valid() || h.Until() != until {
		t.Fatalf("a renewal not acknowledged changed the hold (valid %v, until %v -> %v)", h.Valid(), until, h.Until())
	}
	r.resume()
	if err := h.Renew(bg()); err != nil {
		t.Fatalf("renewal once the replica is back: %v", err)
	}
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

// A renewal counts on a master left with fewer replicas than asked once every connected one
// acknowledged it (the promoted replica after a failover); a new grant there does not.
func TestReplicaAcksFewerReplicas(t *testing.T) {
	m := startServer(t)
	mrdb := m.client(t)
	r1 := replicaOf(t, m, mrdb, 1)
	r2 := replicaOf(t, m, mrdb, 2)
	c, _ := locksOn(t, m, ReplicaAcks(2, 2*time.Second), NodeTimeout(2*time.Second))
	h := mustAcquire(t, c, "acks:f", TTL(30*time.Second))

	_ = r2.cmd.Process.Kill()
	eventually(t, 30*time.Second, "the master saw the replica go", func() bool {
		return containsLine(mrdb.Info(bg(), "replication").Val(), "connected_slaves:1")
	})
	if err := h.Renew(bg()); err != nil {
		t.Fatalf("renewal acknowledged by every connected replica (1 of 2 asked): %v", err)
	}
	_, err := c.Acquire(bg(), "acks:g", TTL(30*time.Second))
	notAcked(t, err, m.addr(), 1, 2, 2*time.Second)
	if v := lockInfo(t, mrdb, "acks:g"); v != nil {
		t.Fatalf("the grant not acknowledged is still held: %v", v)
	}
	// The one replica left stopped too: the renewal is not acknowledged by it, and does not count.
	r1.pause()
	defer r1.resume()
	if err := h.Renew(bg()); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("renewal acknowledged by none of the connected replicas: want ErrNoQuorum, got %v", err)
	}
	r1.resume()
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestReplicaAcksInvalid(t *testing.T) {
	s := startServer(t)
	for _, o := range []ClientOption{ReplicaAcks(-1, time.Second), ReplicaAcks(1, 0)} {
		c := New(s.client(t), o)
		if _, err := c.Acquire(bg(), "k"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("want ErrInvalid, got %v", err)
		}
		_ = c.Close()
	}
}

// resumeAfterUndo resumes the stopped replica r once key, granted to someone but other on
// the master (a grant the stopped replica cannot acknowledge), has been undone there.
func resumeAfterUndo(t *testing.T, mrdb *redis.Client, key, other string, r *server) chan struct{} {
	t.Helper()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		defer r.resume()
		ownerOf := func() (string, bool) {
			v, err := mrdb.Do(bg(), "LOCK.INFO", key).Result()
			if err != nil || v == nil {
				return "", false
			}
			info := parseInfo("", v)
			if info == nil || info.Owner == nil {
				return "", false
			}
			return *info.Owner, true
		}
		end := time.Now().Add(20 * time.Second)
		for time.Now().Before(end) {
			if o, held := ownerOf(); held && o != other {
				break
			}
			time.Sleep(time.Millisecond)
		}
		for time.Now().Before(end) {
			if o, held := ownerOf(); !held || o == other {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return resumed
}

// A grant not acknowledged is undone at once; the campaign (and a group's key-by-key wait)
// then asks again. The undo must not be repeated later under the owner that asks again: it
// would revoke the new grant, a leadership already returned (two leaders).
func TestReplicaAcksRetryNotRevoked(t *testing.T) {
	m := startServer(t)
	mrdb := m.client(t)
	r := replicaOf(t, m, mrdb, 1)
	c, _ := locksOn(t, m, ReplicaAcks(1, 200*time.Millisecond), NodeTimeout(2*time.Second), RetryDelay(50*time.Millisecond))
	plain, _ := locksOn(t, m)

	t.Run("campaign", func(t *testing.T) {
		r.pause()
		resumed := resumeAfterUndo(t, mrdb, "race:e", "", r)
		lead, err := c.Campaign(bg(), "race:e", "n1", TTL(30*time.Second), Wait(20*time.Second))
		<-resumed
		if err != nil {
			t.Fatalf("campaign: %v", err)
		}
		c.settle(5 * time.Second) // the background give-backs of the failed attempt ran
		if i := parseInfo("", lockInfo(t, mrdb, "race:e")); i == nil || i.Owner == nil || *i.Owner != lead.Owner() {
			t.Fatalf("the leadership returned was revoked on the master (%+v)", i)
		}
		if err := lead.Renew(bg()); err != nil {
			t.Fatalf("the leadership returned cannot be renewed: %v", err)
		}
		_ = lead.Resign(bg())
	})

	t.Run("group", func(t *testing.T) {
		other := mustAcquire(t, plain, "race:g1", TTL(30*time.Second))
		r.pause()
		resumed := resumeAfterUndo(t, mrdb, "race:g1", other.Owner(), r)
		type res struct {
			h   *Hold
			err error
		}
		got := make(chan res, 1)
		go func() {
			h, err := c.AcquireAll(bg(), []string{"race:g1", "race:g2"}, TTL(30*time.Second), Wait(20*time.Second))
			got <- res{h, err}
		}()
		eventually(t, 10*time.Second, "the group waits for race:g1", func() bool { return waiters(t, plain, "race:g1") == 1 })
		_ = other.Release(bg())
		g := <-got
		<-resumed
		if g.err != nil {
			t.Fatalf("group: %v", g.err)
		}
		c.settle(5 * time.Second)
		for _, k := range []string{"race:g1", "race:g2"} {
			if o := parseInfo("", lockInfo(t, mrdb, k)); o == nil || o.Owner == nil || *o.Owner != g.h.Owner() {
				t.Fatalf("the group's key %s was revoked on the master (%+v)", k, o)
			}
		}
		if err := g.h.Renew(bg()); err != nil {
			t.Fatalf("the group returned cannot be renewed: %v", err)
		}
		_ = g.h.Release(bg())
	})
}

// A background renewal that stalls (a stopped master; replica acknowledgements that do not
// come) must not hold the loss back: Done closes when the validity ends, not when the
// renewal gives up.
func TestLossWhileRenewalStalls(t *testing.T) {
	check := func(t *testing.T, c *Client, stop func(), resume func()) {
		h := mustAcquire(t, c, "stall", TTL(600*time.Millisecond))
		stop()
		defer resume()
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the hold was not lost")
		}
		// Done closes ttl/20 before the validity ends; judged generously for a busy machine.
		if late := time.Since(h.Until()); late > 150*time.Millisecond {
			t.Fatalf("Done closed %v after the validity ended", late)
		}
		var e *Error
		if !errors.As(h.Err(), &e) || e.Kind != ErrLockLost {
			t.Fatalf("want ErrLockLost, got %v", h.Err())
		}
	}
	t.Run("master stopped", func(t *testing.T) {
		m := startServer(t)
		c, _ := locksOn(t, m, NodeTimeout(3*time.Second))
		check(t, c, m.pause, m.resume)
	})
	t.Run("replica stopped", func(t *testing.T) {
		m := startServer(t)
		mrdb := m.client(t)
		r := replicaOf(t, m, mrdb, 1)
		c, _ := locksOn(t, m, ReplicaAcks(1, 3*time.Second), NodeTimeout(2*time.Second))
		check(t, c, r.pause, r.resume)
	})
}
