package relock

// Real redis-servers with the relock module for the tests: each on a free port, in its own
// directory, ready within a deadline, killed by the test's cleanup (as the Python and Node
// packages' tests/servers.py and test/servers.mjs do).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func modulePath(t testing.TB) string {
	if p := os.Getenv("RELOCK_MODULE"); p != "" {
		return p
	}
	for _, p := range []string{"debug", "release"} {
		f, _ := filepath.Abs(filepath.Join("..", "..", "target", p, "librelock.so"))
		if _, err := os.Stat(f); err == nil {
			return f
		}
	}
	t.Fatal("module not built: run `cargo build -p relock` (scripts/test-go does)")
	return ""
}

// freePort is a port nobody listens on, below the kernel's ephemeral range (10000 up to it):
// a port from Listen(":0") is in that range, where any outgoing connection may take it between
// a server's kill and its restart on the same port ("Address already in use", as the module's
// suites found in a fresh make test).
func freePort(t testing.TB) int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				low = n
			}
		}
	}
	for i := 0; low > 11000 && i < 200; i++ {
		port := 10000 + rand.IntN(low-10000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type server struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
	dir  string
	mu   sync.Mutex
	stop bool
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// startServer starts redis-server with the module (and args), killed at the test's end.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	dir := t.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		s := &server{t: t, port: freePort(t), dir: dir}
		cmdArgs := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
			"--appendonly", "no", "--logfile", "redis.log", "--enable-debug-command", "yes", "--loadmodule", modulePath(t)}
		s.cmd = exec.Command(envOr("REDIS_SERVER", "redis-server"), append(cmdArgs, args...)...)
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Kill()
			<-exited
		})
		if s.ready(exited) {
			return s
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	t.Fatalf("redis-server did not start:\n%s", log)
	return nil
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// ready: the server on our port answers PING with our process id.
func (s *server) ready(exited chan struct{}) bool {
	end := time.Now().Add(20 * time.Second)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for time.Now().Before(end) {
		select {
		case <-exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil && containsLine(info, fmt.Sprintf("process_id:%d", s.cmd.Process.Pid)) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func containsLine(text, line string) bool {
	for _, l := range splitLines(text) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			l := s[start:i]
			if len(l) > 0 && l[len(l)-1] == '\r' {
				l = l[:len(l)-1]
			}
			out = append(out, l)
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// client is a go-redis client of the server, closed at the test's end.
func (s *server) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *server) pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *server) resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// eventually waits until check is true, failing the test after within (a generous bound,
// never a fixed sleep).
func eventually(t testing.TB, within time.Duration, what string, check func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !check() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proxy forwards TCP to a server until cut: then every connection through it is closed and
// new ones are refused (a process whose network went away).
type proxy struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newProxy(t testing.TB, to string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, to: to}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				u.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go pipe(c, u)
			go pipe(u, c)
		}
	}()
	return p
}

func pipe(a, b net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := a.Read(buf)
		if n > 0 {
			if _, werr := b.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	a.Close()
	b.Close()
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) close() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.l.Close()
	for _, c := range conns {
		c.Close()
	}
}

// quiet drops go-redis's own log lines (dial failures of the give-backs to servers a test
// paused or cut on purpose); the tests say what failed.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv("RELOCK_GO_DRIVER_LOG") == "" {
		redis.SetLogger(quiet{})
	}
	os.Exit(m.Run())
}

// drop cuts the connections open through the proxy, and goes on accepting new ones.
func (p *proxy) drop() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
