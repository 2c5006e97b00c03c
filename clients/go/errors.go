package relock

import (
	"errors"
	"fmt"
)

// The kinds of error relock returns: compare with errors.Is. Every error relock returns for a
// lock is an *Error (errors.As) whose Kind is one of these.
var (
	// ErrNotAcquired: the lock was not granted in time (held by another owner, no quorum, the
	// wait or the context ran out). Retryable.
	ErrNotAcquired = errors.New("relock: not acquired")
	// ErrLockLost: the hold ended other than by Release (expired, force-released, deleted,
	// a renewal refused); Error.Loss says why where the server's journal knows.
	ErrLockLost = errors.New("relock: lock lost")
	// ErrReleased: the hold was released (Hold.Err after Release).
	ErrReleased = errors.New("relock: released")
	// ErrNoQuorum: a release or renewal no quorum answered; the servers that did not answer
	// may keep the lock until its ttl (relock keeps trying to give it back in the background).
	ErrNoQuorum = errors.New("relock: no quorum")
	// ErrOtherLimit: the key has another LIMIT there (Error.Limit; 0 means none).
	ErrOtherLimit = errors.New("relock: lock has another limit")
	// ErrOtherMode: the owner holds the key in the other mode.
	ErrOtherMode = errors.New("relock: lock is held in another mode")
	// ErrOtherPermits: the owner holds the key with another number of permits.
	ErrOtherPermits = errors.New("relock: lock is held with other permits")
	// ErrServer: a server failed in a way retrying cannot fix (NOPERM, WRONGTYPE, the module
	// not loaded, ...).
	ErrServer = errors.New("relock: server error")
	// ErrFenced: LOCK.FENCED refused the write: the token is no longer a live hold's. Never
	// retried with another token.
	ErrFenced = errors.New("relock: fenced")
	// ErrInvalid: an argument relock refuses before sending anything.
	ErrInvalid = errors.New("relock: invalid argument")
	// ErrMayHaveRun: a fenced write whose reply was lost (its connection ended, or no reply
	// within the context's deadline): it may have run, and was not sent again. Not retryable
	// blindly: read what the write changes first.
	ErrMayHaveRun = errors.New("relock: may have run")
)

// Error is a relock failure: Kind is one of the Err* values above (errors.Is(err, Kind)),
// Cause what went wrong underneath (a context's error, a driver error), if anything.
type Error struct {
	Kind      error
	Key       string
	Msg       string
	Servers   []string
	Limit     int
	Loss      *LossReason
	Retryable bool
	Cause     error
}

func (e *Error) Error() string { return "relock: " + e.Msg }

// Is reports whether target is the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap gives the cause (a context's error, for instance).
func (e *Error) Unwrap() error { return e.Cause }

func invalid(format string, args ...any) *Error {
	return &Error{Kind: ErrInvalid, Msg: fmt.Sprintf(format, args...)}
}
