#!/usr/bin/env python3
"""Writes the methods that ``relock.Relock`` (src/relock/_sync.py) shares with
``relock.aio.Relock`` (src/relock/aio.py) from the asyncio source, so that nobody keeps the
two in step by hand:

    scripts/gen_sync.py           rewrites _sync.py's generated methods from aio.py
    scripts/gen_sync.py --check   exits 1 (and says which) when _sync.py is not what it writes

    scripts/gen_sync.py --pin Hold._end ...
                                  after a method of ``BY_HAND`` changed in one file and was
                                  brought in step in the other: pins the pair again

What is generated is the list ``GENERATED`` below: every method (or property) whose asyncio
version, rewritten by the rules below, is the synchronous one. Each sits in _sync.py where
it was, under a marker line (``MARKER``).

The methods both files have that are not generated are ``BY_HAND``, each with why: they
differ in more than ``async``/``await``, because the synchronous client runs on threads
(worker pools, a renewal thread, a ``threading.Lock`` per hold, connections opened by
background threads and cut by ``_Cancel`` from another thread, Ctrl-C handled where the
asyncio client handles a cancellation), the asyncio one on tasks (a renewal task per hold,
``asyncio.shield`` and spawned tasks for steps that must not be cut). Each sits under a
comment that says why, with a pin: a digest of both versions (aio.py's rewritten by the rules,
and _sync.py's). When either changes, the check fails, naming the method, until the other is
brought in step and the pair is pinned again (``--pin``). A method in both files that is on
neither list fails the check too; methods of one file alone (the thread or task machinery)
are free.

tests/test_gen_sync.py fails when the checked-in _sync.py is not what this script writes.

The rules, on tokens (so strings and comments are never touched by the code rules):
  * ``async def``, ``async with``, ``async for`` lose ``async``; ``await`` goes;
  * names: see ``NAMES`` (``AsyncIterator`` -> ``Iterator``, ``asynccontextmanager`` ->
    ``contextmanager``, ``__aenter__`` -> ``__enter__``, ...);
  * strings (docstrings) and comments: see ``TEXT`` (``async with`` -> ``with``, ...).
"""

from __future__ import annotations

import ast
import hashlib
import io
import sys
import textwrap
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "relock"
SOURCE = PACKAGE / "aio.py"
TARGET = PACKAGE / "_sync.py"

MARKER = "# generated from aio.py by scripts/gen_sync.py: edit it there, then run the script"

#: (class, method): the methods written from aio.py into _sync.py.
GENERATED: list[tuple[str, str]] = [
    ("Relock", "servers"),
    ("Relock", "quorum"),
    ("Relock", "new_owner"),
    ("Relock", "lock"),
    ("Relock", "acquire"),
    ("Relock", "lock_all"),
    ("Relock", "acquire_all"),
    ("Relock", "_check_slot"),
    ("Relock", "info"),
    ("Relock", "info_each"),
    ("Relock", "holders"),
    ("Relock", "waiters"),
    ("Relock", "force_release"),
    ("Relock", "stats"),
    ("Relock", "log"),
    ("Relock", "reset_log"),
    ("Relock", "history"),
    ("Relock", "_history"),
    ("Relock", "_acquire"),
    ("Relock", "_acquire_all"),
    ("Relock", "_wait_each"),
    ("Relock", "_give_back"),
    ("Relock", "_release_failed"),
    ("Relock", "_give_back_until"),
    ("Relock", "_not_acked"),
    ("Relock", "_ack_time"),
    ("Relock", "_query_each"),
    ("Relock", "_each_node"),
    ("Relock", "campaign"),
    ("Relock", "leader"),
    ("Relock", "_leader"),
    ("_LossEvent", "__init__"),
    ("Hold", "__repr__"),
    ("Hold", "__aenter__"),
    ("Hold", "__aexit__"),
    ("Hold", "_lost_at"),
    ("Hold", "_stall_reason"),
    ("Hold", "check"),
    ("Hold", "fenced"),
    ("Hold", "keys"),
    ("Hold", "who"),
    ("Hold", "cause"),
    ("Hold", "is_valid"),
    ("Hold", "_expired"),
    ("Hold", "_expiry_reason"),
    ("Hold", "_renew_args"),
    ("Hold", "_release_args"),
    ("Hold", "_all_held"),
    ("Hold", "_refused_words"),
    ("Hold", "_lose_with_history"),
    ("Hold", "release"),
    ("Hold", "_settle_steps"),
    ("Hold", "_take_back"),
    ("Hold", "_fence"),
    ("GroupHold", "__init__"),
    ("GroupHold", "__repr__"),
    ("GroupHold", "__aenter__"),
    ("GroupHold", "keys"),
    ("GroupHold", "_renew_args"),
    ("GroupHold", "_release_args"),
    ("GroupHold", "_all_held"),
    ("GroupHold", "_refused_words"),
    ("GroupHold", "downgrade"),
    ("GroupHold", "reenter"),
    ("GroupHold", "_fence"),
    ("Leadership", "__repr__"),
    ("Leadership", "__aenter__"),
    ("Leadership", "term"),
    ("Leadership", "value"),
    ("Leadership", "resign"),
    ("Leadership", "downgrade"),
]

#: (class, method in aio.py) -> why _sync.py writes it by hand.
BY_HAND: dict[tuple[str, str], str] = {
    ("_Server", "__init__"): "connections are opened by background threads under a threading.Condition, with a first-connection grace; asyncio opens them in the calling task",
    ("_Server", "_checkout"): "waits on a threading.Condition, up to the caller's deadline, for a connection a background thread opens",
    ("_Server", "_checkin"): "hands the connection to a waiting thread (Condition.notify); asyncio closes a surplus one in a task",
    ("_Server", "_acked"): "reads WAIT's reply with the socket's own timeout; asyncio bounds the read with _within",
    ("_Server", "_undo"): "blocking reads bounded by socket timeouts, the connection checked in here; asyncio reads in a shielded task",
    ("_Server", "call"): "a blocking call a _Cancel cuts from another thread, connecting bounded apart (connect_within), the wait watched inline; asyncio: wait_for and a watcher task",
    ("_Server", "fenced"): "blocking reads bounded by socket timeouts, the first-connection grace; asyncio: wait_for",
    ("_Server", "_fenced_cluster"): "redis-py's sync cluster pools (get_connection, release); asyncio's nodes (acquire_connection, initialize first)",
    ("_Server", "_cluster_acked"): "redis-py's sync cluster client; asyncio's is initialized first and its reads bounded by wait_for",
    ("_Server", "role"): "the sync cluster client keeps its own timeouts; asyncio bounds the call with wait_for",
    ("_Server", "call_many"): "blocking pipelined reads bounded by socket timeouts; asyncio: wait_for over the whole",
    ("_Server", "call_nodes"): "the sync cluster client keeps its own timeouts; asyncio bounds it with wait_for",
    ("_Server", "close"): "under the Condition, and a cluster's connections are redis-py's own; asyncio closes in the loop",
    ("Relock", "__init__"): "worker pools and the renewal thread (_make_pools, _Renewer) instead of tasks and a WeakSet of holds",
    ("Relock", "_ask"): "takes a _Cancel and connect_within (a blocking call cut from another thread); asyncio's timeouts are asyncio.TimeoutError",
    ("Relock", "_round"): "fans out on worker pools (concurrent.futures), renewals on workers of their own; asyncio spawns a task per request",
    ("Relock", "_wait_round"): "each Redlock wait blocks a worker of its own and is cut by a _Cancel, the waits cut off topped up (_top_up); asyncio cancels tasks",
    ("Relock", "_release_late"): "submits to the background workers; asyncio spawns a task",
    ("Relock", "observe"): "returns an Observer that stop() ends from another thread (cutting a blocked LOCK.OBSERVE); asyncio's is an async generator ended by cancellation",
    ("_LossEvent", "is_set"): "a thread that reads lost sets the reason at once (there is no task to wake); asyncio sets it in check()",
    ("Hold", "__init__"): "threading locks, registered with the renewal thread; asyncio: asyncio locks and a renewal task",
    ("Hold", "_lose"): "under the state lock (the renewal thread races the holder), and leaves the renewal thread's list",
    ("Hold", "_renew_round"): "the renewal thread's round (background=True) schedules the next one itself and renew() raises from inside; asyncio's returns a verdict to its loop",
    ("Hold", "_renew_locked"): "the renewal thread's round (background=True) schedules the next one itself and renew() raises from inside; asyncio's returns a verdict to its loop",
    ("Hold", "renew"): "the renewal round raises itself (background=False); asyncio's returns a verdict",
    ("Hold", "downgrade"): "the mode changes under the state lock, which the renewal thread reads under",
    ("Hold", "_end"): "under the state lock; an interrupt (Ctrl-C) moves the release to a thread of its own; asyncio shields a task of its own",
    ("Hold", "_release_whole"): "leaves the renewal thread's list first; asyncio gives the release back in the background when its task is cancelled",
    ("Hold", "_close"): "asyncio shields the release from a cancellation; threads are not cancelled",
    ("Hold", "reenter"): "the step in runs in the calling thread under the step lock (an interrupt taken back in place); asyncio runs it in a task of its own that a cancellation never cuts",
    ("Hold", "_step_out"): "the step out runs in the calling thread under the step lock; asyncio's is a task of its own, shielded",
}

#: The first words of the comment above a ``BY_HAND`` method in _sync.py.
BY_HAND_MARK = "# by hand, beside aio.py's (scripts/gen_sync.py BY_HAND), pin "


class Drift(Exception):
    """_sync.py and aio.py are not in step where the script can tell, but cannot fix."""


def pin(aio_lines: list[str], sync_lines: list[str]) -> str:
    """A digest of both versions of a ``BY_HAND`` method (aio.py's rewritten by the rules)."""
    both = "".join(_unasync(aio_lines)) + "\0" + "".join(sync_lines)
    return hashlib.sha256(both.encode()).hexdigest()[:12]


def by_hand_comment(indent: str, digest: str, why: str) -> list[str]:
    first = f"{indent}{BY_HAND_MARK}{digest}:"
    lines = textwrap.wrap(why, width=100 - len(indent) - 2, break_on_hyphens=False)
    return [first + "\n"] + [f"{indent}# {line}\n" for line in lines]


def _comment_above(lines: list[str], first: int) -> int:
    """The first line (1-based) of the ``BY_HAND`` comment right above line ``first``, or
    ``first`` when there is none."""
    at = first
    while at >= 2 and lines[at - 2].lstrip().startswith("#") and lines[at - 2].strip() != MARKER:
        at -= 1
        if lines[at - 1].lstrip().startswith(BY_HAND_MARK):
            return at
    return first


#: Dotted names rewritten in code (``asyncio.sleep(...)`` pauses the thread).
DOTTED = {
    "asyncio.sleep": "time.sleep",
}

#: Names rewritten in code.
NAMES = {
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}

#: Text rewritten in strings and comments (the docstrings say what a caller writes).
TEXT = [
    ("``async with ", "``with "),
    ("``await ", "``"),
    ("async with", "with"),
]


def _rename(name: str) -> str:
    return NAMES.get(name, name)


def _methods(tree: ast.Module) -> dict[tuple[str, str], tuple[int, int]]:
    """(class, method) -> its first line (decorators included) and last line, 1-based."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([m.lineno, *(d.lineno for d in m.decorator_list)])
                    assert m.end_lineno is not None
                    out[(node.name, m.name)] = (first, m.end_lineno)
    return out


def _unasync(lines: list[str]) -> list[str]:
    """The rules above, on a method's lines (whole lines of aio.py)."""
    text = "".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def at(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), offsets in text
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            nxt = tokens[i + 1]
            if tok.string == "async" and nxt.string not in ("def", "with", "for"):
                continue
            if nxt.start[0] != tok.start[0]:
                raise SystemExit(f"gen_sync: {tok.string} at a line's end: {tok.line.strip()}")
            edits.append((at(tok.start), at(nxt.start), ""))
        elif (
            tok.type == tokenize.NAME
            and i + 2 < len(tokens)
            and tokens[i + 1].string == "."
            and f"{tok.string}.{tokens[i + 2].string}" in DOTTED
        ):
            edits.append((at(tok.start), at(tokens[i + 2].end), DOTTED[f"{tok.string}.{tokens[i + 2].string}"]))
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((at(tok.start), at(tok.end), NAMES[tok.string]))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            new = tok.string
            for old, repl in TEXT:
                new = new.replace(old, repl)
            if new != tok.string:
                edits.append((at(tok.start), at(tok.end), new))
    for start, end, repl in sorted(edits, reverse=True):
        text = text[:start] + repl + text[end:]
    return text.splitlines(keepends=True)


def generate(source: str, target: str, repin: frozenset[str] = frozenset()) -> str:
    """``target`` (_sync.py's text) with its generated methods written anew from ``source``,
    and the comments of its ``BY_HAND`` methods (those named in ``repin``, ``Class.method``,
    pinned again). Raises ``Drift`` for a ``BY_HAND`` pair whose pin no longer matches (one
    side changed) and for a method both files have that neither list names."""
    src_lines = source.splitlines(keepends=True)
    tgt_lines = target.splitlines(keepends=True)
    src_at = _methods(ast.parse(source))
    tgt_at = _methods(ast.parse(target))
    spans: list[tuple[int, int, list[str]]] = []
    generated = set(GENERATED)
    unlisted = [
        f"{cls}.{name}"
        for cls, name in src_at
        if (cls, _rename(name)) in tgt_at and (cls, name) not in generated and (cls, name) not in BY_HAND
    ]
    if unlisted:
        raise Drift(
            f"aio.py and _sync.py both have {', '.join(unlisted)}: generate it (GENERATED in "
            "scripts/gen_sync.py) or say why it is written by hand (BY_HAND)"
        )
    drifted: list[str] = []
    for (cls, name), why in BY_HAND.items():
        sync_name = (cls, _rename(name))
        if (cls, name) not in src_at or sync_name not in tgt_at:
            raise Drift(f"BY_HAND names {cls}.{name}, which aio.py or _sync.py lacks")
        first, last = src_at[(cls, name)]
        t_first, t_last = tgt_at[sync_name]
        digest = pin(src_lines[first - 1 : last], tgt_lines[t_first - 1 : t_last])
        c_first = _comment_above(tgt_lines, t_first)
        old = tgt_lines[c_first - 1 : t_first - 1]
        had = old[0].strip()[len(BY_HAND_MARK) :].split(":", 1)[0] if old else None
        if had != digest and f"{cls}.{name}" not in repin:
            drifted.append(f"{cls}.{name}")
            continue
        indent = tgt_lines[t_first - 1][: len(tgt_lines[t_first - 1]) - len(tgt_lines[t_first - 1].lstrip())]
        spans.append((c_first, t_first - 1, by_hand_comment(indent, digest, why)))
    if drifted:
        raise Drift(
            f"written by hand in _sync.py beside aio.py, and changed on one side since they were "
            f"last compared: {', '.join(drifted)}. Bring the other side in step, then run "
            f"scripts/gen_sync.py --pin {' '.join(drifted)}"
        )
    for cls, name in GENERATED:
        if (cls, name) not in src_at:
            raise SystemExit(f"gen_sync: aio.py has no {cls}.{name}")
        sync_name = (cls, _rename(name))
        if sync_name not in tgt_at:
            raise SystemExit(f"gen_sync: _sync.py has no {cls}.{sync_name[1]} to write")
        first, last = src_at[(cls, name)]
        body = _unasync(src_lines[first - 1 : last])
        indent = body[0][: len(body[0]) - len(body[0].lstrip())]
        t_first, t_last = tgt_at[sync_name]
        if t_first >= 2 and tgt_lines[t_first - 2].strip() == MARKER:
            t_first -= 1
        spans.append((t_first, t_last, [f"{indent}{MARKER}\n", *body]))
    for first, last, new in sorted(spans, reverse=True):
        tgt_lines[first - 1 : last] = new
    return "".join(tgt_lines)


def main(argv: list[str]) -> int:
    check = argv[1:] == ["--check"]
    repin = frozenset(argv[2:]) if argv[1:2] == ["--pin"] else frozenset()
    if argv[1:] not in ([], ["--check"]) and not repin:
        print(__doc__, file=sys.stderr)
        return 2
    current = TARGET.read_text()
    try:
        new = generate(SOURCE.read_text(), current, repin)
    except Drift as e:
        print(f"gen_sync: {e}", file=sys.stderr)
        return 1
    if new == current:
        return 0
    if check:
        print(f"gen_sync: {TARGET} is not what scripts/gen_sync.py writes from {SOURCE.name}: run it", file=sys.stderr)
        return 1
    TARGET.write_text(new)
    print(f"gen_sync: wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
