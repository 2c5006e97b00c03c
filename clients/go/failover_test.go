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
// the manual, lossless one); the hold, renewed in the background, survives it on the new
// master with its owner and token, and its token still fences writes there.
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
	h, err := c.Acquire(ctx, key, TTL(3*time.Second))
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
	// Renewed on the new master past the ttl (every ttl/3: four renewals there are more than
	// the 3 s ttl counted from the failover).
	base := relockStat(t, rc, "renewed_total")
	eventually(t, 30*time.Second, "4 renewals on the new master", func() bool {
		return relockStat(t, rc, "renewed_total") >= base+4 || h.Err() != nil
	})
	if err := h.Err(); err != nil {
		t.Fatalf("the hold did not survive the failover: %v", err)
	}
	info := rc.Do(ctx, "LOCK.INFO", key).Val()
	got := asMap(info)
	if text(got["owner"]) != h.Owner() || toInt(got["token"], -1) != token || h.Token() != token {
		t.Fatalf("on the new master: %v (hold %s token %d)", info, h.Owner(), token)
	}
	if v, err := h.Fenced(ctx, "SET", key+":data", "after"); err != nil || v != "OK" {
		t.Fatalf("fenced write after the failover: %v %v", v, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rc.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("still held on the new master after the release")
	}
}
