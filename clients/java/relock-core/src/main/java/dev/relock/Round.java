package dev.relock;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Predicate;

/** One Redlock round: the replies, fed in as they come, decide whether a quorum is won or lost. */
final class Round {
    enum Progress { PENDING, WON, LOST }

    record Failed(int i, Failure f) {}

    final String[] names;
    final long startedNanos;
    final boolean untilAll;
    final Object[] agreed;
    int nAgreed;
    final boolean[] answered;
    int nAnswered;
    final List<Failed> failures = new ArrayList<>();
    long elapsedNanos;

    Round(String[] names, long startedNanos, boolean untilAll) {
        this.names = names;
        this.startedNanos = startedNanos;
        this.untilAll = untilAll;
        this.agreed = new Object[names.length];
        this.answered = new boolean[names.length];
    }

    static int quorum(int n) {
        return n / 2 + 1;
    }

    int n() {
        return names.length;
    }

    Progress progress() {
        if (untilAll && nAnswered < n()) {
            return Progress.PENDING;
        }
        if (nAgreed >= quorum(n())) {
            return Progress.WON;
        }
        if (failures.size() + quorum(n()) > n()) {
            return Progress.LOST;
        }
        return Progress.PENDING;
    }

    /** Server i's answer: a value when it agreed, null for a refusal, or a failure. */
    Progress onReply(int i, Object value, Failure f) {
        Progress p = progress();
        if (p != Progress.PENDING || i < 0 || i >= n() || answered[i]) {
            return p;
        }
        answered[i] = true;
        nAnswered++;
        if (f != null) {
            failures.add(new Failed(i, f));
        } else if (value == null) {
            failures.add(new Failed(i, Failure.refusal()));
        } else {
            agreed[i] = value;
            nAgreed++;
        }
        return progress();
    }

    /** A grant made after the round was decided (a won wait topped up). */
    void addGrant(int i, Object v) {
        if (i < 0 || i >= n() || v == null) {
            return;
        }
        if (!answered[i]) {
            answered[i] = true;
            nAnswered++;
        }
        if (agreed[i] == null) {
            nAgreed++;
        }
        agreed[i] = v;
    }

    Round finish(long atNanos) {
        elapsedNanos = Math.max(0, atNanos - startedNanos);
        return this;
    }

    boolean won() {
        return nAgreed >= quorum(n());
    }

    int count(Predicate<Failure> keep) {
        int k = 0;
        for (Failed x : failures) {
            if (keep.test(x.f())) {
                k++;
            }
        }
        return k;
    }

    int inGrace() {
        return count(f -> f.grace);
    }

    int refused() {
        return count(f -> f.refused);
    }

    int permanent() {
        return count(f -> f.permanent);
    }

    boolean someFailed() {
        return refused() < failures.size();
    }

    boolean badTtl() {
        return count(f -> f.badTtl) > 0;
    }

    boolean permanentlyFailed() {
        return permanent() + quorum(n()) > n();
    }

    boolean onlyUndone() {
        return count(f -> f.refused || f.undone) == failures.size();
    }

    boolean someUnanswered() {
        return count(f -> !f.refused && !f.permanent) > 0;
    }

    boolean[] unanswered() {
        boolean[] out = new boolean[n()];
        for (Failed x : failures) {
            out[x.i()] = !x.f().refused && !x.f().permanent;
        }
        return out;
    }

    boolean[] agreedBy() {
        boolean[] out = new boolean[n()];
        for (int i = 0; i < n(); i++) {
            out[i] = agreed[i] != null;
        }
        return out;
    }

    boolean[] mayHold() {
        boolean[] out = new boolean[n()];
        Arrays.fill(out, true);
        for (Failed x : failures) {
            if (x.f().permanent) {
                out[x.i()] = false;
            }
        }
        return out;
    }

    /** The validity the round leaves of ttlMs in µs, -1 when none (or not won). */
    long validUs(long ttlMs) {
        if (!won()) {
            return -1;
        }
        return Rules.validityUs(ttlMs, elapsedNanos / 1000);
    }

    /** A quorum granted, but what the round leaves is under two thirds of the ttl (a long wait). */
    boolean grantedLate(long ttlMs) {
        long v = validUs(ttlMs);
        return won() && (v < 0 || (v / 1000) * 3 < ttlMs * 2);
    }

    /** [now, later]: where a failed acquisition is released now, and later in the background. */
    boolean[][] giveBack() {
        boolean[] now = agreedBy();
        boolean[] refusedOrUndone = new boolean[n()];
        for (Failed x : failures) {
            if (x.f().refused || x.f().undone) {
                refusedOrUndone[x.i()] = true;
            }
        }
        boolean[] later = mayHold();
        for (int i = 0; i < n(); i++) {
            later[i] = later[i] && !now[i] && !refusedOrUndone[i];
        }
        return new boolean[][] {now, later};
    }

    String describe(Predicate<Failure> keep) {
        List<String> parts = new ArrayList<>();
        for (Failed x : failures) {
            if (keep == null || keep.test(x.f())) {
                parts.add(names[x.i()] + ": " + x.f().msg);
            }
        }
        return parts.isEmpty() ? "no server failed" : String.join("; ", parts);
    }

    List<String> servers(Predicate<Failure> keep) {
        List<String> out = new ArrayList<>();
        for (Failed x : failures) {
            if (keep == null || keep.test(x.f())) {
                out.add(names[x.i()]);
            }
        }
        return out;
    }

    RelockException permanentError(String key) {
        for (Failed x : failures) {
            String s = names[x.i()];
            Failure f = x.f();
            if (f.otherLimit >= 0) {
                return new RelockException(RelockException.Kind.OTHER_LIMIT, key,
                    "lock \"" + key + "\" on " + s + ": it has another limit there (" + f.otherLimit + "; 0 means none)",
                    List.of(s), f.otherLimit, false, null);
            }
            if (f.otherPermits) {
                return new RelockException(RelockException.Kind.OTHER_PERMITS, key,
                    "lock \"" + key + "\" on " + s + ": the owner holds it with another number of permits", List.of(s), -1, false, null);
            }
            if (f.otherMode) {
                return new RelockException(RelockException.Kind.OTHER_MODE, key,
                    "lock \"" + key + "\" on " + s + ": the owner holds it in the other mode (an exclusive holder uses downgrade)",
                    List.of(s), -1, false, null);
            }
        }
        return new RelockException(RelockException.Kind.SERVER, key,
            "lock \"" + key + "\": " + describe(f -> f.permanent) + " (retrying cannot help)", servers(f -> f.permanent), -1, false, null);
    }

    RelockException acquireError(String key, long ttlMs, long waitedMs) {
        if (won()) {
            return new NotAcquiredException(key, "lock \"" + key + "\": quorum reached after " + elapsedNanos / 1_000_000
                + " ms, leaving no validity of the " + ttlMs + " ms ttl", List.of(), null);
        }
        if (permanentlyFailed()) {
            return permanentError(key);
        }
        int g = inGrace();
        if (g > 0 && nAgreed == 0 && g + refused() == failures.size()) {
            return new NotAcquiredException(key, "lock \"" + key + "\": not granted, " + describe(f -> f.grace)
                + " (retry: the grace ends by itself)", servers(f -> f.grace), null);
        }
        String within = waitedMs > 0 ? " within " + waitedMs + " ms" : "";
        if (n() == 1 && !someFailed()) {
            return new NotAcquiredException(key, "lock \"" + key + "\" is held by another owner" + within, List.of(), null);
        }
        if (waitedMs > 0 && !someFailed()) {
            return new NotAcquiredException(key, "lock \"" + key + "\": not acquired" + within, List.of(), null);
        }
        return new NotAcquiredException(key, "lock \"" + key + "\": no quorum, " + nAgreed + " of " + n() + " servers granted, "
            + quorum(n()) + " needed (" + describe(null) + ")", servers(f -> !f.refused), null);
    }

    /** After an acquisition round without validity: the error to return, or null to try again. */
    RelockException afterFailed(String key, long ttlMs, long waitedMs, boolean deadlinePassed, boolean bounded) {
        if (permanentlyFailed()) {
            return permanentError(key);
        }
        RelockException e = acquireError(key, ttlMs, waitedMs);
        if (deadlinePassed) {
            return e;
        }
        if (n() == 1 && bounded && !someFailed()) {
            return e;
        }
        return null;
    }

    /** A release no quorum made because permanent failures alone leave none; else null. */
    RelockException releaseError(String key) {
        if (won() || !permanentlyFailed()) {
            return null;
        }
        return new RelockException(RelockException.Kind.SERVER, key, "lock \"" + key + "\": release refused ("
            + describe(f -> f.permanent) + "); the lock stays held there until its ttl runs out (retrying cannot help)",
            servers(f -> f.permanent), -1, false, null);
    }

    /** After a renewal without validity: whether no quorum can renew any more. */
    boolean renewLost() {
        return !won() && (refused() > 0 || permanent() > 0) && refused() + permanent() + quorum(n()) > n();
    }
}
