"""Rules of this suite, checked on its own files: a helper is defined once (helpers.py,
conftest.py, servers.py), and no test lets a fixed time pass other than through
``wait_out_ttl`` (a ttl, a timeout or a stall that has to run its length) or waits for an
event another way (``eventually``, ``until``, an Event). The one kind of pause allowed in a
test is work under a lock, marked ``(not a wait)`` on its line; code run in a child process
(a string) is not this suite's."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: Where the waits themselves, and the fakes that stall on purpose, live.
INFRASTRUCTURE = {"helpers.py", "servers.py"}


def _files() -> list[Path]:
    return sorted(p for p in TESTS.glob("*.py") if p.name not in INFRASTRUCTURE)


def test_no_helper_is_defined_in_two_files() -> None:
    where: dict[str, list[str]] = {}
    for path in [*_files(), TESTS / "helpers.py", TESTS / "servers.py"]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where.setdefault(node.name, []).append(path.name)
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"defined in more than one file (define it once, in helpers.py or conftest.py): {twice}"


def _sleeps(source: str) -> list[int]:
    """The lines of ``source`` that call a sleep (time.sleep, asyncio.sleep, usleep) with a
    time that is not 0, unless marked ``(not a wait)``."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in ("sleep", "usleep"):
            continue
        if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0:
            continue  # a yield to the event loop, no time
        if "(not a wait)" in lines[node.lineno - 1]:
            continue
        found.append(node.lineno)
    return found


def test_no_fixed_sleep_outside_wait_out_ttl() -> None:
    found = {p.name: lines for p in _files() if (lines := _sleeps(p.read_text()))}
    assert not found, f"fixed sleeps (use wait_out_ttl, or wait for the event: eventually, until): {found}"


def test_the_rule_finds_a_sleep() -> None:
    assert _sleeps("import time\ntime.sleep(0.5)\n") == [2]
    assert _sleeps("import asyncio\nasync def f() -> None:\n    await asyncio.sleep(0.1)\n") == [3]
    assert _sleeps("import asyncio\nasync def f() -> None:\n    await asyncio.sleep(0)\n") == []
    assert _sleeps('code = "time.sleep(60)"\n') == []
    assert _sleeps("time.sleep(0.001)  # the work under the lock (not a wait)\n") == []
