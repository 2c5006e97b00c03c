package relock

// The client cases every relock client runs (spec/client-cases/, see its README.md): the round's
// verdicts, the validity arithmetic, the classification of failures and the decoding of the read
// commands' replies under RESP2 and RESP3, run against this package's rules (core.go).
//
// A case whose `diverges` names `go` is one this package is known to get wrong: it must still
// fail here (so that fixing it means removing the mark). TestCasesCatchWrongCases checks that a
// deliberately wrong case of each file fails.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

type clientCase struct {
	Name     string            `json:"name"`
	Diverges map[string]string `json:"diverges"`
	raw      map[string]any
}

func loadCases(t *testing.T, file string) []clientCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "spec", "client-cases", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []json.RawMessage `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) == 0 {
		t.Fatalf("%s: no cases", file)
	}
	var out []clientCase
	for _, raw := range doc.Cases {
		var c clientCase
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &c.raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// runCases runs check on every case: it must pass, unless the case diverges for Go.
func runCases(t *testing.T, file string, check func(c map[string]any) error) {
	for _, c := range loadCases(t, file) {
		t.Run(c.Name, func(t *testing.T) {
			err := check(c.raw)
			if why, ok := c.Diverges["go"]; ok {
				if err == nil {
					t.Fatalf("passes now; remove its diverges.go mark (%s)", why)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// replyErr is an error reply as go-redis gives it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// failureOf is a case's `-TEXT`, `timeout` or `down`, classified as a client of plain servers.
func failureOf(reply string) failure {
	switch reply {
	case "timeout":
		return classify(fmt.Errorf("LOCK.ACQUIRE: %w", errors.Join(errTimeoutForCase)), false)
	case "down":
		return classify(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false)
	}
	return classify(replyErr(reply[1:]), false)
}

var errTimeoutForCase = &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func classified(f failure) map[string]any {
	var kind any
	switch {
	case f.otherLimit >= 0:
		kind = "other_limit"
	case f.otherMode:
		kind = "other_mode"
	case f.otherPermits:
		kind = "other_permits"
	case f.grace:
		kind = "grace"
	case f.badTTL:
		kind = "bad_ttl"
	}
	class := "transient"
	if f.permanent {
		class = "permanent"
	}
	out := map[string]any{"class": class, "kind": kind}
	if f.otherLimit >= 0 {
		out["limit"] = float64(f.otherLimit)
	}
	return out
}

func checkError(c map[string]any) error {
	got := classified(failureOf(c["reply"].(string)))
	if !reflect.DeepEqual(got, c["expect"]) {
		return fmt.Errorf("got %v, want %v", got, c["expect"])
	}
	return nil
}

func TestCasesErrors(t *testing.T) { runCases(t, "errors.json", checkError) }

func num(v any) int64 { return int64(v.(float64)) }

func checkValidity(c map[string]any) error {
	ttl := num(c["ttl_ms"])
	if d := driftUS(ttl); d != num(c["drift_us"]) {
		return fmt.Errorf("drift_us %d, want %v", d, c["drift_us"])
	}
	v, ok := validityUS(ttl, num(c["elapsed_us"]))
	var got any
	if ok {
		got = float64(v)
	}
	if !reflect.DeepEqual(got, c["validity_us"]) {
		return fmt.Errorf("validity_us %v, want %v", got, c["validity_us"])
	}
	return nil
}

func TestCasesValidity(t *testing.T) { runCases(t, "validity.json", checkValidity) }

// roundOf is the case's round, started at 0, fed its replies, finished elapsed_ms later.
func roundOf(c map[string]any) (*round, []any) {
	n := int(num(c["masters"]))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
	}
	start := time.Unix(0, 0)
	rnd := newRound(names, start, c["until"] == "all")
	var prog []any
	for _, r := range c["replies"].([]any) {
		pair := r.([]any)
		i, text := int(num(pair[0])), pair[1].(string)
		var p progress
		switch {
		case text == "nil":
			p = rnd.onReply(i, nil, nil)
		case len(text) > 6 && text[:6] == "grant ":
			var tok int64
			fmt.Sscan(text[6:], &tok)
			p = rnd.onReply(i, tok, nil)
		default:
			f := failureOf(text)
			p = rnd.onReply(i, nil, &f)
		}
		prog = append(prog, p.String())
	}
	elapsed := 5.0
	if e, ok := c["elapsed_ms"].(float64); ok {
		elapsed = e
	}
	return rnd.finish(start.Add(time.Duration(elapsed * float64(time.Millisecond)))), prog
}

func verdict(e *Error) string {
	switch e.Kind {
	case ErrOtherLimit:
		return "other_limit"
	case ErrOtherMode:
		return "other_mode"
	case ErrOtherPermits:
		return "other_permits"
	case ErrNotAcquired:
		return "not_acquired"
	}
	return "permanent"
}

func bools(b []bool) []any {
	out := make([]any, len(b))
	for i, x := range b {
		out[i] = x
	}
	return out
}

func checkRound(c map[string]any) error {
	want := c["expect"].(map[string]any)
	ttl := int64(10000)
	if v, ok := c["ttl_ms"].(float64); ok {
		ttl = int64(v)
	}
	rnd, prog := roundOf(c)
	eq := func(field string, got, w any) error {
		if !reflect.DeepEqual(got, w) {
			return fmt.Errorf("%s: got %v, want %v", field, got, w)
		}
		return nil
	}
	var errs []error
	if w, ok := want["progress"]; ok {
		errs = append(errs, eq("progress", prog, w))
	}
	if w, ok := want["tokens"]; ok {
		tokens := make([]any, rnd.n())
		for i := range tokens {
			if v := rnd.agreed[i]; v != nil {
				tokens[i] = float64(v.(int64))
			}
		}
		errs = append(errs, eq("tokens", tokens, w))
	}
	if w, ok := want["may_hold"]; ok {
		errs = append(errs, eq("may_hold", bools(rnd.mayHold()), w))
	}
	if w, ok := want["give_back_later"]; ok {
		now, later := rnd.giveBack()
		if tw, ok := want["tokens"].([]any); ok {
			nowWant := make([]any, len(tw))
			for i, t := range tw {
				nowWant[i] = t != nil
			}
			errs = append(errs, eq("give back now", bools(now), nowWant))
		}
		errs = append(errs, eq("give_back_later", bools(later), w))
	}
	if w, ok := want["validity_ms"]; ok {
		v, valid := rnd.validFor(ttl)
		if !valid || w == nil {
			var got any
			if valid {
				got = v
			}
			errs = append(errs, eq("validity_ms", got, w))
		} else if math.Abs(float64(v.Microseconds())/1000-w.(float64)) > 1e-6 {
			errs = append(errs, fmt.Errorf("validity_ms: got %v, want %v", v, w))
		}
	}
	if w, ok := want["acquire"]; ok {
		got := "acquired"
		if _, valid := rnd.validFor(ttl); !valid {
			got = verdict(rnd.acquireError("k", ttl, 0))
		}
		errs = append(errs, eq("acquire", got, w))
	}
	if w, ok := want["renew"]; ok {
		got := "renewed"
		if _, valid := rnd.validFor(ttl); !valid {
			switch {
			case rnd.badTTL():
				got = "kept"
			case rnd.renewLost():
				got = "lost"
			default:
				got = "retry"
			}
		}
		errs = append(errs, eq("renew", got, w))
	}
	if w, ok := want["release"]; ok {
		// Hold.Release's verdicts: nil, ErrServer, ErrLockLost (every master that did not
		// release said nil), ErrNoQuorum (some failed otherwise).
		got := "released"
		switch {
		case rnd.won():
		case rnd.releaseError("k") != nil:
			got = "permanent"
		case !rnd.someFailed():
			got = "lost"
		default:
			got = "no_quorum"
		}
		errs = append(errs, eq("release", got, w))
	}
	for _, f := range []struct {
		field  string
		passed bool
	}{{"wait", false}, {"wait_at_deadline", true}} {
		w, ok := want[f.field]
		if !ok {
			continue
		}
		got := "again"
		if e := rnd.afterFailed("k", ttl, 0, f.passed, false); e != nil {
			got = verdict(e)
			if got == "not_acquired" {
				got = "stop"
			}
		}
		errs = append(errs, eq(f.field, got, w))
	}
	return errors.Join(errs...)
}

func TestCasesRound(t *testing.T) { runCases(t, "round.json", checkRound) }

// value is a reply as the case files write it, as go-redis gives it: int64, string, float64,
// bool, []any, and a RESP3 map as map[any]any.
func value(t any) any {
	if t == nil {
		return nil
	}
	for tag, v := range t.(map[string]any) {
		switch tag {
		case "int":
			return int64(v.(float64))
		case "double":
			return v.(float64)
		case "bulk", "simple":
			return v.(string)
		case "bool":
			return v.(bool)
		case "array", "set":
			out := []any{}
			for _, x := range v.([]any) {
				out = append(out, value(x))
			}
			return out
		case "map":
			out := map[any]any{}
			for _, kv := range v.([]any) {
				p := kv.([]any)
				out[value(p[0])] = value(p[1])
			}
			return out
		}
		panic("unknown reply tag " + tag)
	}
	return nil
}

func strp(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func intp(n *int64) any {
	if n == nil {
		return nil
	}
	return *n
}

// decode is this package's decoding of a sample, in the case files' shape.
func decode(command string, reply any) any {
	switch command {
	case "LOCK.INFO":
		i := parseInfo("s", reply)
		if i == nil {
			return nil
		}
		return map[string]any{"owner": strp(i.Owner), "token": intp(i.Token), "count": intp(i.Count), "ttl_ms": i.TTL.Milliseconds(),
			"waiters": i.Waiters, "mode": i.Mode, "holders": i.Holders, "limit": i.Limit, "permits_free": i.PermitsFree}
	case "LOCK.HOLDERS":
		out := []any{}
		for _, h := range parseHolders("s", reply) {
			out = append(out, map[string]any{"owner": h.Owner, "token": h.Token, "count": h.Count, "ttl_ms": h.TTL.Milliseconds(), "permits": h.Permits})
		}
		return out
	case "LOCK.HISTORY", "LOCK.LOG":
		out := []any{}
		for _, e := range parseLog("s", reply) {
			var who any
			if e.Who != nil {
				who = map[string]any{"client": intp(e.Who.Client), "name": strp(e.Who.Name), "user": strp(e.Who.User),
					"addr": strp(e.Who.Addr), "command": strp(e.Who.Command)}
			}
			out = append(out, map[string]any{"id": e.ID, "time_ms": e.Time, "db": e.DB, "key": e.Key, "owner": e.Owner,
				"token": e.Token, "reason": e.Reason, "held_ms": intp(e.Held), "who": who, "waiters": e.Waiters})
		}
		return out
	case "LOCK.WAITERS":
		out := []any{}
		for _, w := range parseWaiters("s", reply) {
			var timeout any
			if w.Timeout != nil {
				timeout = w.Timeout.Milliseconds()
			}
			out = append(out, map[string]any{"owner": w.Owner, "mode": w.Mode, "limit": w.Limit, "permits": w.Permits,
				"client": w.Client, "waited_ms": w.Waited.Milliseconds(), "timeout_ms": timeout, "ttl_ms": w.TTL.Milliseconds()})
		}
		return out
	case "LOCK.STATS":
		out := []any{}
		for _, k := range parseStats("s", reply) {
			out = append(out, map[string]any{"key": k.Key, "waits": k.Waits, "granted": k.Granted, "timeouts": k.Timeouts,
				"contended": k.Contended, "wait_ms_total": k.WaitTotal.Milliseconds(), "error": k.Error.Milliseconds(),
				"wait_ms_max": k.WaitMax.Milliseconds()})
		}
		return out
	}
	panic("no decoder for " + command)
}

// normal is v through JSON, to compare with the case's decoded.
func normal(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

func checkReplies(c map[string]any) error {
	command := c["command"].([]any)[0].(string)
	want, ok := c["decoded"]
	if !ok {
		return errors.New("no decoded")
	}
	if command == "LOCK.HOLDERS" && want == nil {
		want = []any{} // Holders is a list: no lock, no holders
	}
	for _, resp := range []string{"resp2", "resp3"} {
		if g := normal(decode(command, value(c[resp]))); !reflect.DeepEqual(g, want) {
			return fmt.Errorf("%s: got %v, want %v", resp, g, want)
		}
	}
	return nil
}

func TestCasesReplies(t *testing.T) { runCases(t, "replies.json", checkReplies) }

// TestCasesCatchWrongCases: each runner fails a case made wrong on purpose (a runner that
// checked nothing would pass every case).
func TestCasesCatchWrongCases(t *testing.T) {
	wrong := []struct {
		file  string
		check func(map[string]any) error
		spoil func(map[string]any)
	}{
		{"errors.json", checkError, func(c map[string]any) { c["expect"].(map[string]any)["class"] = "transient" }},
		{"validity.json", checkValidity, func(c map[string]any) { c["validity_us"] = c["validity_us"].(float64) + 1 }},
		{"round.json", checkRound, func(c map[string]any) { c["expect"].(map[string]any)["acquire"] = "not_acquired" }},
		{"replies.json", checkReplies, func(c map[string]any) { c["decoded"].(map[string]any)["token"] = 1.0 }},
	}
	for _, w := range wrong {
		c := loadCases(t, w.file)
		pick := c[0].raw
		if w.file == "replies.json" {
			pick = c[1].raw // "info exclusive"
		}
		if err := w.check(pick); err != nil {
			t.Fatalf("%s: the case should pass before it is spoiled: %v", w.file, err)
		}
		w.spoil(pick)
		if w.check(pick) == nil {
			t.Fatalf("%s: a spoiled case passed", w.file)
		}
	}
}
