#!/usr/bin/env python3
"""Server-side cost of semaphores and read-write locks (issue 17): the
SEM.* and RWLOCK.* commands next to a Lua semaphore of Redisson's kind
and next to our exclusive lock (LOCK.ACQUIRE / LOCK.RELEASE).

Instructions per operation, whole server, under valgrind --tool=callgrind
(method and helpers of benches/server_cost.py: counters zeroed, N requests
sent by a client that checks every reply, profile dumped, total / N), and
used_memory per holder.

Every acquire below is granted and every release frees a held place; each
key already has two other holders (a semaphore of limit 5, a read-write
lock with two readers), except the writer and the exclusive lock, which
take a free key.

The Lua semaphore follows Redisson's RPermitExpirableSemaphore (permits
with a lease each), as its source describes the algorithm: a string counts
the free permits, a sorted set `<name>:timeout` maps permit ids to their
lease end; acquire and release first drop the ended leases (ZRANGEBYSCORE
0..now, ZREM them, INCRBY the counter, PUBLISH to wake pollers), then
acquire DECRBYs the counter and ZADDs the new id (and PEXPIREs the set like
the counter), release ZREMs the id, INCRBYs and PUBLISHes. The scripts
below are written for this benchmark from that description.

Usage:
    python3 benches/holders_cost.py                       # callgrind + memory, ~3 min
    python3 benches/holders_cost.py --requests 2000 --memory-keys 2000   # quicker
    REDIS_LOCK_MODULE_CONFIG="--lock.hold-timing yes" python3 benches/holders_cost.py --no-memory --renew   # hold timing on
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
TOKEN = sc.TOKEN

# KEYS: the free-permit counter, the `<name>:timeout` sorted set, the
# channel. Both scripts first drop the leases that ended by ARGV[2] (now).
PRUNE_LUA = """
local now = tonumber(ARGV[2])
local ended = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 100)
if #ended > 0 then
  redis.call('zrem', KEYS[2], unpack(ended))
  local free = redis.call('incrby', KEYS[1], #ended)
  if free > 0 then redis.call('publish', KEYS[3], free) end
end
"""

# ARGV: permit id, now, lease end.
ACQUIRE_LUA = PRUNE_LUA + """
local free = redis.call('get', KEYS[1])
if free ~= false and tonumber(free) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], ARGV[3], ARGV[1])
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  return 'OK'
end
return nil
"""

# ARGV: permit id, now.
RELEASE_LUA = PRUNE_LUA + """
local removed = redis.call('zrem', KEYS[2], ARGV[1])
if removed == 0 then return 0 end
redis.call('incrby', KEYS[1], removed)
redis.call('publish', KEYS[3], removed)
return removed
"""


def now_ms() -> int:
    return int(time.time() * 1000)


class Impl:
    """One implementation: how to preload key i, and the acquire and
    release requests with the reply each must get."""

    def __init__(self, name, preload, acquire, release, acq_reply, rel_reply, renew=None):
        self.name, self.preload, self.acquire, self.release = name, preload, acquire, release
        self.acq_reply, self.rel_reply = acq_reply, rel_reply
        # With --renew: a renewal of each held place, between the two (reply 1).
        self.renew = renew


def key(i: int) -> str:
    return "k:%08d" % i


def impls(sha_acq: str, sha_rel: str) -> list:
    others = ["o1-" + TOKEN[3:], "o2-" + TOKEN[3:]]
    now = now_ms()
    deadline = now + TTL
    return [
        Impl("semaphore (SEM.*)",
             lambda i: [["SEM.ACQUIRE", key(i), o, 5, TTL] for o in others],
             lambda i: ["SEM.ACQUIRE", key(i), TOKEN, 5, TTL],
             lambda i: ["SEM.RELEASE", key(i), TOKEN], 1, 1,
             lambda i: ["SEM.RENEW", key(i), TOKEN, TTL + 1000]),
        Impl("read-write lock, READ (RWLOCK.*)",
             lambda i: [["RWLOCK.ACQUIRE", key(i), o, "READ", TTL] for o in others],
             lambda i: ["RWLOCK.ACQUIRE", key(i), TOKEN, "READ", TTL],
             lambda i: ["RWLOCK.RELEASE", key(i), TOKEN], 1, 1,
             lambda i: ["RWLOCK.RENEW", key(i), TOKEN, TTL + 1000]),
        Impl("read-write lock, WRITE, free key",
             lambda i: [],
             lambda i: ["RWLOCK.ACQUIRE", key(i), TOKEN, "WRITE", TTL],
             lambda i: ["RWLOCK.RELEASE", key(i), TOKEN], 1, 1,
             lambda i: ["RWLOCK.RENEW", key(i), TOKEN, TTL + 1000]),
        Impl("Lua semaphore, Redisson's algorithm",
             lambda i: [["SET", key(i), 3], ["ZADD", key(i) + ":timeout", deadline, others[0], deadline, others[1]]],
             lambda i: ["EVALSHA", sha_acq, 3, key(i), key(i) + ":timeout", key(i) + ":channel", TOKEN, now_ms(), deadline],
             lambda i: ["EVALSHA", sha_rel, 3, key(i), key(i) + ":timeout", key(i) + ":channel", TOKEN, now_ms()], b"OK", 1),
        Impl("exclusive lock (LOCK.ACQUIRE/RELEASE), free key",
             lambda i: [],
             lambda i: ["LOCK.ACQUIRE", key(i), TOKEN, TTL],
             lambda i: ["LOCK.RELEASE", key(i), TOKEN], 1, 1,
             lambda i: ["LOCK.RENEW", key(i), TOKEN, TTL + 1000]),
    ]


def exact(conn: sc.Conn, requests, want) -> None:
    """Sends the requests one at a time (P 1), checking every reply."""
    for r in requests:
        got = conn.call(*r)
        if got != want:
            raise RuntimeError(f"{r[0]}: reply {got!r}, expected {want!r}")


def measure(args, module: str) -> list:
    rows = []
    srv = sc.Server(args.redis_server, module, callgrind=True)
    try:
        timing = srv.conn.call("CONFIG", "GET", "lock.hold-timing")
        print(f"lock.hold-timing: {timing[1].decode() if len(timing) == 2 else '?'}", file=sys.stderr)
        sha_acq = srv.conn.call("SCRIPT", "LOAD", ACQUIRE_LUA).decode()
        sha_rel = srv.conn.call("SCRIPT", "LOAD", RELEASE_LUA).decode()
        for impl in impls(sha_acq, sha_rel):
            srv.conn.call("FLUSHALL")
            sc.fill(srv.conn, (c for i in range(args.requests) for c in impl.preload(i)))
            c = sc.Conn(srv.port)
            c.call("PING")
            srv.cg_start()
            exact(c, (impl.acquire(i) for i in range(args.requests)), impl.acq_reply)
            acq = srv.cg_stop() / args.requests
            ren = None
            if args.renew and impl.renew:
                srv.cg_start()
                exact(c, (impl.renew(i) for i in range(args.requests)), 1)
                ren = srv.cg_stop() / args.requests
            srv.cg_start()
            exact(c, (impl.release(i) for i in range(args.requests)), impl.rel_reply)
            rel = srv.cg_stop() / args.requests
            c.close()
            rows.append((impl.name, acq, rel, ren))
            renewed = "" if ren is None else f"  renew {ren:,.0f}"
            print(f"cg {impl.name:50} acquire {acq:,.0f}{renewed}  release {rel:,.0f}", file=sys.stderr)
    finally:
        srv.stop()
    return rows


def memory(args, module: str) -> list:
    """used_memory per key of N keys with h holders, and what each holder adds."""
    n = args.memory_keys
    out = []
    cases = [
        ("semaphore", lambda i, h: [["SEM.ACQUIRE", key(i), "%s-%02d" % (TOKEN, j), 100, TTL] for j in range(h)]),
        ("read-write lock (readers)", lambda i, h: [["RWLOCK.ACQUIRE", key(i), "%s-%02d" % (TOKEN, j), "READ", TTL] for j in range(h)]),
        ("Lua semaphore (Redisson's)", lambda i, h: [["SET", key(i), 100 - h]] + [["ZADD", key(i) + ":timeout", now_ms() + TTL, "%s-%02d" % (TOKEN, j)] for j in range(h)]
         + [["PEXPIRE", key(i) + ":timeout", TTL]]),
        ("exclusive lock", lambda i, h: [["LOCK.ACQUIRE", key(i), "%s-%02d" % (TOKEN, 0), TTL]] if h == 1 else None),
    ]
    for name, make in cases:
        per_key = {}
        for h in (1, 10):
            if make(0, h) is None:
                continue
            srv = sc.Server(args.redis_server, module)
            try:
                base = sc.info_field(srv.conn, "memory", "used_memory")
                sc.fill(srv.conn, (c for i in range(n) for c in make(i, h)))
                per_key[h] = (sc.info_field(srv.conn, "memory", "used_memory") - base) / n
            finally:
                srv.stop()
        extra = (per_key[10] - per_key[1]) / 9 if 10 in per_key else None
        out.append((name, per_key.get(1), per_key.get(10), extra))
        print(f"mem {name:30} {per_key}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000, help="acquires (then releases) per implementation under callgrind")
    ap.add_argument("--memory-keys", type=int, default=20000, help="keys per memory measurement")
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--renew", action="store_true", help="also a renewal of each held place, between acquire and release (Ir/renew)")
    args = ap.parse_args()
    module = sc.build_module(args)
    rows = measure(args, module)
    excl = rows[-1]
    print("| implementation | Ir/acquire | Ir/renew | Ir/release | acquire+release | vs exclusive lock |")
    print("|---|--:|--:|--:|--:|--:|")
    for name, a, r, n in rows:
        renew = "—" if n is None else f"{n:,.0f}"
        print(f"| {name} | {a:,.0f} | {renew} | {r:,.0f} | {a + r:,.0f} | {(a + r) / (excl[1] + excl[2]):.2f} |")
    if not args.no_memory:
        print()
        print("| keys of | bytes/key, 1 holder | bytes/key, 10 holders | bytes per further holder |")
        print("|---|--:|--:|--:|")
        for name, one, ten, extra in memory(args, module):
            fmt = lambda v: "—" if v is None else f"{v:,.0f}"
            print(f"| {name} | {fmt(one)} | {fmt(ten)} | {fmt(extra)} |")
    print(f"\nMachine:\n\n{sc.machine(args.redis_server)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
