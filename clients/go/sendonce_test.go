package relock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeNode is a server speaking just enough RESP2 to be one Redis Cluster master owning every
// slot (or a plain server), that grants LOCK.ACQUIRE and hangs up on LOCK.FENCED after reading
// it, without a reply: the connection ends after the write may have run, the case in which a
// driver that re-sends would run a fenced write twice. fenced counts the LOCK.FENCED it read.
type fakeNode struct {
	ln     net.Listener
	fenced atomic.Int64
	forced atomic.Int64
	wg     sync.WaitGroup
	// silent: LOCK.FENCED is read and never answered, the connection kept open (a reply
	// later than the caller's deadline) until the node closes.
	silent bool
	closed chan struct{}
}

func startFakeNode(t *testing.T, silent bool) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln, silent: silent, closed: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		close(f.closed)
		f.wg.Wait()
	})
	return f
}

func (f *fakeNode) addr() string { return f.ln.Addr().String() }

func (f *fakeNode) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		if name == "CLIENT" || name == "CLUSTER" && len(args) > 1 && !strings.EqualFold(args[1], "SLOTS") {
			name += " " + strings.ToUpper(args[1])
		}
		var reply string
		switch name {
		case "PING":
			reply = "+PONG\r\n"
		case "LOCK.ACQUIRE":
			reply = ":7\r\n"
		case "LOCK.RELEASE":
			reply = ":1\r\n"
		case "CLUSTER SLOTS", "CLUSTER":
			host, port, _ := net.SplitHostPort(f.addr())
			reply = fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%d\r\n%s\r\n:%s\r\n", len(host), host, port)
		case "COMMAND":
			reply = "*0\r\n"
		case "LOCK.FENCED", "LOCK.FORCERELEASE":
			if name == "LOCK.FENCED" {
				f.fenced.Add(1)
			} else {
				f.forced.Add(1)
			}
			if f.silent {
				<-f.closed
			}
			return // read, maybe run, never answered: the connection ends
		default:
			if strings.HasPrefix(name, "CLIENT ") || name == "READONLY" {
				reply = "+OK\r\n"
			} else {
				reply = fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
			}
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, n)
	for range n {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

// TestAFencedWriteWhoseReplyIsLostIsSentOnce: the send-once rule of the client contract
// (spec/client-cases/README.md). go-redis's cluster client re-sends a command whose connection
// ended (io.EOF) or timed out, first to the same node, then to another, up to MaxRedirects
// times, whatever MaxRetries says: a fenced INCR was sent four times. The write is now sent
// once and fails with ErrMayHaveRun, through a cluster's client and a plain server's, whether
// its connection ended or its reply came later than the context's deadline.
func TestAFencedWriteWhoseReplyIsLostIsSentOnce(t *testing.T) {
	for _, kind := range []string{"cluster", "server"} {
		for _, silent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/silent=%v", kind, silent), func(t *testing.T) {
				f := startFakeNode(t, silent)
				var rdb redis.UniversalClient
				if kind == "cluster" {
					rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{f.addr()}, Protocol: 2})
				} else {
					rdb = redis.NewClient(&redis.Options{Addr: f.addr(), Protocol: 2})
				}
				defer rdb.Close()
				c := New(rdb, NodeTimeout(2*time.Second))
				defer c.Close()
				h, err := c.Acquire(bg(), "{order:7}", TTL(30*time.Second))
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				ctx, cancel := context.WithTimeout(bg(), 300*time.Millisecond)
				defer cancel()
				_, err = h.Fenced(ctx, "INCR", "{order:7}:n")
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, ErrMayHaveRun) || e.Retryable || !strings.Contains(e.Msg, "may have run") {
					t.Fatalf("a fenced write whose reply was lost: %v (sent %d times)", err, f.fenced.Load())
				}
				time.Sleep(300 * time.Millisecond) // marked: room for a driver's re-send (its backoff is 8-512 ms), were there one
				if n := f.fenced.Load(); n != 1 {
					t.Fatalf("the fenced write was sent %d times", n)
				}
			})
		}
	}
}

// TestAForceReleaseWhoseConnectionEndsIsSentOnce: LOCK.FORCERELEASE run again after its reply
// was lost would remove a hold taken since; go-redis's cluster client re-sent it.
func TestAForceReleaseWhoseConnectionEndsIsSentOnce(t *testing.T) {
	f := startFakeNode(t, false)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{f.addr()}, Protocol: 2})
	defer rdb.Close()
	c := New(rdb, NodeTimeout(2*time.Second))
	defer c.Close()
	if _, err := c.ForceRelease(bg(), "{order:7}"); !errors.Is(err, ErrServer) {
		t.Fatalf("a force-release whose connection ended: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // marked: room for a driver's re-send, were there one
	if n := f.forced.Load(); n != 1 {
		t.Fatalf("LOCK.FORCERELEASE was sent %d times", n)
	}
}

// TestAFencedWriteNeverSentSaysNothingRan: no connection could be opened, so nothing left:
// retryable, and not ErrMayHaveRun.
func TestAFencedWriteNeverSentSaysNothingRan(t *testing.T) {
	if err := lostFencedReply("k", "s", &net.OpError{Op: "dial", Err: errors.New("connection refused")}); !errors.Is(err, ErrServer) || !err.(*Error).Retryable {
		t.Fatalf("dial error: %v", err)
	}
	if err := lostFencedReply("k", "s", redis.ErrPoolTimeout); !errors.Is(err, ErrServer) {
		t.Fatalf("pool timeout: %v", err)
	}
	if err := lostFencedReply("k", "s", io.EOF); !errors.Is(err, ErrMayHaveRun) {
		t.Fatalf("EOF: %v", err)
	}
}
