"""relock's Python package against redis-py's Lock and python-redis-lock, on one server:
uncontended acquire+release per second, and hand-off latency with 10 contending threads.
Prints one JSON line per peer. Usage: bench.py PORT SECONDS HANDOFFS"""

import json
import statistics
import sys
import threading
import time

import redis
import redis_lock

import relock

port, seconds, handoffs = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
r = redis.Redis(port=port)


def relock_cm(locks):
    return lambda key: locks.lock(key, ttl=30)


PEERS = {
    "relock (LOCK.WAIT, renewal thread)": lambda: relock_cm(relock.Relock(r)),
    "redis-py Lock (SET NX + Lua, polls every 0.1 s)": lambda: (lambda key: r.lock(key, timeout=30)),
    "python-redis-lock (SET NX + BLPOP signal)": lambda: (lambda key: redis_lock.Lock(r, key, expire=30)),
}


def uncontended(make):
    cm = make()
    n = 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        with cm("bench:uncontended"):
            pass
        n += 1
    return n / (time.perf_counter() - start)


def handoff(make):
    cm = make()
    key = f"bench:handoff:{time.monotonic_ns()}"
    lat = []
    state = {"released": None, "left": handoffs, "holder": None}
    guard = threading.Condition()

    def worker(me):
        while True:
            with guard:
                # A hand-off passes the lock to another worker: one that has just released
                # steps aside until another took it, so a lock that lets its releaser take it
                # straight back (every polling peer) is measured on its hand-offs, not on
                # re-acquisitions by the same worker.
                guard.wait_for(lambda: state["holder"] != me or state["left"] <= 0)
                if state["left"] <= 0:
                    return
            with cm(key):
                now = time.perf_counter()
                with guard:
                    if state["released"] is not None:
                        lat.append(now - state["released"])
                    state["left"] -= 1
                    state["holder"] = me
                    guard.notify_all()
                    done = state["left"] <= 0
                time.sleep(0.001)  # a little work under the lock
                with guard:
                    state["released"] = time.perf_counter()
            if done:
                return
            with guard:
                if state["left"] <= 0:
                    return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    return q[49] * 1000, q[98] * 1000, len(lat)


for name, make in PEERS.items():
    ops = uncontended(make)
    p50, p99, n = handoff(make)
    print(json.dumps({"lang": "Python", "peer": name, "ops": ops, "p50_ms": p50, "p99_ms": p99, "handoffs": n}), flush=True)
