from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from servers import LossProxy, Server  # noqa: E402


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def servers3() -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for _ in range(3):
            started.append(Server())
        yield started
    finally:
        for s in started:
            s.close()


@pytest.fixture(params=["3", "2"], ids=["resp3", "resp2"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def proxy(server: Server) -> Iterator[LossProxy]:
    """A proxy to ``server`` that loses or delays replies on demand (servers.LossProxy)."""
    p = LossProxy(server.port)
    try:
        yield p
    finally:
        p.close()
