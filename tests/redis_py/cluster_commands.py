#!/usr/bin/env python3
"""Every module command through redis-py's RedisCluster, a client nobody
here wrote (tests/redis_py_cluster.rs starts the cluster and runs this).

redis-py reads a command name as `module.command` and refuses a name with a
second dot before sending anything; it routes a command by the key specs
that COMMAND reports. Each command below must reach the node serving its
key and answer as documented there. Exits non-zero on the first surprise.

usage: cluster_commands.py PORT
"""

import sys

from redis.cluster import RedisCluster

rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), decode_responses=True)


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}: {got!r}")


def node_of(key):
    return rc.get_node_from_key(key).port


# Keys on every master, so that routing is put to the test.
keys = {}
for i in range(64):
    keys.setdefault(node_of(f"k{i}"), f"k{i}")
    if len(keys) == len(rc.get_primaries()):
        break
if len(keys) < 2:
    sys.exit(f"keys on {len(keys)} master(s) only")

for port, k in sorted(keys.items()):
    check(f"LOCK.ACQUIRE {k} (node {port})", rc.execute_command("LOCK.ACQUIRE", k, "t1", 60000), 1)
    info = rc.execute_command("LOCK.INFO", k)
    check(f"LOCK.INFO {k} owner", info[info.index("owner") + 1] if isinstance(info, list) else info.get("owner"), "t1")
    check(f"LOCK.RENEW {k}", rc.execute_command("LOCK.RENEW", k, "t1", 60000), 1)
    check(f"LOCK.GUARD {k} GET", rc.execute_command("LOCK.GUARD", k, "t1", "GET", k), "t1")
    check(f"LOCK.RELEASE {k}", rc.execute_command("LOCK.RELEASE", k, "t1"), 1)
    check(f"LOCK.TAKEOVER {k}", rc.execute_command("LOCK.TAKEOVER", k, "t2", "run", 60000), 1)
    check(f"LOCK.RELEASE {k} after TAKEOVER", rc.execute_command("LOCK.RELEASE", k, "t2"), 1)

    s = "{%s}sem" % k
    check(f"SEM.ACQUIRE {s}", rc.execute_command("SEM.ACQUIRE", s, "p1", 2, 60000), 1)
    check(f"SEM.ACQUIRE {s} FENCE", rc.execute_command("SEM.ACQUIRE", s, "p2", 2, 60000, "FENCE") > 0, True)
    check(f"SEM.ACQUIRE {s} full", rc.execute_command("SEM.ACQUIRE", s, "p3", 2, 60000), 0)
    check(f"SEM.RENEW {s}", rc.execute_command("SEM.RENEW", s, "p1", 60000), 1)
    info = rc.execute_command("SEM.INFO", s)
    check(f"SEM.INFO {s} limit", info[info.index("limit") + 1] if isinstance(info, list) else info.get("limit"), 2)
    check(f"SEM.RELEASE {s}", rc.execute_command("SEM.RELEASE", s, "p1"), 1)
    check(f"SEM.RELEASE {s} again", rc.execute_command("SEM.RELEASE", s, "p1"), 0)

    w = "{%s}rw" % k
    check(f"RWLOCK.ACQUIRE {w} READ", rc.execute_command("RWLOCK.ACQUIRE", w, "r1", "READ", 60000), 1)
    check(f"RWLOCK.ACQUIRE {w} WRITE refused", rc.execute_command("RWLOCK.ACQUIRE", w, "w1", "WRITE", 60000), 0)
    check(f"RWLOCK.RENEW {w}", rc.execute_command("RWLOCK.RENEW", w, "r1", 60000), 1)
    info = rc.execute_command("RWLOCK.INFO", w)
    check(f"RWLOCK.INFO {w} mode", info[info.index("mode") + 1] if isinstance(info, list) else info.get("mode"), "read")
    check(f"RWLOCK.RELEASE {w}", rc.execute_command("RWLOCK.RELEASE", w, "r1"), 1)

    # Each key went where redis-py sent it: the node that serves its slot.
    node = rc.get_node_from_key(k)
    check(f"{s} stored on node {port}", rc.execute_command("ZCARD", s, target_nodes=node), 2)

# Sessions: node state. Each is granted on the master whose keys it will
# hold (keyless commands go where the caller says), and a lock attaches
# only there: another master does not know the session.
nodes = {n.port: n for n in rc.get_primaries()}
sessions = {}
for port, k in sorted(keys.items()):
    sid = rc.execute_command("SESSION.GRANT", 60000, target_nodes=nodes[port])
    sessions[port] = sid
    check(f"SESSION.GRANT on {port}", len(sid), 32)
    check(f"LOCK.ACQUIRE {k} SESSION", rc.execute_command("LOCK.ACQUIRE", k, "t3", 60000, "SESSION", sid), 1)
    check(f"SESSION.KEEPALIVE on {port}", rc.execute_command("SESSION.KEEPALIVE", sid, target_nodes=nodes[port]), [60000])
    info = rc.execute_command("SESSION.INFO", sid, target_nodes=nodes[port])
    check(f"SESSION.INFO on {port} holds", info[info.index("holds") + 1] if isinstance(info, list) else info.get("holds"), 1)
    check(f"SESSION.LIST on {port}", rc.execute_command("SESSION.LIST", target_nodes=nodes[port]), [sid])
for port in sorted(keys):
    # A key another master serves: the session is unknown there.
    elsewhere = next(p for p in sorted(keys) if p != port)
    try:
        got = rc.execute_command("LOCK.ACQUIRE", keys[elsewhere], "t4", 60000, "SESSION", sessions[port])
    except Exception as e:
        got = str(e)
    check(f"SESSION of {port} on {elsewhere}", "no such session" in str(got), True)
for port, k in sorted(keys.items()):
    check(f"SESSION.REVOKE on {port}", rc.execute_command("SESSION.REVOKE", sessions[port], target_nodes=nodes[port]), 1)

# A keyless command: sent to a node of the caller's choosing.
check("LOCK.FENCEFLOOR", rc.execute_command("LOCK.FENCEFLOOR", 1, target_nodes=RedisCluster.PRIMARIES) is not None, True)
print("all module commands answered through RedisCluster")
