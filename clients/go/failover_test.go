package relock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func plain(t *testing.T, s *server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClusterFailover: the master of a held key fails over to its replica (CLUSTER FAILOVER,
// the manual, lossless one); the client follows it at once (the first fenced write and renewal
// after it reach the new master) and the hold survives there with its owner and token.
func TestClusterFailover(t *testing.T) {
	// In parallel with the other cluster test (each has its own servers): the suite stays
	// under a minute.
	t.Parallel()
	nodes := startCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(bg(), 90*time.Second)
	defer cancel()
	const key = "{fo}"
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var master *server
	for _, n := range nodes {
		if n.addr() == m.Options().Addr {
			master = n
		}
	}
	mc := plain(t, master)
	mid := mc.ClusterMyID(ctx).Val()
	cport := mc.ConfigGet(ctx, "cluster-port").Val()["cluster-port"]

	// A replica of that master joins the cluster.
	replica := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(freePort(t)))
	rc := plain(t, replica)
	rid := rc.ClusterMyID(ctx).Val()
	if err := rc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", master.port, cport).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replica met the master", func() bool {
		out := rc.ClusterNodes(ctx).Val()
		return strings.Contains(out, mid) && !strings.Contains(out, "handshake")
	})
	if err := rc.ClusterReplicate(ctx, mid).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replica in sync and known to every master", func() bool {
		if !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
			return false
		}
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
			out, _ := c.ClusterNodes(ctx).Result()
			c.Close()
			if !strings.Contains(out, rid) {
				return false
			}
		}
		return true
	})

	c := New(cc)
	t.Cleanup(func() { _ = c.Close() })
	// A ttl long enough that no background renewal runs between the acquisition and the
	// checks after the failover: the first command relock sends after it goes by the slot map
	// of before, to the old master, and only a client that follows its MOVED reaches the new
	// one (go-redis reloads the map after a MOVED, so a later renewal would succeed even
	// without following it).
	h, err := c.Acquire(ctx, key, TTL(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	token := h.Token()
	if v, err := h.Fenced(ctx, "SET", key+":data", "before"); err != nil || v != "OK" {
		t.Fatalf("fenced write before the failover: %v %v", v, err)
	}

	if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replica became the key's master", func() bool {
		return strings.Contains(rc.Info(ctx, "replication").Val(), "role:master") &&
			strings.Contains(mc.Info(ctx, "replication").Val(), "role:slave")
	})
	// The first commands after the failover: a fenced write and a renewal, each answered by
	// the new master.
	base := relockStat(t, rc, "renewed_total")
	if v, err := h.Fenced(ctx, "SET", key+":data", "after"); err != nil || v != "OK" {
		t.Fatalf("fenced write right after the failover: %v %v", v, err)
	}
	if err := h.Renew(ctx); err != nil {
		t.Fatalf("renewal right after the failover: %v", err)
	}
	if got := relockStat(t, rc, "renewed_total"); got != base+1 {
		t.Fatalf("the new master counted %d renewals, want 1", got-base)
	}
	if err := h.Err(); err != nil {
		t.Fatalf("the hold did not survive the failover: %v", err)
	}
	if v := rc.Get(ctx, key+":data").Val(); v != "after" {
		t.Fatalf("the new master has %q, not the fenced write", v)
	}
	info := rc.Do(ctx, "LOCK.INFO", key).Val()
	got := asMap(info)
	if text(got["owner"]) != h.Owner() || toInt(got["token"], -1) != token || h.Token() != token {
		t.Fatalf("on the new master: %v (hold %s token %d)", info, h.Owner(), token)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rc.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("still held on the new master after the release")
	}
}
