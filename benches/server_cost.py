#!/usr/bin/env python3
"""Server-side cost of the LOCK.* commands, next to the reference scripts and
the nearest native commands (issue 4).

For every operation and path (bare and structured values, success and
refusal) this runs three implementations of the same operation against a
private redis-server that it starts itself with the module loaded:

  module  the LOCK.* command
  script  the seed-000 reference script via EVALSHA (acquire has none: the
          reference acquire *is* SET NX PX)
  native  the nearest native command, the floor: ACQUIRE vs SET NX PX,
          RENEW vs PEXPIRE, RELEASE vs DEL, TAKEOVER vs SET PX, and GET for
          every refusal that only reads the key

Measurements (select any combination; the default is --wall):

  --wall       redis-benchmark at -P 1 and -P 16; ops/s from redis-benchmark
               and usec_per_call from INFO commandstats after CONFIG
               RESETSTAT. Wall-clock: swings 20-50 % on a shared machine.
  --callgrind  the server runs under valgrind --tool=callgrind; for every
               case the counters are zeroed (callgrind_control -z), the
               requests sent, the profile dumped (-d) and its total divided
               by the number of requests: instructions per operation for the
               whole server process, repeatable to about 1 %. The requests
               come from a built-in pipelining client that uses exact keys
               and checks every reply, so each request provably took the
               intended path.
  --memory     used_memory for --memory-keys held locks (bare via
               LOCK.ACQUIRE, structured via LOCK.TAKEOVER) against as many
               plain SET ... PX keys with the same key and value sizes.

--quick shrinks every count for a CI smoke run (well under 30 s for --wall).
Exits 1 if a reply is not what the path expects; with --check-targets also
when a callgrind or memory target of issue 4 is missed.

Python 3 standard library only. Needs redis-server and redis-benchmark on
PATH (or --redis-server/--redis-benchmark), valgrind for --callgrind, and
cargo unless --module names a prebuilt module.

Reproduce the tables of docs/performance.md ("Instructions per operation",
"Wall clock", "Memory"):
    python3 benches/server_cost.py --wall --callgrind --memory
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------
# Values. Tokens and run ids are UUID-sized, as the Go services use them.

TOKEN = "3f2b8c1e-5d4a-4b6f-9e1c-7a8d9b0c2e4f"
OTHER = "a7c4e2f0-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
RUN = "9d8e7f6a-5b4c-4d3e-a2f1-0e9d8c7b6a50"
RUN2 = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
TTL = 600_000  # long enough that nothing expires while a case runs
STALE_PX = 100_000  # a legacy lock with PTTL <= floor(TTL/2): stale


def structured(token: str, run_id: str) -> str:
    """What redis_lock_rules::encode::structured_value writes (ASCII inputs)."""
    return '{"owner":"%s","runId":"%s"}' % (token, run_id)


MINE = structured(TOKEN, RUN)  # held by us
SAME_RUN = structured(OTHER, RUN)  # held by another owner of our run
OTHER_RUN = structured(OTHER, RUN2)  # held by another run

SCRIPTS = {name: (ROOT / "rules" / "reference" / f"{name}.lua").read_bytes() for name in ("renew", "release", "takeover")}
SHA = {name: hashlib.sha1(body).hexdigest() for name, body in SCRIPTS.items()}

# --------------------------------------------------------------------------
# A minimal RESP client (pipelining, exact reply parsing).


class RespError(Exception):
    pass


OK = "OK"  # a +OK status reply


def encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port: int, timeout: float = 600.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0

    def close(self):
        self.sock.close()

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        if self.pos > (1 << 20):
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos : i])
                self.pos = i + 2
                return line
            self._fill()

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) - self.pos < n + 2:
                self._fill()
            data = bytes(self.buf[self.pos : self.pos + n])
            self.pos += n + 2
            return data
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(f"bad reply line {line!r}")

    def call(self, *args):
        self.sock.sendall(encode(args))
        r = self.read()
        if isinstance(r, RespError):
            raise r
        return r

    def pipeline(self, payload: bytes, count: int) -> list:
        self.sock.sendall(payload)
        return [self.read() for _ in range(count)]


def fill(conn: Conn, commands, batch: int = 10_000) -> None:
    """Sends commands (lists of args) pipelined in batches; fails on an error reply."""
    pending: list[bytes] = []

    def flush():
        for r in conn.pipeline(b"".join(pending), len(pending)):
            if isinstance(r, RespError):
                raise r
        pending.clear()

    for c in commands:
        pending.append(encode(c))
        if len(pending) >= batch:
            flush()
    if pending:
        flush()


# --------------------------------------------------------------------------
# Servers: started on a free loopback port in their own process group, and
# always stopped (SHUTDOWN NOSAVE, then SIGKILL to the group).


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A server's dict hash seed comes from /dev/urandom at start; with another
# seed, other command names and keys share hash buckets, and a case's cost
# moved by 100-450 Ir between two runs of the same module. Under callgrind
# the server reads a fixed seed instead (and rand()/random() start from a
# fixed seed: a sorted set's skiplist levels), through this LD_PRELOAD shim (a
# dynamically linked server; a static one ignores it and runs as before).
# With it, and with serverCron left out, two runs of one module agree within
# ~20 Ir an operation.
SEED_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
static const char seed[64] = "redis-lock benches: a fixed seed, so that runs repeat exactly.";
static FILE *fixed(const char *path) {
    return path && strcmp(path, "/dev/urandom") == 0 ? fmemopen((void *)seed, sizeof seed, "r") : NULL;
}
FILE *fopen(const char *path, const char *mode) {
    FILE *f = fixed(path);
    return f ? f : ((FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen"))(path, mode);
}
FILE *fopen64(const char *path, const char *mode) {
    FILE *f = fixed(path);
    return f ? f : ((FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen64"))(path, mode);
}
/* The server seeds rand() and random() with time ^ pid: a sorted set's
 * skiplist levels (random()) then differ between runs. */
void srand(unsigned seed) { (void)seed; ((void (*)(unsigned))dlsym(RTLD_NEXT, "srand"))(1); }
void srandom(unsigned seed) { (void)seed; ((void (*)(unsigned))dlsym(RTLD_NEXT, "srandom"))(1); }
"""


def module_own_cost(profile: str, module_file: str) -> int:
    """The Ir the module's own work cost in a callgrind profile: every
    instruction executed in the module's object, plus everything under the
    module API calls it made (RM_*: opening keys, writes, replication,
    replies), less the command-table lookup inside RM_Replicate
    (lookupCommandByCString: its cost is that of the server's command dict
    and changes with the set of commands loaded). What a change of the
    module's code moves; the server's own work per command (reading the
    request, looking the command up, the event loop) is not in it. Read
    from self costs, not from the command function's inclusive cost, which
    callgrind misattributes across the module's tail calls."""
    def annotate(*extra):
        return subprocess.run(["callgrind_annotate", "--threshold=100", *extra, profile],
                              capture_output=True, text=True, check=True).stdout
    line_re = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+(.*) \[(.*)\]$")
    own = 0
    for line in annotate().splitlines():
        m = line_re.match(line)
        if m and os.path.basename(m.group(3)) == module_file:
            own += int(m.group(1).replace(",", ""))
    for line in annotate("--inclusive=yes").splitlines():
        m = line_re.match(line)
        if not m:
            continue
        if re.search(r"\?\?\?:RM_[A-Za-z]+$", m.group(2)):
            own += int(m.group(1).replace(",", ""))
        elif m.group(2).endswith("???:lookupCommandByCString"):
            own -= int(m.group(1).replace(",", ""))
    return own


def cron_cost(profile: str) -> int:
    """Ir spent in serverCron (inclusive) in a callgrind profile. Left out of
    every total: how often serverCron runs depends on the wall clock, i.e. on
    the machine's load, and even at hz 1 it moved a P1 case by 20-60 Ir."""
    r = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", profile],
                       capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+) .*:serverCron[ ']", line)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def fixed_seed_env() -> dict:
    """The environment of a server under callgrind: LD_PRELOAD of the seed shim, compiled once into target/."""
    out = ROOT / "target" / "bench-seed" / f"seed-{hashlib.sha1(SEED_SHIM.encode()).hexdigest()[:8]}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        src = out.with_suffix(".c")
        src.write_text(SEED_SHIM)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"], check=True)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD", ""), str(out)) if x)
    return env


class Server:
    def __init__(self, redis_server: str, module: Optional[str], callgrind: bool = False, extra=()):
        self.dir = tempfile.mkdtemp(prefix="redis-lock-bench-")
        self.module = module
        self.callgrind = callgrind
        self.proc = None
        last = ""
        for _ in range(5):
            self.port = free_port()
            cmd = [redis_server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", self.dir, "--logfile", "server.log", "--daemonize", "no", *extra]
            if module:
                cmd += ["--loadmodule", module]
                # e.g. "--lock.hold-timing yes": module configs, for the module's runs
                # only. The "--" matters: words after the module's path up to the next
                # "--" are the module's load arguments, which it ignores.
                cmd += os.environ.get("REDIS_LOCK_MODULE_CONFIG", "").split()
            env = None
            if callgrind:
                # hz 1: serverCron runs per wall-clock second, and a server
                # under callgrind is ~50x slower, so at the default hz 10 its
                # time-driven work (~110 000 Ir a call) would add 5-15 % to a
                # P1 case and vary with machine load.
                cmd += ["--hz", "1", "--dynamic-hz", "no"]
                # Instrumentation is off while keys are loaded and switched on
                # only around a measured case (callgrind_control -i).
                cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                       f"--callgrind-out-file={self.dir}/callgrind.out", *cmd]
                env = fixed_seed_env()
            self.proc = subprocess.Popen(cmd, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=open(os.path.join(self.dir, "stderr.log"), "wb"), start_new_session=True)
            if self._wait_ready(120 if callgrind else 20):
                self.conn = Conn(self.port)
                return
            last = self._logs()
            self._kill()
        self.stop()
        raise RuntimeError(f"redis-server did not start:\n{last}")

    def _logs(self) -> str:
        out = []
        for name in ("server.log", "stderr.log"):
            try:
                out.append(Path(self.dir, name).read_text(errors="replace")[-4000:])
            except OSError:
                pass
        return "\n".join(out)

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                c = Conn(self.port, timeout=5)
                try:
                    if c.call("PING") == "PONG":
                        return True
                finally:
                    c.close()
            except (OSError, RespError):
                pass
            time.sleep(0.1)
        return False

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def stop(self):
        try:
            if self.proc and self.proc.poll() is None:
                try:
                    c = Conn(self.port, timeout=5)
                    c.sock.sendall(encode(["SHUTDOWN", "NOSAVE"]))
                    c.close()
                    self.proc.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            self._kill()
            shutil.rmtree(self.dir, ignore_errors=True)

    def attach_replica(self, redis_server: str, module: Optional[str]) -> "Server":
        """Starts a replica of this server and waits until it streams."""
        replica = Server(redis_server, module, extra=("--replicaof", "127.0.0.1", str(self.port)))
        deadline = time.time() + 300  # a master under callgrind forks and syncs slowly
        while time.time() < deadline:
            info = self.conn.call("INFO", "replication").decode()
            if "state=online" in info:
                return replica
            time.sleep(0.5)
        replica.stop()
        raise RuntimeError("the replica did not come online")

    # -- callgrind control ------------------------------------------------
    def _cg(self, *args):
        r = subprocess.run(["callgrind_control", *args, str(self.proc.pid)], capture_output=True, text=True)
        if r.returncode != 0 or "OK" not in r.stdout:
            raise RuntimeError(f"callgrind_control {' '.join(args)} failed: {r.stdout}{r.stderr}")

    def cg_start(self):
        self._cg("-i", "on")
        self._cg("-z")

    def cg_stop(self, keep_as: Optional[str] = None, own: Optional[list] = None) -> int:
        """Dumps the counters, switches instrumentation off, returns total Ir.
        With `own` (a list), appends the module's own Ir to it (module_own_cost).
        With REDIS_LOCK_BENCH_IR=module in the environment, the total returned
        is the module's own Ir instead: every bench built on this class then
        compares module builds without the server's share (the command
        table's hash layout, event-loop listeners), e.g. two commits'
        holders_scale.py tables."""
        if own is None and os.environ.get("REDIS_LOCK_BENCH_IR") == "module" and self.module:
            mine: list = []
            self.cg_stop(keep_as, own=mine)
            return sum(mine)
        before = set(glob.glob(os.path.join(self.dir, "callgrind.out.*")))
        self._cg("-d")
        self._cg("-i", "off")
        new = sorted(set(glob.glob(os.path.join(self.dir, "callgrind.out.*"))) - before, key=os.path.getmtime)
        if not new:
            raise RuntimeError("callgrind_control -d wrote no profile")
        total = 0
        for path in new:  # one file per dump (threads are not separated)
            text = Path(path).read_text(errors="replace")
            m = re.search(r"^totals:\s+(\d+)", text, re.M) or re.search(r"^summary:\s+(\d+)", text, re.M)
            if not m:
                raise RuntimeError(f"no totals in {path}")
            total += int(m.group(1)) - cron_cost(path)
            if own is not None and self.module:
                own.append(module_own_cost(path, os.path.basename(self.module)))
            if keep_as:
                shutil.copy(path, keep_as)
            os.remove(path)
        return total


# --------------------------------------------------------------------------
# Cases. A key is FIXED ("held", one key every request hits), FRESH (a new
# key per request: absent) or CONSUMED (a new pre-loaded key per request,
# because the operation changes what the path depends on).

FIXED, FRESH, CONSUMED = "fixed", "fresh", "consumed"


@dataclasses.dataclass
class Impl:
    kind: str  # module | script | native
    argv: list  # "{k}" stands for the key
    stat: str  # INFO commandstats entry
    expect: object  # the reply every request must get


@dataclasses.dataclass
class Case:
    op: str
    path: str
    value: str  # bare | structured
    keys: str  # FIXED | FRESH | CONSUMED
    preload: Optional[tuple]  # (value, px or None) stored under each key before the run
    write: bool  # the success path writes (target 1.8x) or only reads (1.4x)
    impls: list

    @property
    def name(self) -> str:
        return f"{self.op} {self.path} ({self.value})"


def module(cmd, *args, expect):
    return Impl("module", [cmd, "{k}", *args], cmd.lower(), expect)


def script(name, *args, expect):
    return Impl("script", ["EVALSHA", SHA[name], "1", "{k}", *args], "evalsha", expect)


def native(cmd, *args, expect):
    return Impl("native", [cmd, "{k}", *args], cmd.split()[0].lower(), expect)


T = str(TTL)
CASES = [
    Case("ACQUIRE", "success: free key", "bare", FRESH, None, True, [
        module("LOCK.ACQUIRE", TOKEN, T, expect=1),
        native("SET", TOKEN, "NX", "PX", T, expect=OK)]),
    Case("ACQUIRE", "refusal: held", "bare", FIXED, (OTHER, TTL), False, [
        module("LOCK.ACQUIRE", TOKEN, T, expect=0),
        native("SET", TOKEN, "NX", "PX", T, expect=None)]),
    Case("ACQUIRE", "refusal: held", "structured", FIXED, (OTHER_RUN, TTL), False, [
        module("LOCK.ACQUIRE", TOKEN, T, expect=0),
        native("SET", TOKEN, "NX", "PX", T, expect=None)]),
    Case("RENEW", "success: owner", "bare", FIXED, (TOKEN, TTL), True, [
        module("LOCK.RENEW", TOKEN, T, expect=1),
        script("renew", TOKEN, T, expect=1),
        native("PEXPIRE", T, expect=1)]),
    Case("RENEW", "success: owner", "structured", FIXED, (MINE, TTL), True, [
        module("LOCK.RENEW", TOKEN, T, expect=1),
        script("renew", TOKEN, T, expect=1),
        native("PEXPIRE", T, expect=1)]),
    Case("RENEW", "refusal: wrong owner", "bare", FIXED, (OTHER, TTL), False, [
        module("LOCK.RENEW", TOKEN, T, expect=0),
        script("renew", TOKEN, T, expect=0),
        native("GET", expect=OTHER.encode())]),
    Case("RENEW", "refusal: wrong owner", "structured", FIXED, (SAME_RUN, TTL), False, [
        module("LOCK.RENEW", TOKEN, T, expect=0),
        script("renew", TOKEN, T, expect=0),
        native("GET", expect=SAME_RUN.encode())]),
    Case("RELEASE", "success: owner", "bare", CONSUMED, (TOKEN, TTL), True, [
        module("LOCK.RELEASE", TOKEN, expect=1),
        script("release", TOKEN, expect=1),
        native("DEL", expect=1)]),
    Case("RELEASE", "success: owner", "structured", CONSUMED, (MINE, TTL), True, [
        module("LOCK.RELEASE", TOKEN, expect=1),
        script("release", TOKEN, expect=1),
        native("DEL", expect=1)]),
    Case("RELEASE", "refusal: wrong owner", "bare", FIXED, (OTHER, TTL), False, [
        module("LOCK.RELEASE", TOKEN, expect=0),
        script("release", TOKEN, expect=0),
        native("GET", expect=OTHER.encode())]),
    Case("RELEASE", "refusal: wrong owner", "structured", FIXED, (SAME_RUN, TTL), False, [
        module("LOCK.RELEASE", TOKEN, expect=0),
        script("release", TOKEN, expect=0),
        native("GET", expect=SAME_RUN.encode())]),
    Case("TAKEOVER", "success: free key", "structured", FRESH, None, True, [
        module("LOCK.TAKEOVER", TOKEN, RUN, T, expect=1),
        script("takeover", MINE, T, expect=1),
        native("SET", MINE, "PX", T, expect=OK)]),
    Case("TAKEOVER", "success: same run", "structured", FIXED, (SAME_RUN, TTL), True, [
        module("LOCK.TAKEOVER", TOKEN, RUN, T, expect=1),
        script("takeover", MINE, T, expect=1),
        native("SET", MINE, "PX", T, expect=OK)]),
    Case("TAKEOVER", "success: stale legacy", "bare", CONSUMED, (OTHER, STALE_PX), True, [
        module("LOCK.TAKEOVER", TOKEN, RUN, T, expect=1),
        script("takeover", MINE, T, expect=1),
        native("SET", MINE, "PX", T, expect=OK)]),
    Case("TAKEOVER", "refusal: live legacy", "bare", FIXED, (OTHER, TTL), False, [
        module("LOCK.TAKEOVER", TOKEN, RUN, T, expect=0),
        script("takeover", MINE, T, expect=0),
        native("GET", expect=OTHER.encode())]),
    Case("TAKEOVER", "refusal: other run", "structured", FIXED, (OTHER_RUN, TTL), False, [
        module("LOCK.TAKEOVER", TOKEN, RUN, T, expect=0),
        script("takeover", MINE, T, expect=0),
        native("GET", expect=OTHER_RUN.encode())]),
]

HELD = "lock:held"


def key_name(case: Case, i: int) -> str:
    if case.keys == FIXED:
        return HELD
    # redis-benchmark expands __rand_int__ to 12 digits; the same format here.
    return ("lock:free:%012d" if case.keys == FRESH else "lock:c:%012d") % i


def preload(conn: Conn, case: Case, count: int) -> None:
    conn.call("FLUSHALL")
    if case.preload is None:
        return
    value, px = case.preload
    keys = [HELD] if case.keys == FIXED else [key_name(case, i) for i in range(count)]
    fill(conn, (["SET", k, value] + (["PX", str(px)] if px else []) for k in keys))


def argv_for(impl: Impl, key: str) -> list:
    return [key if a == "{k}" else a for a in impl.argv]


# --------------------------------------------------------------------------
# Wall clock: redis-benchmark + INFO commandstats.


def commandstats(conn: Conn) -> dict:
    info = conn.call("INFO", "commandstats").decode()
    out = {}
    for line in info.splitlines():
        m = re.match(r"cmdstat_([^:]+):(.*)", line)
        if m:
            out[m.group(1)] = {k: float(v) for k, v in (kv.split("=") for kv in m.group(2).split(","))}
    return out


def run_wall(server: Server, bench_bin: str, case: Case, impl: Impl, n: int, pipeline: int, clients: int) -> dict:
    # A consumed key is drawn at random from `space` pre-loaded keys
    # (redis-benchmark has no sequential keys): space = 10 n leaves ~5 % of
    # requests on an already-consumed key; the hit rate is reported.
    space = {FIXED: 0, FRESH: 1_000_000_000, CONSUMED: 10 * n}[case.keys]
    preload(server.conn, case, space if case.keys == CONSUMED else 1)
    keys_before = server.conn.call("DBSIZE")
    server.conn.call("CONFIG", "RESETSTAT")
    key = HELD if case.keys == FIXED else key_name(case, 0).replace("%012d" % 0, "__rand_int__")
    cmd = [bench_bin, "-p", str(server.port), "-n", str(n), "-P", str(pipeline), "-c", str(clients), "--csv"]
    if space:
        cmd += ["-r", str(space)]
    cmd += argv_for(impl, key)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {r.stderr}")
    rows = [l for l in r.stdout.splitlines() if l.startswith('"') and not l.startswith('"test"')]
    # "test","rps","avg_latency_ms","min","p50","p95","p99","max": the test
    # name (the command) may itself hold commas and quotes, so count from the end.
    rps = float(rows[-1].rsplit(",", 7)[1].strip('"'))
    st = commandstats(server.conn).get(impl.stat)
    if not st or st["calls"] < n:
        raise RuntimeError(f"{impl.stat} ran {st and st['calls']} times, expected {n}")
    if st.get("failed_calls", 0) or st.get("rejected_calls", 0):
        raise RuntimeError(f"{case.name} / {impl.kind}: errors in commandstats: {st}")
    out = {"ops_per_sec": rps, "usec_per_call": st["usec_per_call"], "calls": int(st["calls"])}
    if case.keys == CONSUMED:
        out["hit_rate"] = consumed_keys(server.conn, case, space) / n
    return out


def consumed_keys(conn: Conn, case: Case, space: int) -> int:
    """Pre-loaded keys no longer holding their pre-loaded value: the requests
    that hit the intended path (a second request on the same key does not)."""
    value = case.preload[0].encode()
    left = 0
    for start in range(0, space, 10_000):
        keys = [key_name(case, i) for i in range(start, min(space, start + 10_000))]
        left += sum(v == value for v in conn.call("MGET", *keys))
    return space - left


# --------------------------------------------------------------------------
# Callgrind: exact keys, every reply checked, Ir per request.


def run_exact(conns: list, case: Case, impl: Impl, n: int, pipeline: int) -> None:
    """Sends n requests, `pipeline` at a time per connection, round-robin over
    the connections; checks every reply."""
    i = 0
    while i < n:
        batches = []
        for c in conns:
            k = min(pipeline, n - i)
            if k <= 0:
                break
            batches.append((c, k, b"".join(encode(argv_for(impl, key_name(case, j))) for j in range(i, i + k))))
            i += k
        for c, k, payload in batches:
            c.sock.sendall(payload)
        for c, k, _ in batches:
            for _ in range(k):
                r = c.read()
                if r != impl.expect:
                    raise RuntimeError(f"{case.name} / {impl.kind}: reply {r!r}, expected {impl.expect!r}")


def run_callgrind(server: Server, case: Case, impl: Impl, n: int, pipeline: int, clients: int, keep: Optional[str]) -> dict:
    preload(server.conn, case, n if case.keys == CONSUMED else 1)
    conns = [Conn(server.port) for _ in range(clients)]
    try:
        for c in conns:
            c.call("PING")
        server.cg_start()
        t = time.time()
        run_exact(conns, case, impl, n, pipeline)
        own = [] if impl.kind == "module" else None
        total = server.cg_stop(keep, own=own)
    finally:
        for c in conns:
            c.close()
    r = {"ir_per_op": total / n, "ir_total": total, "seconds": time.time() - t}
    if own:
        r["own_per_op"] = sum(own) / n
    return r


# --------------------------------------------------------------------------
# Memory.


def run_memory(redis_server: str, module_path: str, n: int) -> list:
    """used_memory growth for n locks against n plain SET ... PX keys."""
    kinds = [
        ("bare", "LOCK.ACQUIRE", lambda k: ["LOCK.ACQUIRE", k, TOKEN, T], lambda k: ["SET", k, TOKEN, "PX", T]),
        ("structured", "LOCK.TAKEOVER", lambda k: ["LOCK.TAKEOVER", k, TOKEN, RUN, T], lambda k: ["SET", k, MINE, "PX", T]),
    ]
    rows = []
    for value, cmd, lock_cmd, plain_cmd in kinds:
        used = {}
        for label, make in ((cmd, lock_cmd), ("SET PX", plain_cmd)):
            srv = Server(redis_server, module_path)
            try:
                base = info_field(srv.conn, "memory", "used_memory")
                fill(srv.conn, (make("lock:%012d" % i) for i in range(n)))
                if srv.conn.call("DBSIZE") != n:
                    raise RuntimeError("memory: wrong key count")
                used[label] = info_field(srv.conn, "memory", "used_memory") - base
            finally:
                srv.stop()
        rows.append({"value": value, "keys": n, "lock_cmd": cmd, "lock_bytes": used[cmd], "plain_bytes": used["SET PX"],
                     "ratio": used[cmd] / used["SET PX"]})
    return rows


def info_field(conn: Conn, section: str, field: str) -> int:
    for line in conn.call("INFO", section).decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise KeyError(field)


def ping_until(probe: Conn, done) -> tuple:
    """PINGs on `probe` until `done()` (asked every 16th PING): the longest
    round trip (s) and how many PINGs; what a server's thread busy with
    something else makes a client wait."""
    longest, pings = 0.0, 0
    while True:
        t = time.perf_counter()
        probe.call("PING")
        longest = max(longest, time.perf_counter() - t)
        pings += 1
        if pings % 16 == 0 and done():
            return longest, pings


def ping_idle(probe: Conn, pings: int) -> float:
    """The longest round trip (s) of `pings` PINGs with nothing else to do:
    the machine's own noise, beside `ping_until`'s."""
    idle = 0.0
    for _ in range(pings):
        t = time.perf_counter()
        probe.call("PING")
        idle = max(idle, time.perf_counter() - t)
    return idle


# --------------------------------------------------------------------------
# Reporting.


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "—"


def target_for(case: Case, impl_kind: str) -> float:
    return (1.8 if case.write else 1.4) if impl_kind == "native" else 0.3


def print_tables(results: dict, cases: list, args, out) -> list:
    missed = []
    def w(s=""):
        print(s, file=out)
    if "wall" in results:
        w(f"### Wall clock: redis-benchmark -c {args.clients} -n {args.requests} (ops/s; usec_per_call from INFO commandstats){', one replica attached' if args.replica else ''}")
        w()
        w("| operation | path | value | P | native | ops/s module | ops/s script | ops/s native | µs/call module | µs/call script | µs/call native | module/native | module/script |")
        w("|---|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for p in args.pipelines:
            for case in cases:
                r = results["wall"].get((case.name, p))
                if not r:
                    continue
                g = lambda kind, f: r[kind][f] if kind in r else None
                native_label = " ".join(x for x in case.impls[-1].argv if not x.startswith("{") and x not in (TOKEN, MINE, T))
                note = ""
                if case.keys == CONSUMED:
                    note = " (hits " + "/".join(f"{r[k]['hit_rate']:.0%}" for k in ("module", "script", "native") if k in r) + ")"
                w(f"| {case.op} | {case.path}{note} | {case.value} | {p} | {native_label} | "
                  + " | ".join(f"{g(k, 'ops_per_sec'):,.0f}" if g(k, 'ops_per_sec') else "—" for k in ("module", "script", "native")) + " | "
                  + " | ".join(f"{g(k, 'usec_per_call'):.2f}" if g(k, 'usec_per_call') else "—" for k in ("module", "script", "native")) + " | "
                  + f"{fmt_ratio(g('module', 'usec_per_call'), g('native', 'usec_per_call'))} | {fmt_ratio(g('module', 'usec_per_call'), g('script', 'usec_per_call'))} |")
        w()
    if "callgrind" in results:
        w(f"### Instructions per operation, whole server process (valgrind --tool=callgrind; {args.cg_requests} requests per case, {args.cg_clients} connection(s){', one replica attached' if args.replica else ''})")
        w()
        w("| operation | path | value | P | native | Ir/op module | Ir/op script | Ir/op native | module/native (target) | module/script (≤ 0.30) | module's own Ir/op |")
        w("|---|---|---|---|---|--:|--:|--:|--:|--:|--:|")
        for p in args.cg_pipelines:
            for case in cases:
                r = results["callgrind"].get((case.name, p))
                if not r:
                    continue
                m, s, nat = (r.get(k, {}).get("ir_per_op") for k in ("module", "script", "native"))
                native_label = " ".join(x for x in case.impls[-1].argv if not x.startswith("{") and x not in (TOKEN, MINE, T))
                tn = target_for(case, "native")
                ok_n = m / nat <= tn
                ok_s = s is None or m / s <= 0.3
                if not ok_n:
                    missed.append(f"{case.name} P{p}: module/native {m / nat:.2f} > {tn}")
                if not ok_s:
                    missed.append(f"{case.name} P{p}: module/script {m / s:.2f} > 0.30")
                w(f"| {case.op} | {case.path} | {case.value} | {p} | {native_label} | {m:,.0f} | {f'{s:,.0f}' if s else '—'} | {nat:,.0f} | "
                  f"{m / nat:.2f} (≤ {tn}) {'✓' if ok_n else '✗'} | {fmt_ratio(m, s)} {'' if s is None else ('✓' if ok_s else '✗')} | "
                  f"{r['module'].get('own_per_op', 0):,.0f} |")
        w()
        w("Module's own Ir/op: the instructions run in the module's object plus everything under the module API "
          "calls it made (RM_*), less the command-table lookup inside RM_Replicate: what a change of the "
          "module's code moves. The whole-process figures also carry the server's own work, which moves with "
          "the command table (its hash layout changes with the set of commands loaded).")
        w()
    if "memory" in results:
        w("### Memory: used_memory growth")
        w()
        w("| value | keys | locks | bytes (locks) | bytes (SET PX) | locks/plain (≤ 1.05) | bytes/key (locks) | bytes/key (plain) |")
        w("|---|--:|---|--:|--:|--:|--:|--:|")
        for r in results["memory"]:
            ok = r["ratio"] <= 1.05
            if not ok:
                missed.append(f"memory {r['value']}: {r['ratio']:.3f} > 1.05")
            w(f"| {r['value']} | {r['keys']:,} | {r['lock_cmd']} | {r['lock_bytes']:,} | {r['plain_bytes']:,} | {r['ratio']:.3f} {'✓' if ok else '✗'} | "
              f"{r['lock_bytes'] / r['keys']:.1f} | {r['plain_bytes'] / r['keys']:.1f} |")
        w()
    return missed


def machine(redis_server: str) -> str:
    lines = [f"- nproc: {os.cpu_count()}  (platform {platform.platform()})"]
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:10]
        lines += ["- lscpu | head:", "", "```", *lscpu, "```", ""]
    except OSError:
        pass
    ver = subprocess.run([redis_server, "--version"], capture_output=True, text=True).stdout.strip()
    lines.append(f"- {ver}")
    try:
        vg = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
        lines.append(f"- {vg}")
    except OSError:
        pass
    rev = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    lines.append(f"- module built from commit {rev or '?'}")
    return "\n".join(lines)


def build_module(args) -> str:
    if args.module:
        # redis-server resolves a relative path from its own working directory.
        return str(Path(args.module).resolve())
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "redis-lock", "--lib"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    so = target / "release" / "libredis_lock.so"
    if not so.exists():
        sys.exit(f"module not found at {so}")
    return str(so)


@contextlib.contextmanager
def measured_server(args, module_path: str, callgrind: bool):
    """The server a measurement runs on, with the reference scripts loaded
    and (--replica) a replica attached; both stopped afterwards."""
    srv = Server(args.redis_server, module_path, callgrind=callgrind)
    replica = None
    try:
        if args.replica:
            replica = srv.attach_replica(args.redis_server, module_path)
        for name, body in SCRIPTS.items():
            assert srv.conn.call("SCRIPT", "LOAD", body).decode() == SHA[name]
        yield srv
    finally:
        srv.stop()
        if replica:
            replica.stop()


def main() -> int:
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the servers' finally blocks run.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(130))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wall", action="store_true", help="wall clock with redis-benchmark (default if nothing else is chosen)")
    ap.add_argument("--callgrind", action="store_true", help="instructions per operation under valgrind --tool=callgrind")
    ap.add_argument("--memory", action="store_true", help="used_memory of held locks vs plain keys")
    ap.add_argument("--quick", action="store_true", help="small counts for a CI smoke run")
    ap.add_argument("--requests", type=int, help="redis-benchmark -n per run (default 200000; quick 2000)")
    ap.add_argument("--pipelines", default="1,16", help="redis-benchmark -P values (default 1,16)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark -c (default 50)")
    ap.add_argument("--cg-requests", type=int, help="requests per callgrind case (default 20000; quick 500)")
    ap.add_argument("--cg-pipelines", default="1,16", help="pipeline depths under callgrind (default 1,16)")
    ap.add_argument("--cg-clients", type=int, default=1, help="connections under callgrind (default 1)")
    ap.add_argument("--cg-keep", metavar="DIR", help="keep each case's callgrind profile in DIR (for callgrind_annotate)")
    ap.add_argument("--memory-keys", type=int, help="keys for --memory (default 1000000; quick 20000)")
    ap.add_argument("--replica", action="store_true", help="attach one replica (with the module) to the measured server, so that every implementation pays its real propagation, as in production")
    ap.add_argument("--cases", help="only cases whose name contains this (case-insensitive), e.g. 'renew'")
    ap.add_argument("--check-targets", action="store_true", help="exit 1 when a callgrind or memory target is missed")
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--redis-benchmark", default="redis-benchmark")
    ap.add_argument("--module", default=os.environ.get("REDIS_LOCK_MODULE"), help="prebuilt module (default: build target/release/libredis_lock.so)")
    ap.add_argument("--no-build", action="store_true", help="use target/release/libredis_lock.so as it is")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables and the machine as Markdown")
    args = ap.parse_args()
    if not (args.wall or args.callgrind or args.memory):
        args.wall = True
    args.requests = args.requests or (2_000 if args.quick else 200_000)
    args.cg_requests = args.cg_requests or (500 if args.quick else 20_000)
    args.memory_keys = args.memory_keys or (20_000 if args.quick else 1_000_000)
    args.pipelines = [int(p) for p in args.pipelines.split(",")]
    args.cg_pipelines = [int(p) for p in args.cg_pipelines.split(",")]
    cases = [c for c in CASES if not args.cases or args.cases.lower() in c.name.lower()]
    module_path = build_module(args)
    if args.cg_keep:
        os.makedirs(args.cg_keep, exist_ok=True)

    results: dict = {}
    started = time.time()
    if args.wall:
        results["wall"] = {}
        with measured_server(args, module_path, callgrind=False) as srv:
            for p in args.pipelines:
                for case in cases:
                    row = results["wall"].setdefault((case.name, p), {})
                    for impl in case.impls:
                        row[impl.kind] = run_wall(srv, args.redis_benchmark, case, impl, args.requests, p, args.clients)
                    print(f"wall  P{p:<2} {case.name:45} " + "  ".join(f"{k} {v['usec_per_call']:.2f}us" for k, v in row.items()), file=sys.stderr)
    if args.callgrind:
        results["callgrind"] = {}
        with measured_server(args, module_path, callgrind=True) as srv:
            for p in args.cg_pipelines:
                for case in cases:
                    row = results["callgrind"].setdefault((case.name, p), {})
                    for impl in case.impls:
                        keep = None
                        if args.cg_keep:
                            slug = re.sub(r"[^a-z0-9]+", "-", f"{case.name}-{impl.kind}-p{p}".lower()).strip("-")
                            keep = os.path.join(args.cg_keep, f"{slug}.callgrind")
                        row[impl.kind] = run_callgrind(srv, case, impl, args.cg_requests, p, args.cg_clients, keep)
                    print(f"cg    P{p:<2} {case.name:45} " + "  ".join(f"{k} {v['ir_per_op']:,.0f}" for k, v in row.items()), file=sys.stderr)
    if args.memory:
        results["memory"] = run_memory(args.redis_server, module_path, args.memory_keys)

    missed = print_tables(results, cases, args, sys.stdout)
    print(f"Machine:\n\n{machine(args.redis_server)}\n\nElapsed: {time.time() - started:.0f} s")
    if args.markdown:
        with open(args.markdown, "w") as f:
            print_tables(results, cases, args, f)
            print(f"Machine:\n\n{machine(args.redis_server)}", file=f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: ({f"{n} P{p}": v for (n, p), v in d.items()} if isinstance(d, dict) else d) for k, d in results.items()}, f, indent=1)
    if missed:
        print("Targets missed:\n  " + "\n  ".join(missed), file=sys.stderr)
        if args.check_targets:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
