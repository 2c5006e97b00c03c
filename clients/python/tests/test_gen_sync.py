"""_sync.py's methods shared with aio.py are written by scripts/gen_sync.py from aio.py: the
checked-in file must be what the script writes now (nobody edits them by hand)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_sync.py"


def _gen_sync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_sync", module)
    spec.loader.exec_module(module)
    return module


def test_sync_client_is_what_the_generator_writes() -> None:
    gen = _gen_sync()
    current = gen.TARGET.read_text()
    assert gen.generate(gen.SOURCE.read_text(), current) == current, (
        "src/relock/_sync.py is not what scripts/gen_sync.py writes from aio.py: edit aio.py, run the script"
    )


def test_every_generated_method_is_marked_and_found() -> None:
    """Every method the generator writes carries its marker, and no marker is left over a
    method written by hand (one taken off the list)."""
    gen = _gen_sync()
    text = gen.TARGET.read_text()
    assert text.count(gen.MARKER) == len(gen.GENERATED)


def test_the_rules_rewrite_code_not_words() -> None:
    gen = _gen_sync()
    src = (
        "    @contextlib.asynccontextmanager\n"
        "    async def f(self) -> AsyncIterator[int]:\n"
        '        """Use ``async with x`` here; an await in words stays."""\n'
        "        async with self._step:  # async with comment\n"
        "            yield await self.g(awaited=1)\n"
    )
    assert gen._unasync(src.splitlines(keepends=True)) == (
        "    @contextlib.contextmanager\n"
        "    def f(self) -> Iterator[int]:\n"
        '        """Use ``with x`` here; an await in words stays."""\n'
        "        with self._step:  # with comment\n"
        "            yield self.g(awaited=1)\n"
    ).splitlines(keepends=True)


def test_every_method_by_hand_says_why_and_is_pinned() -> None:
    """Every method both files have is generated or written by hand with a comment saying
    why, pinned to both versions: one comment per ``BY_HAND`` entry, none left over."""
    gen = _gen_sync()
    text = gen.TARGET.read_text()
    assert text.count(gen.BY_HAND_MARK) == len(gen.BY_HAND)
    for why in gen.BY_HAND.values():
        assert why.strip()


def _change(text: str, cls: str, name: str, extra: str) -> str:
    """``text`` with ``extra`` (a line of code) added at the start of ``cls.name``'s body."""
    gen = _gen_sync()
    tree = ast.parse(text)
    _, last = gen._methods(tree)[(cls, name)]
    lines = text.splitlines(keepends=True)
    indent = lines[last - 1][: len(lines[last - 1]) - len(lines[last - 1].lstrip())]
    lines.insert(last - 1, f"{indent}{extra}\n")
    return "".join(lines)


def test_a_change_on_one_side_of_a_method_by_hand_fails_until_pinned() -> None:
    """A method written by hand that changed in aio.py (or in _sync.py) alone fails the check,
    naming it; after the other side is brought in step, --pin takes the pair again."""
    gen = _gen_sync()
    source, target = gen.SOURCE.read_text(), gen.TARGET.read_text()
    for src, tgt in (
        (_change(source, "Hold", "_end", "self._touched = 1"), target),
        (source, _change(target, "Hold", "_end", "self._touched = 1")),
    ):
        with pytest.raises(gen.Drift, match=r"Hold\._end"):
            gen.generate(src, tgt)
    repinned = gen.generate(source, _change(target, "Hold", "_end", "self._touched = 1"), frozenset({"Hold._end"}))
    assert gen.generate(source, repinned) == repinned


def test_a_method_in_both_files_on_neither_list_fails() -> None:
    gen = _gen_sync()
    source, target = gen.SOURCE.read_text(), gen.TARGET.read_text()
    method = "    def _new_helper(self) -> int:\n        return 1\n\n"
    src = source.replace("    async def settle(self) -> None:", method + "    async def settle(self) -> None:", 1)
    tgt = target.replace("    def close(self) -> None:\n        \"\"\"Closes relock's own", method + "    def close(self) -> None:\n        \"\"\"Closes relock's own", 1)
    assert src != source and tgt != target
    with pytest.raises(gen.Drift, match=r"Relock\._new_helper"):
        gen.generate(src, tgt)
