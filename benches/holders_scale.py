#!/usr/bin/env python3
"""How the cost of a semaphore's or read-write lock's commands grows with
its holders (issue 20): instructions per operation, whole server, under
valgrind --tool=callgrind (the method and helpers of
benches/server_cost.py), at N = 10, 1,000, 10,000 and 100,000 holders, next
to ZADD, ZREM and ZSCORE on a plain sorted set of the same N.

Rows, each the mean over --requests requests whose every reply is checked:

  acquire        a granted SEM.ACQUIRE / RWLOCK.ACQUIRE … READ
  renew          RENEW of a live holder
  refusal        an acquire refused (a full semaphore; WRITE beside readers)
  release        RELEASE of a live holder, nobody waiting
  queued grant   a semaphore: RELEASE that hands the place to a waiter
                 (the release, the grant and the waiter's reply); a
                 read-write lock: CLIENT UNBLOCK of a waiting writer, which
                 hands the key to the reader queued behind it (the writer's
                 departure, the grant and both replies)

At N <= 1,000 every request goes to a key of its own (as many keys as
requests, each filled with N holders), so each one meets exactly N holders;
above, all requests share one key, which then grows by at most
--requests holders (under 2 % at N = 10,000). Keys are filled outside the
measured region with one ZADD of the stored form (rules/src/holders.rs: the
tag member "" scored with the limit, 0 for readers; every holder a member
scored with its lease end) plus PEXPIREAT. With --max-hold MS every holder,
filled or measured, has a hold limit (its member "\\0" + token scored
-holdUntil, docs/lease.md) and every acquire sends MAXHOLD MS.

Targets (issue 20): at every N each write costs at most 3x the native pair
ZADD + ZREM on a set of the same N, and at N = 100,000 at most 2x its own
cost at N = 10. --check-targets exits 1 when one is missed. (Waiter
departure at W = 10..10,000 waiters belongs to the queue's work and is not
measured here.)

Usage:
    python3 benches/holders_scale.py                    # ~5 min
    python3 benches/holders_scale.py --sizes 10,1000 --requests 100
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
OWN_KEYS_UPTO = 1_000


def now_ms() -> int:
    return int(time.time() * 1000)


def holder(i: int) -> str:
    # 39 bytes, as the tokens of holders_cost.py.
    return "h-%06d-%s" % (i, sc.TOKEN[9:])


def keys_for(n: int, requests: int) -> list:
    return ["k:%06d" % j for j in range(requests if n <= OWN_KEYS_UPTO else 1)]


def fill(conn: sc.Conn, keys: list, n: int, tag, with_tag: bool = True, max_hold=None) -> None:
    """Every key gets n members scored with a lease end (and the tag);
    with max_hold, each its hold-limit member "\\0" + token too."""
    deadline = now_ms() + TTL
    cmds = []
    for k in keys:
        for start in range(0, n, 50_000):
            args = ["ZADD", k]
            if with_tag and start == 0:
                args += [tag, ""]
            for i in range(start, min(n, start + 50_000)):
                args += [deadline, holder(i)]
                if max_hold:
                    args += [-(deadline - TTL + max_hold), "\0" + holder(i)]
            cmds.append(args)
        cmds.append(["PEXPIREAT", k, deadline])
    sc.fill(conn, cmds, batch=200)


KEEP = None  # --cg-keep: a directory for each cell's profile


def measured(srv: sc.Server, conn: sc.Conn, requests: list, want, name: str = "") -> float:
    """Instructions per request, each request sent alone and its reply checked."""
    srv.cg_start()
    for r in requests:
        got = conn.call(*r)
        if got != want:
            raise RuntimeError(f"{r}: reply {got!r}, expected {want!r}")
    keep = os.path.join(KEEP, name.replace(" ", "-") + ".out") if KEEP and name else None
    return srv.cg_stop(keep_as=keep) / len(requests)


def until_waiting(conn: sc.Conn, n: int) -> None:
    deadline = time.time() + 600
    while sc.info_field(conn, "lock", "lock_waiting") != n:
        if time.time() > deadline:
            raise RuntimeError(f"expected {n} waiting clients")
        time.sleep(0.05)


def waiter(port: int, args: list):
    """A connection that sends a blocking acquire; returns it and its id."""
    c = sc.Conn(port)
    cid = c.call("CLIENT", "ID")
    c.sock.sendall(sc.encode(args))
    return c, cid


def family_rows(srv: sc.Server, n: int, requests: int, sem: bool, max_hold=None) -> dict:
    """Ir/op of acquire, renew, refusal, release and a queued grant."""
    conn = srv.conn
    terms = ["MAXHOLD", max_hold] if max_hold else []
    keys = keys_for(n, requests)
    per_key = requests // len(keys)
    key = lambda i: keys[i % len(keys)]
    limit = n + per_key
    if sem:
        acq = lambda i, t: ["SEM.ACQUIRE", key(i), t, limit, TTL] + terms
        refused = lambda i: ["SEM.ACQUIRE", key(i), "x-%06d" % i, limit, TTL] + terms
        pre, tag = "SEM.", limit
    else:
        acq = lambda i, t: ["RWLOCK.ACQUIRE", key(i), t, "READ", TTL] + terms
        refused = lambda i: ["RWLOCK.ACQUIRE", key(i), "x-%06d" % i, "WRITE", TTL] + terms
        pre, tag = "RWLOCK.", 0
    conn.call("FLUSHALL")
    fill(conn, keys, n, tag, max_hold=max_hold)
    c = sc.Conn(srv.port)
    c.call("PING")
    mine = ["a-%06d" % i for i in range(requests)]
    rows = {}
    rows["acquire"] = measured(srv, c, [acq(i, mine[i]) for i in range(requests)], 1)
    rows["renew"] = measured(srv, c, [[pre + "RENEW", key(i), mine[i], TTL] for i in range(requests)], 1)
    rows["refusal"] = measured(srv, c, [refused(i) for i in range(requests)], 0)
    rows["release"] = measured(
        srv, c, [[pre + "RELEASE", key(i), mine[i]] for i in range(requests)], 1, f"{pre}release-{n}"
    )
    # The queued grant: full again, then waiters.
    sc.fill(conn, [acq(i, mine[i]) for i in range(requests)])
    waiters = []
    if sem:
        for i in range(requests):
            waiters.append(waiter(srv.port, ["SEM.ACQUIRE", key(i), "q-%06d" % i, limit, TTL, "WAIT", 0] + terms))
        until_waiting(conn, requests)
        rows["queued grant"] = measured(
            srv, c, [[pre + "RELEASE", key(i), mine[i]] for i in range(requests)], 1, f"sem-queued-grant-{n}"
        )
        for w, _ in waiters:
            if w.read() != 1:
                raise RuntimeError("a waiter was not granted")
    else:
        # Per key: a writer, then a reader behind it, and so on.
        writers = []
        for i in range(requests):
            w = waiter(srv.port, ["RWLOCK.ACQUIRE", key(i), "w-%06d" % i, "WRITE", TTL, "WAIT", 0] + terms)
            writers.append(w)
            until_waiting(conn, 2 * i + 1)
            waiters.append(waiter(srv.port, ["RWLOCK.ACQUIRE", key(i), "q-%06d" % i, "READ", TTL, "WAIT", 0] + terms))
            until_waiting(conn, 2 * i + 2)
        rows["queued grant"] = measured(
            srv, c, [["CLIENT", "UNBLOCK", cid] for _, cid in writers], 1, f"rw-queued-grant-{n}"
        )
        for w, _ in writers:
            if w.read() != 0:
                raise RuntimeError("an unblocked writer was not refused")
            w.close()
        for w, _ in waiters:
            if w.read() != 1:
                raise RuntimeError("a reader behind a writer was not granted")
    for w, _ in waiters:
        w.close()
    c.close()
    return rows


def native_rows(srv: sc.Server, n: int, requests: int) -> dict:
    conn = srv.conn
    keys = keys_for(n, requests)
    key = lambda i: keys[i % len(keys)]
    conn.call("FLUSHALL")
    fill(conn, keys, n, None, with_tag=False)
    c = sc.Conn(srv.port)
    c.call("PING")
    deadline = now_ms() + TTL
    mine = ["a-%06d" % i for i in range(requests)]
    rows = {}
    rows["ZADD"] = measured(srv, c, [["ZADD", key(i), deadline, mine[i]] for i in range(requests)], 1)
    rows["ZSCORE"] = measured(srv, c, [["ZSCORE", key(i), mine[i]] for i in range(requests)], str(deadline).encode())
    rows["ZREM"] = measured(srv, c, [["ZREM", key(i), mine[i]] for i in range(requests)], 1)
    c.close()
    return rows


OPS = ["acquire", "renew", "refusal", "release", "queued grant"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,1000,10000,100000", help="holders per key (default 10,1000,10000,100000)")
    ap.add_argument("--requests", type=int, default=200, help="requests per row (default 200)")
    ap.add_argument("--check-targets", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument(
        "--max-hold",
        type=int,
        metavar="MS",
        help="every holder (filled and measured) with MAXHOLD MS (at least 600000): the cost of hold-limit members",
    )
    ap.add_argument("--cg-keep", metavar="DIR", help="keep the release and queued-grant profiles in DIR (for callgrind_annotate)")
    args = ap.parse_args()
    global KEEP
    KEEP = args.cg_keep
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    module = sc.build_module(args)
    results = {}
    srv = sc.Server(args.redis_server, module, callgrind=True)
    try:
        for n in sizes:
            nat = native_rows(srv, n, args.requests)
            print(f"cg N={n:<7} native {nat}", file=sys.stderr)
            for fam, sem in (("semaphore", True), ("read-write lock", False)):
                rows = family_rows(srv, n, args.requests, sem, args.max_hold)
                print(f"cg N={n:<7} {fam} {rows}", file=sys.stderr)
                results[(fam, n)] = rows
            results[("native", n)] = nat
    finally:
        srv.stop()

    missed = []
    print("Ir per operation (callgrind, whole server). \"x pair\": the operation over ZADD + ZREM on a plain")
    print(f"sorted set of the same N; \"x N={sizes[0]}\": over its own cost at N = {sizes[0]}.")
    print()
    print("| N | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---|" + "--:|" * len(sizes))
    for name in ("ZADD", "ZREM", "ZSCORE"):
        print(f"| `{name}` (plain sorted set) | " + " | ".join(f"{results[('native', n)][name]:,.0f}" for n in sizes) + " |")
    pair = {n: results[("native", n)]["ZADD"] + results[("native", n)]["ZREM"] for n in sizes}
    print("| ZADD + ZREM (the native pair) | " + " | ".join(f"{pair[n]:,.0f}" for n in sizes) + " |")
    for fam in ("semaphore", "read-write lock"):
        for op in OPS:
            cells = []
            base = results[(fam, sizes[0])][op]
            for n in sizes:
                v = results[(fam, n)][op]
                # (REDIS_LOCK_BENCH_IR=module: the native rows count no module work, 0)
                vs_pair, vs_small = v / pair[n] if pair[n] else 0.0, v / base if base else 0.0
                ok_pair = vs_pair <= 3.0
                ok_small = n != 100_000 or vs_small <= 2.0
                if not (ok_pair and ok_small):
                    missed.append(f"{fam} {op} at N={n}: {vs_pair:.2f}x pair, {vs_small:.2f}x N={sizes[0]}")
                cells.append(f"{v:,.0f} ({vs_pair:.2f}x pair, {vs_small:.2f}x N={sizes[0]})")
            print(f"| {fam}: {op} | " + " | ".join(cells) + " |")
    print()
    print(f"{args.requests} requests per cell; keys of their own up to N = {OWN_KEYS_UPTO:,}, one shared key above.")
    print(f"\nMachine:\n\n{sc.machine(args.redis_server)}")
    if missed:
        print("\nTargets missed:\n\n" + "\n".join(f"- {m}" for m in missed))
    else:
        print("\nEvery target met (each write <= 3x the native pair; at N = 100,000 <= 2x its cost at N = 10).")
    return 1 if missed and args.check_targets else 0


if __name__ == "__main__":
    sys.exit(main())
