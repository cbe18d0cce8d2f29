#!/usr/bin/env python3
"""Server-side cost of a key's wait queue as it grows (issue 20): W clients
blocked on one key, then, with callgrind's counters zeroed:

  leave   M of them leave the line, newest first (the far end from the
          head, where a scan of the line would be longest): `CLIENT UNBLOCK
          <id>` for each, the path of a timeout, a disconnect and CLIENT
          UNBLOCK alike. Side by side: as many BLPOP waiters on a list
          leaving the same way.
  grant   M handovers: each `LOCK.RELEASE` grants the head of the line in
          the same command. Side by side: M `RPUSH`es to a list with BLPOP
          waiters, each serving its head.

Instructions per operation inside the server's `processCommand`
(callgrind, inclusive: the command's own work; the whole process, as
benches/server_cost.py counts, would be dominated by the cron walking
thousands of clients), at W = 10, 1,000 and 10,000; M is
2 per batch, the cheapest of 5 batches (the same at every W, so that fixed
costs weigh alike). The target: a departure costs the same at W = 10,000 as at
W = 10.

Python 3 standard library only; needs valgrind, redis-server, and cargo
unless --module names a prebuilt module.

    python3 benches/waiters_cost.py            # the table in docs/performance.md
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402

KEY = "q"
HOLDER = "holder"


def waiter_args(kind: str, i: int) -> list:
    if kind == "module":
        return ["LOCK.ACQUIRE", KEY, f"w{i:05d}", 600000, "WAIT", 0]
    return ["BLPOP", KEY, 0]


def block(server: sc.Server, kind: str, w: int) -> list:
    """W clients blocked on KEY, oldest first: (connection, client id)."""
    waiters = []
    for i in range(w):
        c = sc.Conn(server.port)
        cid = c.call("CLIENT", "ID")
        c.sock.sendall(sc.encode(waiter_args(kind, i)))
        waiters.append((c, cid))
    # Every waiter is in line once the server counts them blocked.
    while True:
        info = server.conn.call("INFO", "clients").decode()
        blocked = int(info.split("blocked_clients:")[1].split()[0])
        if blocked >= w:
            return waiters
        sc.time.sleep(0.05)


def measure(server: sc.Server, payload: bytes, count: int, expect) -> int:
    """Instructions per request inside `processCommand` (inclusive), every
    reply `expect` (or for which `expect(reply)` holds): the
    commands' own work, without the event loop's. A server with thousands
    of clients spends millions of instructions a second walking them in
    its cron (clientsCron) and its epoll calls, whichever command runs, and
    that would drown what a command costs."""
    profile = Path(server.dir, "case.callgrind")
    server.cg_start()
    replies = server.conn.pipeline(payload, count)
    server.cg_stop(keep_as=str(profile))
    ok = expect if callable(expect) else (lambda r: r == expect)
    bad = [r for r in replies if not ok(r)]
    if bad:
        raise SystemExit(f"unexpected replies: {bad[:3]}")
    if sc.os.environ.get("REDIS_LOCK_BENCH_IR") == "module" and server.module:
        # The module's own share (server_cost.module_own_cost), to compare two module builds.
        return sc.module_own_cost(str(profile), sc.os.path.basename(server.module)) // count
    return process_command_ir(profile) // count


def process_command_ir(profile: Path) -> int:
    """Instructions inside `processCommand` (inclusive) in a kept profile."""
    out = sc.subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile)], capture_output=True,
                            text=True, check=True).stdout
    for line in out.splitlines():
        if line.rstrip().endswith(":processCommand") or ":processCommand " in line:
            return int(line.split()[0].replace(",", ""))
    raise SystemExit(f"no processCommand in the profile of {profile}")


def run(args, kind: str, op: str, w: int) -> int:
    server = sc.Server(args.redis_server, args.module if kind == "module" else None, callgrind=True,
                       extra=("--maxclients", str(w + 100)))
    try:
        if kind == "module":
            server.conn.call("LOCK.ACQUIRE", KEY, HOLDER, 600000)
        waiters = block(server, kind, w)
        m = args.ops
        newest = [cid for _, cid in reversed(waiters)]
        tokens = [HOLDER] + [f"w{i:05d}" for i in range(w)]
        best = None
        # The cheapest of several batches: the least disturbed by what else
        # the server did meanwhile.
        for rep in range(args.reps):
            batch = range(rep * m, (rep + 1) * m)
            if op == "leave":
                payload = b"".join(sc.encode(["CLIENT", "UNBLOCK", newest[i]]) for i in batch)
            elif kind == "module":
                # Each release hands the key to the head, whose token is next.
                payload = b"".join(sc.encode(["LOCK.RELEASE", KEY, tokens[i]]) for i in batch)
            else:
                # Each push serves the head at once: the list is empty again.
                payload = b"".join(sc.encode(["RPUSH", KEY, "x"]) for _ in batch)
            per_op = measure(server, payload, m, 1)
            if args.verbose:
                print(f"  {kind} {op} W={w} batch {rep}: {per_op} Ir/op", file=sys.stderr)
            best = per_op if best is None else min(best, per_op)
        for c, _ in waiters:
            c.close()
        return best
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--module", default=sc.os.environ.get("REDIS_LOCK_MODULE"),
                    help="prebuilt module (default: build target/release/libredis_lock.so)")
    ap.add_argument("--no-build", action="store_true", help="use target/release/libredis_lock.so as it is")
    ap.add_argument("--waiters", default="10,1000,10000", help="W values, comma-separated")
    ap.add_argument("--ops", type=int, default=2, help="operations per measured batch")
    ap.add_argument("--verbose", action="store_true", help="every batch's cost, on stderr")
    ap.add_argument("--reps", type=int, default=5, help="batches per case (ops x reps <= the smallest W)")
    args = ap.parse_args()
    args.module = sc.build_module(args)
    ws = [int(x) for x in args.waiters.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, max(ws) + 1000)), hard))
    rows = []
    for op, label in (("leave", "a waiter leaves (CLIENT UNBLOCK, newest first)"),
                      ("grant", "a release grants the head")):
        for w in ws:
            mod = run(args, "module", op, w)
            nat = run(args, "native", op, w)
            rows.append((label, w, mod, nat))
            print(f"{label}, W={w}: module {mod} Ir/op, native {nat} Ir/op", file=sys.stderr)
    print("Server instructions per operation (callgrind):\n")
    print(sc.machine(args.redis_server) + "\n")
    print("| operation | W waiters | module (LOCK.ACQUIRE … WAIT) | native (BLPOP) | module / native | module vs W = %d |" % ws[0])
    print("|---|--:|--:|--:|--:|--:|")
    base = {}
    for label, w, mod, nat in rows:
        base.setdefault(label, mod)
        print(f"| {label} | {w:,} | {mod:,} | {nat:,} | {mod / nat:.2f}× | {mod / base[label]:.2f}× |")


if __name__ == "__main__":
    main()
