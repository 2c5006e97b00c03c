// relock's Go package against go-redsync/redsync v4 (go-redis v9 pool) and bsm/redislock, on
// one server: uncontended acquire+release per second, and hand-off latency with 10 contending
// goroutines (the method of bench.py and bench.mjs). Prints one JSON line per peer.
// Usage: go run . PORT SECONDS HANDOFFS
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	relock "github.com/relock/relock/clients/go"
)

// using runs fn while holding key.
type using func(ctx context.Context, key string, fn func()) error

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bench PORT SECONDS HANDOFFS")
		os.Exit(2)
	}
	port := os.Args[1]
	seconds, err1 := strconv.ParseFloat(os.Args[2], 64)
	handoffs, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "usage: bench PORT SECONDS HANDOFFS")
		os.Exit(2)
	}
	// One go-redis client, shared by every peer (a pool big enough for 10 waiting goroutines).
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, PoolSize: 20})
	defer rdb.Close()

	// Throughput in interleaved rounds (each peer in turn, five times, the median kept), after a
	// warm-up of each: a machine whose speed drifts during the run (a shared 2-core VM does)
	// then favours no peer by its place in the order.
	ps := peers(rdb)
	uses := make([]using, len(ps))
	dones := make([]func(), len(ps))
	for i, p := range ps {
		uses[i], dones[i] = p.make()
		if _, err := uncontended(uses[i], min(seconds, 0.5)); err != nil {
			fail(p.name, err)
		}
	}
	const rounds = 5
	opsOf := make([][]float64, len(ps))
	for range rounds {
		for i, p := range ps {
			ops, err := uncontended(uses[i], seconds/rounds)
			if err != nil {
				fail(p.name, err)
			}
			opsOf[i] = append(opsOf[i], ops)
		}
	}
	for i, p := range ps {
		p50, p99, n, err := handoff(uses[i], handoffs)
		if err != nil {
			fail(p.name, err)
		}
		dones[i]()
		slices.Sort(opsOf[i])
		line, _ := json.Marshal(map[string]any{"lang": "Go", "peer": p.name, "ops": opsOf[i][rounds/2], "p50_ms": p50, "p99_ms": p99, "handoffs": n})
		fmt.Println(string(line))
	}
}

// peer is one lock package: make gives its acquire-run-release and what ends it.
type peer struct {
	name string
	make func() (using, func())
}

// peers are the lock packages compared, on rdb.
func peers(rdb *redis.Client) []peer {
	return []peer{
		{"relock (LOCK.WAIT, renewal timer)", func() (using, func()) {
			locks := relock.New(rdb)
			return func(ctx context.Context, key string, fn func()) error {
				hold, err := locks.Acquire(ctx, key, relock.TTL(30*time.Second), relock.Wait(-1))
				if err != nil {
					return err
				}
				fn()
				return hold.Release(ctx)
			}, func() { locks.Close() }
		}},
		// redsync's default retry delay: 50-250 ms at random between tries; tries without
		// end, as a waiting worker needs (the default, 32, gives up after a few seconds).
		{"redsync v4.18.1 (SET NX + Lua, polls every 50-250 ms)", func() (using, func()) {
			rs := redsync.New(goredis.NewPool(rdb))
			return func(ctx context.Context, key string, fn func()) error {
				m := rs.NewMutex(key, redsync.WithExpiry(30*time.Second), redsync.WithTries(math.MaxInt32))
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				fn()
				_, err := m.UnlockContext(ctx)
				return err
			}, func() {}
		}},
		// redislock retries only with a RetryStrategy; LinearBackoff(100 ms) is its README's.
		{"bsm/redislock v0.9.4 (SET NX + Lua, polls every 100 ms)", func() (using, func()) {
			lc := redislock.New(rdb)
			opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}
			return func(ctx context.Context, key string, fn func()) error {
				l, err := lc.Obtain(ctx, key, 30*time.Second, opt)
				if err != nil {
					return err
				}
				fn()
				return l.Release(ctx)
			}, func() {}
		}},
	}
}

func fail(name string, err error) {
	fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
	os.Exit(1)
}

func uncontended(use using, seconds float64) (float64, error) {
	ctx := context.Background()
	n := 0
	start := time.Now()
	end := start.Add(time.Duration(seconds * float64(time.Second)))
	for time.Now().Before(end) {
		if err := use(ctx, "bench:uncontended", func() {}); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func handoff(use using, handoffs int) (p50, p99 float64, n int, err error) {
	// A bound well past any hand-off, so that redislock's retries do not end at its default
	// deadline (the ttl).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	key := fmt.Sprintf("bench:handoff:%d", time.Now().UnixNano())
	var (
		mu       sync.Mutex
		lat      []float64
		released time.Time
		left     = handoffs
		firstErr error
		holder   = -1 // the worker whose body ran last
	)
	taken := sync.NewCond(&mu)
	var wg sync.WaitGroup
	for me := range 10 {
		wg.Go(func() {
			for {
				mu.Lock()
				// A hand-off passes the lock to another worker: one that has just released
				// steps aside until another took it, so a lock that lets its releaser take it
				// straight back (every polling peer) is measured on its hand-offs, not on
				// re-acquisitions by the same worker.
				for holder == me && left > 0 && firstErr == nil {
					taken.Wait()
				}
				stop := left <= 0 || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				e := use(ctx, key, func() {
					now := time.Now()
					mu.Lock()
					if !released.IsZero() {
						lat = append(lat, float64(now.Sub(released))/float64(time.Millisecond))
					}
					left--
					holder = me
					taken.Broadcast()
					mu.Unlock()
					time.Sleep(time.Millisecond) // a little work under the lock
					mu.Lock()
					released = time.Now()
					mu.Unlock()
				})
				if e != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = e
					}
					taken.Broadcast()
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, 0, firstErr
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p/100*float64(len(lat))))] }
	return q(50), q(99), len(lat), nil
}
