package relock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func bg() context.Context { return context.Background() }

// locksOn is a Client on s (closed at the test's end) and a plain client for looking.
func locksOn(t *testing.T, s *server, opts ...ClientOption) (*Client, *redis.Client) {
	t.Helper()
	rdb := s.client(t)
	c := New(rdb, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb
}

func mustAcquire(t *testing.T, c *Client, key string, opts ...Option) *Hold {
	t.Helper()
	h, err := c.Acquire(bg(), key, opts...)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return h
}

func waiters(t *testing.T, c *Client, key string) int {
	ws, err := c.Waiters(bg(), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(ws)
}

func TestAcquireRelease(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	h := mustAcquire(t, c, "orders:7", TTL(10*time.Second))
	if h.Token() < 1 || !strings.HasSuffix(h.Owner(), h.Owner()[len(h.Owner())-32:]) || len(h.Owner()) < 34 {
		t.Fatalf("token %d owner %q", h.Token(), h.Owner())
	}
	info, err := c.Info(bg(), "orders:7")
	if err != nil || info == nil || *info.Owner != h.Owner() || *info.Token != h.Token() || info.Mode != "exclusive" {
		t.Fatalf("info %+v %v", info, err)
	}
	if pttl := rdb.PTTL(bg(), "orders:7").Val(); pttl <= 0 || pttl > 10*time.Second {
		t.Fatalf("pttl %v", pttl)
	}
	// Another owner (another hold of the same client) is refused while it is held.
	_, err = c.Acquire(bg(), "orders:7")
	var e *Error
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &e) || !strings.Contains(e.Msg, "held by another owner") {
		t.Fatalf("second acquire: %v", err)
	}
	if !h.Valid() || h.Err() != nil {
		t.Fatal("not valid")
	}
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed by Release")
	}
	if !errors.Is(h.Err(), ErrReleased) || h.Context().Err() == nil {
		t.Fatalf("err %v", h.Err())
	}
	if err := h.Release(bg()); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if n := rdb.Exists(bg(), "orders:7").Val(); n != 0 {
		t.Fatal("key left after release")
	}
	// Close releases what is still held, and tells its holders.
	c2 := New(rdb)
	h2 := mustAcquire(t, c2, "orders:8")
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(h2.Err(), ErrLockLost) || !strings.Contains(h2.Err().Error(), "closed") {
		t.Fatalf("after Close: %v", h2.Err())
	}
	if rdb.Exists(bg(), "orders:8").Val() != 0 {
		t.Fatal("Close did not release")
	}
	// Invalid arguments are refused before anything is sent.
	if _, err := c.Acquire(bg(), "k", TTL(time.Millisecond)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ttl 1 ms: %v", err)
	}
}

func TestWaitFIFO(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	first := mustAcquire(t, c, "q", TTL(30*time.Second))
	type got struct {
		name string
		h    *Hold
		err  error
	}
	grants := make(chan got, 2)
	for i, name := range []string{"second", "third"} {
		go func() {
			h, err := c.Acquire(bg(), "q", TTL(30*time.Second), Wait(20*time.Second))
			grants <- got{name, h, err}
		}()
		eventually(t, 10*time.Second, name+" queued", func() bool { return waiters(t, c, "q") == i+1 })
	}
	if err := first.Release(bg()); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	if g.err != nil || g.name != "second" {
		t.Fatalf("first grant: %s %v", g.name, g.err)
	}
	if g.h.Token() <= first.Token() {
		t.Fatalf("token %d after %d", g.h.Token(), first.Token())
	}
	select {
	case g2 := <-grants:
		t.Fatalf("%s granted while second holds", g2.name)
	default:
	}
	_ = g.h.Release(bg())
	g = <-grants
	if g.err != nil || g.name != "third" {
		t.Fatalf("second grant: %s %v", g.name, g.err)
	}
	_ = g.h.Release(bg())
}

func TestWaitTimeoutAndCancel(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	h := mustAcquire(t, c, "busy")
	defer h.Release(bg())
	start := time.Now()
	_, err := c.Acquire(bg(), "busy", Wait(150*time.Millisecond))
	if !errors.Is(err, ErrNotAcquired) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("timed wait: %v after %v", err, time.Since(start))
	}
	// A context deadline bounds the wait too.
	ctx, cancel := context.WithTimeout(bg(), 150*time.Millisecond)
	_, err = c.Acquire(ctx, "busy", Wait(-1))
	cancel()
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("ctx deadline: %v", err)
	}
	// Cancelling the context ends a wait without a limit at once; the server drops the waiter.
	ctx, cancel = context.WithCancel(bg())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "busy", Wait(-1))
		done <- err
	}()
	eventually(t, 10*time.Second, "queued", func() bool { return waiters(t, c, "busy") == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not end the wait")
	}
	eventually(t, 10*time.Second, "waiter gone", func() bool { return waiters(t, c, "busy") == 0 })
	stats, err := c.Stats(bg(), 10)
	if err != nil || len(stats) != 1 || stats[0].Key != "busy" || stats[0].Timeouts < 1 || stats[0].Waits < 3 {
		t.Fatalf("stats %+v %v", stats, err)
	}
	// A wait longer than the application client's ReadTimeout (go-redis's default: 5 s; 1 s
	// here) is neither cut nor re-sent by the driver: it keeps its place in the queue (a
	// re-sent wait would queue behind a later one).
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), ReadTimeout: time.Second})
	defer rdb.Close()
	c = New(rdb)
	defer c.Close()
	order := make(chan string, 2)
	for i, name := range []string{"early", "late"} {
		go func() {
			h2, err := c.Acquire(bg(), "busy", Wait(20*time.Second))
			if err != nil {
				order <- err.Error()
				return
			}
			order <- name
			_ = h2.Release(bg())
		}()
		eventually(t, 10*time.Second, name+" queued", func() bool { return waiters(t, c, "busy") == i+1 })
	}
	ws, _ := c.Waiters(bg(), "busy", 0)
	early := ws[0].Client
	eventually(t, 20*time.Second, "past the driver's read timeout", func() bool {
		ws, _ := c.Waiters(bg(), "busy", 0)
		return len(ws) > 0 && ws[0].Waited > 1500*time.Millisecond
	})
	if ws, _ := c.Waiters(bg(), "busy", 0); len(ws) != 2 || ws[0].Client != early {
		t.Fatalf("the early wait lost its place: %+v", ws)
	}
	_ = h.Release(bg())
	if first, second := <-order, <-order; first != "early" || second != "late" {
		t.Fatalf("granted %s then %s", first, second)
	}
}

func relockStat(t *testing.T, rdb *redis.Client, field string) int64 {
	info := rdb.Info(bg(), "relock").Val()
	for _, l := range splitLines(info) {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, field) {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in INFO relock", field)
	return 0
}

func TestRenewal(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	h := mustAcquire(t, c, "renewed", TTL(time.Second))
	// Renewed every ttl/3: four renewals are more than the ttl, and it is still held.
	eventually(t, 20*time.Second, "3 renewals", func() bool { return relockStat(t, rdb, "renewed_total") >= 4 })
	if err := h.Err(); err != nil {
		t.Fatalf("lost: %v", err)
	}
	info, _ := c.Info(bg(), "renewed")
	if info == nil || *info.Token != h.Token() {
		t.Fatalf("info %+v", info)
	}
	if err := h.Renew(bg()); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func expectLoss(t *testing.T, h *Hold, cause string) *Error {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Done not closed")
	}
	var e *Error
	if !errors.As(h.Err(), &e) || !errors.Is(e, ErrLockLost) {
		t.Fatalf("err %v", h.Err())
	}
	if e.Loss == nil || e.Loss.Cause != cause || !strings.Contains(e.Error(), lossWords[cause]) {
		t.Fatalf("loss %+v (%v), want %s", e.Loss, e, cause)
	}
	if !errors.Is(context.Cause(h.Context()), ErrLockLost) {
		t.Fatalf("context cause %v", context.Cause(h.Context()))
	}
	return e
}

func TestLossDeletedAndForceReleased(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	// A ttl long enough that the loss is seen by a renewal, within the validity.
	h := mustAcquire(t, c, "gone", TTL(3*time.Second))
	rdb.Del(bg(), "gone")
	expectLoss(t, h, "deleted")
	if time.Now().After(h.Until()) {
		t.Fatal("seen only after the validity")
	}
	if !errors.Is(h.Release(bg()), ErrLockLost) {
		t.Fatal("release of a lost hold")
	}

	h = mustAcquire(t, c, "gone", TTL(3*time.Second))
	if n, err := c.ForceRelease(bg(), "gone"); err != nil || n != 1 {
		t.Fatalf("forcerelease %d %v", n, err)
	}
	e := expectLoss(t, h, "forcereleased")
	log, err := c.Log(bg(), 10)
	if err != nil || len(log) != 2 || log[0].Reason != "forcereleased" || log[0].Owner != h.Owner() || log[1].Reason != "deleted" {
		t.Fatalf("log %+v %v", log, err)
	}
	if e.Loss.Who == nil || e.Loss.Who.Command == nil || !strings.EqualFold(*e.Loss.Who.Command, "lock.forcerelease") {
		t.Fatalf("who %+v", e.Loss.Who)
	}
}

func TestDoCancelsOnLoss(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	err := c.Do(bg(), "job", func(ctx context.Context) error {
		rdb.Do(bg(), "LOCK.FORCERELEASE", "job")
		<-ctx.Done()
		return context.Cause(ctx)
	}, TTL(3*time.Second))
	// fn's context ends at the renewal answered nil, before the journal says why: its cause is
	// the loss without its reason (TestDoStopsAtTheNilAndCloseKeepsTheLoss).
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrLockLost) || !strings.Contains(e.Msg, "LOCK.RENEW answered nil") {
		t.Fatalf("Do: %v", err)
	}
	// Do releases when fn returns.
	var token int64
	if err := c.Do(bg(), "job", func(ctx context.Context) error {
		info, _ := c.Info(ctx, "job")
		token = *info.Token
		return nil
	}); err != nil || token == 0 {
		t.Fatal(err)
	}
	if rdb.Exists(bg(), "job").Val() != 0 {
		t.Fatal("not released by Do")
	}
}

func TestShared(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	r1 := mustAcquire(t, c, "rw", Shared())
	r2 := mustAcquire(t, c, "rw", Shared())
	if r1.Token() == r2.Token() {
		t.Fatal("shared holds share a token")
	}
	info, _ := c.Info(bg(), "rw")
	if info.Mode != "shared" || info.Holders != 2 || info.Owner != nil || info.Limit != 0 {
		t.Fatalf("info %+v", info)
	}
	hs, _ := c.Holders(bg(), "rw", 0)
	if len(hs) != 2 || hs[0].Owner != r1.Owner() || hs[1].Owner != r2.Owner() {
		t.Fatalf("holders %+v", hs)
	}
	if _, err := c.Acquire(bg(), "rw"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("writer got in: %v", err)
	}
	// A writer queued blocks later readers (no barging); granted when both readers leave.
	w := make(chan *Hold, 1)
	go func() {
		h, err := c.Acquire(bg(), "rw", Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		w <- h
	}()
	eventually(t, 10*time.Second, "writer queued", func() bool { return waiters(t, c, "rw") == 1 })
	if _, err := c.Acquire(bg(), "rw", Shared()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("reader barged: %v", err)
	}
	_ = r1.Release(bg())
	_ = r2.Release(bg())
	wh := <-w
	if wh == nil {
		t.FailNow()
	}
	// Downgrade: the writer becomes a reader, a queued reader is granted with it.
	rc := make(chan *Hold, 1)
	go func() {
		h, err := c.Acquire(bg(), "rw", Shared(), Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		rc <- h
	}()
	eventually(t, 10*time.Second, "reader queued", func() bool { return waiters(t, c, "rw") == 1 })
	if err := wh.Downgrade(bg()); err != nil {
		t.Fatal(err)
	}
	r3 := <-rc
	if r3 == nil {
		t.FailNow()
	}
	info, _ = c.Info(bg(), "rw")
	if info.Mode != "shared" || info.Holders != 2 {
		t.Fatalf("after downgrade %+v", info)
	}
	if err := wh.Release(bg()); err != nil {
		t.Fatal(err)
	}
	_ = r3.Release(bg())
}

func TestSemaphore(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, _ := locksOn(t, s)
	a := mustAcquire(t, c, "sem", Limit(3))
	b := mustAcquire(t, c, "sem", Limit(3), Permits(2))
	info, _ := c.Info(bg(), "sem")
	if info.Limit != 3 || info.PermitsFree != 0 || info.Holders != 2 {
		t.Fatalf("info %+v", info)
	}
	if _, err := c.Acquire(bg(), "sem", Limit(3)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("over the limit: %v", err)
	}
	_, err := c.Acquire(bg(), "sem", Limit(2))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrOtherLimit) || e.Limit != 3 {
		t.Fatalf("other limit: %v", err)
	}
	if _, err := c.Acquire(bg(), "sem", Permits(2)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("permits without a limit: %v", err)
	}
	// A waiter for one permit is served when b's two are back.
	got := make(chan error, 1)
	go func() {
		h, err := c.Acquire(bg(), "sem", Limit(3), Wait(20*time.Second))
		if err == nil {
			defer h.Release(bg())
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "queued", func() bool { return waiters(t, c, "sem") == 1 })
	_ = b.Release(bg())
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	_ = a.Release(bg())
}

func TestAcquireAll(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	g := func() *Hold {
		h, err := c.AcquireAll(bg(), []string{"b", "a"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}()
	if g.TokenOf("a") != g.TokenOf("b") || g.Token() == 0 || g.Keys()[0] != "b" {
		t.Fatalf("tokens %v", g.keyTokens)
	}
	if _, err := c.Acquire(bg(), "a"); !errors.Is(err, ErrNotAcquired) {
		t.Fatal("a is free")
	}
	if err := g.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(bg(), "a", "b").Val() != 0 {
		t.Fatal("group not released")
	}
	if _, err := c.AcquireAll(bg(), []string{"a", "a"}); !errors.Is(err, ErrInvalid) {
		t.Fatal("a key twice")
	}
	// One key taken: the group waits for the keys one by one, in order, and gets them all.
	hb := mustAcquire(t, c, "b")
	done := make(chan *Hold, 1)
	go func() {
		h, err := c.AcquireAll(bg(), []string{"b", "a", "c"}, Wait(20*time.Second), TTL(3*time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	eventually(t, 10*time.Second, "queued for b", func() bool { return waiters(t, c, "b") == 1 })
	info, _ := c.Info(bg(), "a")
	if info == nil {
		t.Fatal("a not taken first (sorted order)")
	}
	_ = hb.Release(bg())
	g = <-done
	if g == nil {
		t.FailNow()
	}
	for _, k := range []string{"a", "b", "c"} {
		if i, _ := c.Info(bg(), k); i == nil || *i.Owner != g.Owner() {
			t.Fatalf("%s not held by the group", k)
		}
	}
	// Deleting one key of a group is the group's loss.
	rdb.Del(bg(), "c")
	expectLoss(t, g, "deleted")
	eventually(t, 10*time.Second, "lost group given back", func() bool { return rdb.Exists(bg(), "a", "b").Val() == 0 })
	// A group that cannot be had in time gives back what it took.
	hb = mustAcquire(t, c, "b")
	if _, err := c.AcquireAll(bg(), []string{"a", "b"}, Wait(100*time.Millisecond)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("group in time: %v", err)
	}
	eventually(t, 10*time.Second, "a given back", func() bool { return rdb.Exists(bg(), "a").Val() == 0 })
	_ = hb.Release(bg())
}

func TestMutex(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	c, rdb := locksOn(t, s)
	m := c.NewMutex("mx", TTL(2*time.Second))
	if err := m.Lock(); err != nil {
		t.Fatal(err)
	}
	if m.Value() == "" || time.Until(m.Until()) <= 0 || m.Name() != "mx" {
		t.Fatal("value/until")
	}
	if ok, err := m.Valid(); !ok || err != nil {
		t.Fatalf("valid %v %v", ok, err)
	}
	other := c.NewMutex("mx", TTL(2*time.Second))
	if err := other.TryLock(); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("trylock: %v", err)
	}
	// Until counts from the round's start less its length, so a slow Extend round (a busy
	// core) can end before the Lock's Until: the check is that it is a fresh validity.
	start := time.Now()
	if ok, err := m.Extend(); !ok || err != nil || !m.Until().After(start.Add(time.Second)) {
		t.Fatalf("extend %v %v, valid for %v after it began", ok, err, m.Until().Sub(start))
	}
	// Lock waits in the queue: granted when m unlocks.
	got := make(chan error, 1)
	go func() { got <- other.LockContext(bg()) }()
	eventually(t, 10*time.Second, "queued", func() bool { return waiters(t, c, "mx") == 1 })
	if ok, err := m.Unlock(); !ok || err != nil {
		t.Fatalf("unlock %v %v", ok, err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Valid(); ok {
		t.Fatal("m still valid")
	}
	rdb.Do(bg(), "LOCK.FORCERELEASE", "mx")
	if ok, err := other.Valid(); ok || err != nil {
		t.Fatalf("valid after forcerelease %v %v", ok, err)
	}
	if ok, err := other.Unlock(); ok || !errors.Is(err, ErrLockLost) {
		t.Fatalf("unlock of a lost mutex %v %v", ok, err)
	}
}

func TestRedlockPausedMaster(t *testing.T) {
	noLeaks(t)
	var servers []*server
	var rdbs []redis.UniversalClient
	for range 3 {
		s := startServer(t)
		servers = append(servers, s)
		rdbs = append(rdbs, s.client(t))
	}
	c := NewRedlock(rdbs, NodeTimeout(200*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Acquire(bg(), "k", Limit(2)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("semaphore over Redlock: %v", err)
	}
	servers[2].pause()
	h := mustAcquire(t, c, "rl", TTL(2*time.Second))
	if len(h.Tokens()) != 2 || h.Tokens()[servers[2].addr()] != 0 {
		t.Fatalf("tokens %v", h.Tokens())
	}
	// Renewed by the quorum while a master is paused.
	until := h.Until()
	eventually(t, 20*time.Second, "renewed", func() bool { return h.Until().After(until) })
	if _, err := h.Fenced(bg(), "SET", "x", "1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("fenced over Redlock: %v", err)
	}
	// Another owner cannot get it, and a second paused master leaves no quorum.
	if _, err := c.Acquire(bg(), "rl"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second owner: %v", err)
	}
	if err := h.Release(bg()); err != nil {
		t.Fatal(err)
	}
	servers[1].pause()
	_, err := c.Acquire(bg(), "rl2")
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrNotAcquired) || !strings.Contains(e.Msg, "no quorum") {
		t.Fatalf("one master of three: %v", err)
	}
	servers[1].resume()
	servers[2].resume()
	// What the failed round granted on master 0 is given back.
	eventually(t, 10*time.Second, "given back", func() bool {
		return rdbs[0].Exists(bg(), "rl2").Val() == 0
	})
	// A Redlock wait: granted when the holder releases.
	h = mustAcquire(t, c, "rw")
	got := make(chan error, 1)
	go func() {
		h2, err := c.Acquire(bg(), "rw", Wait(20*time.Second))
		if err == nil {
			if len(h2.Tokens()) < 2 {
				err = errors.New("granted by fewer than a quorum")
			}
			_ = h2.Release(bg())
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "queued", func() bool { return waiters(t, c, "rw") >= 2 })
	_ = h.Release(bg())
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A loss on a majority of masters is a loss, with its reason.
	h = mustAcquire(t, c, "rd", TTL(3*time.Second))
	rdbs[0].Del(bg(), "rd")
	rdbs[1].Del(bg(), "rd")
	expectLoss(t, h, "deleted")
}

func TestElection(t *testing.T) {
	noLeaks(t)
	s := startServer(t)
	watch, _ := locksOn(t, s)
	obs := watch.Observe(bg(), "leader")
	if o := <-obs; o.Leader != nil || o.Err != nil {
		t.Fatalf("first observation %+v", o)
	}
	// Three candidates, each its own process: a client through a proxy that can be cut.
	type cand struct {
		c *Client
		p *proxy
	}
	var cands []cand
	for range 3 {
		p := newProxy(t, s.addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c := New(rdb)
		t.Cleanup(func() { _ = c.Close() })
		cands = append(cands, cand{c, p})
	}
	leads := make(chan *Leadership, 3)
	var wg sync.WaitGroup
	for i, cd := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := cd.c.Campaign(bg(), "leader", "node-"+strconv.Itoa(i), TTL(time.Second))
			if err != nil {
				leads <- nil
				return
			}
			leads <- l
		}()
		eventually(t, 10*time.Second, "candidate queued", func() bool {
			ws, _ := watch.Waiters(bg(), "leader", 0)
			info, _ := watch.Info(bg(), "leader")
			return info != nil && len(ws) == i
		})
	}
	first := <-leads
	if first == nil || first.Value() != "node-0" {
		t.Fatalf("first leader %+v", first)
	}
	o := <-obs
	if o.Leader == nil || o.Leader.Value != "node-0" || o.Leader.Term != first.Term() {
		t.Fatalf("observed %+v", o.Leader)
	}
	if l, _ := watch.Leader(bg(), "leader"); l == nil || l.Value != "node-0" || l.Term != first.Term() {
		t.Fatalf("leader %+v", l)
	}
	// The leader's connection is killed: it stops leading (Done), and the next candidate leads
	// with a larger term once the old term's lease runs out.
	cut := time.Now()
	cands[0].p.close()
	select {
	case <-first.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("old leader not told")
	}
	if !errors.Is(first.Err(), ErrLockLost) {
		t.Fatalf("old leader's err %v", first.Err())
	}
	second := <-leads
	took := time.Since(cut)
	t.Logf("the leader was cut off; the next one led %v later (ttl 1s)", took)
	if second == nil || second.Value() != "node-1" || second.Term() <= first.Term() {
		t.Fatalf("second leader %+v", second)
	}
	// The old term's lease ends at most a ttl after its last renewal, before the cut; then its
	// expiry grants the next in line. About ttl + 100 ms idle; 500 ms of room for busy cores,
	// as the other clients' tests.
	if took > time.Second+500*time.Millisecond {
		t.Fatalf("node-1 led %v after node-0 was cut off", took)
	}
	for o = <-obs; o.Leader == nil; o = <-obs {
	}
	if o.Leader.Value != "node-1" || o.Leader.Term != second.Term() || o.Regressed {
		t.Fatalf("observed %+v", o)
	}
	// Resign: the third leads in the same step (the very next read shows it).
	if err := second.Resign(bg()); err != nil {
		t.Fatal(err)
	}
	if l, _ := watch.Leader(bg(), "leader"); l == nil || l.Value != "node-2" || l.Term <= second.Term() {
		t.Fatalf("leader right after the resign: %+v", l)
	}
	third := <-leads
	if third == nil || third.Value() != "node-2" || third.Term() <= second.Term() {
		t.Fatalf("third %+v", third)
	}
	for o = <-obs; o.Leader == nil || o.Leader.Value != "node-2"; o = <-obs {
		if o.Regressed || o.Err != nil || o.Leader != nil && o.Leader.Value != "node-1" {
			t.Fatalf("observed before node-2: %+v", o)
		}
	}
	if o.Leader.Term != third.Term() || o.Regressed {
		t.Fatalf("observed %+v", o)
	}
	_ = third.Resign(bg())
	if o = <-obs; o.Leader != nil || o.Err != nil {
		t.Fatalf("observed after the last resign: %+v", o)
	}
	wg.Wait()
	// Elections refuse Redlock and shared keys.
	s2 := startServer(t)
	rl := NewRedlock([]redis.UniversalClient{s.client(t), s2.client(t), startServer(t).client(t)})
	defer rl.Close()
	if _, err := rl.Campaign(bg(), "leader", "x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("campaign over Redlock: %v", err)
	}
}

// TestRESP2: the same calls on a RESP2 connection (flat arrays where RESP3 has maps).
func TestRESP2(t *testing.T) {
	s := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	h := mustAcquire(t, c, "r2", TTL(3*time.Second))
	info, err := c.Info(bg(), "r2")
	if err != nil || info == nil || *info.Owner != h.Owner() || *info.Token != h.Token() || info.Mode != "exclusive" || info.TTL <= 0 {
		t.Fatalf("info %+v %v", info, err)
	}
	hs, err := c.Holders(bg(), "r2", 0)
	if err != nil || len(hs) != 1 || hs[0].Owner != h.Owner() || hs[0].Token != h.Token() {
		t.Fatalf("holders %+v %v", hs, err)
	}
	go func() { _, _ = c.Acquire(bg(), "r2", Wait(200*time.Millisecond)) }()
	eventually(t, 10*time.Second, "queued", func() bool {
		ws, _ := c.Waiters(bg(), "r2", 0)
		return len(ws) == 1 && ws[0].Mode == "exclusive" && ws[0].Timeout != nil && ws[0].Client > 0
	})
	rdb.Do(bg(), "LOCK.FORCERELEASE", "r2")
	expectLoss(t, h, "forcereleased")
	hist, err := c.History(bg(), "r2", 10)
	if err != nil || len(hist) == 0 || hist[0].Owner != h.Owner() || hist[0].Reason != "forcereleased" || hist[0].Who == nil {
		t.Fatalf("history %+v %v", hist, err)
	}
}

// A wait cut by a lost connection is given back in the background, once more 100 ms later;
// the campaign (and a group's key-by-key wait) asks again meanwhile. The repeat must not
// revoke what the new attempt is granted: a new attempt is a new owner.
func TestCampaignRetryAfterCutWait(t *testing.T) {
	s := startServer(t)
	p := newProxy(t, s.addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = prdb.Close() })
	c := New(prdb, RetryDelay(50*time.Millisecond), NodeTimeout(time.Second))
	t.Cleanup(func() { _ = c.Close() })
	plain, rdb := locksOn(t, s)
	// cut drops the proxy's connections once key's waiter is queued, then hands key over once
	// the attempt after the cut is queued.
	cut := func(other *Hold, key string) {
		eventually(t, 10*time.Second, "queued for "+key, func() bool { return waiters(t, plain, key) == 1 })
		p.drop()
		eventually(t, 10*time.Second, "the cut wait gone", func() bool { return waiters(t, plain, key) == 0 })
		eventually(t, 10*time.Second, "queued again for "+key, func() bool { return waiters(t, plain, key) == 1 })
		_ = other.Release(bg())
	}
	ownerOf := func(key string) string {
		info := parseInfo("", lockInfo(t, rdb, key))
		if info == nil || info.Owner == nil {
			return "<nobody>"
		}
		return *info.Owner
	}

	t.Run("campaign", func(t *testing.T) {
		other := mustAcquire(t, plain, "cut:e", TTL(30*time.Second))
		got := make(chan error, 1)
		var lead *Leadership
		go func() {
			var err error
			lead, err = c.Campaign(bg(), "cut:e", "n1", TTL(30*time.Second), Wait(20*time.Second))
			got <- err
		}()
		cut(other, "cut:e")
		if err := <-got; err != nil {
			t.Fatalf("campaign: %v", err)
		}
		c.settle(5 * time.Second)
		if o := ownerOf("cut:e"); o != lead.Owner() {
			t.Fatalf("the leadership returned was revoked (owner now %s)", o)
		}
		_ = lead.Resign(bg())
	})

	t.Run("group", func(t *testing.T) {
		other := mustAcquire(t, plain, "cut:g1", TTL(30*time.Second))
		got := make(chan error, 1)
		var g *Hold
		go func() {
			var err error
			g, err = c.AcquireAll(bg(), []string{"cut:g1", "cut:g2"}, TTL(30*time.Second), Wait(20*time.Second))
			got <- err
		}()
		cut(other, "cut:g1")
		if err := <-got; err != nil {
			t.Fatalf("group: %v", err)
		}
		c.settle(5 * time.Second)
		for _, k := range []string{"cut:g1", "cut:g2"} {
			if o := ownerOf(k); o != g.Owner() {
				t.Fatalf("the group's key %s was revoked (owner now %s)", k, o)
			}
		}
		_ = g.Release(bg())
	})
}

// TestRenewalAnsweredNilFailsValidBeforeTheReasonIsIn: found in the Java review (finding 7,
// shared by every client): a renewal the quorum answered nil (the lock forcereleased) was
// acted on only after LOCK.HISTORY asked the servers why, a node timeout for a stopped one
// first in line; all that time Valid said held although the client knew the key was taken.
// Valid and Err report the loss from the nil; Done closes once the reason is in.
func TestRenewalAnsweredNilFailsValidBeforeTheReasonIsIn(t *testing.T) {
	noLeaks(t)
	var servers []*server
	var rdbs []redis.UniversalClient
	for range 3 {
		s := startServer(t)
		servers = append(servers, s)
		rdbs = append(rdbs, s.client(t))
	}
	c := NewRedlock(rdbs, NodeTimeout(2*time.Second))
	t.Cleanup(func() { _ = c.Close() })
	// The journals are asked in order: the stopped master first.
	servers[0].pause()
	t.Cleanup(servers[0].resume)
	h := mustAcquire(t, c, "nil", TTL(10*time.Second))
	for _, r := range rdbs[1:] {
		if err := r.Do(bg(), "LOCK.FORCERELEASE", "nil").Err(); err != nil {
			t.Fatal(err)
		}
	}
	reasonIn := false
	eventually(t, 20*time.Second, "the nil renewal seen", func() bool {
		if h.Valid() {
			return false
		}
		select {
		case <-h.Done():
			reasonIn = true
		default:
		}
		return true
	})
	if reasonIn {
		t.Fatal("Valid said held until the reason was in")
	}
	if err := h.Err(); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "LOCK.RENEW answered nil") {
		t.Fatalf("the loss before its reason: %v", err)
	}
	// Meanwhile (the stopped master's journal takes its 2 s node timeout): a renewal says lost
	// at once, not after the lookup; a release says lost too and leaves the loss, with its
	// cause, to end the hold.
	ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
	started := time.Now()
	err := h.Renew(ctx)
	cancel()
	if !errors.Is(err, ErrLockLost) || time.Since(started) > time.Second {
		t.Fatalf("renew in the window: %v after %v", err, time.Since(started))
	}
	if err := h.Release(bg()); !errors.Is(err, ErrLockLost) {
		t.Fatalf("release in the window: %v", err)
	}
	select {
	case <-h.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Done never closed")
	}
	var e *Error
	if !errors.As(h.Err(), &e) || e.Loss == nil || e.Loss.Cause != "forcereleased" {
		t.Fatalf("the reason: %v", h.Err())
	}
}

// TestDoStopsAtTheNilAndCloseKeepsTheLoss: the window between a renewal answered nil and the
// reason read from the journals (the same setup as above: the stopped master is asked first).
// Do's fn must stop at the nil: its context is cancelled then, with the loss as its cause and
// no reason yet (before, it ran on until the journals answered). Client.Close in that window
// ends a hold as the loss it is, not as "closed".
func TestDoStopsAtTheNilAndCloseKeepsTheLoss(t *testing.T) {
	noLeaks(t)
	var servers []*server
	var rdbs []redis.UniversalClient
	for range 3 {
		s := startServer(t)
		servers = append(servers, s)
		rdbs = append(rdbs, s.client(t))
	}
	// Renewals every 1.5 s, the validity 4.5 s from the last one, the stopped master's journal
	// answered (timed out) 6 s after the nil: the nil comes first, then the validity's end,
	// then the reason, so a context cancelled at the end or at the reason shows it.
	c := NewRedlock(rdbs, NodeTimeout(6*time.Second))
	t.Cleanup(func() { _ = c.Close() })
	servers[0].pause()
	t.Cleanup(servers[0].resume)
	h := mustAcquire(t, c, "close-nil", TTL(4500*time.Millisecond))
	entered := make(chan struct{})
	cause := make(chan error, 1)
	go func() {
		_ = c.Do(bg(), "do-nil", func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		}, TTL(4500*time.Millisecond))
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("Do never ran fn")
	}
	for _, r := range rdbs[1:] {
		if err := r.Do(bg(), "LOCK.FORCERELEASE", "do-nil").Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Do(bg(), "LOCK.FORCERELEASE", "close-nil").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var got error
	select {
	case got = <-cause:
	case <-time.After(30 * time.Second):
		t.Fatal("fn's context was never cancelled")
	}
	var e *Error
	if !errors.As(got, &e) || e.Kind != ErrLockLost || !strings.Contains(e.Msg, "LOCK.RENEW answered nil") {
		t.Fatalf("fn's context's cause: %v", got)
	}
	if e.Loss != nil || strings.Contains(e.Msg, "validity ran out") {
		t.Fatalf("fn's context was cancelled only at the reason or the validity's end (%v): the work ran on after the nil", e)
	}
	eventually(t, 20*time.Second, "the other hold's nil renewal seen", func() bool { return !h.Valid() })
	select {
	case <-h.Done():
		t.Fatalf("the hold ended before Close could be tried in the window: %v", h.Err())
	default:
	}
	_ = c.Close()
	if err := h.Err(); !errors.As(err, &e) || e.Kind != ErrLockLost || !strings.Contains(err.Error(), "LOCK.RENEW answered nil") ||
		strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "validity ran out") {
		t.Fatalf("a hold known lost, then Client.Close: %v", err)
	}
}
