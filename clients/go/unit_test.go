package relock

// Unit tests of what needs no server.

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	cb := &redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: 5, NewClient: func(*redis.Options) *redis.Client { return nil }}
	co := ownClusterOptions(cb)
	if co.MaxRetries != -1 || !co.ContextTimeoutEnabled || co.NewClient != nil || co.MaintNotificationsConfig == nil || co.Addrs[0] != cb.Addrs[0] {
		t.Fatalf("own cluster options %+v", co)
	}
	if cb.MaxRetries != 5 || cb.NewClient == nil || cb.MaintNotificationsConfig != nil {
		t.Fatal("the application's cluster options were changed")
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
