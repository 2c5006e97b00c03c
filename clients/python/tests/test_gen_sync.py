"""_sync.py's methods shared with aio.py are written by scripts/gen_sync.py from aio.py: the
checked-in file must be what the script writes now (nobody edits them by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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
