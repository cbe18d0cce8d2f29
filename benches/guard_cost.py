#!/usr/bin/env python3
"""Server-side cost of a guarded write (issue 16), in instructions per
operation for the whole server process under callgrind:

  native  SET d v                          (the write alone, no check)
  guard   LOCK.GUARD lock:g tok SET d v    (the module's check + RM_Call)
  eval    EVALSHA of a script that compares the lock's value with the token
          and then SETs (bare values only: the cheapest script check)

each on a held lock, plus both refusals (the token does not hold the lock:
NOTHELD, nothing written). Every reply is checked, so each request took the
intended path. Uses the server, client and callgrind control of
`server_cost.py` (same --hz 1 setup, so the numbers compare with its table).

Reproduce the README table:
    python3 benches/guard_cost.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_cost import OK, Conn, RespError, Server, encode, machine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[2], ARGV[2])
end
return redis.error_reply('NOTHELD the token does not hold the lock')"""


def not_held(r) -> bool:
    return isinstance(r, RespError) and str(r).startswith("NOTHELD")


# (name, argv, reply check); {sha} is the script's SHA1.
CASES = [
    ("write, held: native SET", ["SET", "d", "v"], lambda r: r == OK),
    ("write, held: LOCK.GUARD", ["LOCK.GUARD", "lock:g", "tok", "SET", "d", "v"], lambda r: r == OK),
    ("write, held: EVALSHA check+SET", ["EVALSHA", "{sha}", "2", "lock:g", "d", "tok", "v"], lambda r: r == OK),
    ("refused (not held): LOCK.GUARD", ["LOCK.GUARD", "lock:g", "other", "SET", "d", "v"], not_held),
    ("refused (not held): EVALSHA", ["EVALSHA", "{sha}", "2", "lock:g", "d", "other", "v"], not_held),
]


def run_case(srv: Server, argv: list, check, n: int, pipeline: int) -> float:
    conn = Conn(srv.port)
    try:
        conn.call("PING")
        payload = encode(argv)
        srv.cg_start()
        done = 0
        while done < n:
            k = min(pipeline, n - done)
            for r in conn.pipeline(payload * k, k):
                if not check(r):
                    raise RuntimeError(f"{argv}: unexpected reply {r!r}")
            done += k
        return srv.cg_stop() / n
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000, help="requests per case (default 10000)")
    ap.add_argument("--pipelines", default="1,16", help="pipeline depths (default 1,16)")
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"), help="prebuilt module (default: build target/release/libredis_lock.so)")
    args = ap.parse_args()
    module = args.module
    if not module:
        import subprocess
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "redis-lock", "--lib"], cwd=ROOT, check=True)
        module = str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "libredis_lock.so")
    pipelines = [int(p) for p in args.pipelines.split(",")]
    started = time.time()
    results = {}
    srv = Server(args.redis_server, str(Path(module).resolve()), callgrind=True)
    try:
        sha = srv.conn.call("SCRIPT", "LOAD", SCRIPT).decode()
        # Held for the whole run: a day's TTL.
        assert srv.conn.call("LOCK.ACQUIRE", "lock:g", "tok", 86_400_000) == 1
        for p in pipelines:
            for name, argv, check in CASES:
                argv = [sha if a == "{sha}" else a for a in argv]
                results[(name, p)] = run_case(srv, argv, check, args.requests, p)
                print(f"cg P{p:<2} {name:40} {results[(name, p)]:,.0f}", file=sys.stderr)
    finally:
        srv.stop()

    print("| operation | " + " | ".join(f"Ir/op P{p}" for p in pipelines) + " |")
    print("|---|" + "---:|" * len(pipelines))
    for name, _, _ in CASES:
        print(f"| {name} | " + " | ".join(f"{results[(name, p)]:,.0f}" for p in pipelines) + " |")
    print()
    for p in pipelines:
        native, guard, script = (results[(n, p)] for n, _, _ in CASES[:3])
        print(f"P{p}: LOCK.GUARD adds {guard - native:,.0f} Ir to the SET ({guard / native:.2f}x); the script adds {script - native:,.0f} ({script / native:.2f}x)")
    print(f"\nMachine:\n\n{machine(args.redis_server)}\n\nElapsed: {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
