package relock

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startCluster is three masters with the module (no replicas), healthy before use.
//
// redis-cli waits, with no bound of its own, until every node knows every other (at load 12 a
// create ran past 120 s): it gets 90 s, then one more try on new nodes.
func startCluster(t *testing.T) []*server {
	for attempt := 1; ; attempt++ {
		nodes, out, err := createCluster(t)
		if err == nil {
			return nodes
		}
		if attempt == 2 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cluster create: %v\n%s", err, out)
		}
		t.Logf("cluster: a second attempt on new nodes after: %v\n%s", err, out)
		for _, n := range nodes {
			_ = n.cmd.Process.Kill()
		}
	}
}

func createCluster(t *testing.T) ([]*server, []byte, error) {
	var nodes []*server
	var addrs []string
	for range 3 {
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(freePort(t)))
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	// Each node in its own directory (nodes.conf): startServer gives each its own TempDir.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (killed: %v)", ctx.Err(), err)
		}
		return nodes, out, err
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
	return nodes, nil, nil
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

// A slot migrating (ASK) or moved (MOVED) since the slot map was loaded: relock sends its
// acknowledged writes and its waits to the key's master itself, so it follows the
// redirection (the command did not run where it was refused) instead of failing until the
// map is reloaded by something else.
func TestClusterRedirected(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	acked := New(cc, ReplicaAcks(1, 20*time.Millisecond), NodeTimeout(2*time.Second))
	t.Cleanup(func() { _ = acked.Close() })
	plain := New(cc, NodeTimeout(2*time.Second))
	t.Cleanup(func() { _ = plain.Close() })
	ctx, cancel := context.WithTimeout(bg(), 60*time.Second)
	defer cancel()
	const k1, k2 = "{mv}:1", "{mv}:2"
	// No replicas: an acknowledged grant is refused, but by the master that has the slot (the
	// error names the master the grant ran on).
	notAckedHere := func(what, master string) {
		t.Helper()
		_, err := acked.Acquire(ctx, k1)
		if err == nil || strings.Contains(err.Error(), "MOVED") || strings.Contains(err.Error(), "ASK") ||
			!strings.Contains(err.Error(), "master "+master+": only 0 of 1 required replica acknowledgements") {
			t.Fatalf("%s: want the grant reached and not acknowledged, got %v", what, err)
		}
	}
	src, err := cc.MasterForKey(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redis.Client
	var all []*redis.Client
	for _, n := range nodes {
		cl := n.client(t)
		all = append(all, cl)
		if n.addr() != src.Options().Addr && dst == nil {
			dst = cl
		}
	}
	notAckedHere("slot in place", src.Options().Addr) // loads the slot maps
	if _, err := plain.Info(ctx, k2); err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, k1).Val()
	srcID := src.Do(ctx, "CLUSTER", "MYID").Val()
	dstID := dst.Do(ctx, "CLUSTER", "MYID").Val()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Migrating: the source answers ASK for a key it does not have.
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	notAckedHere("slot migrating", dst.Options().Addr)
	l, err := plain.Campaign(ctx, k2, "n1", Wait(5*time.Second))
	if err != nil {
		t.Fatalf("campaign while the slot migrates: %v", err)
	}
	_ = l.Resign(ctx)
	// Moved: the source answers MOVED.
	for _, cl := range append([]*redis.Client{dst, src}, all...) {
		must(cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	notAckedHere("slot moved", dst.Options().Addr)
	l, err = plain.Campaign(ctx, k2, "n1", Wait(5*time.Second))
	if err != nil {
		t.Fatalf("campaign after the slot moved: %v", err)
	}
	if v := dst.Do(ctx, "LOCK.INFO", k2).Val(); v == nil {
		t.Fatal("the leadership is not on the slot's new master")
	}
	_ = l.Resign(ctx)
}
