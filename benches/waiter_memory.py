#!/usr/bin/env python3
"""Server memory per blocked client: LOCK.ACQUIRE ... WAIT vs BLPOP.

Starts its own server (with the module) on a free loopback port, opens N
connections that block (N waiters on one held lock, then N BLPOP clients on
one empty list), and reports used_memory growth per blocked client, with the
growth per merely-connected client subtracted out as a baseline.

    python3 benches/waiter_memory.py [--server PATH] [--module PATH] [-n 2000]
"""
import argparse, os, socket, subprocess, sys, tempfile, time


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def info_field(sock, section, field):
    sock.sendall(resp("INFO", section))
    data = b""
    while True:
        data += sock.recv(65536)
        head, _, rest = data.partition(b"\r\n")
        if head.startswith(b"$") and len(rest) >= int(head[1:]):
            break
    for line in rest.decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise KeyError(field)


def settle(sock):
    time.sleep(0.3)
    return info_field(sock, "memory", "used_memory")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser()
    p.add_argument("--server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    p.add_argument("--module", default=os.path.join(root, "target/release/libredis_lock.so"))
    p.add_argument("-n", type=int, default=2000)
    a = p.parse_args()
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    d = tempfile.mkdtemp()
    srv = subprocess.Popen([a.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                            "--dir", d, "--maxclients", str(3 * a.n + 100), "--loadmodule", os.path.abspath(a.module)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                admin = socket.create_connection(("127.0.0.1", port)); break
            except OSError:
                time.sleep(0.02)
        version = info_field(admin, "server", "redis_version") if False else None
        admin.sendall(resp("LOCK.ACQUIRE", "k", "holder", 600000)); admin.recv(100)

        def connections(n):
            return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]

        base = settle(admin)
        idle = connections(a.n)
        per_idle = (settle(admin) - base) / a.n
        base = settle(admin)
        waiters = connections(a.n)
        for i, c in enumerate(waiters):
            c.sendall(resp("LOCK.ACQUIRE", "k", "t%d" % i, 600000, "WAIT", 0))
        per_wait = (settle(admin) - base) / a.n
        base = settle(admin)
        blpops = connections(a.n)
        for c in blpops:
            c.sendall(resp("BLPOP", "list", 0))
        per_blpop = (settle(admin) - base) / a.n
        print(f"{os.path.basename(a.server)} n={a.n}: idle connection {per_idle:.0f} B; "
              f"connection + LOCK.ACQUIRE WAIT {per_wait:.0f} B (blocked: {per_wait - per_idle:.0f} B); "
              f"connection + BLPOP {per_blpop:.0f} B (blocked: {per_blpop - per_idle:.0f} B)")
        for c in idle + waiters + blpops:
            c.close()
    finally:
        srv.kill(); srv.wait()


if __name__ == "__main__":
    main()
