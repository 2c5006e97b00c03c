package main

// The uncontended loop of the bench program, as a Go benchmark: each peer's heap allocations
// per acquire+release (allocs/op, B/op), which do not depend on the machine's load (the
// ns/op does). Needs a server with the relock module:
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench Pair -benchmem
import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func BenchmarkPair(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR (a server with the relock module) not set")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 20})
	defer rdb.Close()
	for _, p := range peers(rdb) {
		b.Run(p.name, func(b *testing.B) {
			use, done := p.make()
			defer done()
			ctx := context.Background()
			pair := func() {
				if err := use(ctx, "bench:pair", func() {}); err != nil {
					b.Fatal(err)
				}
			}
			pair() // the connections' handshakes, a script's load
			b.ReportAllocs()
			for b.Loop() {
				pair()
			}
		})
	}
}
