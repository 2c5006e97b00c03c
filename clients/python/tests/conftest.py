from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from servers import LossProxy, Server  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "alone: runs while no other test of this run does (a test whose timing bounds, such as "
        "the 0.1 s default node_timeout, a machine busy with the other workers' tests misses)",
    )


@pytest.fixture(autouse=True)
def alone_or_together(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist (several workers, scripts/test-clients), a test marked ``alone`` runs
    while no other test does; the others run side by side. A readers-writer lock on files
    that every worker of the run shares (the parent of each worker's basetemp): the others
    hold ``together`` shared, an ``alone`` test holds it exclusively, and ``gate`` lets an
    ``alone`` test that waits keep new tests from starting (else it could wait for ever).
    Taken before the test's other fixtures (servers) and released after their teardown.
    Without xdist every test is alone anyway."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker("alone") is not None
    with open(shared / "relock-gate.lock", "a") as gate, open(shared / "relock-together.lock", "a") as together:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(together, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(together, fcntl.LOCK_UN)


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
