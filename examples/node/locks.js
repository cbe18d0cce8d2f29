#!/usr/bin/env node
// redis-lock from Node with ioredis: the module's commands sent as generic
// commands (`redis.call`), one server.
//
// Acquire, renew (and a renewal timer at TTL/3), release, a fenced acquire
// and a waiting acquire on a dedicated connection whose command timeout is
// longer than the wait. docs/clients.md walks through it; tests/examples.rs
// runs it against a server with the module on every `scripts/test`.
//
// usage: node locks.js [URL]   (default: $REDIS_URL, else redis://127.0.0.1:6379/)
// (ioredis from NODE_PATH: scripts/deps.sh installs it into .servers/node)
//
// Exits non-zero on the first reply that is not the documented one.

"use strict";

const crypto = require("crypto");
const Redis = require("ioredis");

const URL = process.argv[2] || process.env.REDIS_URL || "redis://127.0.0.1:6379/";

// The shared client: acquires without WAIT, renewals, releases. A 2 s
// command timeout: none of these blocks in the server.
const redis = new Redis(URL, { commandTimeout: 2000, lazyConnect: true });

function expect(what, got, want) {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    console.error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
  console.log(`ok ${what}: ${JSON.stringify(got)}`);
}

// A fresh token per acquisition: 128 random bits, as 32 hex digits.
const newToken = () => crypto.randomBytes(16).toString("hex");

// 1: granted; 0: someone holds the key.
const acquire = (key, token, ttlMs) => redis.call("LOCK.ACQUIRE", key, token, ttlMs);
// 1: renewed; 2: renewed up to its MAXHOLD only; 0: the lock is lost.
const renew = (key, token, ttlMs) => redis.call("LOCK.RENEW", key, token, ttlMs);
// 1: released; 0: this token did not hold it (any more).
const release = (key, token) => redis.call("LOCK.RELEASE", key, token);

// The grant's fencing token, or null when the key is held. A fence counts
// the server's clock in microseconds (about 1.8e15 today): ioredis's
// number is exact up to 2^53, some 230 years on (`stringNumbers: true`
// makes ioredis return integers as strings, for BigInt).
const acquireFenced = (key, token, ttlMs) => redis.call("LOCK.ACQUIRE", key, token, ttlMs, "FENCE");

// Queue in the server for up to waitMs; the fence, or null on timeout. A
// client blocked in the server runs nothing else, so the wait gets a
// connection of its own (never the shared one the renewals use), and its
// command timeout is the wait plus the usual 2 s: the shared client's 2 s
// would reject any longer wait while the server still holds it in line.
async function acquireWaiting(key, token, ttlMs, waitMs) {
  const conn = redis.duplicate({ commandTimeout: waitMs + 2000 });
  try {
    return await conn.call("LOCK.ACQUIRE", key, token, ttlMs, "FENCE", "WAIT", waitMs);
  } finally {
    conn.disconnect();
  }
}

// Renews every TTL/3 until stopped; onLost when a renewal replies 0.
function keepRenewed(key, token, ttlMs, onLost) {
  let renewals = 0;
  const timer = setInterval(async () => {
    try {
      if ((await renew(key, token, ttlMs)) === 0) {
        clearInterval(timer);
        onLost();
      } else {
        renewals += 1;
      }
    } catch (e) {
      // A failed renewal is retried at the next tick: the lock lasts until its TTL runs out.
    }
  }, ttlMs / 3);
  return { stop: () => clearInterval(timer), renewals: () => renewals };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  await redis.connect();
  const key = `example:node:${process.pid}:job`;

  // Acquire, refuse a second holder, renew, release.
  let tok = newToken();
  expect("acquire a free key", await acquire(key, tok, 30000), 1);
  expect("acquire a held key", await acquire(key, newToken(), 30000), 0);
  expect("renew by the holder", await renew(key, tok, 30000), 1);
  expect("renew by another token", await renew(key, "someone-else", 30000), 0);
  expect("release by the holder", await release(key, tok), 1);
  expect("release again", await release(key, tok), 0);

  // A renewal timer keeps a 3 s lock: renewed every second until stopped.
  tok = newToken();
  expect("acquire a lock with a 3 s TTL", await acquire(key, tok, 3000), 1);
  let lost = false;
  const renewer = keepRenewed(key, tok, 3000, () => (lost = true));
  for (let i = 0; i < 600 && renewer.renewals() < 2 && !lost; i++) await sleep(50);
  renewer.stop();
  expect("renewed twice, never lost", [renewer.renewals() >= 2, lost], [true, false]);
  expect("still held by its token", await redis.get(key), tok);
  expect("release the renewed lock", await release(key, tok), 1);

  // Fences: each grant's is larger than the one before; a refusal is null.
  tok = newToken();
  const f1 = await acquireFenced(key, tok, 30000);
  expect("a fence is a positive integer", Number.isSafeInteger(f1) && f1 > 0, true);
  expect("fenced acquire of a held key", await acquireFenced(key, newToken(), 30000), null);
  expect("release", await release(key, tok), 1);
  const f2 = await acquireFenced(key, tok, 30000);
  expect("the next grant's fence is larger", f2 > f1, true);

  // Waiting: the holder releases after 200 ms and the waiter gets the lock
  // then, in the release's own step, not at its 10 s timeout.
  setTimeout(() => release(key, tok), 200);
  const waiter = newToken();
  const started = Date.now();
  const f3 = await acquireWaiting(key, waiter, 30000, 10000);
  const waited = Date.now() - started;
  expect("the waiter's fence is larger", f3 !== null && f3 > f2, true);
  expect("granted at the release, well before the timeout", waited >= 150 && waited < 5000, true);
  expect("the waiter holds the key", await redis.get(key), waiter);
  expect("a wait that times out", await acquireWaiting(key, newToken(), 30000, 100), null);
  expect("release the waiter's lock", await release(key, waiter), 1);

  redis.disconnect();
  console.log("node example: every reply as documented");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
