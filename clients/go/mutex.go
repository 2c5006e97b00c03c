package relock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Mutex is a distributed mutex with redsync's method names, for code moving from
// github.com/go-redsync/redsync. Like redsync's it is not renewed on its own: it holds for
// its ttl (TTL, default 8 s as redsync's expiry) unless extended. Lock waits in the key's
// FIFO queue (server-side, LOCK.WAIT) up to the Wait option (default: the ttl) or the
// context, instead of redsync's polling. A Mutex holds one lock at a time.
type Mutex struct {
	c    *Client
	name string
	o    options

	mu    sync.Mutex
	hold  *Hold
	value string
	until time.Time
	// The hold an Unlock answered true for: a second Unlock of it answers false.
	unlocked *Hold
}

// NewMutex is a Mutex on key name (redsync's rs.NewMutex).
func (c *Client) NewMutex(name string, opts ...Option) *Mutex {
	o := options{ttl: 8 * time.Second, wait: -2}
	for _, f := range opts {
		f(&o)
	}
	if o.wait == -2 {
		o.wait = o.ttl
	}
	return &Mutex{c: c, name: name, o: o}
}

// Name is the mutex's key.
func (m *Mutex) Name() string { return m.name }

// Value is the owner of the current (or last) hold: redsync's random value.
func (m *Mutex) Value() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.value
}

// Until is when the current hold's validity ends.
func (m *Mutex) Until() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.until
}

// Lock waits for the mutex (see LockContext).
func (m *Mutex) Lock() error { return m.LockContext(context.Background()) }

// TryLock takes the mutex only if it is free now.
func (m *Mutex) TryLock() error { return m.TryLockContext(context.Background()) }

// LockContext waits for the mutex up to the Wait option or ctx: ErrNotAcquired otherwise
// (redsync's ErrFailed).
func (m *Mutex) LockContext(ctx context.Context) error { return m.lock(ctx, m.o.wait) }

// TryLockContext takes the mutex only if it is free now.
func (m *Mutex) TryLockContext(ctx context.Context) error { return m.lock(ctx, 0) }

func (m *Mutex) lock(ctx context.Context, wait time.Duration) error {
	opts := []Option{TTL(m.o.ttl), Wait(wait)}
	h, err := m.c.acquire(ctx, m.name, false, opts...)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.hold, m.value, m.until = h, h.Owner(), h.Until()
	m.mu.Unlock()
	return nil
}

func (m *Mutex) current() *Hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hold
}

// Unlock releases the mutex: true when released (redsync's answer); false with an error
// saying why otherwise: among them a mutex unlocked already, or lost (redsync's
// ErrLockAlreadyExpired), whose error is ErrReleased or ErrLockLost.
func (m *Mutex) Unlock() (bool, error) { return m.UnlockContext(context.Background()) }

// UnlockContext releases the mutex.
func (m *Mutex) UnlockContext(ctx context.Context) (bool, error) {
	h := m.current()
	if h == nil {
		return false, &Error{Kind: ErrLockLost, Key: m.name, Msg: "mutex " + m.name + " is not locked"}
	}
	// Unlocked before (a Hold's second Release is nil, a Mutex's second Unlock is not: redsync
	// answers false), or lost: this value releases nothing.
	if err := h.Err(); err != nil {
		return false, err
	}
	if err := h.Release(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unlocked == h {
		return false, h.Err() // another Unlock of the same hold answered true
	}
	m.unlocked = h
	return true, nil
}

// Extend renews the mutex for its ttl: true when extended.
func (m *Mutex) Extend() (bool, error) { return m.ExtendContext(context.Background()) }

// ExtendContext renews the mutex for its ttl.
func (m *Mutex) ExtendContext(ctx context.Context) (bool, error) {
	h := m.current()
	if h == nil {
		return false, &Error{Kind: ErrLockLost, Key: m.name, Msg: "mutex " + m.name + " is not locked"}
	}
	if err := h.Renew(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	m.until = h.Until()
	m.mu.Unlock()
	return true, nil
}

// Valid asks the servers whether the mutex is still held by this Value (a quorum of them).
func (m *Mutex) Valid() (bool, error) { return m.ValidContext(context.Background()) }

// ValidContext asks the servers whether the mutex is still held by this Value.
func (m *Mutex) ValidContext(ctx context.Context) (bool, error) {
	h := m.current()
	if h == nil {
		return false, nil
	}
	if err := h.Err(); err != nil {
		if errors.Is(err, ErrReleased) || errors.Is(err, ErrLockLost) {
			return false, nil
		}
		return false, err
	}
	accept := func(r any) (any, error) {
		if list, ok := r.([]any); ok && len(list) > 0 {
			return r, nil
		}
		return nil, nil
	}
	rnd := m.c.round(ctx, []any{"LOCK.HOLDERS", m.name, "OWNER", h.Owner()}, roundOpts{accept: accept})
	if rnd.won() {
		return true, nil
	}
	if rnd.permanentlyFailed() {
		return false, rnd.permanentError(m.name)
	}
	return false, nil
}
