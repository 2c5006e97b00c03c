package relock

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startCluster is three masters with the module (no replicas), healthy before use.
func startCluster(t *testing.T) []*server {
	var nodes []*server
	var addrs []string
	for range 3 {
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(freePort(t)))
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	// Each node in its own directory (nodes.conf): startServer gives each its own TempDir.
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster create: %v\n%s", err, out)
	}
	eventually(t, 60*time.Second, "cluster healthy", func() bool {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
			info, err := c.ClusterInfo(bg()).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	})
	return nodes
}

func TestCluster(t *testing.T) {
	// In parallel with the other cluster test (each has its own servers): the suite stays
	// under a minute.
	t.Parallel()
	nodes := startCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	c := New(cc)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(bg(), 60*time.Second)
	defer cancel()
	// Keys on every master: acquire, wait (on the key's master's own connection), release.
	slots := map[string]bool{}
	for i := range 6 {
		key := "order:" + strconv.Itoa(i)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slots[m.Options().Addr] = true
		h, err := c.Acquire(ctx, key, TTL(5*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if info, _ := c.Info(ctx, key); info == nil || *info.Owner != h.Owner() {
			t.Fatalf("%s: info %+v", key, info)
		}
		got := make(chan error, 1)
		go func() {
			h2, err := c.Acquire(ctx, key, Wait(20*time.Second))
			if err == nil {
				err = h2.Release(bg())
			}
			got <- err
		}()
		eventually(t, 10*time.Second, "queued on "+key, func() bool { return waiters(t, c, key) == 1 })
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if len(slots) < 2 {
		t.Fatalf("keys on %d masters only", len(slots))
	}
	// A semaphore is allowed on a cluster; a group under one hash tag too.
	s, err := c.Acquire(ctx, "{gpu}", Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Release(ctx)
	g, err := c.AcquireAll(ctx, []string{"{acct}:1", "{acct}:2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Release(ctx)
	// A fenced write, routed to the lock key's master.
	f, err := c.Acquire(ctx, "{order:8}")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := f.Fenced(ctx, "SET", "{order:8}:data", "v"); err != nil || v != "OK" {
		t.Fatalf("fenced on a cluster: %v %v", v, err)
	}
	_ = f.Release(ctx)
	// Loss on a cluster node is seen with its reason.
	h, err := c.Acquire(ctx, "order:9", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cc.Del(ctx, "order:9")
	expectLoss(t, h, "deleted")
	// An election on a cluster.
	l, err := c.Campaign(ctx, "{svc}:leader", "n1", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if who, err := c.Leader(ctx, "{svc}:leader"); err != nil || who == nil || who.Term != l.Term() {
		t.Fatalf("leader %+v %v", who, err)
	}
	_ = l.Resign(ctx)
	if _, err := c.AcquireAll(ctx, []string{"a", "b"}); err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("keys of two slots: %v", err)
	}
}
