package relock

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dropFirstRelease fails the first LOCK.RELEASE without sending it, as a reply lost to the
// node timeout would look (the undo may still be in the server's input buffer), and calls
// then() once.
type dropFirstRelease struct {
	once  sync.Once
	owner chan any
	then  func()
}

func (h *dropFirstRelease) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *dropFirstRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *dropFirstRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		dropped := false
		if len(a) > 2 && a[0] == "LOCK.RELEASE" {
			h.once.Do(func() {
				dropped = true
				h.owner <- a[2]
				h.then()
			})
		}
		if dropped {
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout (dropped by the test)")}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A grant not acknowledged whose undo's reply is lost: the undo may still run, after the
// next grant; so the wait that follows must not ask under the same owner (a late give-back
// never meets the same owner's next grant).
func TestReplicaAcksLostUndoNewOwner(t *testing.T) {
	m := startServer(t)
	mrdb := m.client(t)
	r := replicaOf(t, m, mrdb, 1)
	c, _ := locksOn(t, m, ReplicaAcks(1, time.Second), NodeTimeout(5*time.Second), RetryDelay(20*time.Millisecond))
	hook := &dropFirstRelease{owner: make(chan any, 1), then: r.resume}
	c.nodes[0].rdb.AddHook(hook) // the client's own (New makes one from the options given)
	r.pause()
	defer r.resume()
	h, err := c.Acquire(bg(), "undo:k", TTL(30*time.Second), Wait(20*time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	var first any
	select {
	case first = <-hook.owner:
	default:
		t.Fatal("no undo was sent (the first grant was acknowledged?)")
	}
	if h.Owner() == first {
		t.Fatalf("granted under %v, the owner whose undo was lost and may still run", first)
	}
	c.settle(5 * time.Second) // the give-back of the first owner ran
	if i := parseInfo("", lockInfo(t, mrdb, "undo:k")); i == nil || i.Owner == nil || *i.Owner != h.Owner() {
		t.Fatalf("the hold returned is not the master's (%+v)", i)
	}
	if err := h.Release(bg()); err != nil {
		t.Fatalf("release: %v", err)
	}
}
