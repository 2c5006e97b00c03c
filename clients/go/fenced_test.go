package relock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFencedErrorMapping: LOCK.FENCED's refusals as this package reports them.
func TestFencedErrorMapping(t *testing.T) {
	stale := fencedError("k", replyErr("FENCED stale token 5, current 9"))
	var e *Error
	if !errors.As(stale, &e) || !errors.Is(stale, ErrFenced) || e.Key != "k" || e.Retryable {
		t.Fatalf("stale: %v", stale)
	}
	if !errors.Is(fencedError("k", replyErr("FENCED stale token 5, current none")), ErrFenced) {
		t.Fatal("none")
	}
	refused := fencedError("k", replyErr("ERR FLUSHALL cannot run in LOCK.FENCED"))
	if !errors.Is(refused, ErrInvalid) {
		t.Fatalf("refused command: %v", refused)
	}
	if !errors.Is(fencedError("k", replyErr("ERR LOCK.FENCED needs Redis 7.0.6 or later")), ErrInvalid) {
		t.Fatal("old server")
	}
	if !errors.Is(fencedError("k", replyErr("ERR unknown command 'LOCK.FENCED', with args beginning with: ")), ErrServer) {
		t.Fatal("old module")
	}
	// The inner command's own errors pass through unchanged.
	inner := replyErr("WRONGTYPE Operation against a key holding the wrong kind of value")
	if got := fencedError("k", inner); got != error(inner) {
		t.Fatalf("inner: %v", got)
	}
	if fencedError("k", nil) != nil {
		t.Fatal("nil")
	}
}

// TestFenced: a write through LOCK.FENCED runs while the hold is live and is refused by the
// server, with nothing run, once the token is stale.
func TestFenced(t *testing.T) {
	s := startServer(t)
	c, rdb := locksOn(t, s)
	h := mustAcquire(t, c, "{order:7}", TTL(10*time.Second))
	v, err := h.Fenced(bg(), "HINCRBY", "{order:7}:data", "paid", 5)
	if err != nil || v != int64(5) {
		t.Fatalf("fenced write: %v %v", v, err)
	}
	// The inner command's own error passes through.
	rdb.Set(bg(), "{order:7}:str", "x", 0)
	if _, err := h.Fenced(bg(), "HINCRBY", "{order:7}:str", "paid", 1); err == nil || errors.Is(err, ErrFenced) || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("inner error: %v", err)
	}
	// A command LOCK.FENCED refuses.
	if _, err := h.Fenced(bg(), "FLUSHALL"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("refused command: %v", err)
	}
	// The lock is taken away (and taken by another owner): the write is refused.
	rdb.Do(bg(), "LOCK.FORCERELEASE", "{order:7}")
	other := mustAcquire(t, c, "{order:7}")
	_, err = h.Fenced(bg(), "HINCRBY", "{order:7}:data", "paid", 100)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrFenced) || !strings.Contains(e.Msg, "stale token") {
		t.Fatalf("stale write: %v", err)
	}
	if n := rdb.HGet(bg(), "{order:7}:data", "paid").Val(); n != "5" {
		t.Fatalf("the stale write ran: paid %s", n)
	}
	if v, err := other.Fenced(bg(), "HINCRBY", "{order:7}:data", "paid", 1); err != nil || v != int64(6) {
		t.Fatalf("new holder's write: %v %v", v, err)
	}
	_ = other.Release(bg())
}

// TestOwnOptions: relock's own clients never let go-redis retry (a re-sent wait queues again,
// a release is re-sent only by relock's give-back) and honour context deadlines.
func TestOwnOptions(t *testing.T) {
	base := &redis.Options{Addr: "127.0.0.1:1", MaxRetries: 5, ReadTimeout: 2 * time.Second}
	o := ownOptions(base)
	if o.MaxRetries != -1 || !o.ContextTimeoutEnabled || o.Addr != base.Addr || o.ReadTimeout != base.ReadTimeout {
		t.Fatalf("own options %+v", o)
	}
	if base.MaxRetries != 5 || base.ContextTimeoutEnabled {
		t.Fatal("the application's options were changed")
	}
	c := New(redis.NewClient(base))
	defer c.Close()
	got := c.nodes[0].rdb.(*redis.Client).Options()
	if got.MaxRetries != 0 || !got.ContextTimeoutEnabled {
		t.Fatalf("own client: retries %d, context deadlines %v", got.MaxRetries, got.ContextTimeoutEnabled)
	}
}

func TestObserveChange(t *testing.T) {
	for _, c := range []struct {
		first                bool
		known, highest, term int64
		report, regressed    bool
	}{
		{true, 0, 0, 0, true, false},   // the first state, nobody leads
		{false, 0, 0, 0, false, false}, // still nobody
		{false, 0, 0, 7, true, false},  // a leader
		{false, 7, 7, 7, false, false}, // unchanged (a renewal wakes nobody)
		{false, 7, 7, 9, true, false},  // a new term
		{false, 9, 9, 0, true, false},  // nobody leads
		{false, 0, 9, 5, true, true},   // a term below one seen: history lost
		{true, 0, 0, 3, true, false},   // the first state, someone leads
	} {
		report, regressed := observeChange(c.first, c.known, c.highest, c.term)
		if report != c.report || regressed != c.regressed {
			t.Errorf("%+v: report %v regressed %v", c, report, regressed)
		}
	}
}
