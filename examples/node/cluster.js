#!/usr/bin/env node
// redis-lock from Node with ioredis's Redis.Cluster.
//
// ioredis knows commands' keys only from its built-in table, so it cannot
// route a module command by its key: it sends it to some master and
// follows the MOVED reply to the key's node. This checks that every
// command still lands on the key's node and answers as documented, and
// that a waiting acquire works on a dedicated cluster client whose command
// timeout is above the wait. tests/examples.rs runs it against a 3-master
// cluster.
//
// usage: node cluster.js PORT   (any node of the cluster on 127.0.0.1)

"use strict";

const crypto = require("crypto");
const Redis = require("ioredis");

const cluster = new Redis.Cluster([{ host: "127.0.0.1", port: Number(process.argv[2]) }], {
  redisOptions: { commandTimeout: 2000 },
});

function expect(what, got, want) {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    console.error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
  console.log(`ok ${what}: ${JSON.stringify(got)}`);
}

const newToken = () => crypto.randomBytes(16).toString("hex");

// A waiting acquire on a cluster client of its own (the shared one runs
// the renewals), whose command timeout is above the wait.
async function acquireWaiting(key, token, ttlMs, waitMs) {
  const waiter = cluster.duplicate(undefined, { redisOptions: { commandTimeout: waitMs + 2000 } });
  try {
    return await waiter.call("LOCK.ACQUIRE", key, token, ttlMs, "FENCE", "WAIT", waitMs);
  } finally {
    waiter.disconnect();
  }
}

async function main() {
  // Keys on every master: a command sent to the wrong one must be redirected.
  const keys = [];
  for (let i = 0; i < 16; i++) keys.push(`example:node:${process.pid}:job${i}`);
  for (const key of keys) {
    const tok = newToken();
    expect(`acquire ${key}`, await cluster.call("LOCK.ACQUIRE", key, tok, 30000), 1);
    expect(`acquire ${key} held`, await cluster.call("LOCK.ACQUIRE", key, newToken(), 30000), 0);
    expect(`renew ${key}`, await cluster.call("LOCK.RENEW", key, tok, 30000), 1);
    // GET is in ioredis's table: routed by its key, it finds the lock there.
    expect(`${key} on its node`, await cluster.get(key), tok);
    expect(`release ${key}`, await cluster.call("LOCK.RELEASE", key, tok), 1);
  }

  const key = keys[0];
  const tok = newToken();
  const f1 = await cluster.call("LOCK.ACQUIRE", key, tok, 30000, "FENCE");
  expect("fenced acquire", Number.isSafeInteger(f1) && f1 > 0, true);
  setTimeout(() => cluster.call("LOCK.RELEASE", key, tok), 200);
  const waiter = newToken();
  const f2 = await acquireWaiting(key, waiter, 30000, 10000);
  expect("the waiter is granted with a larger fence", f2 !== null && f2 > f1, true);
  expect("a wait that times out", await acquireWaiting(key, newToken(), 30000, 100), null);
  expect("release by the waiter", await cluster.call("LOCK.RELEASE", key, waiter), 1);

  cluster.disconnect();
  console.log("node cluster example: every reply as documented");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
