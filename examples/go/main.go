// Workers sharing a counter under a relock lock, then a leader election.
//
// Three workers each add 1 to a counter ten times, read-modify-write, each step under the lock
// `example:counter` (locks.Do: acquired waiting in the key's FIFO queue, renewed, released when
// the function returns, its context cancelled if the lock is lost). Without the lock, updates
// would be lost; with it the counter ends at exactly 30. Every write carries the hold's fencing
// token. Then two candidates campaign for `example:leader`: the first leads, resigns, and the
// second leads with a larger term, as an observer reports.
//
//	go run .    # against $REDIS_ADDR (default 127.0.0.1:6379), a server with the relock module
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	relock "github.com/relock/relock/clients/go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks := relock.New(rdb)
	defer locks.Close()
	rdb.Del(ctx, "example:counter:value")

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				err := locks.Do(ctx, "example:counter", func(ctx context.Context) error {
					n, err := rdb.Get(ctx, "example:counter:value").Int()
					if err != nil && err != redis.Nil {
						return err
					}
					return rdb.Set(ctx, "example:counter:value", strconv.Itoa(n+1), 0).Err()
				}, relock.TTL(5*time.Second), relock.Wait(10*time.Second))
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	n, _ := rdb.Get(ctx, "example:counter:value").Int()
	fmt.Printf("counter: %d (3 workers x 10 increments)\n", n)
	if n != 30 {
		return fmt.Errorf("counter is %d, not 30", n)
	}

	// A leader election: campaign, observe, resign.
	obs := locks.Observe(ctx, "example:leader")
	<-obs // the current state: nobody leads
	first, err := locks.Campaign(ctx, "example:leader", "node-a", relock.TTL(5*time.Second))
	if err != nil {
		return err
	}
	fmt.Printf("leader: %s, term %d\n", first.Value(), first.Term())
	second := make(chan *relock.Leadership, 1)
	go func() {
		l, err := locks.Campaign(ctx, "example:leader", "node-b", relock.TTL(5*time.Second))
		if err != nil {
			fmt.Fprintln(os.Stderr, "example: node-b:", err)
		}
		second <- l
	}()
	if o := <-obs; o.Leader == nil || o.Leader.Value != "node-a" {
		return fmt.Errorf("observed %+v", o.Leader)
	}
	for {
		ws, err := locks.Waiters(ctx, "example:leader", 0)
		if err != nil {
			return err
		}
		if len(ws) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := first.Resign(ctx); err != nil {
		return err
	}
	next := <-second
	if next == nil {
		return fmt.Errorf("node-b did not lead")
	}
	o := <-obs
	for o.Leader == nil {
		o = <-obs
	}
	fmt.Printf("observed: %s leads, term %d (was %d)\n", o.Leader.Value, o.Leader.Term, first.Term())
	if o.Leader.Value != "node-b" || next.Term() <= first.Term() {
		return fmt.Errorf("observed %+v", o.Leader)
	}
	return next.Resign(ctx)
}
