"""Real redis-servers with the relock module for the tests: each on a free port (bound to
port 0 first), in its own directory, ready within a deadline, killed on teardown."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[3]
READY_WITHIN = 20.0


def module_path() -> str:
    env = os.environ.get("RELOCK_MODULE")
    if env:
        return env
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "librelock.so"
        if p.exists():
            return str(p)
    raise RuntimeError("module not built: run `cargo build -p relock` (make test does)")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nobody listens on, below the kernel's ephemeral range (10000 up to it): a port
    from bind(0) is in that range, where any outgoing connection may take it between a
    server's kill and its restart on the same port ("Address already in use", as the module's
    suites found in a fresh make test)."""
    low = _ephemeral_low()
    for _ in range(200 if low > 11000 else 0):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(check: Callable[[], bool], within: float = 20.0, every: float = 0.01) -> bool:
    """Whether ``check`` comes true within ``within`` seconds (a generous bound, never a
    fixed sleep)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every)
    return check()


class Server:
    def __init__(self, *args: str, module: bool = True) -> None:
        self.dir = tempfile.mkdtemp(prefix="relock-py-test-")
        self.args = list(args)
        self.module = module
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.start()

    def start(self, port: int | None = None) -> None:
        last = ""
        for _ in range(5):
            self.port = port or free_port()
            cmd = [
                os.environ.get("REDIS_SERVER", "redis-server"),
                "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--logfile", "redis.log",
                "--enable-debug-command", "yes",
            ]
            if self.module:
                cmd += ["--loadmodule", module_path()]
            self.proc = subprocess.Popen(cmd + self.args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._ready():
                return
            last = self.log()
            self.kill()
            if port is not None or "Address already in use" not in last:
                break
        raise RuntimeError(f"redis-server did not start:\n{last}")

    def _ready(self) -> bool:
        end = time.monotonic() + READY_WITHIN
        while time.monotonic() < end:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"INFO server\r\n")
                    data = b""
                    while b"process_id:" not in data or not data.rstrip().endswith(b""):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                        if b"\r\n\r\n" in data[-8:] or len(data) > 200 and b"process_id:" in data:
                            break
                    if f"process_id:{self.proc.pid}\r".encode() in data:
                        return True
                    if b"LOADING" not in data and b"process_id:" in data:
                        return False  # another server on our port
            except OSError:
                pass
            time.sleep(0.02)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    def log(self) -> str:
        try:
            return (Path(self.dir) / "redis.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Six nodes with the module, three masters and three replicas (`redis-cli --cluster
    create`), healthy before it is handed out."""

    def __init__(self) -> None:
        # redis-cli waits, with no bound of its own, until every node knows every other (at load
        # 12 a create ran past 120 s): 90 s, then once more on new nodes.
        try:
            self._start()
        except subprocess.TimeoutExpired as e:
            print(f"cluster: a second attempt on new nodes after: {e}\n{e.stdout!r}", file=sys.stderr)
            self._start()

    def _start(self) -> None:
        import redis

        self.nodes: list[Server] = []
        try:
            for _ in range(6):
                bus = str(free_port())
                # Diskless sync at once: by default a master waits 5 s for more replicas to come.
                self.nodes.append(Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "2000", "--cluster-port", bus,
                                         "--repl-diskless-sync-delay", "0"))
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1",
                                  "--cluster-yes"], capture_output=True, text=True, timeout=90)
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
            self.redis = redis
            if not eventually(self.healthy, 60, 0.1):
                raise RuntimeError("cluster not healthy in time")
        except BaseException:
            self.close()
            raise

    def conn(self, n: Server) -> "Any":
        return self.redis.Redis(port=n.port, socket_timeout=2, decode_responses=True)

    def role(self, n: Server) -> str:
        try:
            return str(self.conn(n).info("replication")["role"])
        except Exception:  # noqa: BLE001
            return ""

    def healthy(self) -> bool:
        for n in self.nodes:
            try:
                c = self.conn(n)
                info = c.cluster("info")
                if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != 6:
                    return False
                # Every node's view agrees: three masters, each replica known as a replica of one
                # of them. (A replica's link can be up before the others, its master included,
                # have heard that it replicates: a master ignores a manual failover started by
                # a node it does not know as its replica, and the failover never comes.)
                view = c.cluster("nodes").values()
                masters = {v["node_id"] for v in view if "master" in v["flags"].split(",")}
                replicas = [v["master_id"] for v in view if "slave" in v["flags"].split(",")]
                if len(masters) != 3 or len(replicas) != 3 or not set(replicas) <= masters:
                    return False
                if any(not v["connected"] or any(f in v["flags"] for f in ("fail", "handshake", "noaddr"))
                       for v in view):
                    return False
                repl = c.info("replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
                if repl["role"] == "master" and int(repl.get("connected_slaves", 0)) != 1:
                    return False
            except Exception:  # noqa: BLE001
                return False
        return True

    def master_of(self, key: str) -> Server:
        c = self.conn(self.nodes[0])
        slot = int(c.cluster("keyslot", key))
        for s, e, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if s <= slot <= e:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise KeyError(key)

    def replica_of(self, master: Server) -> Server:
        for n in self.nodes:
            repl = self.conn(n).info("replication")
            if repl["role"] == "slave" and int(repl["master_port"]) == master.port:
                return n
        raise KeyError(master.port)

    def failover(self, replica: Server, old_master: Server) -> None:
        self.conn(replica).execute_command("CLUSTER", "FAILOVER")
        if not eventually(lambda: self.role(replica) == "master" and self.role(old_master) == "slave", 60, 0.05):
            raise RuntimeError("failover did not happen in time")
        eventually(self.healthy, 60, 0.1)

    def close(self) -> None:
        for n in self.nodes:
            n.close()


class SlowProxy:
    """A TCP proxy to ``port`` that holds every new connection ``delay`` seconds before it
    forwards anything: a server that is slow to connect to (far away, or on a loaded
    machine), and quick to answer once connected."""

    def __init__(self, port: int, delay: float) -> None:
        self.target = port
        self.delay = delay
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        time.sleep(self.delay)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        pump(upstream, client)

    def close(self) -> None:
        self.closed = True
        self.listener.close()


class LossProxy:
    """A TCP proxy to ``port`` that loses replies on demand: once ``arm(pattern)`` is called,
    the next command sent through it that contains ``pattern`` reaches the server, and the
    server's reply to it is dropped and the client's connection reset (a connection that
    died between a command and its reply). ``arm(pattern, delay=d)`` delays that reply by
    ``d`` seconds instead. ``lost`` counts the replies lost so far; ``hit`` is set once an
    armed pattern went through, ``delivered`` once a delayed reply was passed on."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.closed = False
        self.armed: list[tuple[bytes, float | None]] = []
        self.lost = 0
        self.hit = threading.Event()
        self.delivered = threading.Event()
        self.silent = False
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.seen: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def sever_silently(self) -> None:
        """Closes every connection to the server and leaves the clients' ends open and
        silent: connections that died without a word (a NAT that forgot them, a cable)."""
        self.silent = True
        for _, upstream in list(self.pairs):
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                upstream.close()

    def arm(self, pattern: bytes, times: int = 1, delay: float | None = None) -> None:
        with self._lock:
            self.armed += [(pattern, delay)] * times

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self.pairs.append((client, upstream))
        drop = threading.Event()
        delays: list[float] = []

        def reset() -> None:
            with contextlib.suppress(OSError):
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()

        def up() -> None:
            try:
                while data := client.recv(65536):
                    if self.silent:
                        continue
                    self.seen.append(data)
                    with self._lock:
                        hit = next((a for a in self.armed if a[0] in data), None)
                        if hit is not None:
                            self.armed.remove(hit)
                    lose = hit is not None and hit[1] is None
                    if hit is not None and hit[1] is not None:
                        delays.append(hit[1])
                    elif lose:
                        drop.set()
                    upstream.sendall(data)
                    if hit is not None:
                        self.hit.set()
                    if lose:
                        return
            except OSError:
                pass
            if not self.silent:
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=up, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                if drop.is_set():
                    self.lost += 1
                    reset()
                    return
                delayed = bool(delays)
                if delayed:
                    time.sleep(delays.pop())
                client.sendall(data)
                if delayed:
                    self.delivered.set()
        except OSError:
            pass
        if not self.silent:
            reset()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
