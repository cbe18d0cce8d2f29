#!/usr/bin/env python3
"""Observers woken per leader change (issue 22): N clients blocked in
`LOCK.OBSERVE key AFTER rev WAIT 0` on one key, then one `LOCK.PROCLAIM`
(a new revision) wakes them all. Per round:

  wake all   wall time from sending the PROCLAIM until the last of the N
             observers has read its reply (client side, on this machine)
  µs/wake    the server's CPU time (INFO cpu: used_cpu_user + used_cpu_sys)
             spent from just before the PROCLAIM until every reply was read,
             divided by N: the change, the key read once, N unblocks and
             N replies written

Side by side, the native way to tell N clients one thing: N `SUBSCRIBE`d
clients and one `PUBLISH`. The median of --rounds rounds is reported.
Wall-clock numbers on a shared machine: compare the two columns of one
run, not runs on different machines.

Python 3 standard library only; needs redis-server, and cargo unless
--module names a prebuilt module.

    python3 benches/observers_cost.py            # the row in docs/performance.md
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_cost as sc  # noqa: E402

KEY = "elect:bench"


def cpu_s(conn: sc.Conn) -> float:
    info = conn.call("INFO", "cpu").decode()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def info_int(conn: sc.Conn, section: str, field: str) -> int:
    info = conn.call("INFO", section).decode()
    return int(info.split(f"{field}:")[1].split()[0])


def until(conn: sc.Conn, section: str, field: str, n: int):
    deadline = time.time() + 120
    while info_int(conn, section, field) != n:
        if time.time() > deadline:
            raise SystemExit(f"{field} never reached {n}")
        time.sleep(0.02)


def observers(server: sc.Server, n: int, rounds: int) -> list:
    """(wake-all seconds, server CPU seconds) per round."""
    c = server.conn
    rev = c.call("LOCK.ELECT", KEY, "lead", 3_600_000, "v0")
    conns = [sc.Conn(server.port) for _ in range(n)]
    out = []
    for r in range(rounds):
        for o in conns:
            o.sock.sendall(sc.encode(["LOCK.OBSERVE", KEY, "AFTER", rev, "WAIT", 0]))
        until(c, "lock", "lock_observing", n)
        cpu0 = cpu_s(c)
        t0 = time.perf_counter()
        if c.call("LOCK.PROCLAIM", KEY, "lead", f"v{r + 1}") != 1:
            raise SystemExit("proclaim refused")
        replies = [o.read() for o in conns]
        t1 = time.perf_counter()
        cpu1 = cpu_s(c)
        new = {reply[5] for reply in replies}
        if len(new) != 1 or rev in new:
            raise SystemExit(f"observers saw {new} after {rev}")
        rev = new.pop()
        out.append((t1 - t0, cpu1 - cpu0))
    for o in conns:
        o.close()
    return out


def pubsub(server: sc.Server, n: int, rounds: int) -> list:
    c = server.conn
    conns = [sc.Conn(server.port) for _ in range(n)]
    # Each SUBSCRIBE's confirmation means that client is subscribed.
    for o in conns:
        o.call("SUBSCRIBE", KEY)
    out = []
    for r in range(rounds):
        cpu0 = cpu_s(c)
        t0 = time.perf_counter()
        if c.call("PUBLISH", KEY, f"v{r + 1}") != n:
            raise SystemExit("not every subscriber got the message")
        for o in conns:
            o.read()
        t1 = time.perf_counter()
        out.append((t1 - t0, cpu_s(c) - cpu0))
    for o in conns:
        o.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--module", default=sc.os.environ.get("REDIS_LOCK_MODULE"),
                    help="prebuilt module (default: build target/release/libredis_lock.so)")
    ap.add_argument("--no-build", action="store_true", help="use target/release/libredis_lock.so as it is")
    ap.add_argument("--observers", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    args.module = sc.build_module(args)
    n = args.observers
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 1000)), hard))
    rows = []
    for label, fn in (("LOCK.PROCLAIM wakes N LOCK.OBSERVE … AFTER rev WAIT 0", observers),
                      ("native: PUBLISH to N SUBSCRIBE clients", pubsub)):
        server = sc.Server(args.redis_server, args.module, extra=("--maxclients", str(n + 100)))
        try:
            runs = fn(server, n, args.rounds)
        finally:
            server.stop()
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        rows.append((label, wall, cpu))
        print(f"{label}: {wall * 1e3:.2f} ms to all, {cpu * 1e6 / n:.2f} µs server CPU each", file=sys.stderr)
    print(f"One change told to N = {n:,} blocked clients on one key (median of {args.rounds} rounds):\n")
    print(sc.machine(args.redis_server) + "\n")
    print("| operation | N | wake all (ms, wall) | server CPU per client woken (µs) |")
    print("|---|--:|--:|--:|")
    for label, wall, cpu in rows:
        print(f"| {label} | {n:,} | {wall * 1e3:.2f} | {cpu * 1e6 / n:.2f} |")


if __name__ == "__main__":
    main()
