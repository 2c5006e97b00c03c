package relock

import (
	"errors"
	"strings"
	"testing"
	"time"
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
	noLeaks(t)
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
