#!/usr/bin/env python3
"""redis-lock from Python with redis-py: the module's commands sent as
generic commands (`execute_command`), one server.

Acquire, renew (and a renewal thread at TTL/3), release, a fenced acquire
and a waiting acquire on a dedicated connection whose read timeout is
longer than the wait. docs/clients.md walks through it; tests/examples.rs
runs it against a server with the module on every `scripts/test`.

usage: locks.py [URL]   (default: $REDIS_URL, else redis://127.0.0.1:6379/)

Exits non-zero on the first reply that is not the documented one.
"""

import os
import secrets
import sys
import threading
import time

import redis

URL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/")

# The shared client: acquires without WAIT, renewals, releases. A short
# read timeout: none of these blocks in the server.
r = redis.Redis.from_url(URL, socket_timeout=2)


def expect(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}: {got!r}")


def new_token():
    """A fresh token per acquisition: 128 random bits, as 32 hex digits."""
    return secrets.token_hex(16)


def acquire(key, token, ttl_ms):
    """1: granted; 0: someone holds the key."""
    return r.execute_command("LOCK.ACQUIRE", key, token, ttl_ms)


def renew(key, token, ttl_ms):
    """1: renewed; 2: renewed up to its MAXHOLD only; 0: the lock is lost."""
    return r.execute_command("LOCK.RENEW", key, token, ttl_ms)


def release(key, token):
    """1: released; 0: this token did not hold it (any more)."""
    return r.execute_command("LOCK.RELEASE", key, token)


def acquire_fenced(key, token, ttl_ms):
    """The grant's fencing token (an int), or None when the key is held."""
    return r.execute_command("LOCK.ACQUIRE", key, token, ttl_ms, "FENCE")


def acquire_waiting(key, token, ttl_ms, wait_ms):
    """Queue in the server for up to wait_ms; the fence, or None on timeout.

    A client blocked in the server runs nothing else, so the wait gets a
    connection of its own (never the shared one the renewals use), and its
    read timeout is the wait plus the usual 2 s: with the shared client's
    2 s, redis-py would give up on any wait longer than that.
    """
    conn = redis.Redis.from_url(URL, socket_timeout=wait_ms / 1000 + 2, single_connection_client=True)
    try:
        return conn.execute_command("LOCK.ACQUIRE", key, token, ttl_ms, "FENCE", "WAIT", wait_ms)
    finally:
        conn.close()


def keep_renewed(key, token, ttl_ms, stop, lost, renewed):
    """Renew every TTL/3 until `stop` is set; on a 0 reply set `lost`.
    `renewed` counts the renewals that took effect."""
    while not stop.wait(ttl_ms / 3000):
        try:
            if renew(key, token, ttl_ms) == 0:
                lost.set()
                return
            renewed.append(time.monotonic())
        except redis.RedisError:
            # Retry sooner (TTL/10): the lock lasts until its TTL runs out.
            stop.wait(ttl_ms / 10000)


key = f"example:py:{os.getpid()}:job"

# Acquire, refuse a second holder, renew, release.
tok = new_token()
expect("acquire a free key", acquire(key, tok, 30000), 1)
expect("acquire a held key", acquire(key, new_token(), 30000), 0)
expect("renew by the holder", renew(key, tok, 30000), 1)
expect("renew by another token", renew(key, "someone-else", 30000), 0)
expect("release by the holder", release(key, tok), 1)
expect("release again", release(key, tok), 0)

# A renewal thread keeps a 3 s lock: renewed every second until stopped.
tok = new_token()
expect("acquire a lock with a 3 s TTL", acquire(key, tok, 3000), 1)
stop, lost, renewed = threading.Event(), threading.Event(), []
renewer = threading.Thread(target=keep_renewed, args=(key, tok, 3000, stop, lost, renewed))
renewer.start()
deadline = time.monotonic() + 30
while len(renewed) < 2 and not lost.is_set() and time.monotonic() < deadline:
    time.sleep(0.05)
stop.set()
renewer.join()
expect("renewed twice, never lost", (len(renewed) >= 2, lost.is_set()), (True, False))
expect("still held by its token", r.get(key), tok.encode())
expect("release the renewed lock", release(key, tok), 1)

# Fences: each grant's is larger than the one before; a refusal is None.
tok = new_token()
f1 = acquire_fenced(key, tok, 30000)
expect("a fence is a positive integer", isinstance(f1, int) and f1 > 0, True)
expect("fenced acquire of a held key", acquire_fenced(key, new_token(), 30000), None)
expect("release", release(key, tok), 1)
f2 = acquire_fenced(key, tok, 30000)
expect("the next grant's fence is larger", f2 > f1, True)

# Waiting: the holder releases after 200 ms and the waiter gets the lock
# then, in the release's own step, not at its 10 s timeout.
threading.Timer(0.2, release, args=(key, tok)).start()
waiter = new_token()
started = time.monotonic()
f3 = acquire_waiting(key, waiter, 30000, 10000)
waited = time.monotonic() - started
expect("the waiter's fence is larger", isinstance(f3, int) and f3 > f2, True)
expect("granted at the release, well before the timeout", 0.15 < waited < 5, True)
expect("the waiter holds the key", r.get(key), waiter.encode())
expect("a wait that times out", acquire_waiting(key, new_token(), 30000, 100), None)
expect("release the waiter's lock", release(key, waiter), 1)

print("python example: every reply as documented")
