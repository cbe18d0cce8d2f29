#!/usr/bin/env python3
"""What the orphan walk costs the server (src/blocked/orphan_walk.rs,
docs/sessions.md "A key moved to another node"): one semaphore of N
permits, each held by its own session (N sessions: the most lookups a key
of N places can need). First a refused acquire asks for a walk of the key
while every session is known here (each stepped over); then the key comes
back without its sessions (`DUMP`, `FLUSHALL`, `RESTORE`: N orphans) and a
refused acquire asks again (each place given its end). Reported: the
longest run of the sessions' timer (`lock_session_tick_max_us`, the
server thread's CPU time) after each, the longest PING round trip a probe
sees during the orphans' walk, and how long that walk took (until
`lock_orphans_leased` reached N).

Usage:
    python3 benches/orphan_walk_cost.py               # N=100000
    python3 benches/orphan_walk_cost.py --places 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402

TTL = 600_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--places", type=int, default=100_000)
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    n = args.places
    module = sc.build_module(args)
    srv = sc.Server(args.redis_server, module)
    try:
        conn = srv.conn
        conn.call("CONFIG", "SET", "lock.orphan-grace", TTL)
        ids: list[str] = []
        while len(ids) < n:
            batch = min(5_000, n - len(ids))
            replies = conn.pipeline(sc.encode(["SESSION.GRANT", TTL]) * batch, batch)
            ids.extend(r.decode() for r in replies)
        sc.fill(conn, (["SEM.ACQUIRE", "sem", f"t{i}", n, TTL, "SESSION", ids[i]] for i in range(n)), batch=5_000)
        # Every session known: the walk steps over each.
        before = sc.info_field(conn, "lock", "lock_session_tick_max_us")
        if conn.call("SEM.ACQUIRE", "sem", "other", n, 1000) != 0:
            sys.exit("the semaphore was not full")
        time.sleep(3)
        known = sc.info_field(conn, "lock", "lock_session_tick_max_us")
        dump = conn.call("DUMP", "sem")
        conn.call("FLUSHALL")
        conn.call("RESTORE", "sem", 0, dump)
        probe = sc.Conn(srv.port)
        started = time.perf_counter()
        conn.call("SEM.ACQUIRE", "sem", "other", n, 1000)
        longest, pings = sc.ping_until(probe, lambda: sc.info_field(conn, "lock", "lock_orphans_leased") >= n)
        took = (time.perf_counter() - started) * 1000
        orphans = sc.info_field(conn, "lock", "lock_session_tick_max_us")
        idle = sc.ping_idle(probe, pings)
        probe.close()
    finally:
        srv.stop()
    print("| places (sessions) | longest timer run, all known | longest timer run, all orphans "
          "| longest PING | the same PINGs, idle | orphans' walk took |")
    print("|---|---|---|---|---|---|")
    print(f"| {n:,} | {known / 1000:.2f} ms (before: {before / 1000:.2f} ms) | {orphans / 1000:.2f} ms "
          f"| {longest * 1000:.2f} ms | {idle * 1000:.2f} ms | {took:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
