#!/usr/bin/env python3
"""Writes the methods that ``relock.Relock`` (src/relock/_sync.py) shares with
``relock.aio.Relock`` (src/relock/aio.py) from the asyncio source, so that nobody keeps the
two in step by hand:

    scripts/gen_sync.py           rewrites _sync.py's generated methods from aio.py
    scripts/gen_sync.py --check   exits 1 (and says which) when _sync.py is not what it writes

What is generated is the list ``GENERATED`` below: every method (or property) whose asyncio
version, rewritten by the rules below, is the synchronous one. Each sits in _sync.py where
it was, under a marker line (``MARKER``); the rest of _sync.py is written by hand, because it
differs in more than ``async``/``await``: the synchronous client runs on threads (worker
pools, a renewal thread, a ``threading.Lock`` per hold, connections opened by background
threads and cut by ``_Cancel``, Ctrl-C handled where the asyncio client handles a
cancellation), the asyncio one on tasks (a renewal task per hold, ``asyncio.shield`` and
spawned tasks for steps that must not be cut). tests/test_gen_sync.py fails when the checked-in
_sync.py is not what this script writes.

The rules, on tokens (so strings and comments are never touched by the code rules):
  * ``async def``, ``async with``, ``async for`` lose ``async``; ``await`` goes;
  * names: see ``NAMES`` (``AsyncIterator`` -> ``Iterator``, ``asynccontextmanager`` ->
    ``contextmanager``, ``__aenter__`` -> ``__enter__``, ...);
  * strings (docstrings) and comments: see ``TEXT`` (``async with`` -> ``with``, ...).
"""

from __future__ import annotations

import ast
import io
import sys
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
    ("Relock", "_release_failed"),
    ("Relock", "campaign"),
    ("Relock", "leader"),
    ("Relock", "_leader"),
    ("_LossEvent", "__init__"),
    ("Hold", "__repr__"),
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


def generate(source: str, target: str) -> str:
    """``target`` (_sync.py's text) with its generated methods written anew from ``source``."""
    src_lines = source.splitlines(keepends=True)
    tgt_lines = target.splitlines(keepends=True)
    src_at = _methods(ast.parse(source))
    tgt_at = _methods(ast.parse(target))
    spans: list[tuple[int, int, list[str]]] = []
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
    if argv[1:] not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    current = TARGET.read_text()
    new = generate(SOURCE.read_text(), current)
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
