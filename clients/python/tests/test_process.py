"""The process around a hold: exit (normal, an uncaught exception, killed), threads that outlive
the main thread, signals during a wait, fork."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import relock
from helpers import connect, eventually, holding, run_python, wait_out_ttl
from servers import Server


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_process_exit_releases_what_it_holds(server: Server) -> None:
    import subprocess
    import sys

    code = (
        "import redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "h = locks.acquire('exit', ttl=60)\n"
        "print(h.token, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert relock.Relock(connect(server)).info("exit") is None


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_redlock_holds_are_released_at_interpreter_exit(servers3: list[Server]) -> None:
    """Attack: a Redlock client's process ends normally with a hold still held (docs: "released
    at interpreter exit (atexit)"). Must hold: no master keeps it after the process is gone."""
    ports = [s.port for s in servers3]
    code = (
        "import redis, relock\n"
        f"locks = relock.Relock([redis.Redis(port=p) for p in {ports}])\n"
        "h = locks.acquire('rl-exit', ttl=60)\n"
        "print(h.token, flush=True)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert holding(servers3, "rl-exit") == [False] * 3


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_one_server_holds_are_released_at_exit_even_on_an_uncaught_exception(server: Server) -> None:
    """Attack: a process (one server) dies of an uncaught exception, and another one calls
    sys.exit, each with a hold. Must hold: released at exit."""
    for ending in ("raise RuntimeError('boom')", "import sys; sys.exit(3)"):
        code = (
            "import redis, relock\n"
            f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
            "h = locks.acquire('exit', ttl=60)\n"
            f"{ending}\n"
        )
        out = run_python(code, 60)
        assert out is not None and out.returncode != 0
        assert holding([server], "exit") == [False], ending


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_killed_process_keeps_its_lock_no_longer_than_the_ttl(server: Server) -> None:
    """Attack: SIGTERM (no handler) and os._exit with a hold of ttl 1 s. Must hold: nothing
    renews it afterwards; it is free within the ttl (plus slack)."""
    code = (
        "import os, sys, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "h = locks.acquire(sys.argv[1], ttl=1)\n"
        "print('held', flush=True)\n"
        "if sys.argv[1] == 'exit': os._exit(0)\n"
        "time.sleep(60)\n"
    )
    for how in ("term", "exit"):
        p = subprocess.Popen([sys.executable, "-c", code, how], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "held"
            if how == "term":
                p.send_signal(signal.SIGTERM)
            p.wait(20)
            gone = time.monotonic()
            assert eventually(lambda: holding([server], how) == [False], 5)
            assert time.monotonic() - gone < 2.0
        finally:
            p.kill()
            p.wait()


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_worker_thread_keeps_its_hold_after_the_main_thread_returns(server: Server) -> None:
    """Attack: the main thread starts a (non-daemon) worker and returns; the worker holds a
    0.6 s lock for 2 s. Must hold: the hold is renewed the whole time (the process is alive,
    the server healthy)."""
    code = (
        "import threading, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "def work():\n"
        "    with locks.lock('worker', ttl=0.6) as h:\n"
        "        print('lost' if h.lost.wait(2.0) else 'kept', h.reason, flush=True)\n"
        "threading.Thread(target=work).start()\n"
        "time.sleep(0.1)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert out.stdout.startswith("kept"), out.stdout


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_an_interrupted_redlock_wait_exits_and_leaves_no_waiter(servers3: list[Server]) -> None:
    """Attack: a process waits without limit for a Redlock key that is held, and gets SIGTERM
    (its handler calls sys.exit, as services do). Must hold: it exits promptly, and its waits
    leave the masters' queues (nobody is granted the lock for a dead waiter)."""
    locks = relock.Relock([connect(s) for s in servers3])
    holder = locks.acquire("rl-wait", ttl=30)
    assert holder is not None
    code = (
        "import signal, sys, redis, relock\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
        f"locks = relock.Relock([redis.Redis(port=s) for s in {[s.port for s in servers3]}])\n"
        "print('waiting', flush=True)\n"
        "with locks.lock('rl-wait', ttl=30):\n"
        "    print('granted', flush=True)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        queued = lambda: sum(bool(connect(s).execute_command("LOCK.WAITERS", "rl-wait")) for s in servers3)  # noqa: E731
        assert eventually(lambda: queued() >= 2, 10)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
            exited = True
        except subprocess.TimeoutExpired:
            exited = False
        assert exited, "still running 5 s after SIGTERM (its executor threads block in LOCK.WAIT)"
        assert eventually(lambda: queued() == 0, 5), "a master kept the dead process's wait"
        holder.release()
        assert eventually(lambda: holding(servers3, "rl-wait") == [False] * 3, 5), holding(servers3, "rl-wait")
    finally:
        p.kill()
        p.wait()


# From test_sync.py (the sync client: the behaviour cases of relock-client).
def test_fork_after_acquire(server: Server) -> None:
    r = connect(server)
    locks = relock.Relock(r)
    with locks.lock("k", ttl=1.0) as h:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the hold is the parent's, never renewed or released here
            ok = h.lost.is_set() and not h.release()
            try:
                h.check()
                ok = False
            except relock.LockLost as e:
                ok = ok and "forked" in str(e)
            os.write(write, b"ok" if ok else b"no")
            os._exit(0)
        os.close(write)
        assert os.read(read, 2) == b"ok"
        os.waitpid(pid, 0)
        wait_out_ttl(1.2)  # longer than the ttl: the parent's renewal still runs
        h.check()
        info = locks.info("k")
        assert info is not None and info.owner == h.owner


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_child_forked_mid_renewal_can_use_the_client(server: Server) -> None:
    """Attack: fork at the instant a relock background thread (renewal, connection opener)
    holds the per-server connection lock, as it does for every checkout; that instant is hit
    about 1 fork in 40 with 20 holds of ttl 30 ms, and is pinned here by holding that lock from
    a thread across the fork. Must hold: the child can take a lock of its own (the parent's
    holds are not its own; its client state is reset at fork)."""
    # A busy machine (make test's four lanes) made the child's one attempt time out at the
    # default 0.1 s: the fork is what is tested, not the timeout.
    locks = relock.Relock(connect(server), node_timeout=2)
    with locks.lock("parent", ttl=5) as h:
        inner = locks._servers[0]._cond
        taken, done = threading.Event(), threading.Event()

        def busy() -> None:
            with inner:
                taken.set()
                done.wait(5)

        threading.Thread(target=busy, daemon=True).start()
        assert taken.wait(5)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            signal.alarm(3)
            try:
                c = locks.acquire("child", ttl=1, wait=0)
                os._exit(0 if c is not None and c.release() else 1)
            except BaseException:  # noqa: BLE001
                os._exit(2)
        done.set()
        _, status = os.waitpid(pid, 0)
        h.check()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status} (SIGALRM: hung)"


# From test_attack.py (an attack on the package: a break found and fixed since, or one it held).
def test_a_forked_child_that_exits_leaves_the_parents_hold_alone(server: Server) -> None:
    """Attack: fork inside ``with locks.lock(...)``; the child takes a lock of its own, leaves
    the ``with`` block (its exit releases) and ends with sys.exit (atexit runs in the child).
    Must hold: the child neither releases nor renews the parent's hold; the parent keeps it and
    renews it past its ttl."""
    code = (
        "import os, sys, time, redis, relock\n"
        f"locks = relock.Relock(redis.Redis(port={server.port}))\n"
        "with locks.lock('k', ttl=0.6) as h:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        with locks.lock('child', ttl=1, wait=0):\n"
        "            pass\n"
        "    else:\n"
        "        os.waitpid(pid, 0)\n"
        "        time.sleep(1.0)\n"
        "        h.check()\n"
        "        print('parent kept', locks.info('k').owner == h.owner, flush=True)\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "print('released', locks.info('k') is None, flush=True)\n"
    )
    out = run_python(code, 60)
    assert out is not None and out.returncode == 0, out
    assert out.stdout.split() == ["parent", "kept", "True", "released", "True"], out.stdout + out.stderr

