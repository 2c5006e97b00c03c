package relock

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

func checkKeys(keys []string) ([]string, error) {
	if len(keys) < 1 || len(keys) > MaxKeys {
		return nil, invalid("a group takes 1 to %d keys, not %d", MaxKeys, len(keys))
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			return nil, invalid("key %q is named twice in the group", k)
		}
		seen[k] = true
	}
	return slices.Clone(keys), nil
}

// waitOrder is the order a group's keys are waited for, one by one: by their bytes, the same
// in every relock client, so that overlapping groups never wait for each other in a circle.
func waitOrder(keys []string) []string {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) })
	return out
}

// AcquireAll takes every key of keys or none (exclusive holds, LOCK.MACQUIRE), as one Hold
// renewed and released together. With Wait, on one server or a cluster it waits for the keys
// one by one in sorted order (deadlock-free with FIFO queues), keeping those already taken
// alive, and gives them back if it fails; with Redlock it tries again after a pause. In a
// cluster the keys must share a hash slot ({tag}).
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts ...Option) (*Hold, error) {
	if c.err != nil {
		return nil, c.err
	}
	group, err := checkKeys(keys)
	if err != nil {
		return nil, err
	}
	o := makeOptions(opts)
	if o.shared {
		return nil, invalid("a group takes exclusive holds only")
	}
	ttlMS, err := checkTTL(o.ttl)
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(ttlMS) * time.Millisecond
	name := strings.Join(group, ",")
	deadline, limited := waitDeadline(ctx, o.wait, time.Now())
	ctx, done := c.untilClosed(ctx)
	defer done()
	n := len(group)
	accept := func(r any) (any, error) {
		if r == nil {
			return nil, nil
		}
		list, ok := r.([]any)
		if !ok || len(list) != n {
			return nil, fmt.Errorf("%w: LOCK.MACQUIRE answered %v for %d keys", errBadReply, r, n)
		}
		return list, nil
	}
	for {
		owner := c.NewOwner()
		rel := fixed(append(append([]any{"LOCK.MRELEASE", n}, toAny(group)...), owner, "FROM", 1)...)
		args := append(append([]any{"LOCK.MACQUIRE", n}, toAny(group)...), owner, ttlMS)
		ro := c.withAcks(roundOpts{accept: accept}, ackGrant, group[0])
		if ro.acked != ackNone {
			ro.undo = rel(0)
		}
		rnd := c.round(ctx, args, ro)
		if valid, ok := rnd.validFor(ttlMS); ok {
			var first []any
			for _, v := range rnd.agreed {
				if v != nil {
					first = v.([]any)
					break
				}
			}
			kt := map[string]int64{}
			for i, k := range group {
				kt[k] = toInt(first[i], 0)
			}
			return c.groupHold(group, owner, ttlMS, rnd, kt, rnd.started.Add(valid)), nil
		}
		now, later := rnd.giveBack()
		if slices.Contains(now, true) {
			if left := c.round(context.Background(), nil, roundOpts{targets: now, untilAll: true, argsOf: rel}).unanswered(); slices.Contains(left, true) {
				c.releaseLate(ttl, rel, left)
			}
		}
		if slices.Contains(later, true) {
			c.releaseLate(ttl, rel, later)
		}
		if rnd.permanentlyFailed() {
			return nil, rnd.permanentError(group[0])
		}
		if o.wait == 0 || limited && !time.Now().Before(deadline) || ctxErr(ctx) != nil {
			e := rnd.acquireError(name, ttlMS, max(o.wait, 0))
			e.Cause = ctxCause(ctx)
			return nil, e
		}
		if len(c.nodes) == 1 && !rnd.someFailed() {
			h, err := c.waitEach(ctx, group, owner, ttlMS, deadline, limited)
			if h != nil || err != nil {
				return h, err
			}
			continue // a key taken early was lost while waiting: start again
		}
		delay := jitter(c.retryDelay)
		if limited {
			delay = min(delay, time.Until(deadline))
		}
		sleep(ctx, delay)
	}
}

func (c *Client) groupHold(group []string, owner string, ttlMS int64, rnd *round, kt map[string]int64, until time.Time) *Hold {
	tokens := make([]int64, len(c.nodes))
	for i, v := range rnd.agreed {
		if v != nil {
			tokens[i] = kt[group[0]]
		}
	}
	h := c.newHold(group[0], group, owner, ttlMS, tokens, until, nil, false, true, nil)
	h.keyTokens = kt
	return h
}

// waitEach waits for group's keys one by one in wait order under owner, keeping the keys
// already taken alive (a wait is cut into ttl/3 pieces with a renewal between). The hold, an
// error, or neither (a key taken early was lost, or a wait failed other than by a refusal
// or an undone grant: start over under a fresh owner); what was taken is given back unless
// the hold is returned.
func (c *Client) waitEach(ctx context.Context, group []string, owner string, ttlMS int64, deadline time.Time, limited bool) (*Hold, error) {
	ttl := time.Duration(ttlMS) * time.Millisecond
	var taken []string
	tokens := map[string]int64{}
	giveBack := func(keys []string) {
		if len(keys) > 0 {
			c.releaseLate(ttl, fixed(append(append([]any{"LOCK.MRELEASE", len(keys)}, toAny(keys)...), owner, "FROM", 1)...), nil)
		}
	}
	for _, key := range waitOrder(group) {
		for {
			remaining := time.Until(deadline)
			if limited && remaining <= 0 || ctxErr(ctx) != nil {
				giveBack(taken)
				return nil, &Error{Kind: ErrNotAcquired, Key: group[0], Retryable: true, Cause: ctxCause(ctx),
					Msg: fmt.Sprintf("locks %q: not all acquired in time", group)}
			}
			piece, pieceLimited := remaining, limited
			if len(taken) > 0 && (!limited || ttl/3 < remaining) {
				piece, pieceLimited = ttl/3, true
			}
			rnd := c.waitRound(ctx, key, owner, ttlMS, piece, pieceLimited, nil)
			if rnd.won() {
				taken = append(taken, key)
				for _, v := range rnd.agreed {
					if v != nil {
						tokens[key] = toInt(v, 0)
					}
				}
				break
			}
			if rnd.permanentlyFailed() {
				giveBack(append(taken, key))
				return nil, rnd.permanentError(key)
			}
			if rnd.someFailed() {
				sleep(ctx, min(jitter(c.retryDelay), max(0, time.Until(deadline))))
				if !rnd.onlyUndone() {
					// The key may have been granted where the round could not see it: it is
					// given back in the background, a repeat included, which would revoke a
					// grant of it to this owner asked for again. Start over under a fresh owner.
					giveBack(append(taken, key))
					return nil, nil
				}
				// Every failure a grant not acknowledged and undone there: nothing is left to
				// give back, and the same owner may ask again.
			}
			if len(taken) > 0 {
				renewal := c.round(ctx, append(append([]any{"LOCK.MRENEW", len(taken)}, toAny(taken)...), owner, ttlMS), c.withAcks(roundOpts{accept: allOf(len(taken))}, ackRenew, taken[0]))
				if renewal.renewLost() {
					giveBack(taken)
					return nil, nil
				}
			}
		}
	}
	// The first keys' ttl ran while later ones were waited for: measure the validity.
	renewal := c.round(context.WithoutCancel(ctx), append(append([]any{"LOCK.MRENEW", len(group)}, toAny(group)...), owner, ttlMS), c.withAcks(roundOpts{accept: allOf(len(group))}, ackRenew, group[0]))
	valid, ok := renewal.validFor(ttlMS)
	if !ok {
		giveBack(group)
		return nil, nil
	}
	return c.groupHold(group, owner, ttlMS, renewal, tokens, renewal.started.Add(valid)), nil
}
