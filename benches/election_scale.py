#!/usr/bin/env python3
"""How the cost of the election commands and LOCK.TOP grows with what is
on their key or in the server (the project's rule: no command may do work
growing with its key beyond O(log N) plus what it changes), each beside a
native command of the same shape on a server with as many blocked clients:

  LOCK.ELECT refused   a candidate without WAIT, refused (nil), with W
                       candidates queued on the key behind its leader;
                       native: SET key v NX refused, W BLPOP clients blocked
  LOCK.ELECT queued    a candidate with WAIT 0 joining the line of W
                       candidates (it blocks); native: BLPOP joining W
                       BLPOP clients on the same list
  LOCK.PROCLAIM        a proclaim (1) on a key nobody observes, with N
                       observers blocked on another key (a proclaim that
                       wakes none vs all of its own key's observers is
                       benches/observers_cost.py); native: PUBLISH to a
                       channel nobody listens to, N clients subscribed to
                       another
  LOCK.LEADER          with N observers blocked on the key (AFTER its
                       revision, WAIT 0); native: GET, N BLPOP clients
                       blocked on another key
  LOCK.OBSERVE         without AFTER: the immediate reply, N observers
                       blocked on the key; native: GET, as above
  LOCK.TOP COUNT 10    with K contended keys, one waiter each (the holder
                       and the waiter of each are LOCK.ACQUIRE's); native:
                       ZRANGE z 0 9 REV, the ten largest of a K-member
                       sorted set

Instructions per operation inside the server's `processCommand`
(callgrind, inclusive: the command's own work, as benches/waiters_cost.py
counts, whose helpers this uses; the event loop's walk of thousands of
clients is left out), the cheapest of --reps batches of --ops operations.
A queued candidate's batch is --ops connections each sending one blocking
command; the measurement stops --settle seconds later and every one of
them is checked to be blocked.

Sizes: W, N and K = 10, 1,000, 10,000 by default. Each blocked client is
a connection of this process: --sizes 100000 needs a file-descriptor limit
above 100,000 for this process and the server (`ulimit -n`).

Python 3 standard library only; needs valgrind, redis-server, and cargo
unless --module names a prebuilt module.

    python3 benches/election_scale.py            # the table in docs/performance.md
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402
import waiters_cost as wc  # noqa: E402

TTL = 600_000
KEY, OTHER, LIST = "e", "o", "q"
SETTLE = 1.0


def until(conn: sc.Conn, section: str, field: str, n: int) -> None:
    deadline = time.time() + 600
    while sc.info_field(conn, section, field) != n:
        if time.time() > deadline:
            raise SystemExit(f"{field} never reached {n}")
        time.sleep(0.05)


def blocked(server: sc.Server, commands) -> list:
    """One connection per command, each sent and left blocked."""
    conns = []
    for args in commands:
        c = sc.Conn(server.port)
        c.sock.sendall(sc.encode(args))
        conns.append(c)
    return conns


def rev_of(conn: sc.Conn, key: str) -> int:
    leader = conn.call("LOCK.LEADER", key)
    return dict(zip(leader[::2], leader[1::2]))[b"rev"]


def is_leader(r) -> bool:
    return isinstance(r, list) and r[:1] == [b"value"]


def best(args, server: sc.Server, batch) -> int:
    """The cheapest per-op cost over the reps: `batch(rep)` is (payload, expect)."""
    costs = []
    for rep in range(args.reps):
        payload, expect = batch(rep)
        costs.append(wc.measure(server, payload, args.ops, expect))
    return min(costs)


def best_blocking(args, server: sc.Server, commands, field: str, before: int) -> int:
    """The cheapest per-op cost of commands that block: each rep sends
    --ops of `commands(rep)` from connections of their own and stops the
    count --settle seconds later; then checks they all block (`field` of
    INFO lock, or INFO clients' blocked_clients, grew by --ops by then)."""
    costs, kept = [], []
    section = "lock" if field.startswith("lock_") else "clients"
    for rep in range(args.reps):
        profile = Path(server.dir, "case.callgrind")
        server.cg_start()
        kept += blocked(server, commands(rep))
        time.sleep(args.settle)
        server.cg_stop(keep_as=str(profile))
        # All of them must have blocked while counted (a late one would
        # make the batch look cheap).
        now = sc.info_field(server.conn, section, field)
        if now != before + (rep + 1) * args.ops:
            raise SystemExit(f"{field} is {now} after {args.settle} s, not {before + (rep + 1) * args.ops}: "
                             "raise --settle")
        costs.append(wc.process_command_ir(profile) // args.ops)
    for c in kept:
        c.close()
    return min(costs)


def elect(args, module: str | None, w: int) -> dict:
    """ELECT refused and queued with W candidates in line (native: SET NX
    and BLPOP with W BLPOP clients)."""
    server = sc.Server(args.redis_server, module, callgrind=True, extra=("--maxclients", str(w + 1000)))
    c = server.conn
    try:
        if module:
            c.call("LOCK.ELECT", KEY, "lead", TTL, "v0")
            line = blocked(server, (["LOCK.ELECT", KEY, f"c{i:06d}", TTL, "v", "WAIT", 0] for i in range(w)))
            until(c, "lock", "lock_waiting", w)
            refused = best(args, server, lambda rep: (b"".join(
                sc.encode(["LOCK.ELECT", KEY, f"x{rep}-{i}", TTL, "v"]) for i in range(args.ops)), None))
            queued = best_blocking(args, server, lambda rep: (
                ["LOCK.ELECT", KEY, f"y{rep}-{i}", TTL, "v", "WAIT", 0] for i in range(args.ops)), "lock_waiting", w)
        else:
            c.call("SET", KEY, "v0")
            line = blocked(server, (["BLPOP", LIST, 0] for _ in range(w)))
            until(c, "clients", "blocked_clients", w)
            refused = best(args, server, lambda rep: (sc.encode(["SET", KEY, "x", "NX"]) * args.ops, None))
            queued = best_blocking(args, server, lambda rep: (["BLPOP", LIST, 0] for _ in range(args.ops)),
                                   "blocked_clients", w)
        for x in line:
            x.close()
        return {"refused": refused, "queued": queued}
    finally:
        server.stop()


def proclaim(args, module: str | None, n: int) -> dict:
    """PROCLAIM on a key nobody observes, N observers on another (native:
    PUBLISH to a channel nobody listens to, N subscribers of another)."""
    server = sc.Server(args.redis_server, module, callgrind=True, extra=("--maxclients", str(n + 1000)))
    c = server.conn
    try:
        if module:
            c.call("LOCK.ELECT", KEY, "lead", TTL, "v0")
            c.call("LOCK.ELECT", OTHER, "lead", TTL, "v0")
            rev = rev_of(c, OTHER)
            watching = blocked(server, (["LOCK.OBSERVE", OTHER, "AFTER", rev, "WAIT", 0] for _ in range(n)))
            until(c, "lock", "lock_observing", n)
            cost = best(args, server, lambda rep: (b"".join(
                sc.encode(["LOCK.PROCLAIM", KEY, "lead", f"v{rep}-{i}"]) for i in range(args.ops)), 1))
        else:
            watching = [sc.Conn(server.port) for _ in range(n)]
            # Each SUBSCRIBE's confirmation means that client is subscribed.
            for x in watching:
                x.call("SUBSCRIBE", OTHER)
            cost = best(args, server, lambda rep: (sc.encode(["PUBLISH", KEY, "v"]) * args.ops, 0))
        for x in watching:
            x.close()
        return {"proclaim": cost}
    finally:
        server.stop()


def leader(args, module: str | None, n: int) -> dict:
    """LEADER and OBSERVE (immediate) with N observers blocked on the key
    (native: GET with N BLPOP clients blocked)."""
    server = sc.Server(args.redis_server, module, callgrind=True, extra=("--maxclients", str(n + 1000)))
    c = server.conn
    try:
        if module:
            c.call("LOCK.ELECT", KEY, "lead", TTL, "v0")
            rev = rev_of(c, KEY)
            watching = blocked(server, (["LOCK.OBSERVE", KEY, "AFTER", rev, "WAIT", 0] for _ in range(n)))
            until(c, "lock", "lock_observing", n)
            rows = {
                "leader": best(args, server, lambda rep: (sc.encode(["LOCK.LEADER", KEY]) * args.ops, is_leader)),
                "observe": best(args, server, lambda rep: (sc.encode(["LOCK.OBSERVE", KEY]) * args.ops, is_leader)),
            }
        else:
            c.call("SET", KEY, "v0")
            watching = blocked(server, (["BLPOP", LIST, 0] for _ in range(n)))
            until(c, "clients", "blocked_clients", n)
            get = best(args, server, lambda rep: (sc.encode(["GET", KEY]) * args.ops, b"v0"))
            rows = {"leader": get, "observe": get}
        for x in watching:
            x.close()
        return rows
    finally:
        server.stop()


def top(args, module: str | None, k: int) -> dict:
    """LOCK.TOP COUNT 10 with K contended keys (native: the ten largest of a
    K-member sorted set)."""
    server = sc.Server(args.redis_server, module, callgrind=True, extra=("--maxclients", str(k + 1000)))
    c = server.conn
    want = min(10, k)
    try:
        if module:
            sc.fill(c, (["LOCK.ACQUIRE", f"k{i:06d}", "holder", TTL] for i in range(k)))
            waiting = blocked(server, (["LOCK.ACQUIRE", f"k{i:06d}", "waiter", TTL, "WAIT", 0] for i in range(k)))
            until(c, "lock", "lock_waiting", k)
            cost = best(args, server, lambda rep: (
                sc.encode(["LOCK.TOP", "COUNT", 10]) * args.ops, lambda r: isinstance(r, list) and len(r) == want))
        else:
            for start in range(0, k, 10_000):
                args_ = ["ZADD", "z"]
                for i in range(start, min(k, start + 10_000)):
                    args_ += [i, f"k{i:06d}"]
                c.call(*args_)
            waiting = []
            cost = best(args, server, lambda rep: (
                sc.encode(["ZRANGE", "z", 0, 9, "REV"]) * args.ops, lambda r: isinstance(r, list) and len(r) == want))
        for x in waiting:
            x.close()
        return {"top": cost}
    finally:
        server.stop()


ROWS = [
    # (label, size name, group, row, native label)
    ("`LOCK.ELECT` refused (no WAIT)", "W candidates queued", "elect", "refused", "`SET k v NX` refused"),
    ("`LOCK.ELECT … WAIT 0` queued", "W candidates queued", "elect", "queued", "`BLPOP l 0` queued"),
    ("`LOCK.PROCLAIM` (wakes none)", "N observers on another key", "proclaim", "proclaim", "`PUBLISH` (no listener)"),
    ("`LOCK.LEADER`", "N observers on the key", "leader", "leader", "`GET`"),
    ("`LOCK.OBSERVE` (immediate)", "N observers on the key", "leader", "observe", "`GET`"),
    ("`LOCK.TOP COUNT 10`", "K contended keys", "top", "top", "`ZRANGE z 0 9 REV`"),
]

GROUPS = {"elect": elect, "proclaim": proclaim, "leader": leader, "top": top}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--module", default=sc.os.environ.get("REDIS_LOCK_MODULE"),
                    help="prebuilt module (default: build target/release/libredis_lock.so)")
    ap.add_argument("--no-build", action="store_true", help="use target/release/libredis_lock.so as it is")
    ap.add_argument("--sizes", default="10,1000,10000", help="W, N and K values, comma-separated")
    ap.add_argument("--groups", default=",".join(GROUPS), help="which of " + ", ".join(GROUPS))
    ap.add_argument("--ops", type=int, default=2, help="operations per measured batch")
    ap.add_argument("--reps", type=int, default=5, help="batches per case (the cheapest counts)")
    ap.add_argument("--settle", type=float, default=SETTLE, help="seconds a blocking batch gets to arrive")
    args = ap.parse_args()
    args.module = sc.build_module(args)
    sizes = [int(x) for x in args.sizes.split(",")]
    groups = args.groups.split(",")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(sizes) + 1000
    if hard < need:
        raise SystemExit(f"{max(sizes):,} blocked clients need {need:,} file descriptors; the limit is {hard:,}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    started = time.time()
    results = {}
    for g in groups:
        for n in sizes:
            for kind, module in (("module", args.module), ("native", None)):
                t0 = time.time()
                results[(g, kind, n)] = GROUPS[g](args, module, n)
                print(f"{g} {kind} N={n}: {results[(g, kind, n)]} ({time.time() - t0:.0f} s)", file=sys.stderr)
    print("Server instructions per operation inside processCommand (callgrind), the cheapest of "
          f"{args.reps} batches of {args.ops}:\n")
    print(sc.machine(args.redis_server) + "\n")
    head = " | ".join(f"{n:,}" for n in sizes)
    print(f"| command | N is | {head} | × N = {sizes[0]:,} | native | {head} |")
    print("|---|---|" + "--:|" * len(sizes) + "--:|---|" + "--:|" * len(sizes))
    flagged = []
    for label, size, g, row, native in ROWS:
        if g not in groups:
            continue
        mod = [results[(g, "module", n)][row] for n in sizes]
        nat = [results[(g, "native", n)][row] for n in sizes]
        growth = mod[-1] / mod[0]
        cells = " | ".join(f"{v:,}" for v in mod)
        mark = ""
        if growth >= 1.5:
            per = (mod[-1] - mod[0]) / (sizes[-1] - sizes[0])
            mark = " ⚠"
            flagged.append(f"{label}: {mod[0]:,} → {mod[-1]:,} Ir from {size} = {sizes[0]:,} to {sizes[-1]:,} "
                           f"(~{per:,.1f} Ir per extra one: linear)")
        print(f"| {label} | {size} | {cells} | {growth:.2f}×{mark} | {native} | " + " | ".join(f"{v:,}" for v in nat) + " |")
    if flagged:
        print("\nGrowing with N beyond O(log N) (⚠: ≥ 1.5× from the smallest size to the largest):\n")
        print("\n".join(f"- {f}" for f in flagged))
    print(f"\n{time.time() - started:.0f} s in all.")


if __name__ == "__main__":
    main()
