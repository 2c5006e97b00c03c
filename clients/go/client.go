package relock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
)

// ownOptions are the options of one of relock's own clients: the application's (addresses,
// TLS, credentials, protocol, timeouts), without driver retries, with context deadlines, and
// without the application's push-notification and client-side-cache machinery (those belong
// to its own client and cannot be shared).
func ownOptions(base *redis.Options) *redis.Options {
	o := *base
	ownRules(&o.MaxRetries, &o.ContextTimeoutEnabled, &o.PushNotificationProcessor, &o.MaintNotificationsConfig)
	o.ClientSideCache = nil
	o.ClientSideCacheConfig = nil
	return &o
}

// ownClusterOptions: the same for a Redis Cluster (the cluster client makes its node clients
// from these; an application's NewClient hook is not taken over).
func ownClusterOptions(base *redis.ClusterOptions) *redis.ClusterOptions {
	o := *base
	ownRules(&o.MaxRetries, &o.ContextTimeoutEnabled, &o.PushNotificationProcessor, &o.MaintNotificationsConfig)
	o.NewClient = nil
	return &o
}

// ownRules are the settings both kinds of options share: no driver retries, context
// deadlines honoured, no push-notification processor and no maintenance notifications.
func ownRules(retries *int, contextDeadlines *bool, pushes *push.NotificationProcessor, maint **maintnotifications.Config) {
	*retries = -1
	*contextDeadlines = true
	*pushes = nil
	*maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// node is one server (or a whole Redis Cluster) the client talks to.
//
// relock never sends its commands on the application's go-redis client itself, but on a
// client of its own made from the same options (so the same addresses, TLS, user, password
// and protocol), with two changes that the lock rules need:
//
//   - MaxRetries -1: go-redis re-sends a command after a lost connection or a read timeout.
//     relock decides itself what a failure means (a round's verdict, a give-back in the
//     background): a LOCK.WAIT re-sent would queue a second time at the back of the queue, and
//     a release re-sent after a timeout is what the contract says a client must never do
//     blindly (relock's releases carry FROM and are repeated only by its own give-back).
//   - ContextTimeoutEnabled: every command runs under a context with the node timeout as its
//     deadline, and go-redis honours a context's deadline only with this set.
//
// Blocking commands (LOCK.WAIT, LOCK.OBSERVE) run on a connection of their own, opened for
// that one call, with no read timeout of go-redis's (ReadTimeout -1): the context's deadline,
// set a little after the command's own timeout_ms, bounds it, so that the driver never cuts a
// wait the server is about to answer (go-redis's ReadTimeout, 5 s by default in v9.23, would; with retries on it would
// then re-send it). Cancelling the wait closes that connection: the server drops the waiter
// (and revokes a grant whose reply could not reach it), and the client gives the key back
// in the background in case a grant landed.
type node struct {
	name    string
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient
	opts    *redis.Options
	// warm: a cluster client has loaded the slot map (its first command does, which the
	// node timeout alone would cut on a busy machine).
	warm atomic.Bool

	// idle: connections for blocking commands kept between two, per server address.
	idleMu sync.Mutex
	idle   map[string][]*redis.Client
	closed bool
}

// clusterWarmUp bounds a cluster client's first command, which loads the slot map first.
const clusterWarmUp = 2 * time.Second

func (n *node) call(ctx context.Context, timeout time.Duration, args ...any) (any, error) {
	if n.cluster != nil && timeout > 0 && !n.warm.Load() {
		timeout = max(timeout, clusterWarmUp)
	}
	v, err := n.do(ctx, timeout, args...)
	if n.cluster != nil && (err == nil || isRedisError(err)) {
		n.warm.Store(true)
	}
	return v, err
}

// callOnce is call for a write that is not safe to run twice (LOCK.FENCED, LOCK.FORCERELEASE;
// key is the key it names): sent at most once. A lost reply is an error other than a
// redis.Error (see notSent). In a cluster it goes on the key's master's own client (whose
// MaxRetries is off) and a MOVED or ASK refusal (nothing ran) is followed once by relock:
// go-redis's cluster client re-sends a command after a lost connection or a timeout, and
// after any error reply starting READONLY, LOADING, MOVED or ASK, up to MaxRedirects times,
// whatever MaxRetries or a command's NoRetry says; through LOCK.FENCED such a reply can be a
// script's own, after its write ran.
func (n *node) callOnce(ctx context.Context, key string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, &unsent{err}
	}
	if n.cluster == nil {
		v, err := n.rdb.Do(ctx, args...).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return v, err
	}
	if !n.warm.Load() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, clusterWarmUp)
		defer cancel()
	}
	cl, err := n.clientFor(ctx, key)
	if err != nil {
		return nil, &unsent{err}
	}
	v, _, _, err := pipeOn(ctx, cl, false, nil, args)
	if addr, ask, ok := redirection(err); ok {
		v, _, _, err, _ = n.follow(ctx, cl.Options(), addr, ask, nil, args)
	}
	if err == nil || isRedisError(err) {
		n.warm.Store(true)
	}
	return v, err
}

// unsent is the failure of a command that was never written (the context ended first, or
// the cluster's slot map could not be read).
type unsent struct{ err error }

func (e *unsent) Error() string { return e.err.Error() }
func (e *unsent) Unwrap() error { return e.err }

// notSent: a command that failed before any byte of it was written (no connection could be
// opened: a dial error, the pool's wait for a connection, a client already closed).
func notSent(err error) bool {
	var op *net.OpError
	var u *unsent
	return errors.As(err, &u) || errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// lostReply is a write sent at most once (what names it, e.g. "the fenced write") that got no
// reply: ErrMayHaveRun once any byte of it may have left (never sent again, by relock or by
// go-redis), or an ErrServer saying nothing ran when it was never written (retryable unless
// the client is closed).
func lostReply(key, server, what string, err error) *Error {
	if notSent(err) {
		return &Error{Kind: ErrServer, Key: key, Servers: []string{server}, Retryable: !errors.Is(err, redis.ErrClosed), Cause: err,
			Msg: fmt.Sprintf("lock %q: %s was not sent (%v): nothing ran", key, what, err)}
	}
	return &Error{Kind: ErrMayHaveRun, Key: key, Servers: []string{server}, Cause: err,
		Msg: fmt.Sprintf("lock %q: %s's reply was lost (%v): it may have run, and was not sent again", key, what, err)}
}

func (n *node) do(ctx context.Context, timeout time.Duration, args ...any) (any, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	v, err := n.rdb.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// clientFor is the client of the server that serves key: the server itself, or key's master
// in a cluster.
func (n *node) clientFor(ctx context.Context, key string) (*redis.Client, error) {
	if n.cluster != nil {
		return n.cluster.MasterForKey(ctx, key)
	}
	return n.rdb.(*redis.Client), nil
}

// replicaAcks is ReplicaAcks: how many replicas must acknowledge a write, and how long the
// master waits for them (WAIT replicas timeout_ms).
type replicaAcks struct {
	replicas int64
	timeout  time.Duration
}

// waitArgs is WAIT replicas timeout_ms (at least 1 ms: WAIT 0 waits for ever).
func (a replicaAcks) waitArgs() []any {
	return []any{"WAIT", a.replicas, max(1, a.timeout.Milliseconds())}
}

// pipeAcked sends args and then WAIT on cl's one connection, in one pipeline (the count
// covers args' write): args' reply, and how many replicas acknowledged or WAIT's error.
func pipeAcked(ctx context.Context, cl *redis.Client, a replicaAcks, args []any) (v any, acked int64, ackErr, err error) {
	return pipeOn(ctx, cl, false, &a, args)
}

// pipeOn sends args on cl's one connection, after ASKING when asking (a cluster's ASK
// redirection) and followed by WAIT when acks is set, in one pipeline.
func pipeOn(ctx context.Context, cl *redis.Client, asking bool, acks *replicaAcks, args []any) (v any, acked int64, ackErr, err error) {
	if !asking && acks == nil {
		v, err = cl.Do(ctx, args...).Result()
		if errors.Is(err, redis.Nil) {
			v, err = nil, nil
		}
		return v, 0, nil, err
	}
	pipe := cl.Pipeline()
	if asking {
		pipe.Do(ctx, "ASKING")
	}
	cmd := pipe.Do(ctx, args...)
	var wait *redis.Cmd
	if acks != nil {
		wait = pipe.Do(ctx, acks.waitArgs()...)
	}
	_, _ = pipe.Exec(ctx)
	v, err = cmd.Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err != nil || wait == nil {
		return v, 0, nil, err
	}
	acked, ackErr = wait.Int64()
	return v, acked, ackErr, nil
}

// redirection: err is a cluster node's MOVED or ASK refusal (the command did not run there):
// the address it names, and whether it is ASK.
func redirection(err error) (addr string, ask, ok bool) {
	if err == nil || !isRedisError(err) {
		return "", false, false
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return "", false, false
	}
	return f[2], f[0] == "ASK", true
}

// follow is a write refused with MOVED or ASK by a cluster master (it did not run: sending
// it on is safe) sent once more where it was sent to: after ASKING for ASK, and on MOVED the
// slot map is reloaded for the next commands too. On a connection of the target's own (kept
// with the blocking commands' idle ones), in the same pipeline as its WAIT; ctx bounds it.
func (n *node) follow(ctx context.Context, from *redis.Options, addr string, ask bool, acks *replicaAcks, args []any) (v any, acked int64, ackErr, err error, at *redis.Options) {
	if !ask {
		n.cluster.ReloadState(ctx)
	}
	wc := n.connTo(from, addr)
	at = wc.Options()
	stop := context.AfterFunc(ctx, func() { _ = wc.Close() })
	v, acked, ackErr, err = pipeOn(ctx, wc, ask, acks, args)
	answered := (err == nil || isRedisError(err)) && (ackErr == nil || isRedisError(ackErr))
	if stop() && answered {
		n.keepWaitConn(wc)
	} else {
		_ = wc.Close()
	}
	if cerr := ctxErr(ctx); err != nil && cerr != nil {
		return nil, 0, nil, fmt.Errorf("%w (%s)", cerr, err), at
	}
	return v, acked, ackErr, err, at
}

// callAcked is call for a write that replicas must acknowledge: args, then WAIT on the same
// connection (to key's master in a cluster), together bounded by timeout. In a cluster, a
// write refused with MOVED or ASK (a slot migrated or migrating) is followed once; at is the
// options of the master it ran on.
func (n *node) callAcked(ctx context.Context, timeout time.Duration, key string, a replicaAcks, args []any) (v any, acked int64, ackErr, err error, at *redis.Options) {
	if n.cluster != nil && !n.warm.Load() {
		timeout = max(timeout, clusterWarmUp)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := n.clientFor(ctx, key)
	if err != nil {
		return nil, 0, nil, err, nil
	}
	at = cl.Options()
	v, acked, ackErr, err = pipeAcked(ctx, cl, a, args)
	if n.cluster != nil {
		if addr, ask, ok := redirection(err); ok {
			v, acked, ackErr, err, at = n.follow(ctx, at, addr, ask, &a, args)
		}
		if err == nil || isRedisError(err) {
			n.warm.Store(true)
		}
	}
	return v, acked, ackErr, err, at
}

// connectedReplicas is how many replicas the master a write ran on (at; nil: key's master)
// has connected (ROLE). In a cluster it asks that very master, whatever the slot map says.
func (n *node) connectedReplicas(ctx context.Context, at *redis.Options, key string, timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var role []any
	var err error
	if n.cluster != nil && at != nil {
		wc := n.connTo(at, at.Addr)
		role, err = wc.Do(ctx, "ROLE").Slice()
		if err == nil || isRedisError(err) {
			n.keepWaitConn(wc)
		} else {
			_ = wc.Close()
		}
	} else {
		var cl *redis.Client
		if cl, err = n.clientFor(ctx, key); err != nil {
			return 0, err
		}
		role, err = cl.Do(ctx, "ROLE").Slice()
	}
	if err != nil {
		return 0, err
	}
	if len(role) < 3 || text(role[0]) != "master" {
		return 0, fmt.Errorf("%w: ROLE %v", errBadReply, role)
	}
	replicas, _ := role[2].([]any)
	return int64(len(replicas)), nil
}

// isRedisError: err is the server's error reply. A function of its own: the target of
// errors.As escapes to the heap, and in the caller it was allocated on every command, failed
// or not.
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// maxIdleWaitConns is how many connections for blocking commands a node keeps open between two
// of them (per server address), so that a worker that waits again at once (the hand-off of a
// contended lock) does not dial and handshake on the way to its place in the queue.
const maxIdleWaitConns = 16

// waitConn is a connection of its own for one blocking command on the server of key: an idle
// one kept from an earlier command, or a new one (one connection, no read timeout of
// go-redis's: the context bounds the command).
func (n *node) waitConn(ctx context.Context, key string) (*redis.Client, error) {
	base := n.opts
	if n.cluster != nil {
		m, err := n.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		base = m.Options()
	}
	return n.connTo(base, base.Addr), nil
}

// connTo is a connection of its own to addr (base's options otherwise): an idle one, or a
// new one.
func (n *node) connTo(base *redis.Options, addr string) *redis.Client {
	n.idleMu.Lock()
	idle := n.idle[addr]
	if k := len(idle); k > 0 {
		wc := idle[k-1]
		n.idle[addr] = idle[:k-1]
		n.idleMu.Unlock()
		return wc
	}
	n.idleMu.Unlock()
	o := ownOptions(base)
	o.Addr = addr
	o.ReadTimeout = -1
	o.PoolSize = 1
	o.MinIdleConns = 0
	o.MaxIdleConns = 0
	return redis.NewClient(o)
}

// keepWaitConn puts wc back for the next blocking command, or closes it (the node closed, or
// enough kept).
func (n *node) keepWaitConn(wc *redis.Client) {
	addr := wc.Options().Addr
	n.idleMu.Lock()
	if !n.closed && len(n.idle[addr]) < maxIdleWaitConns {
		if n.idle == nil {
			n.idle = map[string][]*redis.Client{}
		}
		n.idle[addr] = append(n.idle[addr], wc)
		n.idleMu.Unlock()
		return
	}
	n.idleMu.Unlock()
	_ = wc.Close()
}

// close closes the node's own clients: its connections for blocking commands kept idle, and
// the client for the other commands.
func (n *node) close() error {
	n.idleMu.Lock()
	n.closed = true
	idle := n.idle
	n.idle = nil
	n.idleMu.Unlock()
	for _, list := range idle {
		for _, wc := range list {
			_ = wc.Close()
		}
	}
	return n.rdb.Close()
}

// blocking runs a blocking command on a connection of its own, bounded by bound (0: none)
// and by ctx; cancelling ctx closes the connection (the server drops the waiter). The
// connection is kept for the next blocking command only when the command was answered.
func (n *node) blocking(ctx context.Context, key string, bound time.Duration, args ...any) (any, error) {
	v, _, _, err, _ := n.blockingAcked(ctx, key, bound, nil, args)
	return v, err
}

// blockingAcked is blocking, followed on the same connection by WAIT when acks asks for
// replica acknowledgements (the server runs it once the blocking command answered).
func (n *node) blockingAcked(ctx context.Context, key string, bound time.Duration, acks *replicaAcks, args []any) (v any, acked int64, ackErr, err error, at *redis.Options) {
	wc, err := n.waitConn(ctx, key)
	if err != nil {
		return nil, 0, nil, err, nil
	}
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	stop := context.AfterFunc(ctx, func() { _ = wc.Close() })
	v, acked, ackErr, err = pipeOn(ctx, wc, false, acks, args)
	answered := (err == nil || isRedisError(err)) && (ackErr == nil || isRedisError(ackErr))
	at = wc.Options()
	if stop() && answered {
		// Neither cancelled nor cut: the connection is whole, with nothing left to read.
		n.keepWaitConn(wc)
	} else {
		_ = wc.Close()
	}
	if cerr := ctxErr(ctx); err != nil && cerr != nil {
		return nil, 0, nil, fmt.Errorf("%w (%s)", cerr, err), at
	}
	if n.cluster != nil {
		if addr, ask, ok := redirection(err); ok {
			// The slot moved (or is moving): the wait did not queue there; it queues once
			// where the master sends it.
			return n.follow(ctx, at, addr, ask, acks, args)
		}
	}
	return v, acked, ackErr, err, at
}

// Client takes locks on one Redis server with the relock module, on a Redis Cluster, or with
// Redlock over several independent masters. Every hold has an owner of its own, so
// goroutines sharing one Client exclude each other. Safe for concurrent use.
type Client struct {
	nodes          []*node
	names          []string
	cluster        bool
	err            error
	nodeTimeout    time.Duration
	retryDelay     time.Duration
	maxPartialHold time.Duration
	prefix         *string
	// acks: ReplicaAcks (replicas 0: off).
	acks replicaAcks

	mu     sync.Mutex
	live   map[*Hold]bool
	bgN    int
	idle   chan struct{}
	bgCtx  context.Context
	bgStop context.CancelFunc
	// closing is cancelled when Close begins: it ends the waits and Observes still running.
	closing  context.Context
	closeNow context.CancelFunc
}

// errClosed is the cause of a wait or an Observe ended by Close.
var errClosed = errors.New("relock: the client was closed")

// untilClosed is ctx, cancelled also when the client is closed; done releases it.
func (c *Client) untilClosed(ctx context.Context) (merged context.Context, done func()) {
	merged, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(errClosed) })
	return merged, func() {
		stop()
		cancel(nil)
	}
}

// ClientOption sets an option of New and NewRedlock.
type ClientOption func(*Client)

// NodeTimeout is how long one server may take to answer one non-blocking command (default
// 100 ms).
func NodeTimeout(d time.Duration) ClientOption { return func(c *Client) { c.nodeTimeout = d } }

// RetryDelay is the mean pause between two rounds of a Redlock wait (default 200 ms).
func RetryDelay(d time.Duration) ClientOption { return func(c *Client) { c.retryDelay = d } }

// ReplicaAcks makes every acquisition, renewal and campaign wait, on each master, until n
// of its replicas acknowledged the write (WAIT n timeout, sent on the same connection right
// after it) before it counts. An acquisition (a grant, a campaign's grant, a nested section)
// that fewer replicas acknowledged within timeout is released again on that master at once,
// and that master counts as failed: the error names it and says how many acknowledged. A
// renewal not acknowledged does not count (the hold stays valid until its earlier validity
// ends), except on a master with fewer replicas connected than n (the promoted replica after
// a failover, its old master down), where it counts once every connected replica
// acknowledged it. Each such command may take the node timeout plus timeout. It narrows, not
// closes, the window in which a failover loses a lock: replication stays asynchronous.
// n 0 (the default) turns it off.
func ReplicaAcks(n int, timeout time.Duration) ClientOption {
	return func(c *Client) { c.acks = replicaAcks{replicas: int64(n), timeout: timeout} }
}

// OwnerPrefix replaces `<host>/<pid>` in the owners relock makes ("" : the random part alone).
func OwnerPrefix(p string) ClientOption { return func(c *Client) { c.prefix = &p } }

// New is a Client on one server (a *redis.Client) or a Redis Cluster (a *redis.ClusterClient).
// Other UniversalClients (a Ring) make every call fail with ErrInvalid.
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	return newClient([]redis.UniversalClient{rdb}, opts)
}

// NewRedlock is a Client over independent masters (each a *redis.Client): a lock is held when
// a quorum (N/2+1) granted it, for the validity the round leaves.
func NewRedlock(masters []redis.UniversalClient, opts ...ClientOption) *Client {
	return newClient(masters, opts)
}

func newClient(rdbs []redis.UniversalClient, opts []ClientOption) *Client {
	c := &Client{nodeTimeout: DefaultNodeTimeout, retryDelay: DefaultRetryDelay, maxPartialHold: DefaultMaxPartialHold, live: map[*Hold]bool{}}
	c.bgCtx, c.bgStop = context.WithCancel(context.Background())
	c.closing, c.closeNow = context.WithCancel(context.Background())
	for _, o := range opts {
		o(c)
	}
	if len(rdbs) == 0 {
		c.err = invalid("no servers given")
		return c
	}
	for _, u := range rdbs {
		switch r := u.(type) {
		case *redis.Client:
			// opts: a copy of its own (the client keeps and initialises the one it is given),
			// for the connections of blocking commands.
			o := ownOptions(r.Options())
			c.coverAcks(&o.ReadTimeout)
			c.nodes = append(c.nodes, &node{name: o.Addr, rdb: redis.NewClient(o), opts: ownOptions(r.Options())})
		case *redis.ClusterClient:
			if len(rdbs) > 1 {
				c.err = invalid("Redlock takes independent masters; pass a ClusterClient alone")
				return c
			}
			o := ownClusterOptions(r.Options())
			c.coverAcks(&o.ReadTimeout)
			own := redis.NewClusterClient(o)
			c.cluster = true
			c.nodes = append(c.nodes, &node{name: "cluster[" + strings.Join(o.Addrs, ",") + "]", rdb: own, cluster: own})
		default:
			c.err = invalid("relock takes a *redis.Client or a *redis.ClusterClient, not %T", u)
			return c
		}
	}
	for _, n := range c.nodes {
		if slices.Contains(c.names, n.name) {
			c.err = invalid("%s is named twice: Redlock needs independent masters", n.name)
		}
		c.names = append(c.names, n.name)
	}
	if c.nodeTimeout < time.Millisecond {
		c.err = invalid("node timeout %v is below 1 ms", c.nodeTimeout)
	}
	if c.retryDelay < 0 {
		// Refused here: the retries' jitter would panic on it, in Observe's own goroutine.
		c.err = invalid("retry delay %v is negative (0 retries at once)", c.retryDelay)
	}
	if c.acks.replicas < 0 || c.acks.replicas > 0 && c.acks.timeout < time.Millisecond {
		c.err = invalid("replica acknowledgements %d within %v: give 0 (off) or more replicas, within 1 ms or more", c.acks.replicas, c.acks.timeout)
	}
	return c
}

// coverAcks raises a read timeout of relock's own client to the node timeout plus the
// ReplicaAcks timeout, when it is shorter: go-redis reads a pipeline (a write and its WAIT)
// under the client's ReadTimeout, whatever the command, and would cut a WAIT the master is
// still allowed to take. The context's deadline bounds it as before.
func (c *Client) coverAcks(readTimeout *time.Duration) {
	if c.acks.replicas <= 0 || *readTimeout < 0 {
		return // off, or no read timeout at all
	}
	current := *readTimeout
	if current == 0 {
		current = 5 * time.Second // what go-redis v9.23 makes of 0
	}
	if need := c.nodeTimeout + c.acks.timeout; current < need {
		*readTimeout = need
	}
}

// Servers are the servers' addresses (a cluster: cluster[...]), in the order given.
func (c *Client) Servers() []string { return slices.Clone(c.names) }

// Quorum is how many servers must agree: N/2 + 1.
func (c *Client) Quorum() int { return quorum(len(c.nodes)) }

// NewOwner is a fresh owner, `<host>/<pid>/<32 hex>` (see OwnerPrefix).
func (c *Client) NewOwner() string { return makeOwner(c.prefix) }

// masters is how many independent masters a quorum is taken of (a cluster counts as one).
func (c *Client) masters() int {
	if c.cluster {
		return 1
	}
	return len(c.nodes)
}

// Close releases every hold of this client still held, waits a little for the give-backs
// running in the background, and closes relock's own connections (not the application's
// go-redis clients).
func (c *Client) Close() error {
	c.closeNow()
	c.mu.Lock()
	holds := make([]*Hold, 0, len(c.live))
	for h := range c.live {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	for _, h := range holds {
		_ = h.releaseAs(context.Background(), &Error{Kind: ErrLockLost, Key: h.key, Msg: fmt.Sprintf("lock %q: the client was closed (Client.Close), which released it", h.key)})
	}
	c.settle(time.Second)
	c.bgStop()
	c.settle(time.Minute)
	var first error
	for _, n := range c.nodes {
		if err := n.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// --- rounds ----------------------------------------------------------------------------

type roundOpts struct {
	targets  []bool
	untilAll bool
	// timeout of each command; 0: the node timeout.
	timeout     time.Duration
	blocking    bool
	blockKey    string
	partialHold time.Duration
	argsOf      func(i int) []any
	// accept turns a reply into the value agreed (nil: refused).
	accept func(reply any) (any, error)
	// acked: how the command waits for ReplicaAcks (ackNone: it does not); ackKey routes the
	// WAIT in a cluster; undo is sent to a master whose replicas did not acknowledge a grant.
	acked  ackMode
	ackKey string
	undo   []any
}

// ackMode is what a write that ReplicaAcks asks to be acknowledged is.
type ackMode int

const (
	ackNone ackMode = iota
	// ackGrant: a new grant (acquire, a campaign's grant, a nested section); not
	// acknowledged, it is undone on that master and the master counts as failed.
	ackGrant
	// ackRenew: a renewal; not acknowledged, it does not count, except on a master with
	// fewer replicas connected than asked, once every connected one acknowledged it.
	ackRenew
)

// grantAcks are the options of a round granting key to owner (undo: its release, FROM 1),
// when ReplicaAcks is on; o unchanged otherwise (nothing allocated).
func (c *Client) grantAcks(o roundOpts, key string, owner string) roundOpts {
	if c.acks.replicas > 0 {
		o.acked, o.ackKey, o.undo = ackGrant, key, []any{"LOCK.RELEASE", key, owner, "FROM", 1}
	}
	return o
}

// withAcks are o with mode, when ReplicaAcks is on.
func (c *Client) withAcks(o roundOpts, mode ackMode, key string) roundOpts {
	if c.acks.replicas > 0 {
		o.acked, o.ackKey = mode, key
	}
	return o
}

// argsFor is what server i is sent: argsOf's, else args.
func (o roundOpts) argsFor(i int, args []any) []any {
	if o.argsOf != nil {
		return o.argsOf(i)
	}
	return args
}

type reply struct {
	i int
	v any
	f *failure
}

func (c *Client) ask(ctx context.Context, i int, args []any, o roundOpts) reply {
	n := c.nodes[i]
	var v any
	var err, ackErr error
	var acked int64
	var at *redis.Options
	acking := o.acked != ackNone && c.acks.replicas > 0
	if o.blocking {
		var acks *replicaAcks
		bound := o.timeout
		if acking {
			acks = &c.acks
			if bound > 0 {
				bound += c.acks.timeout
			}
		}
		v, acked, ackErr, err, at = n.blockingAcked(ctx, o.blockKey, bound, acks, args)
	} else {
		t := o.timeout
		if t == 0 {
			t = c.nodeTimeout
		}
		if acking {
			v, acked, ackErr, err, at = n.callAcked(ctx, t+c.acks.timeout, o.ackKey, c.acks, args)
		} else {
			v, err = n.call(ctx, t, args...)
		}
	}
	if err == nil && o.accept != nil {
		v, err = o.accept(v)
	}
	if err == nil && acking && v != nil && (ackErr != nil || acked < c.acks.replicas) {
		if f := c.notAcked(ctx, n, o, at, acked, ackErr); f != nil {
			return reply{i: i, f: f}
		}
	}
	if err != nil {
		f := classify(err, n.cluster != nil)
		return reply{i: i, f: &f}
	}
	return reply{i: i, v: v}
}

// notAcked: what a write that fewer replicas than ReplicaAcks acknowledged (acked; ackErr:
// WAIT failed) means on n: nil when it counts all the same (a renewal on a master with fewer
// replicas connected, every one of which acknowledged it), else the master's failure, after
// a grant was undone there. at: the options of the master the write ran on.
func (c *Client) notAcked(ctx context.Context, n *node, o roundOpts, at *redis.Options, acked int64, ackErr error) *failure {
	ctx = context.WithoutCancel(ctx)
	if ackErr == nil && o.acked == ackRenew {
		connected, err := n.connectedReplicas(ctx, at, o.ackKey, c.nodeTimeout)
		if err == nil && connected < c.acks.replicas && acked >= connected {
			return nil
		}
	}
	undone := false
	if o.acked == ackGrant && o.undo != nil {
		_, uerr := n.call(ctx, c.nodeTimeout, o.undo...)
		undone = uerr == nil
	}
	where := ""
	if n.cluster != nil && at != nil {
		where = "master " + at.Addr + ": "
	}
	f := failure{otherLimit: -1, acks: true, undone: undone,
		msg: fmt.Sprintf("%sonly %d of %d required replica acknowledgements within %v", where, acked, c.acks.replicas, c.acks.timeout)}
	if ackErr != nil {
		f.msg = fmt.Sprintf("%sthe replica acknowledgements (WAIT %d) failed: %v", where, c.acks.replicas, ackErr)
	}
	if o.acked == ackGrant {
		f.msg += " (the grant was released there again)"
	}
	return &f
}

// round sends args (or each server's argsOf) to every server targets selects, until a quorum
// is won or lost (or every server answered, untilAll).
func (c *Client) round(ctx context.Context, args []any, o roundOpts) *round {
	rnd := newRound(c.names, time.Now(), o.untilAll)
	if len(c.nodes) == 1 && !o.blocking {
		if o.targets != nil && !o.targets[0] {
			rnd.onReply(0, nil, nil)
		} else {
			r := c.ask(ctx, 0, o.argsFor(0, args), o)
			rnd.onReply(0, r.v, r.f)
		}
		return rnd.finish(time.Now())
	}
	return c.roundEach(ctx, rnd, args, o)
}

// roundEach is round's asking of several servers (or a blocking command), in parallel: o is
// a copy of round's own, so that round's does not move to the heap with the goroutines.
func (c *Client) roundEach(ctx context.Context, rnd *round, args []any, o roundOpts) *round {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replies := make(chan reply, len(c.nodes))
	open := 0
	for i := range c.nodes {
		if o.targets != nil && !o.targets[i] {
			rnd.onReply(i, nil, nil)
			continue
		}
		open++
		go func(i int) { replies <- c.ask(rctx, i, o.argsFor(i, args), o) }(i)
	}
	var cut <-chan time.Time
	for open > 0 && rnd.progress() == pending {
		select {
		case r := <-replies:
			open--
			rnd.onReply(r.i, r.v, r.f)
			if o.partialHold > 0 && rnd.nAgreed > 0 && cut == nil {
				cut = time.After(o.partialHold)
			}
		case <-cut:
			open = 0
		}
	}
	if o.blocking {
		// Cut the waits still under way (their connections close): the servers drop them.
		cancel()
		for i := range c.nodes {
			if !rnd.answered[i] && rnd.progress() == pending {
				rnd.onReply(i, nil, &failure{msg: "no quorum within the partial-hold limit", timeout: true, otherLimit: -1})
			}
		}
	}
	return rnd.finish(time.Now())
}

// releaseLate gives a hold back in the background (a release harmless to repeat: FROM) on
// targets (nil: every server): again, a little longer apart each time, until each answered
// or ttl from now passed; then once more 100 ms later (a grant still under way when a round
// was decided lands before it).
func (c *Client) releaseLate(ttl time.Duration, argsOf func(i int) []any, targets []bool) {
	c.releaseLateThen(ttl, argsOf, targets, nil)
}

// releaseLateThen is releaseLate, calling done (if not nil) once: when the background job
// ends, its repeat included, however it ends; or, with several masters, as soon as its first
// try left a master unanswered (one that is down: a section's entry waiting on done must not
// wait the ttl out for it; a Redlock hold goes on without it, and a count that master gets
// wrong is outvoted). With one server the entry needs that server anyway: it waits.
func (c *Client) releaseLateThen(ttl time.Duration, argsOf func(i int) []any, targets []bool, done func()) {
	if targets == nil {
		targets = make([]bool, len(c.nodes))
		for i := range targets {
			targets[i] = true
		}
	}
	var once sync.Once
	settled := func() {
		if done != nil {
			once.Do(done)
		}
	}
	c.track(func() {
		defer settled()
		until := time.Now().Add(ttl + c.nodeTimeout)
		left := slices.Clone(targets)
		delay := 20 * time.Millisecond
		for first := true; slices.Contains(left, true); first = false {
			rnd := c.round(c.bgCtx, nil, roundOpts{targets: left, untilAll: true, argsOf: argsOf})
			un := rnd.unanswered()
			for i := range left {
				left[i] = left[i] && un[i]
			}
			if first && len(c.nodes) > 1 && slices.Contains(left, true) {
				settled()
			}
			if !slices.Contains(left, true) || time.Now().After(until) {
				break
			}
			if !sleep(c.bgCtx, min(delay, time.Until(until))) {
				return
			}
			delay = min(delay*2, time.Second)
		}
		if sleep(c.bgCtx, 100*time.Millisecond) {
			c.round(c.bgCtx, nil, roundOpts{targets: targets, untilAll: true, argsOf: argsOf})
		}
	})
}

// track runs job in the background, waited for by Close.
func (c *Client) track(job func()) {
	c.mu.Lock()
	c.bgN++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.bgN--
			if c.bgN == 0 && c.idle != nil {
				close(c.idle)
				c.idle = nil
			}
			c.mu.Unlock()
		}()
		job()
	}()
}

// settle waits up to d for the background give-backs to end.
func (c *Client) settle(d time.Duration) {
	c.mu.Lock()
	if c.bgN == 0 {
		c.mu.Unlock()
		return
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(d):
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func fixed(args ...any) func(int) []any { return func(int) []any { return args } }

// releaseFailed gives back what a failed acquisition round may have granted.
func (c *Client) releaseFailed(key, owner string, ttl time.Duration, rnd *round) {
	now, later := rnd.giveBack()
	rel := fixed("LOCK.RELEASE", key, owner, "FROM", 1)
	if slices.Contains(now, true) {
		back := c.round(context.Background(), nil, roundOpts{targets: now, untilAll: true, argsOf: rel})
		if left := back.unanswered(); slices.Contains(left, true) {
			c.releaseLate(ttl, rel, left)
		}
	}
	if slices.Contains(later, true) {
		c.releaseLate(ttl, rel, later)
	}
}

// --- acquiring -------------------------------------------------------------------------

// Option sets an option of Acquire, AcquireAll, Do, NewMutex and Campaign.
type Option func(*options)

type options struct {
	ttl     time.Duration
	wait    time.Duration
	shared  bool
	limit   int
	permits int
	// Whether Limit / Permits were given: Limit(0) and Permits(0) are errors, not "none".
	limitGiven, permitsGiven bool
}

func makeOptions(opts []Option) options {
	o := options{ttl: DefaultTTL}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// TTL is the lease of a hold (default 30 s); relock renews it every ttl/3 while held.
func TTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// Wait is how long to wait for the lock: 0 (the default) tries once, a positive duration
// waits up to it in the key's first-in, first-out queue, a negative one waits without a
// limit of its own. The context's deadline and cancellation bound every wait too.
func Wait(d time.Duration) Option { return func(o *options) { o.wait = d } }

// Shared asks for a shared hold: a read lock, or a semaphore's permit with Limit.
func Shared() Option { return func(o *options) { o.shared = true } }

// Limit makes the key a counting semaphore of n permits (implies Shared; one server or a
// cluster only).
func Limit(n int) Option {
	return func(o *options) { o.shared, o.limit, o.limitGiven = true, n, true }
}

// Permits takes p permits of a semaphore at once (with Limit).
func Permits(p int) Option { return func(o *options) { o.permits, o.permitsGiven = p, true } }

// deadline of a wait: the Wait option and ctx's deadline, whichever is first; limited false
// when neither bounds it.
// ctxBinds: the deadline waitDeadline gave is ctx's own (a wait that ends there ends by the
// context).
func ctxBinds(ctx context.Context, deadline time.Time) bool {
	cd, ok := ctx.Deadline()
	return ok && cd.Equal(deadline)
}

func waitDeadline(ctx context.Context, wait time.Duration, start time.Time) (time.Time, bool) {
	var d time.Time
	limited := false
	if wait >= 0 {
		d, limited = start.Add(wait), true
	}
	if cd, ok := ctx.Deadline(); ok && (!limited || cd.Before(d)) {
		d, limited = cd, true
	}
	return d, limited
}

// Acquire takes key: at once, or waiting (Wait) in the key's queue. It returns ErrNotAcquired
// (an *Error saying why) when the lock is not granted in time, or when ctx ends first. The
// Hold is renewed every ttl/3 until released or lost.
func (c *Client) Acquire(ctx context.Context, key string, opts ...Option) (*Hold, error) {
	return c.acquire(ctx, key, true, opts...)
}

func (c *Client) acquire(ctx context.Context, key string, autoRenew bool, opts ...Option) (*Hold, error) {
	if c.err != nil {
		return nil, c.err
	}
	o := makeOptions(opts)
	ttlMS, err := checkTTL(o.ttl)
	if err != nil {
		return nil, err
	}
	if o.limitGiven && o.limit == 0 {
		// Not "no limit": a semaphore of 0 permits was asked for (Shared() is the unlimited
		// shared lock).
		return nil, invalid("invalid limit 0 (must be 1 to %d)", MaxLimit)
	}
	if o.permitsGiven && o.permits == 0 {
		return nil, invalid("invalid permits 0 (must be 1 to the limit)")
	}
	if err := checkMode(o.limit, o.permits, c.masters()); err != nil {
		return nil, err
	}
	mode := modeArgs(o.shared, o.limit, o.permits)
	deadline, limited := waitDeadline(ctx, o.wait, time.Now())
	// The context merged with Close's is made when first needed (a wait, a pause, a Redlock
	// round): one server's try alone is a command bounded by the node timeout, and Close
	// gives back what it granted (below).
	uc := closable{c: c, base: ctx}
	defer uc.release()
	if len(c.nodes) > 1 {
		uc.ctx()
	}
	keyArg, ttlArg := any(key), any(ttlMS)
	for {
		if err := uc.cause(); err != nil {
			// ctx's own error, or errClosed
			return nil, &Error{Kind: ErrNotAcquired, Key: key, Retryable: true, Cause: err, Msg: fmt.Sprintf("lock %q: not acquired: %v", key, err)}
		}
		owner := c.NewOwner()
		remaining := time.Until(deadline)
		tryOnly := limited && remaining <= 0 || o.wait == 0
		args := append([]any{"LOCK.ACQUIRE", keyArg, owner, ttlArg}, mode...)
		var rnd *round
		if tryOnly || len(c.nodes) == 1 {
			rnd = c.round(uc.current(), args, c.grantAcks(roundOpts{}, key, owner))
		} else {
			rnd = newRound(c.names, time.Now(), false)
		}
		// The wait goes on under the same owner only when no grant of the first round can
		// still be there: every failure a refusal or an undo the server answered. An undo
		// whose reply was lost may run after a same-owner LOCK.WAIT grant and release it (two
		// holders): that owner is given back below and the retry asks as a new one.
		if !rnd.won() && !tryOnly && !rnd.permanentlyFailed() && rnd.onlyUndone() {
			rnd = c.waitRound(uc.ctx(), key, owner, ttlMS, remaining, limited, mode)
		}
		valid, ok := rnd.validFor(ttlMS)
		started := rnd.started
		if rnd.grantedLate(ttlMS) {
			// Granted after a long wait: the ttl counts from a grant we did not see.
			renewal := c.round(context.WithoutCancel(uc.current()), []any{"LOCK.RENEW", keyArg, args[2], ttlArg}, c.withAcks(roundOpts{}, ackRenew, key))
			valid, ok = renewal.validFor(ttlMS)
			started = renewal.started
			if !ok {
				rnd = renewal
			}
		}
		if ok {
			var one [1]int64 // on the stack: newHold copies the tokens
			tokens := one[:]
			if len(c.nodes) > 1 {
				tokens = make([]int64, len(c.nodes))
			}
			for i, t := range rnd.agreed {
				if t != nil {
					tokens[i] = toInt(t, 0)
				}
			}
			h := c.newHold(key, nil, owner, ttlMS, tokens, started.Add(valid), mode, o.shared, autoRenew, args)
			if c.closing.Err() != nil {
				// Granted while the client closed: given back, as Close gives back the rest.
				_ = h.Release(context.Background())
				return nil, &Error{Kind: ErrNotAcquired, Key: key, Cause: errClosed, Msg: fmt.Sprintf("lock %q: not acquired: %v", key, errClosed)}
			}
			return h, nil
		}
		c.releaseFailed(key, owner, time.Duration(ttlMS)*time.Millisecond, rnd)
		waited := time.Duration(0)
		if o.wait > 0 {
			waited = o.wait
		}
		ended := uc.cause() != nil
		passed := tryOnly || limited && !time.Now().Before(deadline) || ended
		if e := rnd.afterFailed(key, ttlMS, waited, passed, limited); e != nil {
			if ended && e.Kind == ErrNotAcquired {
				e.Cause = uc.cause()
				e.Msg = fmt.Sprintf("lock %q: not acquired: %v", key, e.Cause)
			} else if e.Kind == ErrNotAcquired && !tryOnly && ctxBinds(ctx, deadline) {
				// The wait's timeout was ctx's deadline, and the server's (whole
				// milliseconds) ended it a moment before the context's timer did.
				e.Cause = context.DeadlineExceeded
				e.Msg = fmt.Sprintf("lock %q: not acquired: %v", key, e.Cause)
			}
			return nil, e
		}
		delay := jitter(c.retryDelay)
		if limited {
			delay = min(delay, time.Until(deadline))
		}
		sleep(uc.ctx(), delay)
	}
}

// closable is a context merged with the client's closing (untilClosed), made on first use.
type closable struct {
	c      *Client
	base   context.Context
	merged context.Context
	done   func()
}

// ctx is the merged context, made now if it was not.
func (u *closable) ctx() context.Context {
	if u.merged == nil {
		u.merged, u.done = u.c.untilClosed(u.base)
	}
	return u.merged
}

// current is the merged context if it was made, else the one given.
func (u *closable) current() context.Context {
	if u.merged != nil {
		return u.merged
	}
	return u.base
}

// cause is why the merged context is (or would be) cancelled: the given one's cause, or
// errClosed; nil while neither ended.
func (u *closable) cause() error {
	if u.merged != nil {
		return ctxCause(u.merged)
	}
	if err := ctxCause(u.base); err != nil {
		return err
	}
	if u.c.closing.Err() != nil {
		return errClosed
	}
	return nil
}

func (u *closable) release() {
	if u.done != nil {
		u.done()
	}
}

func (c *Client) waitRound(ctx context.Context, key, owner string, ttlMS int64, remaining time.Duration, limited bool, mode []any) *round {
	args := append([]any{"LOCK.WAIT", key, owner, ttlMS, waitMS(remaining, limited)}, mode...)
	bound := time.Duration(0)
	if limited {
		bound = remaining + waitGrace + c.nodeTimeout
	}
	ro := c.grantAcks(roundOpts{timeout: bound, blocking: true, blockKey: key}, key, owner)
	if len(c.nodes) > 1 {
		ro.partialHold = min(c.maxPartialHold, time.Duration(ttlMS)*time.Millisecond/4)
	}
	rnd := c.round(ctx, args, ro)
	cut := make([]bool, len(c.nodes))
	anyCut := false
	for i := range cut {
		cut[i] = !rnd.answered[i]
		anyCut = anyCut || cut[i]
	}
	if rnd.won() && anyCut {
		// The waits a quorum made unneeded were cut: ask those masters once more with
		// LOCK.ACQUIRE (confirms a grant that landed, or takes a free key).
		extra := c.round(context.WithoutCancel(ctx), append([]any{"LOCK.ACQUIRE", key, owner, ttlMS}, mode...), c.grantAcks(roundOpts{targets: cut, untilAll: true}, key, owner))
		for i, t := range extra.agreed {
			if t != nil {
				rnd.addGrant(i, t)
			}
		}
	}
	return rnd
}

// Do runs fn while holding key: acquires it (as Acquire), renews it, cancels fn's context the
// moment the hold is known lost (context.Cause is then an *Error of kind ErrLockLost: with
// the reason when relock knew it at that moment; when a renewal was answered nil, at once,
// without waiting for the servers' journals, and its Loss is nil), and releases it however fn
// returns. It returns fn's error, or the acquisition's; when fn returned nil but the lock was
// lost while it ran, the loss (ErrLockLost): its work may have overlapped another holder's.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	h, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	defer func() {
		rerr := h.Release(context.WithoutCancel(ctx))
		if err == nil && errors.Is(rerr, ErrLockLost) {
			// fn returned nil, but the lock was lost while it ran (its context was cancelled
			// with the loss, and fn did not stop): what it did may have overlapped another
			// holder's work, which the caller must hear (attack round of 2026-12-05).
			err = rerr
		}
	}()
	fctx, done := h.derive(ctx)
	defer done()
	return fn(fctx)
}

// --- looking at locks ------------------------------------------------------------------

func (c *Client) queryEach(ctx context.Context, key string, args ...any) ([]any, error) {
	if c.err != nil {
		return nil, c.err
	}
	out := make([]any, len(c.nodes))
	for i, n := range c.nodes {
		var v any
		var err error
		if args[0] == "LOCK.FORCERELEASE" {
			// Sent once: run again after its reply was lost, it would remove a hold taken
			// since (go-redis's cluster client re-sends after a lost connection).
			tctx, cancel := context.WithTimeout(ctx, max(c.nodeTimeout, time.Second))
			v, err = n.callOnce(tctx, key, args...)
			cancel()
			if err != nil && !isRedisError(err) {
				e := lostReply(key, n.name, "LOCK.FORCERELEASE", err)
				if i > 0 {
					e.Msg += fmt.Sprintf(" (it ran on the %d servers before)", i)
				}
				return nil, e
			}
		} else {
			v, err = n.call(ctx, max(c.nodeTimeout, time.Second), args...)
		}
		if err != nil {
			f := classify(err, n.cluster != nil)
			kind := ErrServer
			return nil, &Error{Kind: kind, Key: key, Servers: []string{n.name}, Retryable: !f.permanent, Cause: err,
				Msg: fmt.Sprintf("lock %q on %s: %s", key, n.name, f.msg)}
		}
		out[i] = v
	}
	return out, nil
}

// Info is LOCK.INFO: the lock at key, or nil (with Redlock, the first server's that has one).
func (c *Client) Info(ctx context.Context, key string) (*Info, error) {
	rs, err := c.queryEach(ctx, key, "LOCK.INFO", key)
	if err != nil {
		return nil, err
	}
	for i, r := range rs {
		if info := parseInfo(c.names[i], r); info != nil {
			return info, nil
		}
	}
	return nil, nil
}

// Holders is LOCK.HOLDERS on every server: the holds of key in grant order (at most count
// per server; 0: all).
func (c *Client) Holders(ctx context.Context, key string, count int) ([]Holder, error) {
	rs, err := c.queryEach(ctx, key, "LOCK.HOLDERS", key, "COUNT", count)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for i, r := range rs {
		out = append(out, parseHolders(c.names[i], r)...)
	}
	return out, nil
}

// Waiters is LOCK.WAITERS on every server: key's queue in order (at most count per server;
// 0: all).
func (c *Client) Waiters(ctx context.Context, key string, count int) ([]Waiter, error) {
	rs, err := c.queryEach(ctx, key, "LOCK.WAITERS", key, "COUNT", count)
	if err != nil {
		return nil, err
	}
	var out []Waiter
	for i, r := range rs {
		out = append(out, parseWaiters(c.names[i], r)...)
	}
	return out, nil
}

// History is LOCK.HISTORY on every server: the holds of key that ended other than by their
// owner, newest first.
func (c *Client) History(ctx context.Context, key string, count int) ([]LogEntry, error) {
	rs, err := c.queryEach(ctx, key, "LOCK.HISTORY", key, count)
	if err != nil {
		return nil, err
	}
	var out []LogEntry
	for i, r := range rs {
		out = append(out, parseLog(c.names[i], r)...)
	}
	return out, nil
}

// ForceRelease is LOCK.FORCERELEASE key on every server: how many holds were removed.
func (c *Client) ForceRelease(ctx context.Context, key string) (int64, error) {
	rs, err := c.queryEach(ctx, key, "LOCK.FORCERELEASE", key)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, r := range rs {
		n += toInt(r, 0)
	}
	return n, nil
}

// explainLoss asks the servers' journals why owner's hold of keys ended.
func (c *Client) explainLoss(keys []string, owner string, since int64) LossReason {
	for _, key := range keys {
		for i, n := range c.nodes {
			v, err := n.call(context.Background(), max(c.nodeTimeout, 500*time.Millisecond), "LOCK.HISTORY", key, 100)
			if err != nil {
				continue
			}
			if r := lossReason(parseLog(c.names[i], v), owner, since); r.Cause != "" {
				return r
			}
		}
	}
	return LossReason{Message: unknownLoss}
}

// eachNode runs args on every server (administrative commands without a key).
func (c *Client) eachNode(ctx context.Context, args ...any) ([]any, error) {
	if c.err != nil {
		return nil, c.err
	}
	out := make([]any, len(c.nodes))
	for i, n := range c.nodes {
		var v any
		var err error
		if n.cluster != nil {
			// Every master of a cluster: the journal and the statistics are per node.
			var all []any
			err = n.cluster.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				r, err := m.Do(ctx, args...).Result()
				if err == nil {
					if list, ok := r.([]any); ok {
						all = append(all, list...)
					}
				}
				return err
			})
			v = all
		} else {
			v, err = n.call(ctx, max(c.nodeTimeout, time.Second), args...)
		}
		if err != nil {
			f := classify(err, n.cluster != nil)
			return nil, &Error{Kind: ErrServer, Servers: []string{n.name}, Retryable: !f.permanent, Cause: err,
				Msg: fmt.Sprintf("%s: %s", n.name, f.msg)}
		}
		out[i] = v
	}
	return out, nil
}

// Log is LOCK.LOG on every server (every master of a cluster): the holds that ended other than
// by their owner, newest first per server, at most count per server. An admin command.
func (c *Client) Log(ctx context.Context, count int) ([]LogEntry, error) {
	rs, err := c.eachNode(ctx, "LOCK.LOG", count)
	if err != nil {
		return nil, err
	}
	var out []LogEntry
	for i, r := range rs {
		out = append(out, parseLog(c.names[i], r)...)
	}
	return out, nil
}

// Stats is LOCK.STATS COUNT count on every server (every master of a cluster): the hottest
// keys by total wait time. An admin command.
func (c *Client) Stats(ctx context.Context, count int) ([]KeyStats, error) {
	rs, err := c.eachNode(ctx, "LOCK.STATS", "COUNT", count)
	if err != nil {
		return nil, err
	}
	var out []KeyStats
	for i, r := range rs {
		out = append(out, parseStats(c.names[i], r)...)
	}
	return out, nil
}
