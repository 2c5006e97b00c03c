package relock

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Leadership is a won campaign: a Hold whose token is the term. It is renewed every ttl/3;
// Done is closed and Context cancelled when leadership is lost. Hand Term to whatever the
// leader writes, as a fencing token.
type Leadership struct {
	*Hold
	value string
}

// Term is the leadership's term: the hold's fencing token, larger for every new leader.
func (l *Leadership) Term() int64 { return l.Token() }

// Value is the proclaimed value (a name, an address): the owner without its random part.
func (l *Leadership) Value() string { return l.value }

// Resign gives leadership up: the next candidate leads in the same step.
func (l *Leadership) Resign(ctx context.Context) error { return l.Release(ctx) }

// LeaderInfo is who leads: the proclaimed value, the owner and the term.
type LeaderInfo struct {
	Value string
	Owner string
	Term  int64
	TTL   time.Duration
}

// proclaimed is an owner without its last `/`-separated part.
func proclaimed(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		return owner[:i]
	}
	return ""
}

func candidateOwner(value string) string {
	owner := withRandom(value)
	if value == "" {
		return "/" + owner
	}
	return owner
}

func (c *Client) electionCheck(o options) error {
	if c.err != nil {
		return c.err
	}
	if c.masters() > 1 {
		return invalid("elections run on one server or a cluster, never over Redlock masters: a term must come from one sequence, and FIFO order does not compose across independent queues")
	}
	if o.shared {
		return invalid("an election is an exclusive lock: Shared and Limit do not apply")
	}
	return nil
}

// Campaign queues value as a candidate for key (LOCK.WAIT: candidates are served in arrival
// order) and returns once it leads: its Leadership, renewed until resigned or lost. It waits
// up to the Wait option (default: no limit of its own) and ctx; ErrNotAcquired otherwise.
// With ReplicaAcks it returns only after the grant is acknowledged by that many replicas
// (WAIT after the LOCK.WAIT, on the same connection); a grant not acknowledged is released
// again and the campaign goes on until its wait ends. One server or a cluster only.
func (c *Client) Campaign(ctx context.Context, key, value string, opts ...Option) (*Leadership, error) {
	o := options{ttl: DefaultTTL, wait: -1}
	for _, f := range opts {
		f(&o)
	}
	if err := c.electionCheck(o); err != nil {
		return nil, err
	}
	ttlMS, err := checkTTL(o.ttl)
	if err != nil {
		return nil, err
	}
	deadline, limited := waitDeadline(ctx, o.wait, time.Now())
	ctx, done := c.untilClosed(ctx)
	defer done()
	for {
		// A fresh owner for every attempt: a failed one's give-back may still be repeated in
		// the background (releaseLate), and under the same owner that repeat would revoke
		// this attempt's grant, a leadership already returned (two leaders).
		owner := candidateOwner(value)
		rnd := c.waitRound(ctx, key, owner, ttlMS, time.Until(deadline), limited, nil)
		valid, ok := rnd.validFor(ttlMS)
		started := rnd.started
		if rnd.grantedLate(ttlMS) {
			renewal := c.round(context.WithoutCancel(ctx), []any{"LOCK.RENEW", key, owner, ttlMS}, c.withAcks(roundOpts{}, ackRenew, key))
			valid, ok, started = 0, false, renewal.started
			if v, good := renewal.validFor(ttlMS); good {
				valid, ok = v, true
			} else {
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
			h := c.newHold(key, nil, owner, ttlMS, tokens, started.Add(valid), nil, false, true, nil)
			return &Leadership{Hold: h, value: proclaimed(owner)}, nil
		}
		c.releaseFailed(key, owner, time.Duration(ttlMS)*time.Millisecond, rnd)
		passed := limited && !time.Now().Before(deadline) || ctxErr(ctx) != nil
		if e := rnd.afterFailed(key, ttlMS, max(o.wait, 0), passed, limited); e != nil {
			if cause := ctxCause(ctx); cause != nil {
				e.Cause = cause
			} else if e.Kind == ErrNotAcquired && ctxBinds(ctx, deadline) {
				// The campaign's wait ended at ctx's deadline, by the server's timeout (whole
				// milliseconds) a moment before the context's timer.
				e.Cause = context.DeadlineExceeded
			}
			return nil, e
		}
		sleep(ctx, min(jitter(c.retryDelay), max(0, time.Until(deadline))))
	}
}

func leaderOf(info *Info) (*LeaderInfo, error) {
	if info == nil {
		return nil, nil
	}
	if info.Mode == "shared" || info.Owner == nil || info.Token == nil {
		return nil, invalid("key is a shared lock, not an election")
	}
	return &LeaderInfo{Value: proclaimed(*info.Owner), Owner: *info.Owner, Term: *info.Token, TTL: info.TTL}, nil
}

// Leader is who leads the election at key (LOCK.INFO), nil when nobody does.
func (c *Client) Leader(ctx context.Context, key string) (*LeaderInfo, error) {
	if err := c.electionCheck(options{}); err != nil {
		return nil, err
	}
	info, err := c.Info(ctx, key)
	if err != nil {
		return nil, err
	}
	return leaderOf(info)
}

// Observation is one change of leadership seen by Observe: Leader nil when nobody leads;
// Regressed when the term went down (the store lost history: a failover or a restart without
// persistence); Err set, on the last observation, when observing stopped on an error
// retrying cannot fix.
type Observation struct {
	Leader    *LeaderInfo
	Regressed bool
	Err       error
}

// observeChunk is how long one LOCK.OBSERVE blocks before it is sent again (an observer has
// no place in a queue, so nothing is lost between two).
const observeChunk = 10 * time.Second

// Observe reports the election at key: the current leader at once, then each change
// (LOCK.OBSERVE, blocking on the server: no polling), until ctx ends; the channel is then
// closed. It reports the latest leader after each wake-up, not every intermediate term.
func (c *Client) Observe(ctx context.Context, key string) <-chan Observation {
	out := make(chan Observation, 1)
	go func() {
		defer close(out)
		ctx, done := c.untilClosed(ctx)
		defer done()
		if err := c.electionCheck(options{}); err != nil {
			out <- Observation{Err: err}
			return
		}
		send := func(o Observation) bool {
			select {
			case out <- o:
				return true
			case <-ctx.Done():
				return false
			}
		}
		n := c.nodes[0]
		var known, highest int64
		first := true
		for ctx.Err() == nil {
			var v any
			var err error
			if first {
				v, err = n.call(ctx, max(c.nodeTimeout, time.Second), "LOCK.INFO", key)
			} else {
				v, err = n.blocking(ctx, key, observeChunk+waitGrace, "LOCK.OBSERVE", key, known, observeChunk.Milliseconds())
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				f := classify(err, n.cluster != nil)
				if f.permanent {
					send(Observation{Err: &Error{Kind: ErrServer, Key: key, Cause: err, Msg: fmt.Sprintf("observing %q: %s", key, f.msg)}})
					return
				}
				sleep(ctx, jitter(c.retryDelay))
				continue
			}
			info := parseInfo(n.name, v)
			leader, lerr := leaderOf(info)
			if lerr != nil {
				send(Observation{Err: lerr})
				return
			}
			term := int64(0)
			if leader != nil {
				term = leader.Term
			}
			if report, regressed := observeChange(first, known, highest, term); report {
				if !send(Observation{Leader: leader, Regressed: regressed}) {
					return
				}
			}
			first = false
			known = term
			highest = max(highest, term)
		}
	}()
	return out
}

// observeChange: whether a term seen by Observe is reported (the first, and every change) and
// whether it regressed (lower than the highest seen: the store lost history; 0 is nobody).
func observeChange(first bool, known, highest, term int64) (report, regressed bool) {
	return first || term != known, term != 0 && term < highest
}
