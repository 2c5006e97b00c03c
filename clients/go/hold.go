package relock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Hold is a lock held by this process (one key, or a group of keys taken together), renewed in
// the background every ttl/3 until released or lost. Safe for concurrent use.
type Hold struct {
	c         *Client
	key       string
	group     []string // the keys of a group, in the order given; nil for one key
	owner     string
	ttlMS     int64
	tokens    []int64 // per server, 0 where it did not grant
	keyTokens map[string]int64
	since     int64 // Unix ms of the grant, to match the journal's flush entries
	autoRenew bool
	// keyArg and ownerArg are key and owner as command arguments: boxed once (the
	// acquisition's own), not again for every renewal and release.
	keyArg, ownerArg any
	// tokens1 and release1: tokens and the release's arguments of a hold of one key on one
	// server, in the hold itself (not two allocations more per hold).
	tokens1  [1]int64
	release1 [5]any

	mu          sync.Mutex
	mode        []any
	validUntil  time.Time
	lastFailure string
	err         error
	// known: the loss seen (a renewal the servers answered nil) while its reason is still
	// being read from their journals; Err and Valid report it at once, Done and Context wait
	// for the reason. Under mu.
	known     error
	knownWhat string
	// done and ctx (Done, Context) are made when first asked for (most holds are released
	// without either: three allocations fewer per hold); one made after the hold ended is
	// made closed. Under mu.
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelCauseFunc
	renewing sync.Mutex
	// timer wakes the hold for its next renewal (next) or its loss, whichever is first: a
	// timer, not a goroutine per hold, so a hold costs no goroutine start and no wake-up of
	// another thread while nothing is due; stopped by end. Under mu.
	timer *time.Timer
	next  time.Time
	// renewingNow: a tick is renewing; the timer is then armed for the loss, so that a
	// renewal that stalls (a stopped master, replica acknowledgements that do not come) does
	// not hold the loss back. Under mu.
	renewingNow bool
	// sections: the cancel functions of the contexts derived from the hold (Do's, Reenter's),
	// cancelled by end itself, so that they are cancelled when Release or the loss returns.
	sections map[*int]context.CancelCauseFunc
	// stepping orders the count-changing steps (a section's entry and exit, the release);
	// count is the reentrancy count the servers hold (1 + the sections entered), under it.
	stepping sync.Mutex
	count    int64
	// lateExits: closed when no step of this hold's count (a section's exit, an entry taken
	// back) is being given back in the background (nil: none ever was). A late step is
	// repeated once more 100 ms after it was answered; a section entered before that (FROM c,
	// the same c) would have its count taken back by the repeat, so an entry waits for it
	// (under stepping, with h.mu for the field).
	lateExits chan struct{}
	lateN     int
}

// newHold is a hold granted; args are the acquisition's LOCK.ACQUIRE or LOCK.WAIT arguments
// (their key and owner are taken as the hold's), nil for a group.
func (c *Client) newHold(key string, group []string, owner string, ttlMS int64, tokens []int64, until time.Time, mode []any, shared, autoRenew bool, args []any) *Hold {
	h := &Hold{c: c, key: key, group: group, owner: owner, ttlMS: ttlMS, mode: mode,
		validUntil: until, since: time.Now().UnixMilli(), autoRenew: autoRenew, count: 1}
	// tokens is copied (the caller's may be on its stack).
	h.tokens = append(h.tokens1[:0], tokens...)
	if len(args) >= 3 && group == nil {
		h.keyArg, h.ownerArg = args[1], args[2]
	} else {
		h.keyArg, h.ownerArg = key, owner
	}
	h.release1 = [5]any{"LOCK.RELEASE", h.keyArg, h.ownerArg, "FROM", 1}
	c.mu.Lock()
	c.live[h] = true
	c.mu.Unlock()
	h.mu.Lock()
	h.next = time.Now().Add(h.every())
	h.armLocked()
	h.mu.Unlock()
	return h
}

// Key is the key held (a group's first key).
func (h *Hold) Key() string { return h.key }

// Keys are the keys held: [Key()], or a group's keys in the order given.
func (h *Hold) Keys() []string {
	if h.group != nil {
		return slices.Clone(h.group)
	}
	return []string{h.key}
}

// Owner is the hold's owner, `<host>/<pid>/<random>`: what LOCK.INFO and LOCK.HOLDERS show.
func (h *Hold) Owner() string { return h.owner }

// TTL is the hold's lease.
func (h *Hold) TTL() time.Duration { return time.Duration(h.ttlMS) * time.Millisecond }

// Token is the fencing token of the hold: the token of the first server that granted it (a
// group: of its first key). Hand it to whatever the holder writes, which refuses tokens lower
// than the latest it saw.
func (h *Hold) Token() int64 {
	if h.group != nil {
		return h.keyTokens[h.group[0]]
	}
	for _, t := range h.tokens {
		if t != 0 {
			return t
		}
	}
	return 0
}

// TokenOf is a group's token of key (LOCK.MACQUIRE gives one token to the whole group; keys
// waited for one by one each get their own).
func (h *Hold) TokenOf(key string) int64 { return h.keyTokens[key] }

// Tokens are the tokens per server that granted the hold (Redlock: one per master).
func (h *Hold) Tokens() map[string]int64 {
	out := map[string]int64{}
	for i, t := range h.tokens {
		if t != 0 {
			out[h.c.names[i]] = t
		}
	}
	return out
}

// Until is when the hold's validity ends unless renewed: the ttl less the round's time and
// the clock drift allowance (1 % + 2 ms), as measured by the last successful round.
func (h *Hold) Until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

func (h *Hold) lostAt() time.Time {
	return h.validUntil.Add(-lossLead(h.TTL()))
}

// expireIfPast loses the hold when the clock says its validity has passed, whether or not
// the renewal timer ran.
func (h *Hold) expireIfPast() {
	h.mu.Lock()
	past := h.err == nil && !time.Now().Before(h.lostAt())
	h.mu.Unlock()
	if past {
		h.expire()
	}
}

// Done is closed when the hold ends: lost (Err is then an *Error of kind ErrLockLost saying
// why) or released (Err is ErrReleased).
func (h *Hold) Done() <-chan struct{} {
	h.expireIfPast()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{})
		if h.err != nil {
			close(h.done)
		}
	}
	return h.done
}

// Err is nil while the hold is held; after it ended, why: an *Error of kind ErrLockLost
// (Error.Loss has the cause from the server's journal, LOCK.HISTORY), or ErrReleased. It
// reads the clock: past the validity it is the loss, even if no renewal ran. A renewal the
// servers answered nil makes it the loss at once, without Loss while the journals are read;
// once Done is closed it is the loss with its cause.
func (h *Hold) Err() error {
	h.expireIfPast()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil && h.known != nil {
		return h.known
	}
	return h.err
}

// Context is cancelled when the hold ends; context.Cause gives Err.
func (h *Hold) Context() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
		if h.err != nil {
			h.cancel(h.err)
		}
	}
	return h.ctx
}

// Valid reports whether the hold is still held and within its validity.
func (h *Hold) Valid() bool { return h.Err() == nil }

func (h *Hold) lostError(reason string, loss *LossReason) *Error {
	return &Error{Kind: ErrLockLost, Key: h.key, Loss: loss, Servers: h.c.Servers(),
		Msg: fmt.Sprintf("lock %q was lost: %s", h.key, reason)}
}

func (h *Hold) expiryReason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known != nil {
		// The servers answered nil, and the validity ran out while they were asked why.
		return h.knownWhat + " (its validity ran out while the servers' journals were read)"
	}
	if h.lastFailure != "" {
		return "its validity ran out: renewals failed (" + h.lastFailure + ")"
	}
	if h.renewingNow {
		return "its validity ran out while a renewal was still unanswered"
	}
	if !h.autoRenew {
		return "its validity ran out (not extended in time)"
	}
	return fmt.Sprintf("its validity ran out before it could be renewed (the process did not run the renewal in time: stalled longer than the %d ms ttl?)", h.ttlMS)
}

// end ends the hold on the client's side: Done closed, Context cancelled; false if it had
// ended already.
func (h *Hold) end(err error) bool {
	return h.endIf(err, nil)
}

// endIf is end, only if `still` (nil: always) holds when looked at under h.mu, in the same
// step as the end.
func (h *Hold) endIf(err error, still func() bool) bool {
	h.mu.Lock()
	if h.err != nil || (still != nil && !still()) {
		h.mu.Unlock()
		return false
	}
	h.err = err
	sections := h.sections
	h.sections = nil
	done, cancel := h.done, h.cancel
	if h.timer != nil {
		h.timer.Stop() // a tick already running sees err set and arms nothing
	}
	h.mu.Unlock()
	// Context first: whoever sees Done closed finds the Context cancelled with its cause.
	if cancel != nil {
		cancel(err)
	}
	for _, cancel := range sections {
		cancel(err)
	}
	if done != nil {
		close(done)
	}
	h.c.mu.Lock()
	delete(h.c.live, h)
	h.c.mu.Unlock()
	return true
}

// lose ends the hold as lost and gives it back in the background where servers still have it.
func (h *Hold) lose(reason string, loss *LossReason) {
	if h.end(h.lostError(reason, loss)) {
		h.c.releaseLate(h.TTL(), fixed(h.releaseArgs()...), nil)
	}
}

// expire loses the hold because its validity ran out, unless a renewal moved the validity
// since it was looked at: the check and the end are one step under h.mu, so a renewal
// answering at that moment either extends the hold before it ends (and the hold lives on), or
// finds it ended and says so (renew). Before, the two interleaved: an Extend whose round was
// applied just before the late give-back answered true for a hold the client had already
// given back, and another owner could take the lock at once (attack round of 2026-12-05).
func (h *Hold) expire() {
	reason := h.expiryReason()
	past := func() bool { return !time.Now().Before(h.lostAt()) }
	if h.endIf(h.lostError(reason, nil), past) {
		h.c.releaseLate(h.TTL(), fixed(h.releaseArgs()...), nil)
	}
}

func (h *Hold) renewArgs(ttlMS int64) []any {
	if h.group != nil {
		return append(append([]any{"LOCK.MRENEW", len(h.group)}, toAny(h.group)...), h.owner, ttlMS)
	}
	return []any{"LOCK.RENEW", h.keyArg, h.ownerArg, ttlMS}
}

func (h *Hold) releaseArgs() []any {
	if h.group != nil {
		return append(append([]any{"LOCK.MRELEASE", len(h.group)}, toAny(h.group)...), h.owner, "FROM", 1)
	}
	return h.release1[:]
}

func toAny(keys []string) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// allOf accepts a LOCK.MRENEW reply only when every key of the group was renewed.
func allOf(n int) func(any) (any, error) {
	return func(r any) (any, error) {
		if r == nil || toInt(r, -1) != int64(n) {
			return nil, nil
		}
		return r, nil
	}
}

// every is the renewal period: ttl/3.
func (h *Hold) every() time.Duration { return max(h.TTL()/3, time.Millisecond) }

// armLocked sets the timer to the hold's next wake: its renewal (autoRenew) or its loss,
// whichever is first; nothing once the hold ended. Under h.mu.
func (h *Hold) armLocked() {
	if h.err != nil {
		return
	}
	wake := h.lostAt()
	if h.autoRenew && h.next.Before(wake) {
		wake = h.next
	}
	d := time.Until(wake)
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.tick)
	} else {
		h.timer.Reset(d)
	}
}

// tick is one wake of the hold (on the timer's goroutine): past its validity the hold is
// lost; otherwise it is renewed (autoRenew; a Mutex, as redsync's, is not: it ends with its
// validity unless extended), and the timer set again.
func (h *Hold) tick() {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	lostAt := h.lostAt()
	busy := h.renewingNow
	renewing := !busy && h.autoRenew && time.Now().Before(lostAt)
	if renewing {
		// Wake at the loss even while the renewal below runs: a renewal can take the node
		// timeout, plus the ReplicaAcks timeout and a ROLE query.
		h.renewingNow = true
		h.timer.Reset(time.Until(lostAt))
	}
	h.mu.Unlock()
	if !time.Now().Before(lostAt) {
		h.expire()
		return
	}
	if busy {
		return // an early wake during a renewal (it moved the validity): the renewal re-arms
	}
	ok := false
	if renewing {
		// Bounded by the loss: past it, the renewal's answer cannot save the hold.
		ctx, cancel := context.WithDeadline(context.Background(), lostAt)
		ok, _ = h.renew(ctx, h.ttlMS)
		cancel()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewingNow = false
	if h.autoRenew {
		if ok {
			h.next = time.Now().Add(h.every())
		} else {
			h.next = time.Now().Add(min(h.every()/4, time.Until(h.validUntil)/2))
		}
	}
	h.armLocked()
}

// renew runs one renewal round: true when it renewed; the hold is lost (Done closed) when no
// quorum can renew any more.
func (h *Hold) renew(ctx context.Context, ttlMS int64) (bool, error) {
	// Known lost (or ended): said at once, not after the renewal under way has read the journals.
	if err := h.Err(); err != nil {
		return false, err
	}
	h.renewing.Lock()
	defer h.renewing.Unlock()
	if err := h.Err(); err != nil {
		return false, err
	}
	ro := h.c.withAcks(roundOpts{}, ackRenew, h.key)
	if h.group != nil {
		ro.accept = allOf(len(h.group))
	}
	rnd := h.c.round(ctx, h.renewArgs(ttlMS), ro)
	if valid, ok := rnd.validFor(ttlMS); ok {
		h.mu.Lock()
		if err := h.err; err != nil {
			// The hold ended while the round ran (its validity ran out and it is being given
			// back, or it was released): a renewal the servers applied before that give-back
			// does not revive it.
			h.mu.Unlock()
			return false, err
		}
		h.validUntil = rnd.started.Add(valid)
		h.lastFailure = ""
		h.mu.Unlock()
		return true, nil
	}
	if rnd.badTTL() {
		return false, &Error{Kind: ErrServer, Key: h.key, Msg: fmt.Sprintf("lock %q: renewal to a ttl of %d ms refused (%s); the hold is kept with its ttl (ask for a shorter ttl)", h.key, ttlMS, rnd.describe(func(f failure) bool { return f.badTTL }))}
	}
	if rnd.renewLost() {
		refused := rnd.servers(func(f failure) bool { return f.refused })
		what := "renewal failed: " + rnd.describe(func(f failure) bool { return f.permanent })
		if len(refused) > 0 {
			what = "LOCK.RENEW answered nil on " + strings.Join(refused, ", ") + ": the lock expired or was taken away"
		}
		// Known lost from now: asking the journals why can take a node timeout per server
		// (one stopped), and meanwhile Valid must not say held.
		known := h.lostError(what+" (the reason is being read from the servers' journals)", nil)
		h.mu.Lock()
		h.known, h.knownWhat = known, what
		sections := make([]context.CancelCauseFunc, 0, len(h.sections))
		for _, cancel := range h.sections {
			sections = append(sections, cancel)
		}
		h.mu.Unlock()
		// The work under the hold (Do's fn, a Reenter section) stops at the nil, not when the
		// journals answer: its context's cause is this loss, without its reason (Err has the
		// reason once Done is closed).
		for _, cancel := range sections {
			cancel(known)
		}
		loss := h.c.explainLoss(h.Keys(), h.owner, h.since)
		where := ""
		if loss.Entry != nil && h.group != nil && loss.Entry.Key != "" {
			where = fmt.Sprintf("key %q ", loss.Entry.Key)
		}
		h.lose(what+": "+where+loss.Message, &loss)
		return false, h.Err()
	}
	h.mu.Lock()
	h.lastFailure = rnd.describe(nil)
	h.mu.Unlock()
	return false, &Error{Kind: ErrNoQuorum, Key: h.key, Retryable: true, Servers: rnd.servers(nil),
		Msg: fmt.Sprintf("lock %q: renewal without a quorum (%s); still held until %v unless renewed", h.key, rnd.describe(nil), h.Until())}
}

// Renew renews the hold now (relock also does it every ttl/3 on its own): nil when renewed;
// an *Error of kind ErrLockLost when the hold is gone, ErrNoQuorum when no quorum answered
// (it is still held until Until).
func (h *Hold) Renew(ctx context.Context) error {
	_, err := h.renew(ctx, h.ttlMS)
	return err
}

// Release gives the lock back: nil when released; an *Error of kind ErrLockLost when the
// servers said it was no longer held (Err says why when relock knew first), ErrNoQuorum when
// no quorum answered (relock gives it back in the background, never re-sending blindly: the
// release names its step, FROM 1, so a repeat changes nothing), ErrServer when errors
// retrying cannot fix refused it. Releasing twice is nil.
func (h *Hold) Release(ctx context.Context) error { return h.release(ctx) }

func (h *Hold) release(ctx context.Context) error { return h.releaseAs(ctx, ErrReleased) }

// releaseAs ends the hold with why (Done, Context) and releases it on the servers, unless it
// had ended already: then nil after a release, the loss after a loss.
func (h *Hold) releaseAs(ctx context.Context, why error) error {
	h.mu.Lock()
	known := h.known
	h.mu.Unlock()
	if known != nil {
		// Known lost, its reason still being read: the loss ends the hold (Done, Context, Err
		// with its cause) and gives it back; a release now would replace the loss with itself.
		if why != ErrReleased {
			// Client.Close: the background that would read the reason is stopping, so the
			// hold ends now as the loss it is (without its reason), not as closed.
			h.end(known)
		}
		return known
	}
	if !h.end(why) {
		h.mu.Lock()
		prev := h.err
		h.mu.Unlock()
		if e, ok := prev.(*Error); ok && e.Kind == ErrLockLost {
			return e
		}
		return nil
	}
	// The sections still entered (Reenter) are taken down first, one FROM step each, so the
	// hold ends whole; their exits then send nothing.
	h.stepping.Lock()
	for ; h.count > 1; h.count-- {
		step := fixed("LOCK.RELEASE", h.key, h.owner, "FROM", h.count)
		rnd := h.c.round(ctx, nil, roundOpts{untilAll: true, argsOf: step})
		if un := rnd.unanswered(); slices.Contains(un, true) {
			h.c.releaseLate(h.TTL(), step, un)
		}
	}
	h.stepping.Unlock()
	args := h.releaseArgs()
	rnd := h.c.round(ctx, args, roundOpts{untilAll: true})
	if rnd.someUnanswered() {
		h.c.releaseLate(h.TTL(), fixed(args...), rnd.unanswered())
	}
	if rnd.won() {
		return nil
	}
	if e := rnd.releaseError(h.key); e != nil {
		return e
	}
	if !rnd.someFailed() {
		return h.lostError("it was no longer held when released (LOCK.RELEASE answered nil)", nil)
	}
	return &Error{Kind: ErrNoQuorum, Key: h.key, Retryable: true, Servers: rnd.servers(func(f failure) bool { return !f.refused }),
		Msg: fmt.Sprintf("lock %q: release without a quorum (%s); given back in the background", h.key, rnd.describe(nil))}
}

// Reenter runs fn in a nested section of the hold, under the same owner: LOCK.REENTER takes
// the count up by one on the servers (and resets the lease), and the count comes back down
// when fn returns. Reentrancy is only ever asked for this way. Every step names the count it
// expects (LOCK.REENTER ... FROM c, then LOCK.RELEASE ... FROM c+1), so a step that reaches a
// server twice is applied once. An entry without a quorum is taken back wherever it may have
// run (LOCK.RELEASE ... FROM c+1 answers c whether or not the entry ran) and fn does not run:
// an *Error of kind ErrNotAcquired (retryable), ErrLockLost when the servers no longer have
// the hold (REENTER answered nil), ErrServer when they refused. fn's context is the hold's
// Context merged with ctx. Release inside fn ends the hold whole (the section's count
// included), and the section's exit then sends nothing. One key only (not a group).
func (h *Hold) Reenter(ctx context.Context, fn func(ctx context.Context) error) error {
	if h.group != nil {
		return invalid("a group cannot be reentered")
	}
	if err := h.enter(ctx); err != nil {
		return err
	}
	defer h.exit()
	fctx, done := h.derive(ctx)
	defer done()
	return fn(fctx)
}

// derive is ctx, cancelled also when the hold ends (with Err as its cause) before end returns:
// a section's or Do's context is cancelled by the time Release or the loss is seen.
func (h *Hold) derive(ctx context.Context) (context.Context, func()) {
	fctx, cancel := context.WithCancelCause(ctx)
	id := new(int)
	h.mu.Lock()
	if err := h.err; err != nil {
		h.mu.Unlock()
		cancel(err)
		return fctx, func() {}
	}
	if h.known != nil {
		known := h.known
		h.mu.Unlock()
		cancel(known)
		return fctx, func() {}
	}
	if h.sections == nil {
		h.sections = map[*int]context.CancelCauseFunc{}
	}
	h.sections[id] = cancel
	h.mu.Unlock()
	return fctx, func() {
		h.mu.Lock()
		delete(h.sections, id)
		h.mu.Unlock()
		cancel(nil)
	}
}

func (h *Hold) enter(ctx context.Context) error {
	h.stepping.Lock()
	defer h.stepping.Unlock()
	if err := h.Err(); err != nil {
		return err
	}
	// A section's exit still being given back (and repeated) in the background carries the
	// count this entry would ask FROM: entered now, the repeat would take the new section's
	// count back (attack round of 2026-12-05). Bounded: a late exit ends within its ttl and
	// node timeout, plus its repeat.
	h.mu.Lock()
	late := h.lateExits
	h.mu.Unlock()
	if late != nil {
		select {
		case <-late:
		case <-ctx.Done():
			return &Error{Kind: ErrNotAcquired, Key: h.key, Retryable: true, Cause: context.Cause(ctx),
				Msg: fmt.Sprintf("lock %q: the nested section was not entered: a section's exit was still being given back when the context ended; still held", h.key)}
		}
		if err := h.Err(); err != nil {
			return err
		}
	}
	c := h.count
	h.mu.Lock()
	args := append(append([]any{"LOCK.REENTER", h.key, h.owner, h.ttlMS}, h.mode...), "FROM", c)
	h.mu.Unlock()
	ro := roundOpts{accept: func(r any) (any, error) {
		if r == nil || toInt(r, -1) != c+1 {
			return nil, nil
		}
		return r, nil
	}}
	if h.c.acks.replicas > 0 {
		// A section not acknowledged is taken back on that master at once.
		ro.acked, ro.ackKey, ro.undo = ackGrant, h.key, []any{"LOCK.RELEASE", h.key, h.owner, "FROM", c + 1}
	}
	rnd := h.c.round(ctx, args, ro)
	if rnd.won() {
		h.count = c + 1
		return nil
	}
	// Taken back wherever it may have run; harmless where it did not.
	back := fixed("LOCK.RELEASE", h.key, h.owner, "FROM", c+1)
	brnd := h.c.round(context.WithoutCancel(ctx), nil, roundOpts{untilAll: true, argsOf: back})
	if un := brnd.unanswered(); slices.Contains(un, true) {
		// A late take-back is a step of the count as a late exit is: the next entry waits.
		h.c.releaseLateThen(h.TTL(), back, un, h.lateExit())
	}
	if rnd.renewLost() && rnd.refused() > 0 {
		loss := h.c.explainLoss(h.Keys(), h.owner, h.since)
		h.lose("LOCK.REENTER answered nil: "+loss.Message, &loss)
		return h.Err()
	}
	if rnd.permanentlyFailed() {
		return rnd.permanentError(h.key)
	}
	return &Error{Kind: ErrNotAcquired, Key: h.key, Retryable: true, Servers: rnd.servers(nil),
		Msg: fmt.Sprintf("lock %q: the nested section was not entered: no quorum (%s); still held", h.key, rnd.describe(nil))}
}

func (h *Hold) exit() {
	h.stepping.Lock()
	defer h.stepping.Unlock()
	if h.count <= 1 {
		return // the hold was released meanwhile, sections included
	}
	h.mu.Lock()
	ended := h.err != nil
	h.mu.Unlock()
	step := fixed("LOCK.RELEASE", h.key, h.owner, "FROM", h.count)
	h.count--
	if ended {
		// Lost: give the section's count back where a server may still have it.
		h.c.releaseLate(h.TTL(), step, nil)
		return
	}
	rnd := h.c.round(context.Background(), nil, roundOpts{untilAll: true, argsOf: step})
	if un := rnd.unanswered(); slices.Contains(un, true) {
		h.c.releaseLateThen(h.TTL(), step, un, h.lateExit())
	}
}

// lateExit counts a section's exit given back in the background until the returned function
// runs (when that background job ends, its repeat included); enter waits for none to be left.
// Under stepping.
func (h *Hold) lateExit() func() {
	h.mu.Lock()
	if h.lateN == 0 {
		h.lateExits = make(chan struct{})
	}
	h.lateN++
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.lateN--
		if h.lateN == 0 {
			close(h.lateExits)
		}
	}
}

// Downgrade turns an exclusive hold into a shared one of the same key in one atomic step
// (same token and ttl; the shared waiters at the head of the queue are granted with it).
func (h *Hold) Downgrade(ctx context.Context) error {
	if h.group != nil {
		return invalid("a group cannot be downgraded")
	}
	if err := h.Err(); err != nil {
		return err
	}
	rnd := h.c.round(ctx, []any{"LOCK.DOWNGRADE", h.key, h.owner}, roundOpts{untilAll: true})
	if rnd.won() {
		h.mu.Lock()
		h.mode = []any{"SHARED"}
		h.mu.Unlock()
		return nil
	}
	if rnd.permanentlyFailed() {
		return rnd.permanentError(h.key)
	}
	if rnd.renewLost() {
		loss := h.c.explainLoss(h.Keys(), h.owner, h.since)
		h.lose("LOCK.DOWNGRADE answered nil: "+loss.Message, &loss)
		return h.Err()
	}
	return &Error{Kind: ErrNoQuorum, Key: h.key, Retryable: true, Msg: fmt.Sprintf("lock %q: downgrade without a quorum (%s)", h.key, rnd.describe(nil))}
}

// Fenced runs a command through LOCK.FENCED key token command args...: the server runs it
// only while the hold's token is a live hold's, atomically with that check, and returns its
// reply unchanged. A stale token is an *Error of kind ErrFenced (never retried); the inner
// command's own errors come back as go-redis gives them. One server or a cluster only (with
// Redlock each master has its own tokens). Put the data under the lock's hash tag
// ({order:7}, {order:7}:data) in a cluster.
func (h *Hold) Fenced(ctx context.Context, args ...any) (any, error) {
	if len(h.c.nodes) > 1 {
		return nil, invalid("Fenced needs one server or a cluster: with Redlock each master has its own tokens, so no one token can fence a write")
	}
	if h.group != nil {
		return nil, invalid("Fenced is for a hold of one key")
	}
	if len(args) == 0 {
		return nil, invalid("Fenced needs a command")
	}
	full := append([]any{"LOCK.FENCED", h.key, h.Token()}, args...)
	v, err := h.c.nodes[0].callOnce(ctx, h.key, full...)
	if err != nil && !isRedisError(err) {
		return nil, lostReply(h.key, h.c.names[0], "the fenced write", err)
	}
	return v, fencedError(h.key, err)
}

// fencedError maps LOCK.FENCED's refusals: -FENCED to ErrFenced, LOCK.FENCED's own refusal of
// a command to ErrInvalid; anything else (the inner command's errors) unchanged.
func fencedError(key string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "FENCED "):
		return &Error{Kind: ErrFenced, Key: key, Cause: err, Msg: fmt.Sprintf("lock %q: the write was refused by the server: %s", key, strings.TrimPrefix(msg, "FENCED "))}
	case strings.HasPrefix(msg, "ERR ") && (strings.Contains(msg, "in LOCK.FENCED") || strings.Contains(msg, "LOCK.FENCED needs")):
		return &Error{Kind: ErrInvalid, Key: key, Cause: err, Msg: strings.TrimPrefix(msg, "ERR ")}
	case strings.HasPrefix(msg, "ERR unknown command") && strings.Contains(strings.ToUpper(msg), "LOCK.FENCED"):
		return &Error{Kind: ErrServer, Key: key, Cause: err, Msg: msg + " (this relock module is older than LOCK.FENCED)"}
	}
	return err
}
