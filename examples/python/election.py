"""Leader election: candidates queue for one key, the holder leads, its term is its token.

node-a campaigns and leads; node-b campaigns (queued behind it); an observer follows the
leaders. node-a resigns: node-b leads in the same step, with a larger term. node-b resigns,
and the observer has seen every leader.

    python3 examples/python/election.py     # against $REDIS_URL (default redis://127.0.0.1:6379)
"""

import os
import sys
import threading
import time
import uuid

# scripts/setup-examples installs relock and redis-py into .deps/ beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".deps"))

import redis  # noqa: E402
import relock  # noqa: E402


def main() -> None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379"
    locks = relock.Relock(redis.Redis.from_url(url))
    key = f"service:leader:{uuid.uuid4().hex[:8]}"

    # The observer: every leader, until nobody leads after node-b.
    seen: list[str] = []

    def observe() -> None:
        for change in locks.observe(key):
            seen.append("nobody" if change.leader is None else f"{change.value} (term {change.term})")
            if len(seen) == 4:
                return

    observer = threading.Thread(target=observe)
    observer.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)  # for the demo: campaign once the observer has seen that nobody leads

    a = locks.campaign(key, "node-a", ttl=10)
    print(f"node-a: leads, term {a.term}")

    got: list[relock.Leadership] = []
    b_thread = threading.Thread(target=lambda: got.append(locks.campaign(key, "node-b", ttl=10)))
    b_thread.start()
    deadline = time.monotonic() + 10
    while (lead := locks.leader(key)) is not None and lead.waiters == 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # for the demo: resign only once node-b is queued
    print(f"node-b: queued behind {lead.value if lead else None}")

    print(f"node-a: resign() -> {a.resign()}")
    lead = locks.leader(key)
    print(f"leader() right after: {lead.value if lead else None}, term {lead.term if lead else 0}")
    b_thread.join()
    b = got[0]
    print(f"node-b: leads, term {b.term}")
    while len(seen) < 3 and time.monotonic() < deadline + 10:
        time.sleep(0.005)  # for the demo: resign once the observer has seen node-b lead
    b.resign()
    observer.join(10)
    print(f"observer saw: {', '.join(seen)}")
    print(f"leader() -> {locks.leader(key)}")


if __name__ == "__main__":
    main()
