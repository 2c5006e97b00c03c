package relock

// What needs no I/O: limits, owners, the Redlock round (who agreed, whether a quorum is won or
// lost, the validity left), the classification of failures into transient and permanent, and
// the decoding of replies under RESP2 and RESP3. It follows relock-client (client/src/round.rs,
// validity.rs) and the Node and Python packages (clients/node/src/core.ts) rule for rule; the
// shared cases in spec/client-cases/ check it (cases_test.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultTTL is the lease when no TTL option is given (relock-client's and lockctl's).
	DefaultTTL = 30 * time.Second
	// DefaultNodeTimeout is how long one server may take to answer one command.
	DefaultNodeTimeout = 100 * time.Millisecond
	// DefaultRetryDelay is the mean pause between two Redlock rounds of a wait.
	DefaultRetryDelay = 200 * time.Millisecond
	// DefaultMaxPartialHold is how long a Redlock wait keeps a minority of grants.
	DefaultMaxPartialHold = 500 * time.Millisecond
	// MinTTL is the smallest usable ttl: the drift allowance (1 % + 2 ms) leaves less than
	// half of a shorter one valid.
	MinTTL = 5 * time.Millisecond
	// MaxMS is the largest ttl_ms and timeout_ms the LOCK.* commands accept.
	MaxMS = 1_000_000_000_000
	// MaxLimit is the largest LIMIT the module accepts.
	MaxLimit = 1_000_000
	// MaxKeys is the most keys one group takes (LOCK.MACQUIRE).
	MaxKeys  = 256
	maxOwner = 256
	// waitGrace is added to a LOCK.WAIT's own timeout for the connection's deadline: the
	// server answers nil at its timeout, the client must not cut the wait before.
	waitGrace = 1000 * time.Millisecond
)

// driftUS is the clock drift allowed for a lock of ttlMS ms: 1 % plus 2 ms, in µs.
func driftUS(ttlMS int64) int64 { return ttlMS*1000/100 + 2000 }

// validityUS is ttl - elapsed - drift in whole microseconds, and false when nothing is left:
// integer arithmetic, so that a round that used exactly the ttl less the drift leaves nothing.
func validityUS(ttlMS, elapsedUS int64) (int64, bool) {
	if elapsedUS < 0 {
		elapsedUS = 0
	}
	left := ttlMS*1000 - elapsedUS - driftUS(ttlMS)
	return left, left > 0
}

// lossLead is how long before its validity ends a hold is reported lost: ttl/20, at most 20 ms.
func lossLead(ttl time.Duration) time.Duration {
	return min(ttl/20, 20*time.Millisecond)
}

// ctxErr is ctx's error, or context.DeadlineExceeded once its deadline has passed while its
// timer has not fired yet: a socket deadline set from it fires first as often as not, and the
// failure is then the context's, not the server's (attack round of 2026-12-05: a wait cut by
// its context's deadline said "no quorum" or "held by another owner" in a third of the runs).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// ctxCause is context.Cause(ctx), with ctxErr's reading of a deadline that has passed.
func ctxCause(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return ctxErr(ctx)
}

// jitter is a delay between d/2 and 3d/2 (0 for d <= 0, which newClient refuses anyway).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(mrand.Int64N(int64(d)+1))
}

func checkTTL(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ttl > 0 && ms < MinTTL.Milliseconds() {
		return 0, invalid("invalid ttl %v: the smallest usable ttl is 5 ms, since the drift allowance of 1 %% + 2 ms leaves less than half of a shorter one valid", ttl)
	}
	if ms < MinTTL.Milliseconds() || ms > MaxMS {
		return 0, invalid("invalid ttl %v (must be 5 ms to 10^12 ms)", ttl)
	}
	return ms, nil
}

// waitMS is what is left of a wait as LOCK.WAIT's timeout_ms: 0 (no limit) for a negative
// remaining, else 1 .. 10^12.
func waitMS(remaining time.Duration, limited bool) int64 {
	if !limited {
		return 0
	}
	return max(1, min(MaxMS, remaining.Milliseconds()))
}

func modeArgs(shared bool, limit, permits int) []any {
	if limit > 0 {
		if permits > 0 {
			return []any{"SHARED", "LIMIT", limit, "PERMITS", permits}
		}
		return []any{"SHARED", "LIMIT", limit}
	}
	if shared {
		return []any{"SHARED"}
	}
	return nil
}

func checkMode(limit, permits, masters int) error {
	if permits != 0 {
		if limit == 0 {
			return invalid("permits %d needs a limit: several permits are taken of a semaphore", permits)
		}
		if permits < 1 || permits > limit {
			return invalid("invalid permits %d (must be 1 to the limit, %d)", permits, limit)
		}
	}
	if limit == 0 {
		return nil
	}
	if limit < 1 || limit > MaxLimit {
		return invalid("invalid limit %d (must be 1 to %d)", limit, MaxLimit)
	}
	if masters > 1 {
		return invalid("a limit (%d) needs one server or a Redis Cluster, not %d independent masters: "+
			"a quorum cannot count permits (with limit 2 on masters A, B and C, three clients can hold "+
			"{A,B}, {B,C} and {A,C}); a shared lock without a limit is sound over a quorum", limit, masters)
	}
	return nil
}

// makeOwner is a fresh owner `<prefix>/<random>`; the prefix is `<host>/<pid>` unless given
// ("": the random part alone). The prefix is cut to fit 256 bytes, never the random part.
func makeOwner(prefix *string) string {
	var text string
	if prefix == nil {
		text = hostPID()
	} else {
		text = *prefix
	}
	return withRandom(text)
}

// withRandom is `<text>/<32 random hex digits>` (text cut to fit 256 bytes; "": the random
// part alone), made in one allocation.
func withRandom(text string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var r [2 * len(b)]byte
	hex.Encode(r[:], b[:])
	if text == "" {
		return string(r[:])
	}
	text = cutUTF8(text, maxOwner-len(r)-1)
	var sb strings.Builder
	sb.Grow(len(text) + 1 + len(r))
	sb.WriteString(text)
	sb.WriteByte('/')
	sb.Write(r[:])
	return sb.String()
}

// hostPID is `<host>/<pid>`, read once per process (os.Hostname opens and reads a file: a
// system call per owner otherwise).
var hostPID = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
})

func cutUTF8(s string, room int) string {
	if len(s) <= room {
		return s
	}
	// Cut before the rune the limit falls in (at most 3 bytes back); bytes that are not UTF-8
	// are cut where the limit is (before, a value with one invalid byte was cut to "").
	for back := 0; back < utf8.UTFMax-1 && room > 0 && !utf8.RuneStart(s[room]); back++ {
		room--
	}
	return s[:room]
}

// --- failures --------------------------------------------------------------------------

// failure is why one server did not do what was asked.
type failure struct {
	msg          string
	refused      bool
	permanent    bool
	timeout      bool
	grace        bool
	badTTL       bool
	otherMode    bool
	otherPermits bool
	otherLimit   int // -1: none
	// acks: fewer replicas than ReplicaAcks acknowledged the write there; undone: it was a
	// grant, and its undo (the release, FROM 1) was answered: that master no longer has it.
	acks   bool
	undone bool
}

func refusal() failure {
	return failure{msg: "not granted (held by another owner or not held by us)", refused: true, otherLimit: -1}
}

var transientCodes = map[string]bool{
	"BUSY": true, "MISCONF": true, "NOREPLICAS": true, "UNBLOCKED": true, "NOTREADY": true,
	"CLUSTERDOWN": true, "MASTERDOWN": true, "LOADING": true, "READONLY": true, "OOM": true,
	"TRYAGAIN": true, "MOVED": true, "ASK": true,
}

var otherLimitRe = regexp.MustCompile(`^lock has another limit \((\d+)\)$`)

// errBadReply marks a reply relock cannot read: permanent, never retried.
var errBadReply = errors.New("a reply relock cannot read")

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// classify is the one place that decides whether a failure is permanent: refused logins,
// permissions, WRONGTYPE, unknown commands and refused arguments are; timeouts, lost
// connections and a busy, loading or failing-over server are not. MOVED and ASK pass through
// a ClusterClient (cluster), which follows them; a plain client of a cluster node gets them
// for ever: permanent.
func classify(err error, cluster bool) failure {
	f := failure{otherLimit: -1}
	if errors.Is(err, errBadReply) {
		f.msg, f.permanent = err.Error(), true
		return f
	}
	if errors.Is(err, redis.ErrClosed) {
		f.msg, f.permanent = "the redis client was closed", true
		return f
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		f.msg = err.Error()
		f.timeout = isTimeout(err)
		return f
	}
	msg := strings.TrimPrefix(rerr.Error(), "ERR ")
	if strings.HasPrefix(msg, "TRYAGAIN") && strings.Contains(msg, "restart grace") {
		f.msg, f.grace = "in its restart grace, granting nothing new yet ("+strings.TrimPrefix(msg, "TRYAGAIN ")+")", true
		return f
	}
	switch {
	case strings.HasPrefix(msg, "lock is held with other permits"):
		f.msg, f.permanent, f.otherPermits = "the owner holds the lock there with another number of permits", true, true
		return f
	case strings.HasPrefix(msg, "lock is held in another mode"):
		f.msg, f.permanent, f.otherMode = "the owner holds the lock in the other mode there", true, true
		return f
	case strings.HasPrefix(msg, "ttl_ms exceeds"):
		f.msg, f.permanent, f.badTTL = msg, true, true
		return f
	}
	if m := otherLimitRe.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		f.msg, f.permanent, f.otherLimit = fmt.Sprintf("the lock has another limit there (%d; 0 means none)", n), true, n
		return f
	}
	code, _, _ := strings.Cut(msg, " ")
	f.msg = msg
	if !cluster && (code == "MOVED" || code == "ASK") {
		f.msg += " (a Redis Cluster node: give relock a *redis.ClusterClient, not a client of one node)"
		f.permanent = true
		return f
	}
	if transientCodes[code] || strings.HasPrefix(msg, "max number of clients reached") {
		return f
	}
	if code == "NOPERM" {
		f.msg += " (the user's ACL does not allow it)"
	}
	if strings.HasPrefix(msg, "unknown command") && strings.Contains(strings.ToUpper(msg), "LOCK.") {
		f.msg += " (is the relock module loaded on this server?)"
	}
	if code == "NOAUTH" || code == "WRONGPASS" {
		f.msg += " (check the user and password)"
	}
	f.permanent = true
	return f
}

// --- the round -------------------------------------------------------------------------

func quorum(n int) int { return n/2 + 1 }

type progress int

const (
	pending progress = iota
	won
	lost
)

func (p progress) String() string { return [...]string{"pending", "won", "lost"}[p] }

type indexedFailure struct {
	i int
	f failure
}

// round is one Redlock round: the replies, fed in as they come, decide whether a quorum is
// won or lost.
type round struct {
	names    []string
	started  time.Time
	untilAll bool
	// agreed is, per server, the value it agreed with (nil: none yet, or it did not);
	// nAgreed counts them. answered is, per server, whether it answered; nAnswered counts.
	agreed    []any
	nAgreed   int
	answered  []bool
	nAnswered int
	failures  []indexedFailure
	elapsed   time.Duration
	// Room for one server's agreed and answered in the round itself (one server or a
	// cluster, the common case): a round is then one allocation, not three.
	agreed1   [1]any
	answered1 [1]bool
}

func newRound(names []string, started time.Time, untilAll bool) *round {
	r := &round{names: names, started: started, untilAll: untilAll}
	if len(names) == 1 {
		r.agreed, r.answered = r.agreed1[:], r.answered1[:]
	} else {
		r.agreed, r.answered = make([]any, len(names)), make([]bool, len(names))
	}
	return r
}

func (r *round) n() int { return len(r.names) }

func (r *round) progress() progress {
	if r.untilAll && r.nAnswered < r.n() {
		return pending
	}
	if r.nAgreed >= quorum(r.n()) {
		return won
	}
	if len(r.failures)+quorum(r.n()) > r.n() {
		return lost
	}
	return pending
}

// onReply is server i's answer: a value when it agreed, nil for a refusal, or a failure.
func (r *round) onReply(i int, value any, f *failure) progress {
	p := r.progress()
	if p != pending || i < 0 || i >= r.n() || r.answered[i] {
		return p
	}
	r.answered[i] = true
	r.nAnswered++
	switch {
	case f != nil:
		r.failures = append(r.failures, indexedFailure{i, *f})
	case value == nil:
		r.failures = append(r.failures, indexedFailure{i, refusal()})
	default:
		r.agreed[i] = value
		r.nAgreed++
	}
	return r.progress()
}

// addGrant keeps a grant made after the round was decided (a won wait topped up).
func (r *round) addGrant(i int, v any) {
	if i < 0 || i >= r.n() || v == nil {
		return
	}
	if !r.answered[i] {
		r.answered[i] = true
		r.nAnswered++
	}
	if r.agreed[i] == nil {
		r.nAgreed++
	}
	r.agreed[i] = v
}

func (r *round) finish(at time.Time) *round {
	r.elapsed = max(0, at.Sub(r.started))
	return r
}

func (r *round) won() bool { return r.nAgreed >= quorum(r.n()) }

func (r *round) count(keep func(failure) bool) int {
	n := 0
	for _, x := range r.failures {
		if keep(x.f) {
			n++
		}
	}
	return n
}

func (r *round) inGrace() int     { return r.count(func(f failure) bool { return f.grace }) }
func (r *round) refused() int     { return r.count(func(f failure) bool { return f.refused }) }
func (r *round) permanent() int   { return r.count(func(f failure) bool { return f.permanent }) }
func (r *round) someFailed() bool { return r.refused() < len(r.failures) }
func (r *round) badTTL() bool     { return r.count(func(f failure) bool { return f.badTTL }) > 0 }
func (r *round) permanentlyFailed() bool {
	return r.permanent()+quorum(r.n()) > r.n()
}

// onlyUndone: every failure is a refusal or a grant not acknowledged whose undo was answered:
// no server may hold anything of the round.
func (r *round) onlyUndone() bool {
	return r.count(func(f failure) bool { return f.refused || f.undone }) == len(r.failures)
}

// someUnanswered: a server failed in a way that says nothing of what it did (unanswered has
// one true).
func (r *round) someUnanswered() bool {
	for _, x := range r.failures {
		if !x.f.refused && !x.f.permanent {
			return true
		}
	}
	return false
}

// unanswered is, per server, whether it failed in a way that says nothing of what it did.
func (r *round) unanswered() []bool {
	out := make([]bool, r.n())
	for _, x := range r.failures {
		out[x.i] = !x.f.refused && !x.f.permanent
	}
	return out
}

func (r *round) agreedBy() []bool {
	out := make([]bool, r.n())
	for i := range out {
		out[i] = r.agreed[i] != nil
	}
	return out
}

func (r *round) mayHold() []bool {
	out := make([]bool, r.n())
	for i := range out {
		out[i] = true
	}
	for _, x := range r.failures {
		if x.f.permanent {
			out[x.i] = false
		}
	}
	return out
}

// validFor is the validity the round leaves of ttlMS, false when none (or not won).
func (r *round) validFor(ttlMS int64) (time.Duration, bool) {
	if !r.won() {
		return 0, false
	}
	us, ok := validityUS(ttlMS, r.elapsed.Microseconds())
	return time.Duration(us) * time.Microsecond, ok
}

// grantedLate: a quorum granted, but what the round leaves is under two thirds of the ttl
// (a long wait): the ttl ran from grants the client did not see, so it is measured again.
func (r *round) grantedLate(ttlMS int64) bool {
	v, ok := r.validFor(ttlMS)
	return r.won() && (!ok || v.Milliseconds()*3 < ttlMS*2)
}

// giveBack: where a failed acquisition is released now (those that granted) and later, in
// the background (every server that neither granted, refused, failed permanently, nor had a
// grant not acknowledged undone: a master that answered the undo has nothing left, and a
// delayed repeat of it could only hit a later grant to the same owner).
func (r *round) giveBack() (now, later []bool) {
	now = r.agreedBy()
	refused := map[int]bool{}
	for _, x := range r.failures {
		if x.f.refused || x.f.undone {
			refused[x.i] = true
		}
	}
	later = r.mayHold()
	for i := range later {
		later[i] = later[i] && !now[i] && !refused[i]
	}
	return now, later
}

func (r *round) describe(keep func(failure) bool) string {
	var parts []string
	for _, x := range r.failures {
		if keep == nil || keep(x.f) {
			parts = append(parts, r.names[x.i]+": "+x.f.msg)
		}
	}
	if len(parts) == 0 {
		return "no server failed"
	}
	return strings.Join(parts, "; ")
}

func (r *round) servers(keep func(failure) bool) []string {
	var out []string
	for _, x := range r.failures {
		if keep == nil || keep(x.f) {
			out = append(out, r.names[x.i])
		}
	}
	return out
}

func (r *round) permanentError(key string) *Error {
	for _, x := range r.failures {
		s := r.names[x.i]
		switch {
		case x.f.otherLimit >= 0:
			return &Error{Kind: ErrOtherLimit, Key: key, Servers: []string{s}, Limit: x.f.otherLimit,
				Msg: fmt.Sprintf("lock %q on %s: it has another limit there (%d; 0 means none)", key, s, x.f.otherLimit)}
		case x.f.otherPermits:
			return &Error{Kind: ErrOtherPermits, Key: key, Servers: []string{s},
				Msg: fmt.Sprintf("lock %q on %s: the owner holds it with another number of permits", key, s)}
		case x.f.otherMode:
			return &Error{Kind: ErrOtherMode, Key: key, Servers: []string{s},
				Msg: fmt.Sprintf("lock %q on %s: the owner holds it in the other mode (an exclusive holder uses Downgrade)", key, s)}
		}
	}
	perm := func(f failure) bool { return f.permanent }
	return &Error{Kind: ErrServer, Key: key, Servers: r.servers(perm),
		Msg: fmt.Sprintf("lock %q: %s (retrying cannot help)", key, r.describe(perm))}
}

func (r *round) acquireError(key string, ttlMS int64, waited time.Duration) *Error {
	if r.won() {
		return &Error{Kind: ErrNotAcquired, Key: key, Retryable: true,
			Msg: fmt.Sprintf("lock %q: quorum reached after %v, leaving no validity of the %d ms ttl", key, r.elapsed, ttlMS)}
	}
	if r.permanentlyFailed() {
		return r.permanentError(key)
	}
	if g := r.inGrace(); g > 0 && r.nAgreed == 0 && g+r.refused() == len(r.failures) {
		return &Error{Kind: ErrNotAcquired, Key: key, Retryable: true, Servers: r.servers(func(f failure) bool { return f.grace }),
			Msg: fmt.Sprintf("lock %q: not granted, %s (retry: the grace ends by itself)", key, r.describe(func(f failure) bool { return f.grace }))}
	}
	if r.n() == 1 && !r.someFailed() {
		within := ""
		if waited > 0 {
			within = fmt.Sprintf(" within %v", waited)
		}
		return &Error{Kind: ErrNotAcquired, Key: key, Retryable: true, Msg: fmt.Sprintf("lock %q is held by another owner%s", key, within)}
	}
	if waited > 0 && !r.someFailed() {
		return &Error{Kind: ErrNotAcquired, Key: key, Retryable: true, Msg: fmt.Sprintf("lock %q: not acquired within %v", key, waited)}
	}
	return &Error{Kind: ErrNotAcquired, Key: key, Retryable: true, Servers: r.servers(func(f failure) bool { return !f.refused }),
		Msg: fmt.Sprintf("lock %q: no quorum, %d of %d servers granted, %d needed (%s)", key, r.nAgreed, r.n(), quorum(r.n()), r.describe(nil))}
}

// afterFailed: what an acquisition round without validity means once its grants are given
// back: the error to return, or nil to try again after a pause.
func (r *round) afterFailed(key string, ttlMS int64, waited time.Duration, deadlinePassed, bounded bool) *Error {
	if r.permanentlyFailed() {
		return r.permanentError(key)
	}
	e := r.acquireError(key, ttlMS, waited)
	if deadlinePassed {
		return e
	}
	if r.n() == 1 && bounded && !r.someFailed() {
		return e
	}
	return nil
}

// releaseError: a release that no quorum made because permanent failures alone leave none.
func (r *round) releaseError(key string) *Error {
	if r.won() || !r.permanentlyFailed() {
		return nil
	}
	perm := func(f failure) bool { return f.permanent }
	return &Error{Kind: ErrServer, Key: key, Servers: r.servers(perm),
		Msg: fmt.Sprintf("lock %q: release refused (%s); the lock stays held there until its ttl runs out (retrying cannot help)", key, r.describe(perm))}
}

// renewLost: after a renewal without validity, whether no quorum can renew any more.
func (r *round) renewLost() bool {
	return !r.won() && (r.refused() > 0 || r.permanent() > 0) && r.refused()+r.permanent()+quorum(r.n()) > r.n()
}

// --- replies ---------------------------------------------------------------------------

// asMap reads a map reply: a RESP3 map (map[any]any, map[string]any) or a RESP2 flat array.
func asMap(reply any) map[string]any {
	out := map[string]any{}
	switch v := reply.(type) {
	case map[any]any:
		for k, x := range v {
			out[text(k)] = x
		}
	case map[string]any:
		for k, x := range v {
			out[k] = x
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			out[text(v[i])] = v[i+1]
		}
	}
	return out
}

func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	default:
		return fmt.Sprint(x)
	}
}

func optText(v any) *string {
	if v == nil {
		return nil
	}
	s := text(v)
	return &s
}

func toInt(v any, dflt int64) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	case float64:
		if math.IsNaN(x) {
			return dflt
		}
		return int64(x)
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	}
	return dflt
}

func optInt(v any) *int64 {
	if v == nil {
		return nil
	}
	n := toInt(v, 0)
	return &n
}

// Info is LOCK.INFO on one server. For a shared key Owner, Token and Count are nil.
type Info struct {
	Server string
	Owner  *string
	Token  *int64
	Count  *int64
	// TTL left (of the latest lease for a shared key); -1 ms: no expiry.
	TTL     time.Duration
	Waiters int64
	Mode    string
	Holders int64
	// Limit is 1 for exclusive, n for a semaphore, 0 for a read lock.
	Limit       int64
	PermitsFree int64
}

// Holder is one holder of a key on one server (LOCK.HOLDERS).
type Holder struct {
	Server  string
	Owner   string
	Token   int64
	Count   int64
	TTL     time.Duration
	Permits int64
}

// Waiter is one client queued for a key on one server (LOCK.WAITERS), in queue order.
type Waiter struct {
	Server  string
	Owner   string
	Mode    string
	Limit   int64
	Permits int64
	// Client is the waiting connection's id (CLIENT LIST).
	Client int64
	Waited time.Duration
	// Timeout left, nil for none.
	Timeout *time.Duration
	TTL     time.Duration
}

// Who ended a hold, as LOCK.HISTORY's client-info shows it.
type Who struct {
	Client  *int64
	Name    *string
	User    *string
	Addr    *string
	Command *string
}

func (w Who) String() string {
	var parts []string
	for _, kv := range []struct {
		k string
		v *string
	}{{"name", w.Name}, {"user", w.User}, {"addr", w.Addr}} {
		if kv.v != nil {
			parts = append(parts, kv.k+" "+*kv.v)
		}
	}
	who := "a client"
	if w.Client != nil {
		who = fmt.Sprintf("client %d", *w.Client)
	}
	if len(parts) > 0 {
		return who + " (" + strings.Join(parts, ", ") + ")"
	}
	return who
}

// LogEntry is one entry of the server's journal of holds that ended other than by their
// owner (LOCK.HISTORY, LOCK.LOG). A flush or a swap has an empty Key and Owner.
type LogEntry struct {
	Server string
	ID     int64
	// Time it ended, Unix ms (the server's clock).
	Time   int64
	DB     int64
	Key    string
	Owner  string
	Token  int64
	Reason string
	// Held is ms from grant to end; nil for holds granted before the server started.
	Held    *int64
	Who     *Who
	Waiters int64
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func parseInfo(server string, reply any) *Info {
	if reply == nil {
		return nil
	}
	m := asMap(reply)
	mode := "exclusive"
	if v, ok := m["mode"]; ok && v != nil {
		mode = text(v)
	}
	return &Info{Server: server, Owner: optText(m["owner"]), Token: optInt(m["token"]), Count: optInt(m["count"]),
		TTL: ms(toInt(m["ttl"], 0)), Waiters: toInt(m["waiters"], 0), Mode: mode,
		Holders: toInt(m["holders"], 1), Limit: toInt(m["limit"], 1), PermitsFree: toInt(m["permits_free"], 0)}
}

func parseHolders(server string, reply any) []Holder {
	list, _ := reply.([]any)
	out := []Holder{}
	for _, e := range list {
		m := asMap(e)
		out = append(out, Holder{Server: server, Owner: text(m["owner"]), Token: toInt(m["token"], 0),
			Count: toInt(m["count"], 1), TTL: ms(toInt(m["ttl"], 0)), Permits: toInt(m["permits"], 1)})
	}
	return out
}

func parseWaiters(server string, reply any) []Waiter {
	list, _ := reply.([]any)
	out := []Waiter{}
	for _, e := range list {
		m := asMap(e)
		w := Waiter{Server: server, Owner: text(m["owner"]), Mode: "exclusive", Limit: toInt(m["limit"], 1),
			Permits: toInt(m["permits"], 1), Client: toInt(m["client"], 0), Waited: ms(toInt(m["waited"], 0)),
			TTL: ms(toInt(m["ttl"], 0))}
		if v := m["mode"]; v != nil {
			w.Mode = text(v)
		}
		if t := toInt(m["timeout"], -1); t >= 0 {
			d := ms(t)
			w.Timeout = &d
		}
		out = append(out, w)
	}
	return out
}

func parseWho(v any) *Who {
	raw := text(v)
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	f := map[string]string{}
	for _, part := range strings.Split(raw, " ") {
		if k, x, ok := strings.Cut(part, "="); ok && k != "" {
			f[k] = x
		}
	}
	opt := func(k string) *string {
		if s := f[k]; s != "" {
			return &s
		}
		return nil
	}
	w := &Who{Name: opt("name"), User: opt("user"), Addr: opt("addr"), Command: opt("cmd")}
	if id, err := strconv.ParseInt(f["id"], 10, 64); err == nil {
		w.Client = &id
	}
	return w
}

func parseLog(server string, reply any) []LogEntry {
	list, _ := reply.([]any)
	out := []LogEntry{}
	for _, e := range list {
		m := asMap(e)
		le := LogEntry{Server: server, ID: toInt(m["id"], 0), Time: toInt(m["time"], 0), DB: toInt(m["db"], 0),
			Key: text(m["key"]), Owner: text(m["owner"]), Token: toInt(m["token"], 0), Reason: text(m["reason"]),
			Who: parseWho(m["client-info"]), Waiters: toInt(m["waiters"], 0)}
		if h := m["held"]; h != nil && text(h) != "" {
			n := toInt(h, 0)
			le.Held = &n
		}
		out = append(out, le)
	}
	return out
}

// LossReason is why a hold was lost, from the server's journal (LOCK.HISTORY): Cause is its
// word (expired, forcereleased, deleted, flushed, ...), empty when the journal had nothing
// on it (a failover, a restart, a journal that is off).
type LossReason struct {
	Cause   string
	Who     *Who
	Message string
	Entry   *LogEntry
}

const unknownLoss = "the server's journal (LOCK.HISTORY) has nothing on it, so it cannot say why " +
	"(a failover or restart empties it; relock.log-max-len 0 turns it off)"

var lossWords = map[string]string{
	"expired":       "expired on the server",
	"forcereleased": "force-released (LOCK.FORCERELEASE)",
	"deleted":       "deleted (DEL, UNLINK, GETDEL, or the key overwritten by another value)",
	"evicted":       "evicted by the server (maxmemory)",
	"revoked":       "revoked (its waiter hung up before the grant reached it)",
	"restored":      "replaced by RESTORE or COPY ... REPLACE",
	"moved":         "moved away (RENAME, MOVE or MIGRATE)",
	"flushed":       "flushed with its database (FLUSHDB or FLUSHALL)",
	"swapped":       "swapped out with its database (SWAPDB)",
}

func describeLoss(e LogEntry) string {
	what, ok := lossWords[e.Reason]
	if !ok {
		what = e.Reason
	}
	if e.Reason == "expired" && e.Held != nil {
		what += fmt.Sprintf(": not renewed in time, after %.3f s held", float64(*e.Held)/1000)
	}
	if e.Who != nil {
		what += " by " + e.Who.String()
	}
	return what
}

// lossReason: owner's newest entry, or a flush or swap (no key) at or after since (Unix ms).
func lossReason(entries []LogEntry, owner string, since int64) LossReason {
	for i := range entries {
		e := entries[i]
		if e.Owner == owner || (e.Key == "" && e.Owner == "" && e.Time >= since-1000) {
			return LossReason{Cause: e.Reason, Who: e.Who, Message: describeLoss(e), Entry: &e}
		}
	}
	return LossReason{Message: unknownLoss}
}

// KeyStats is one of the hottest keys by total wait time on one server (LOCK.STATS), from an
// approximate top-k: WaitTotal may be over by up to Error.
type KeyStats struct {
	Server    string
	Key       string
	Waits     int64
	Granted   int64
	Timeouts  int64
	Contended int64
	WaitTotal time.Duration
	Error     time.Duration
	WaitMax   time.Duration
}

func parseStats(server string, reply any) []KeyStats {
	list, _ := reply.([]any)
	out := []KeyStats{}
	for _, e := range list {
		m := asMap(e)
		out = append(out, KeyStats{Server: server, Key: text(m["key"]), Waits: toInt(m["waits"], 0),
			Granted: toInt(m["granted"], 0), Timeouts: toInt(m["timeouts"], 0), Contended: toInt(m["contended"], 0),
			WaitTotal: ms(toInt(m["wait_ms_total"], 0)), Error: ms(toInt(m["error"], 0)), WaitMax: ms(toInt(m["wait_ms_max"], 0))})
	}
	return out
}
