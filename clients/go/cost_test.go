package relock

// The cost of a hold (issue 35's throughput against redsync and redislock): an uncontended
// acquire+release is two commands and no goroutine of its own while held.

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A hold waits for its renewal on a timer, not on a goroutine of its own: holding many keys
// adds no goroutine per hold (a goroutine per hold was started, and woke another thread, on
// every acquisition). The renewal itself is TestRenewal's.
func TestHoldHasNoGoroutine(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	// One hold first: the client's connection is open before the count is taken.
	first := mustAcquire(t, c, "cost:0", TTL(30*time.Second))
	before := runtime.NumGoroutine()
	const n = 40
	holds := make([]*Hold, n)
	for i := range holds {
		holds[i] = mustAcquire(t, c, fmt.Sprintf("cost:%d", i+1), TTL(30*time.Second))
	}
	if grown := runtime.NumGoroutine() - before; grown >= n/2 {
		t.Fatalf("%d holds started %d goroutines", n, grown)
	}
	for _, h := range append(holds, first) {
		if err := h.Release(bg()); err != nil {
			t.Fatal(err)
		}
	}
}

// An uncontended acquire+release sends LOCK.ACQUIRE and LOCK.RELEASE and nothing else (no
// LOCK.INFO, LOCK.HISTORY, CLIENT ID, HELLO per hold).
func TestAcquireReleaseIsTwoCommands(t *testing.T) {
	s := startServer(t)
	c, rdb := locksOn(t, s)
	h := mustAcquire(t, c, "cost:warm", TTL(30*time.Second)) // the connection's handshake
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(bg()).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for range n {
		h := mustAcquire(t, c, "cost:pair", TTL(30*time.Second), Wait(-1))
		if err := h.Release(bg()); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]string{}
	for _, l := range splitLines(rdb.Info(bg(), "commandstats").Val()) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(l, "cmdstat_") {
			continue
		}
		calls[strings.ToLower(name)], _, _ = strings.Cut(rest, ",")
	}
	// CONFIG RESETSTAT and this INFO are the test's own.
	delete(calls, "config|resetstat")
	delete(calls, "info")
	want := map[string]string{"lock.acquire": fmt.Sprintf("calls=%d", n), "lock.release": fmt.Sprintf("calls=%d", n)}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("%d acquire+release sent %v, want %v", n, calls, want)
	}
}

// BenchmarkAcquireRelease is the uncontended acquire+release of make bench-clients (Acquire
// with Wait(-1) and a 30 s ttl, then Release) on one server: its allocs/op are the heap
// allocations per pair (issue 35; they do not depend on the machine's load, the ns/op does).
// go test -run '^$' -bench AcquireRelease -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	s := startServer(b)
	c := New(s.client(b))
	b.Cleanup(func() { _ = c.Close() })
	pair := func() {
		h, err := c.Acquire(bg(), "cost:bench", TTL(30*time.Second), Wait(-1))
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(bg()); err != nil {
			b.Fatal(err)
		}
	}
	pair() // the connection's handshake
	b.ReportAllocs()
	for b.Loop() {
		pair()
	}
}

// An uncontended acquire+release stays near redislock's heap allocations per pair (28 with
// go-redis v9.23): 61 before issue 35's work (a round's two maps, an escaping error target
// and arguments closure per command, the context merged with Close's, the hold's context and
// channel made before anyone asked for them), 30 after. The bound leaves room for go-redis
// and the race detector, not for those to come back.
func TestAcquireReleaseAllocs(t *testing.T) {
	s := startServer(t)
	c, _ := locksOn(t, s)
	pair := func() {
		h, err := c.Acquire(bg(), "cost:allocs", TTL(30*time.Second), Wait(-1))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(bg()); err != nil {
			t.Fatal(err)
		}
	}
	pair() // the connection's handshake
	n := testing.AllocsPerRun(200, pair)
	t.Logf("%.0f allocations per pair", n)
	if n > 40 {
		t.Fatalf("%.0f heap allocations per acquire+release, want at most 40 (BenchmarkAcquireRelease: 30)", n)
	}
}
