#!/usr/bin/env python3
"""redis-lock from Python with redis-py's RedisCluster: the same generic
commands as locks.py, routed to the node that serves the key's slot.

RedisCluster routes a command by the key positions `COMMAND` reports, and
the module declares its key as argument 1, so `execute_command("LOCK.ACQUIRE",
key, …)` goes to the key's node with no hint. A waiting acquire still needs
a connection of its own: here one to the key's node, with a read timeout
longer than the wait, that re-sends on `MOVED` (the slot moved or failed
over while it waited). tests/examples.rs runs it against a 3-master cluster.

usage: cluster.py PORT   (any node of the cluster on 127.0.0.1)

Exits non-zero on the first reply that is not the documented one.
"""

import os
import secrets
import sys
import threading
import time

import redis
from redis.cluster import RedisCluster

rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=2)


def expect(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}: {got!r}")


def new_token():
    return secrets.token_hex(16)


def acquire_waiting(key, token, ttl_ms, wait_ms):
    """LOCK.ACQUIRE … FENCE WAIT on a dedicated connection to the key's node;
    the fence, or None when the wait ran out."""
    deadline = time.monotonic() + wait_ms / 1000
    node = rc.get_node_from_key(key)
    host, port = node.host, node.port
    while True:
        left = max(0, int((deadline - time.monotonic()) * 1000))
        conn = redis.Redis(host=host, port=port, socket_timeout=left / 1000 + 2, single_connection_client=True)
        try:
            # WAIT 0 would mean "forever": a wait that has run out asks once more without blocking.
            args = ["WAIT", left] if left > 0 else []
            return conn.execute_command("LOCK.ACQUIRE", key, token, ttl_ms, "FENCE", *args)
        except redis.ResponseError as e:
            # MOVED slot host:port: the slot is served elsewhere now.
            if not str(e).startswith("MOVED ") or left == 0:
                raise
            host, port = str(e).split()[2].rsplit(":", 1)
        finally:
            conn.close()


# Keys on different masters: each command must reach the key's own node.
keys = []
for i in range(100):
    k = f"example:py:{os.getpid()}:job{i}"
    if rc.get_node_from_key(k).port not in [rc.get_node_from_key(x).port for x in keys]:
        keys.append(k)
    if len(keys) == 2:
        break
expect("keys on two masters", len(keys), 2)

for key in keys:
    tok = new_token()
    expect(f"acquire {key}", rc.execute_command("LOCK.ACQUIRE", key, tok, 30000), 1)
    expect(f"acquire {key} held", rc.execute_command("LOCK.ACQUIRE", key, new_token(), 30000), 0)
    expect(f"renew {key}", rc.execute_command("LOCK.RENEW", key, tok, 30000), 1)
    expect(f"release {key}", rc.execute_command("LOCK.RELEASE", key, tok), 1)
    f1 = rc.execute_command("LOCK.ACQUIRE", key, tok, 30000, "FENCE")
    expect(f"fenced acquire {key}", isinstance(f1, int) and f1 > 0, True)
    # The lock lives on the node that serves its slot.
    expect(f"{key} on its node", rc.execute_command("GET", key, target_nodes=rc.get_node_from_key(key)), tok.encode())

    threading.Timer(0.2, rc.execute_command, args=("LOCK.RELEASE", key, tok)).start()
    waiter = new_token()
    f2 = acquire_waiting(key, waiter, 30000, 10000)
    expect(f"the waiter on {key} is granted with a larger fence", isinstance(f2, int) and f2 > f1, True)
    expect(f"a wait on {key} that times out", acquire_waiting(key, new_token(), 30000, 100), None)
    expect(f"release {key} by the waiter", rc.execute_command("LOCK.RELEASE", key, waiter), 1)

print("python cluster example: every reply as documented")
