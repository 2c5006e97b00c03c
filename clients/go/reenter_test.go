package relock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func holdCount(t *testing.T, c *Client, key string) int64 {
	t.Helper()
	info, err := c.Info(bg(), key)
	if err != nil {
		t.Fatal(err)
	}
	if info == nil || info.Count == nil {
		return 0
	}
	return *info.Count
}

func TestReenter(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	h := mustAcquire(t, c, "reenter:a", TTL(10*time.Second))
	token := h.Token()
	// Nested sections take the count up and back down, under the same owner and token.
	err := h.Reenter(bg(), func(ctx context.Context) error {
		if n := holdCount(t, c, "reenter:a"); n != 2 {
			t.Errorf("count inside one section: %d", n)
		}
		return h.Reenter(ctx, func(context.Context) error {
			if n := holdCount(t, c, "reenter:a"); n != 3 {
				t.Errorf("count inside two sections: %d", n)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := holdCount(t, c, "reenter:a"); n != 1 || h.Token() != token || !h.Valid() {
		t.Fatalf("after the sections: count %d token %d valid %v", n, h.Token(), h.Valid())
	}
	// fn's error comes back as it is.
	boom := errors.New("boom")
	if err := h.Reenter(bg(), func(context.Context) error { return boom }); err != boom {
		t.Fatalf("fn's error: %v", err)
	}
	if n := holdCount(t, c, "reenter:a"); n != 1 {
		t.Fatalf("count after a failed section: %d", n)
	}
	// A release inside a section ends the hold whole: the key is free, and the section's exit
	// sends nothing (another owner's hold is not touched).
	var other *Hold
	err = h.Reenter(bg(), func(ctx context.Context) error {
		if err := h.Release(bg()); err != nil {
			return err
		}
		if ctx.Err() == nil {
			t.Error("the section's context was not cancelled by the release")
		}
		if n := rdb.Exists(bg(), "reenter:a").Val(); n != 0 {
			t.Errorf("key still there after a release inside a section (count %d)", holdCount(t, c, "reenter:a"))
		}
		other = mustAcquire(t, c, "reenter:a", TTL(10*time.Second))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if other == nil || !other.Valid() || holdCount(t, c, "reenter:a") != 1 {
		t.Fatal("the other owner's hold was touched by the section's exit")
	}
	// A released hold cannot be reentered.
	if err := h.Reenter(bg(), func(context.Context) error { return nil }); !errors.Is(err, ErrReleased) {
		t.Fatalf("reenter after release: %v", err)
	}
	if err := other.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestReenterLost(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	h := mustAcquire(t, c, "reenter:lost", TTL(10*time.Second))
	if _, err := c.ForceRelease(bg(), "reenter:lost"); err != nil {
		t.Fatal(err)
	}
	other := mustAcquire(t, c, "reenter:lost", TTL(10*time.Second))
	ran := false
	err := h.Reenter(bg(), func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, ErrLockLost) || ran {
		t.Fatalf("reenter of a hold taken away: %v (fn ran: %v)", err, ran)
	}
	<-h.Done()
	// The take-back (FROM 2) did not touch the new holder.
	if n := holdCount(t, c, "reenter:lost"); n != 1 || !other.Valid() {
		t.Fatalf("the new holder's count %d", n)
	}
	if err := h.Reenter(bg(), func(context.Context) error { return nil }); !errors.Is(err, ErrLockLost) {
		t.Fatalf("reenter after the loss: %v", err)
	}
}
