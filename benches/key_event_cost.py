#!/usr/bin/env python3
"""What the module's keyspace-event subscriptions cost native commands.

Redis calls a module's keyspace-event callback on every event of the
classes it subscribed to, the native commands' included. With a waiter,
an observer and lock.hold-timing on (so every subscription of the module is
taken), this measures, under valgrind --tool=callgrind (the helpers of
benches/server_cost.py), the instructions per native DEL, SET … PX and
PEXPIRE of keys the module does not hold: the price other clients of the
server pay for the module's events. See docs/performance.md.

  python3 benches/key_event_cost.py [--module PATH] [--redis-server PATH] [--requests N]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_cost as sc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--module", default=os.path.join(root, "target/release/libredis_lock.so"))
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--requests", type=int, default=2000)
    a = ap.parse_args()
    srv = sc.Server(a.redis_server, a.module, callgrind=True, extra=["--lock.hold-timing", "yes"])
    try:
        c = sc.Conn(srv.port)
        c.call("LOCK.ACQUIRE", "held", "t", 600000)
        waiter = sc.Conn(srv.port)
        waiter.sock.sendall(sc.encode(["LOCK.ACQUIRE", "held", "w", 600000, "WAIT", 0]))
        term = c.call("LOCK.ELECT", "e", "l", 600000, "v")
        observer = sc.Conn(srv.port)
        # A new leader's revision is its term (docs/election.md).
        observer.sock.sendall(sc.encode(["LOCK.OBSERVE", "e", "AFTER", term, "WAIT", 0]))
        deadline = time.time() + 60
        while sc.info_field(c, "lock", "lock_waiting") != 1 or sc.info_field(c, "lock", "lock_observing") != 1:
            if time.time() > deadline:
                raise RuntimeError("the waiter or the observer did not block")
            time.sleep(0.05)
        n = a.requests
        for i in range(n):
            c.call("SET", f"k{i}", "v")
        rows = []
        for name, args in [
            ("DEL", lambda i: ["DEL", f"k{i}"]),
            ("SET … PX", lambda i: ["SET", f"k{i}", "v", "PX", 600000]),
            ("PEXPIRE", lambda i: ["PEXPIRE", f"k{i}", 700000]),
        ]:
            srv.cg_start()
            for i in range(n):
                c.call(*args(i))
            rows.append((name, srv.cg_stop() / n))
        print("| native command | Ir per command |")
        print("|---|--:|")
        for name, ir in rows:
            print(f"| {name} | {ir:,.0f} |")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
