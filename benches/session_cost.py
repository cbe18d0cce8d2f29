#!/usr/bin/env python3
"""What a session costs the server (issue 30, docs/sessions.md), beside the
native command a per-lock renewal would be:

1. Instructions per SESSION.KEEPALIVE of one session holding N locks
   (callgrind, whole server, the method and helpers of
   benches/server_cost.py), at N = 1, 1,000, 100,000 (and whatever
   --sizes asks), next to PEXPIRE of one key in the same run. Target: flat
   in N within 5 %, and at most 2x PEXPIRE.
2. Ending a session of N locks (SESSION.REVOKE), on a server without
   callgrind: the longest PING round trip a probe client sees while the
   locks are released (every PING is sent as soon as the last one is
   answered), and the whole end's duration. (What one slice propagates is
   bounded by the module: at most 256 DEL/SET of at most 16 KiB of key
   names in all, src/store/session_end.rs.)
3. Memory: `used_memory` (less `mem_clients_normal`) per session (1,000 to 100,000 sessions holding nothing),
   and per lock attached to a session beyond the same lock held by its own
   lease (N keys taken with `LOCK.ACQUIRE key tok ttl SESSION id` against
   `LOCK.ACQUIRE key tok ttl`); and per ended session remembered after
   its locks are released (src/store/session_gone.rs: sessions of a 1 ms
   TTL granted 1,000 at a time, each batch expired and forgotten before
   the next, so that only the ends pile up: 60,000 of them).

Usage:
    python3 benches/session_cost.py                     # ~5 min
    python3 benches/session_cost.py --sizes 1,1000 --requests 200
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402

TTL = 600_000


def attach_all(conn: sc.Conn, sid: bytes, n: int, prefix: str = "k") -> None:
    sc.fill(conn, (["LOCK.ACQUIRE", f"{prefix}:{i:07d}", "tok", TTL, "SESSION", sid] for i in range(n)), batch=5_000)


def measured(srv: sc.Server, conn: sc.Conn, requests: list, want) -> float:
    srv.cg_start()
    for r in requests:
        got = conn.call(*r)
        if got != want:
            raise RuntimeError(f"{r}: reply {got!r}, expected {want!r}")
    return srv.cg_stop() / len(requests)


def keepalive_rows(srv: sc.Server, sizes: list, requests: int) -> dict:
    conn = srv.conn
    rows = {}
    for n in sizes:
        conn.call("FLUSHALL")
        sid = conn.call("SESSION.GRANT", TTL)
        attach_all(conn, sid, n)
        conn.call("SET", "plain", "v", "PX", TTL)
        holds = conn.call("SESSION.INFO", sid, "COUNT", 1)
        if holds[holds.index(b"holds") + 1] != n:
            raise RuntimeError(f"the session holds {holds}, not {n}")
        c = sc.Conn(srv.port)
        c.call("PING")
        rows[("keepalive", n)] = measured(srv, c, [["SESSION.KEEPALIVE", sid]] * requests, [TTL])
        rows[("PEXPIRE", n)] = measured(srv, c, [["PEXPIRE", "plain", TTL]] * requests, 1)
        # Attaching: a new key taken in the session (its hold noted in the
        # session's set of N), against the same grant on its own lease.
        want = c.call("LOCK.ACQUIRE", "probe", "tok", TTL, "SESSION", sid)
        attach = [["LOCK.ACQUIRE", f"a:{i:07d}", "tok", TTL, "SESSION", sid] for i in range(requests)]
        rows[("attach", n)] = measured(srv, c, attach, want)
        alone = [["LOCK.ACQUIRE", f"b:{i:07d}", "tok", TTL] for i in range(requests)]
        rows[("acquire", n)] = measured(srv, c, alone, c.call("LOCK.ACQUIRE", "probe2", "tok", TTL))
        c.close()
        print(f"cg N={n}: keepalive {rows[('keepalive', n)]:,.0f} Ir, PEXPIRE {rows[('PEXPIRE', n)]:,.0f} Ir, "
              f"attach {rows[('attach', n)]:,.0f} Ir, acquire {rows[('acquire', n)]:,.0f} Ir", file=sys.stderr)
    return rows


def end_rows(redis_server: str, module: str, sizes: list) -> dict:
    rows = {}
    srv = sc.Server(redis_server, module)
    try:
        conn = srv.conn
        for n in sizes:
            conn.call("FLUSHALL")
            sid = conn.call("SESSION.GRANT", TTL)
            attach_all(conn, sid, n)
            probe = sc.Conn(srv.port)
            probe.call("PING")
            started = time.perf_counter()
            conn.call("SESSION.REVOKE", sid)
            # (The timer's longest run is a maximum since the server started: sizes go up.)
            longest, pings = sc.ping_until(probe, lambda: conn.call("DBSIZE") == 0)
            took = (time.perf_counter() - started) * 1000
            tick = sc.info_field(conn, "lock", "lock_session_tick_max_us") / 1000
            # The same number of PINGs with nothing to do: the machine's own noise.
            idle = sc.ping_idle(probe, pings)
            rows[n] = (longest * 1000, took, pings, tick, idle * 1000)
            probe.close()
            print(f"end N={n}: longest timer run {tick:.2f} ms, longest PING {longest * 1000:.2f} ms "
                  f"(idle {idle * 1000:.2f} ms) over {pings} pings, {took:.0f} ms in all", file=sys.stderr)
    finally:
        srv.stop()
    return rows


def memory_rows(redis_server: str, module: str, n: int, sessions: list) -> dict:
    srv = sc.Server(redis_server, module)
    try:
        conn = srv.conn
        # Without the clients' buffers (a pipelined batch's query buffer is
        # only shrunk later by the server's cron).
        used = lambda: sc.info_field(conn, "memory", "used_memory") - sc.info_field(conn, "memory", "mem_clients_normal")
        per_session = {}
        # Once first: what the first sessions allocate once (the module's
        # event subscriptions) is no session's.
        sc.fill(conn, (["SESSION.GRANT", TTL] for _ in range(1_000)), batch=5_000)
        for count in sessions:
            # The median of 3 (a few KiB allocated or freed elsewhere
            # would move a small count's figure).
            runs = []
            for _ in range(3):
                conn.call("FLUSHALL")
                base = used()
                sc.fill(conn, (["SESSION.GRANT", TTL] for _ in range(count)), batch=5_000)
                runs.append((used() - base) / count)
            per_session[count] = sorted(runs)[1]
        conn.call("FLUSHALL")
        base = used()
        sc.fill(conn, (["LOCK.ACQUIRE", f"k:{i:07d}", "tok", TTL] for i in range(n)), batch=5_000)
        plain = (used() - base) / n
        conn.call("FLUSHALL")
        sid = conn.call("SESSION.GRANT", TTL)
        base = used()
        attach_all(conn, sid, n)
        held = (used() - base) / n
        # The same keys' values alone (no expiry, as a session-held key):
        # what is left of `held` is the attachment.
        value = conn.call("GET", "k:0000000")
        conn.call("FLUSHALL")
        base = used()
        sc.fill(conn, (["SET", f"k:{i:07d}", value] for i in range(n)), batch=5_000)
        value_only = (used() - base) / n
        # The keys attached in a random order (leaves split in the middle).
        conn.call("FLUSHALL")
        sid = conn.call("SESSION.GRANT", TTL)
        base = used()
        order = list(range(n))
        random.Random(1).shuffle(order)
        sc.fill(conn, (["LOCK.ACQUIRE", f"k:{i:07d}", "tok", TTL, "SESSION", sid] for i in order), batch=5_000)
        shuffled = (used() - base) / n
        # 10,000 sessions holding one lock each (one session per client).
        conn.call("FLUSHALL")
        base = used()
        ids = []
        for _ in range(2):
            ids += conn.pipeline(b"".join(sc.encode(["SESSION.GRANT", TTL]) for _ in range(5_000)), 5_000)
        sc.fill(conn, (["LOCK.ACQUIRE", f"k:{i:07d}", "tok", TTL, "SESSION", sid] for i, sid in enumerate(ids)), batch=5_000)
        one_each = (used() - base) / len(ids)
        conn.call("FLUSHALL")
        base = used()
        sc.fill(conn, (["SESSION.GRANT", TTL] for _ in ids), batch=5_000)
        alone = (used() - base) / len(ids)
        conn.call("FLUSHALL")
        gone = ended_memory(conn, used)
    finally:
        srv.stop()
    return {"session": per_session, "plain": plain, "held": held, "value": value_only, "shuffled": shuffled,
            "one_each": one_each - alone - value_only, "gone": gone}


def ended_memory(conn: sc.Conn, used, batches: int = 60, batch: int = 1_000) -> float:
    """`used_memory` per ended session the node remembers (its end's
    table), the session table itself staying at one batch."""

    def one_batch():
        sc.fill(conn, (["SESSION.GRANT", 1] for _ in range(batch)), batch=batch)
        while conn.call("SESSION.LIST", "COUNT", 1):
            time.sleep(0.005)

    for _ in range(5):
        one_batch()
    base = used()
    for _ in range(batches):
        one_batch()
    return (used() - base) / (batches * batch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,1000,100000", help="locks held by the session (default 1,1000,100000)")
    ap.add_argument("--end-sizes", default="1000,100000,1000000", help="locks of the ended session (default 1000,100000,1000000)")
    ap.add_argument("--requests", type=int, default=1000, help="keepalives per cell (default 1000)")
    ap.add_argument("--memory-locks", type=int, default=100_000)
    ap.add_argument("--memory-sessions", default="1000,10000,14000,15000,50000,100000",
                    help="session counts whose memory per session is measured (default 1000,10000,14000,15000,50000,100000)")
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    end_sizes = [int(s) for s in args.end_sizes.split(",")]
    module = sc.build_module(args)

    srv = sc.Server(args.redis_server, module, callgrind=True)
    try:
        ka = keepalive_rows(srv, sizes, args.requests)
    finally:
        srv.stop()
    ends = end_rows(args.redis_server, module, end_sizes)
    counts = [int(s) for s in args.memory_sessions.split(",")]
    mem = memory_rows(args.redis_server, module, args.memory_locks, counts)

    missed = []
    print("Instructions per call (callgrind, whole server): SESSION.KEEPALIVE of one session holding N locks,")
    print("and PEXPIRE of one key in the same run.")
    print()
    print("| N locks held | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---|" + "--:|" * len(sizes))
    print("| `SESSION.KEEPALIVE id` | " + " | ".join(f"{ka[('keepalive', n)]:,.0f}" for n in sizes) + " |")
    print("| `PEXPIRE key ttl` | " + " | ".join(f"{ka[('PEXPIRE', n)]:,.0f}" for n in sizes) + " |")
    print("| `LOCK.ACQUIRE key tok ttl SESSION id` (attach) | " + " | ".join(f"{ka[('attach', n)]:,.0f}" for n in sizes) + " |")
    print("| `LOCK.ACQUIRE key tok ttl` (own lease) | " + " | ".join(f"{ka[('acquire', n)]:,.0f}" for n in sizes) + " |")
    ratios = [ka[("keepalive", n)] / ka[("PEXPIRE", n)] for n in sizes]
    print("| keepalive / PEXPIRE | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")
    small = ka[("keepalive", sizes[0])]
    spread = [ka[("keepalive", n)] / small - 1 for n in sizes]
    print(f"| keepalive vs N = {sizes[0]:,} | " + " | ".join(f"{s * 100:+.1f} %" for s in spread) + " |")
    if max(abs(s) for s in spread) > 0.05:
        missed.append("keepalive not flat within 5 %")
    if max(ratios) > 2.0:
        missed.append("keepalive above 2x PEXPIRE")
    print()
    print("Ending a session of N locks (SESSION.REVOKE, no callgrind): the longest PING round trip of a probe")
    print("client while the locks are released, and the whole end.")
    print()
    print("| N locks | longest timer run (`lock_session_tick_max_us`, CPU) | longest PING round trip | the same PINGs, idle | end took | PINGs answered meanwhile |")
    print("|---|--:|--:|--:|--:|--:|")
    for n in end_sizes:
        longest, took, pings, tick, idle = ends[n]
        print(f"| {n:,} | {tick:.2f} ms | {longest:.2f} ms | {idle:.2f} ms | {took:,.0f} ms | {pings:,} |")
        if tick > 1.0:
            missed.append(f"a timer run took {tick:.2f} ms while a session of {n:,} ended")
    print()
    per = mem["session"]
    print("Memory (`used_memory` growth less the clients' buffers): a session holding nothing, by how many sessions there are: "
          + ", ".join(f"{c:,}: {per[c]:,.1f} B" for c in counts)
          + f" (from {min(per.values()):,.1f} to {max(per.values()):,.1f} B).")
    print(f"{args.memory_locks:,} locks: {mem['plain']:,.0f} B each held by their own lease, {mem['held']:,.0f} B each")
    print(f"held by one session: {mem['held'] - mem['plain']:+,.0f} B per lock (the attachment, and the longer stored value).")
    print(f"The session-held value alone (SET, no expiry): {mem['value']:,.1f} B a key; the attachment: "
          f"{mem['held'] - mem['value']:,.1f} B with keys attached in order, {mem['shuffled'] - mem['value']:,.1f} B in a random order;")
    print(f"with 10,000 sessions holding one lock each: {mem['one_each']:,.1f} B per session (its holds' set and the attachment).")
    print(f"An ended session remembered after its locks are released (60,000 of them): {mem['gone']:,.0f} B each.")
    print(f"\nMachine:\n\n{sc.machine(args.redis_server)}")
    if missed:
        print("\nTargets missed:\n\n" + "\n".join(f"- {m}" for m in missed))
    else:
        print("\nEvery target met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
