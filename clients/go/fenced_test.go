package relock

import (
	"errors"
	"testing"
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
