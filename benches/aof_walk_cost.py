#!/usr/bin/env python3
"""What restating the sessions after an AOF rewrite without the RDB
preamble costs the server (src/store/aof_walk.rs, docs/sessions.md
"Persistence"): S sessions holding nothing plus one session holding N
locks, `aof-use-rdb-preamble no`, then BGREWRITEAOF. Reported: the longest
run of the sessions' timer during the walk (`lock_session_tick_max_us`,
the server thread's CPU time: every slice is bounded, the sessions walked
from a slot cursor),
the longest PING round trip a probe sees meanwhile (and the same PINGs
idle), and how long the walk took.

Usage:
    python3 benches/aof_walk_cost.py                       # S=100000, N=1000000
    python3 benches/aof_walk_cost.py --sessions 1000 --locks 10000
    python3 benches/aof_walk_cost.py --sessions 1000000 --locks 10000
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
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--locks", type=int, default=1_000_000)
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    module = sc.build_module(args)
    extra = ("--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0")
    srv = sc.Server(args.redis_server, module, extra=extra)
    try:
        conn = srv.conn
        sc.fill(conn, (["SESSION.GRANT", TTL] for _ in range(args.sessions)), batch=5_000)
        sid = conn.call("SESSION.GRANT", TTL)
        sc.fill(conn, (["LOCK.ACQUIRE", f"k:{i:07d}", "tok", TTL, "SESSION", sid] for i in range(args.locks)),
                batch=5_000)
        while "aof_rewrite_in_progress:0" not in conn.call("INFO", "persistence").decode():
            time.sleep(0.05)
        before = sc.info_field(conn, "lock", "lock_session_tick_max_us")
        probe = sc.Conn(srv.port)
        started = time.perf_counter()
        conn.call("BGREWRITEAOF")
        longest, pings = sc.ping_until(probe, lambda: sc.info_field(conn, "lock", "lock_aof_walking") == 0)
        took = (time.perf_counter() - started) * 1000
        tick = sc.info_field(conn, "lock", "lock_session_tick_max_us")
        idle = sc.ping_idle(probe, pings)
        probe.close()
    finally:
        srv.stop()
    print("| sessions | locks of one | longest timer run (CPU) | longest PING | the same PINGs, idle | walk took |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.sessions:,} | {args.locks:,} | {tick / 1000:.2f} ms (before: {before / 1000:.2f} ms) "
          f"| {longest * 1000:.2f} ms | {idle * 1000:.2f} ms | {took:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
