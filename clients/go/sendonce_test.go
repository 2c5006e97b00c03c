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
	// reply: LOCK.FENCED and LOCK.FORCERELEASE are answered with it (an error reply such as a
	// script's own "-READONLY ...", after its write ran) instead of a hang-up.
	reply  string
	closed chan struct{}
	mu     sync.Mutex
	conns  []net.Conn // closed at cleanup: a failed test may leave its clients open
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
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
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
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
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
			if f.reply != "" {
				reply = f.reply
				break
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

// TestAnErrorReplyAfterTheWriteIsNotSentAgain: go-redis's cluster client re-sends a command
// answered with an error starting READONLY (or LOADING, MOVED, ASK), whatever its NoRetry says,
// up to MaxRedirects times; through LOCK.FENCED that reply may be a script's own, after its
// write ran (`redis.call('INCR', ...); return redis.error_reply('READONLY ...')`): the INCR ran
// four times. The fenced write now goes on the master's own client: sent once, the reply
// passed through. (A MOVED or ASK of LOCK.FENCED itself is followed once, by relock.)
func TestAnErrorReplyAfterTheWriteIsNotSentAgain(t *testing.T) {
	for _, reply := range []string{"-READONLY stop\r\n", "-LOADING stop\r\n"} {
		f := startFakeNode(t, false)
		f.reply = reply
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{f.addr()}, Protocol: 2, ReadOnly: true})
		c := New(rdb, NodeTimeout(2*time.Second))
		h, err := c.Acquire(bg(), "{order:7}", TTL(30*time.Second))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		_, err = h.Fenced(bg(), "EVAL", "redis.call('INCR', KEYS[1]); return redis.error_reply('READONLY stop')", 1, "{order:7}:n")
		if err == nil || !isRedisError(err) || errors.Is(err, ErrMayHaveRun) {
			t.Fatalf("%q: the inner reply passed through: %v", reply, err)
		}
		if _, err := c.ForceRelease(bg(), "{order:7}"); err == nil {
			t.Fatalf("%q: force-release: no error", reply)
		}
		time.Sleep(300 * time.Millisecond) // marked: room for a driver's re-send, were there one
		if n, m := f.fenced.Load(), f.forced.Load(); n != 1 || m != 1 {
			t.Fatalf("%q: LOCK.FENCED sent %d times, LOCK.FORCERELEASE %d", reply, n, m)
		}
		_ = c.Close()
		_ = rdb.Close()
	}
}

// TestAForceReleaseWhoseReplyIsLostIsSentOnceAndMayHaveRun: LOCK.FORCERELEASE run again after
// its reply was lost removes a hold taken since; go-redis's cluster client re-sent it, and
// then relock called the failure retryable. It is sent once, and fails with ErrMayHaveRun.
func TestAForceReleaseWhoseReplyIsLostIsSentOnceAndMayHaveRun(t *testing.T) {
	for _, cluster := range []bool{true, false} {
		f := startFakeNode(t, false)
		var rdb redis.UniversalClient = redis.NewClient(&redis.Options{Addr: f.addr(), Protocol: 2})
		if cluster {
			rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{f.addr()}, Protocol: 2})
		}
		c := New(rdb, NodeTimeout(2*time.Second))
		_, err := c.ForceRelease(bg(), "{order:7}")
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrMayHaveRun) || e.Retryable {
			t.Fatalf("cluster %v: %v", cluster, err)
		}
		time.Sleep(300 * time.Millisecond) // marked: room for a driver's re-send, were there one
		if n := f.forced.Load(); n != 1 {
			t.Fatalf("cluster %v: LOCK.FORCERELEASE was sent %d times", cluster, n)
		}
		_ = c.Close()
		_ = rdb.Close()
	}
}

// TestAFencedWriteNeverSentSaysNothingRan: nothing left (no connection could be opened, the
// context ended first, the client is closed): not ErrMayHaveRun; retryable unless closed.
func TestAFencedWriteNeverSentSaysNothingRan(t *testing.T) {
	if err := lostReply("k", "s", "the fenced write", &net.OpError{Op: "dial", Err: errors.New("connection refused")}); !errors.Is(err, ErrServer) || !err.Retryable {
		t.Fatalf("dial error: %v", err)
	}
	if err := lostReply("k", "s", "the fenced write", redis.ErrPoolTimeout); !errors.Is(err, ErrServer) || !err.Retryable {
		t.Fatalf("pool timeout: %v", err)
	}
	if err := lostReply("k", "s", "the fenced write", redis.ErrClosed); !errors.Is(err, ErrServer) || err.Retryable {
		t.Fatalf("closed: %v", err)
	}
	if err := lostReply("k", "s", "the fenced write", io.EOF); !errors.Is(err, ErrMayHaveRun) || err.Retryable {
		t.Fatalf("EOF: %v", err)
	}
	f := startFakeNode(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: f.addr(), Protocol: 2})
	defer rdb.Close()
	c := New(rdb, NodeTimeout(2*time.Second))
	defer c.Close()
	h, err := c.Acquire(bg(), "{order:7}", TTL(30*time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	ctx, cancel := context.WithCancel(bg())
	cancel()
	_, err = h.Fenced(ctx, "INCR", "{order:7}:n")
	if !errors.Is(err, ErrServer) || errors.Is(err, ErrMayHaveRun) || !errors.Is(err, context.Canceled) || f.fenced.Load() != 0 {
		t.Fatalf("a cancelled context: %v, sent %d times", err, f.fenced.Load())
	}
}
