#!/usr/bin/env python3
"""Server-side cost of LOCK.ACQUIREALL (issue 32) against N single-key
grants, for N = 1, 8 and 64 keys, in instructions inside the server's
`processCommand` (callgrind, inclusive; see benches/waiters_cost.py):

  at once   LOCK.ACQUIREALL N keys… on N free keys, against N
            LOCK.ACQUIRE on free keys (per grant of N keys: N of them);
  queued    a LOCK.RELEASE that hands N keys to a waiter on all of them (one
            key was held, the others waited free for it), against N
            LOCK.RELEASEs each handing one key to a single-key waiter;
  leave     CLIENT UNBLOCK of a waiter on N keys, with 20 earlier waiters on
            the same N keys ahead of it, against N single-key waiters
            leaving the same way.

The target: an N-key grant costs at most N single grants plus a constant,
and a departure at most N single departures (O(N log W)).

Python 3 standard library only; needs valgrind, redis-server, and cargo
unless --module names a prebuilt module.

    python3 benches/multi_cost.py            # the table in docs/performance.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402
import waiters_cost as wc  # noqa: E402

LEASE = 600000
AHEAD = 20


def keys(tag: str, n: int) -> list:
    return [f"{{{tag}}}:{i}" for i in range(n)]


def blocked_until(server: sc.Server, n: int) -> None:
    while True:
        info = server.conn.call("INFO", "clients").decode()
        if int(info.split("blocked_clients:")[1].split()[0]) >= n:
            return
        sc.time.sleep(0.05)


def wait_on(server: sc.Server, args: list) -> sc.Conn:
    c = sc.Conn(server.port)
    c.sock.sendall(sc.encode(args))
    return c


def all_args(ks: list, token: str, *opts) -> list:
    return ["LOCK.ACQUIREALL", len(ks), *ks, token, LEASE, *opts]


def waiter_args(g: list, token: str, multi: bool) -> list:
    """One waiter on all of `g`, or one LOCK.ACQUIRE waiter per key."""
    if multi:
        return [all_args(g, token, "WAIT", 0)]
    return [["LOCK.ACQUIRE", k, token, LEASE, "WAIT", 0] for k in g]


def case(args, op: str, n: int, multi: bool) -> int:
    """Instructions per grant (or departure) of `n` keys: one multi-key
    operation, or `n` single-key ones (summed)."""
    server = sc.Server(args.redis_server, args.module, callgrind=True, extra=("--maxclients", "10000"))
    best = None
    try:
        for rep in range(args.reps):
            m = args.ops
            groups = [keys(f"r{rep}o{j}", n) for j in range(m)]
            conns = []
            if op == "once":
                if multi:
                    payload = b"".join(sc.encode(all_args(g, "t")) for g in groups)
                    count = m
                else:
                    payload = b"".join(sc.encode(["LOCK.ACQUIRE", k, "t", LEASE]) for g in groups for k in g)
                    count = m * n
                cost = wc.measure(server, payload, count, 1) * count // m
            elif op == "queued":
                for g in groups:
                    for k in g[:1] if multi else g:
                        server.conn.call("LOCK.ACQUIRE", k, "h", LEASE)
                    for w in waiter_args(g, "w", multi):
                        conns.append(wait_on(server, w))
                blocked_until(server, len(conns))
                releases = [g[:1] if multi else g for g in groups]
                payload = b"".join(sc.encode(["LOCK.RELEASE", k, "h"]) for r in releases for k in r)
                count = sum(len(r) for r in releases)
                cost = wc.measure(server, payload, count, 1) * count // m
            else:  # leave
                ids = []
                for g in groups:
                    server.conn.call(*all_args(g, "h"))
                    for i in range(AHEAD):
                        for w in waiter_args(g, f"a{i}", multi):
                            conns.append(wait_on(server, w))
                for g in groups:
                    for w in waiter_args(g, "w", multi):
                        c = sc.Conn(server.port)
                        ids.append(c.call("CLIENT", "ID"))
                        c.sock.sendall(sc.encode(w))
                        conns.append(c)
                blocked_until(server, len(conns))
                payload = b"".join(sc.encode(["CLIENT", "UNBLOCK", i]) for i in ids)
                cost = wc.measure(server, payload, len(ids), 1) * len(ids) // m
            for c in conns:
                c.close()
            if args.verbose:
                print(f"  {op} N={n} {'multi' if multi else 'single'} batch {rep}: {cost} Ir", file=sys.stderr)
            best = cost if best is None else min(best, cost)
        return best
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--module", default=sc.os.environ.get("REDIS_LOCK_MODULE"),
                    help="prebuilt module (default: build target/release/libredis_lock.so)")
    ap.add_argument("--no-build", action="store_true", help="use target/release/libredis_lock.so as it is")
    ap.add_argument("--keys", default="1,8,64", help="N values, comma-separated")
    ap.add_argument("--ops", type=int, default=2, help="operations per measured batch")
    ap.add_argument("--reps", type=int, default=3, help="batches per case; the cheapest counts")
    ap.add_argument("--verbose", action="store_true", help="every batch's cost, on stderr")
    args = ap.parse_args()
    args.module = sc.build_module(args)
    soft, hard = wc.resource.getrlimit(wc.resource.RLIMIT_NOFILE)
    wc.resource.setrlimit(wc.resource.RLIMIT_NOFILE, (min(hard, max(soft, 20000)), hard))
    labels = {"once": "granted at once", "queued": "a release hands the keys to a waiter",
              "leave": f"a waiter leaves (CLIENT UNBLOCK, {AHEAD} ahead)"}
    rows = []
    for op in ("once", "queued", "leave"):
        for n in (int(x) for x in args.keys.split(",")):
            multi, single = case(args, op, n, True), case(args, op, n, False)
            rows.append((labels[op], n, multi, single))
            print(f"{labels[op]}, N={n}: LOCK.ACQUIREALL {multi} Ir, {n} single {single} Ir", file=sys.stderr)
    print("Server instructions per N keys (callgrind, inside processCommand):\n")
    print(sc.machine(args.redis_server) + "\n")
    print("| operation | N keys | LOCK.ACQUIREALL (one request) | N single-key requests | ratio | over N × single |")
    print("|---|--:|--:|--:|--:|--:|")
    for label, n, multi, single in rows:
        print(f"| {label} | {n} | {multi:,} | {single:,} | {multi / single:.2f}× | {multi - single:+,} |")


if __name__ == "__main__":
    main()
