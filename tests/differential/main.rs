//! The module against the reference scripts, on one server.
//!
//! Each case stores the same value (and absolute expiry) under two keys, runs
//! the reference (the seed's Lua script via EVALSHA, or `SET NX PX` for
//! acquire) on one and the LOCK.* command on the other, and requires the same
//! reply, the same stored bytes and the same expiry. Cases run in pipelined
//! batches so that 100 000 of them take well under a minute.
//!
//! `DIFF_CASES` (default 4 000) and `DIFF_SEED` (default: a fixed seed)
//! scale the generated run: `DIFF_CASES=100000 cargo test --release --test
//! differential`. A mismatching stored value is written to
//! `target/differential-failures-*.txt`, ready to be added to the corpus.

mod corpus;
mod gen;

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use redis_lock_harness::Server;
use redis_lock_rules::cjson::{self, Decoded, Field};
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::scripts;

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    Renew,
    Release,
    Takeover { run_id: Vec<u8> },
}

#[derive(Clone, Debug)]
enum Stored {
    Absent,
    Str(Vec<u8>),
    List,
}

#[derive(Clone, Debug)]
struct Case {
    stored: Stored,
    /// Remaining ms of the stored key; `None`: no expiry.
    remaining: Option<i64>,
    op: Op,
    token: Vec<u8>,
    ttl: i64,
}

/// Remaining TTLs closer than this to the takeover threshold are avoided:
/// time passes between storing a key and running the commands.
const MARGIN_MS: i64 = 300;

struct Shas {
    renew: String,
    release: String,
    takeover: String,
}

struct Harness {
    _server: Server,
    conn: redis::Connection,
    shas: Shas,
    failures: Vec<String>,
    compared: usize,
    /// Cases whose outcome changed while they ran (see `run_batch`).
    skipped: usize,
    /// The server's `lock.orphan-grace` (ms; see `run_batch`).
    orphan_grace: i64,
}

impl Harness {
    fn new() -> Harness {
        let server = Server::start();
        let mut conn = server.conn();
        let mut load =
            |s: &str| -> String { redis::cmd("SCRIPT").arg("LOAD").arg(s).query(&mut conn).expect("load script") };
        let shas =
            Shas { renew: load(scripts::RENEW), release: load(scripts::RELEASE), takeover: load(scripts::TAKEOVER) };
        let (_, grace): (String, i64) =
            redis::cmd("CONFIG").arg("GET").arg("lock.orphan-grace").query(&mut conn).expect("lock.orphan-grace");
        Harness { _server: server, conn, shas, failures: Vec::new(), compared: 0, skipped: 0, orphan_grace: grace }
    }

    fn reference(&self, pipe: &mut redis::Pipeline, key: &str, c: &Case) {
        match &c.op {
            Op::Acquire => pipe.cmd("SET").arg(key).arg(&c.token).arg("NX").arg("PX").arg(c.ttl),
            Op::Takeover { run_id } if run_id.is_empty() => {
                pipe.cmd("SET").arg(key).arg(&c.token).arg("NX").arg("PX").arg(c.ttl)
            }
            Op::Renew => pipe.cmd("EVALSHA").arg(&self.shas.renew).arg(1).arg(key).arg(&c.token).arg(c.ttl),
            Op::Release => pipe.cmd("EVALSHA").arg(&self.shas.release).arg(1).arg(key).arg(&c.token),
            Op::Takeover { run_id } => {
                let value = structured_value(
                    std::str::from_utf8(&c.token).unwrap_or(""),
                    std::str::from_utf8(run_id).unwrap_or(""),
                );
                pipe.cmd("EVALSHA").arg(&self.shas.takeover).arg(1).arg(key).arg(value).arg(c.ttl)
            }
        };
    }

    fn module(pipe: &mut redis::Pipeline, key: &str, c: &Case) {
        match &c.op {
            Op::Acquire => pipe.cmd("LOCK.ACQUIRE").arg(key).arg(&c.token).arg(c.ttl),
            Op::Renew => pipe.cmd("LOCK.RENEW").arg(key).arg(&c.token).arg(c.ttl),
            Op::Release => pipe.cmd("LOCK.RELEASE").arg(key).arg(&c.token),
            Op::Takeover { run_id } => pipe.cmd("LOCK.TAKEOVER").arg(key).arg(&c.token).arg(run_id).arg(c.ttl),
        };
    }

    fn run_batch(&mut self, cases: &[Case]) {
        let now_ms = server_ms(&mut self.conn);
        let mut setup = redis::pipe();
        for (i, c) in cases.iter().enumerate() {
            for key in [format!("ref:{i}"), format!("mod:{i}")] {
                setup.cmd("DEL").arg(&key).ignore();
                match &c.stored {
                    Stored::Absent => continue,
                    Stored::Str(v) => setup.cmd("SET").arg(&key).arg(v).ignore(),
                    Stored::List => setup.cmd("RPUSH").arg(&key).arg("x").ignore(),
                };
                if let Some(r) = c.remaining {
                    setup.cmd("PEXPIREAT").arg(&key).arg(now_ms + r).ignore();
                }
            }
        }
        let _: () = setup.query(&mut self.conn).expect("setup");

        let mut ops = redis::pipe();
        ops.ignore_errors();
        for (i, c) in cases.iter().enumerate() {
            self.reference(&mut ops, &format!("ref:{i}"), c);
            Self::module(&mut ops, &format!("mod:{i}"), c);
        }
        let ops_from = server_ms(&mut self.conn);
        let started = Instant::now();
        let replies: Vec<Value> = ops.query(&mut self.conn).expect("ops");
        let elapsed_ms = started.elapsed().as_millis() as i64 + 2;
        let ops_until = server_ms(&mut self.conn);

        // One MULTI/EXEC: the server reads every key at one instant (its
        // clock is frozen while EXEC runs, on every server we test), so a
        // short lock cannot expire between the TYPE and the PEXPIRETIME of
        // its own copy.
        let mut reads = redis::pipe();
        reads.atomic().ignore_errors();
        for i in 0..cases.len() {
            for key in [format!("ref:{i}"), format!("mod:{i}")] {
                reads.cmd("TYPE").arg(&key).cmd("GET").arg(&key).cmd("PEXPIRETIME").arg(&key);
            }
        }
        let state: Vec<Value> = reads.query(&mut self.conn).expect("reads");
        let read_until = server_ms(&mut self.conn);

        for (i, c) in cases.iter().enumerate() {
            // A stored key that expires, or a legacy lock that turns stale,
            // while the ops run may do so between the script's command and
            // the module's: the two then rightly decide differently. MARGIN_MS
            // keeps such instants out of the ops unless this machine took
            // that long to get there; the server's clock tells.
            let during_ops = |t: i64| (ops_from - 1..=ops_until + 1).contains(&t);
            let turns_during_ops = c.remaining.is_some_and(|r| {
                during_ops(now_ms + r) || (matches!(c.op, Op::Takeover { .. }) && during_ops(now_ms + r - c.ttl / 2))
            });
            if turns_during_ops {
                self.skipped += 1;
                continue;
            }
            self.compared += 1;
            let (r, m) = (normalize(&replies[2 * i]), normalize(&replies[2 * i + 1]));
            let s = &state[6 * i..6 * i + 6];
            let mut problems = Vec::new();
            if r != m {
                problems.push(format!("reply: script {r:?}, module {m:?}"));
            }
            // A lock written with a TTL of a few ms may expire between the
            // reads of its two copies: then one reads as gone and the other
            // expires within the read window. Only the replies are compared.
            // A TTL no longer than the ops' own duration is within the clock
            // jitter of this machine (a VM's wall clock can be stepped), so
            // such a copy may be gone while the other still shows an expiry.
            let expired_between_reads = |gone: &Value, expiry: &Value| {
                *gone == Value::SimpleString("none".into())
                    && int(expiry) >= 0
                    && (int(expiry) <= read_until + 1 || c.ttl <= elapsed_ms)
            };
            if expired_between_reads(&s[0], &s[5]) || expired_between_reads(&s[3], &s[2]) {
                if !problems.is_empty() {
                    self.failures.push(format!("{}\n    {}", describe(c), problems.join("\n    ")));
                }
                continue;
            }
            if s[0] != s[3] {
                problems.push(format!("type: script {:?}, module {:?}", s[0], s[3]));
            }
            let same_value = match (&s[1], &s[4]) {
                (Value::ServerError(a), Value::ServerError(b)) => a.code() == b.code(),
                (a, b) => a == b,
            };
            if !same_value {
                problems.push(format!("value: script {:?}, module {:?}", show(&s[1]), show(&s[4])));
            }
            let (er, em) = (int(&s[2]), int(&s[5]));
            // An orphan (a session-held value of a session this server does
            // not know, docs/sessions.md) without an expiry gets one from
            // the module's first write command, `lock.orphan-grace` after
            // it: an end, not a decision (the reply and the value are the
            // scripts'); the scripts leave it without.
            let orphan = matches!(&c.stored, Stored::Str(v) if redis_lock_rules::value::parse_held(v).is_some())
                && c.remaining.is_none()
                && same_value;
            let orphan_end = (ops_from - 1 + self.orphan_grace..=ops_until + 1 + self.orphan_grace).contains(&em);
            let close = if orphan && er < 0 && em >= 0 {
                orphan_end
            } else if er < 0 || em < 0 {
                er == em
            } else {
                (em - er).abs() <= elapsed_ms
            };
            if !close {
                problems.push(format!(
                    "expiry: script {er}, module {em} (ops took {elapsed_ms} ms, reads done by {read_until})"
                ));
            }
            if !problems.is_empty() {
                self.failures.push(format!("{}\n    {}", describe(c), problems.join("\n    ")));
            }
        }
    }

    fn run(&mut self, cases: &[Case]) {
        for batch in cases.chunks(200) {
            self.run_batch(batch);
        }
    }

    fn assert_agreement(self, what: &str) {
        // Skipping takes a slow run around a threshold; most cases must count.
        assert!(
            self.skipped * 10 <= self.compared,
            "{what}: {} cases skipped, {} compared",
            self.skipped,
            self.compared
        );
        if self.failures.is_empty() {
            eprintln!("{what}: module and scripts agreed on {} cases ({} skipped)", self.compared, self.skipped);
            return;
        }
        let name: String = what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let path = redis_lock_harness::workspace_root().join(format!("target/differential-failures-{name}.txt"));
        let _ = std::fs::write(&path, self.failures.join("\n\n"));
        panic!(
            "{what}: {} of {} cases disagree (all in {}); first ones:\n{}",
            self.failures.len(),
            self.compared,
            path.display(),
            self.failures.iter().take(10).cloned().collect::<Vec<_>>().join("\n\n")
        );
    }
}

/// The server's clock, in Unix milliseconds.
fn server_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1000 + micros / 1000
}

/// Replies in one shape: SET NX's OK/nil read as the 1/0 of the commands,
/// errors by their code (the script's error text names the script).
fn normalize(v: &Value) -> String {
    match v {
        Value::Okay => "1".into(),
        Value::Nil => "0".into(),
        Value::Int(n) => n.to_string(),
        Value::ServerError(e) => format!("error {}", e.code()),
        other => format!("{other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        _ => i64::MIN,
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        other => format!("{other:?}"),
    }
}

fn describe(c: &Case) -> String {
    let stored = match &c.stored {
        Stored::Str(v) if v.len() > 300 => {
            format!("value of {} bytes starting {:?}", v.len(), String::from_utf8_lossy(&v[..120]))
        }
        Stored::Str(v) => format!("value {:?} (bytes {:?})", String::from_utf8_lossy(v), v),
        other => format!("{other:?}"),
    };
    let token = if c.token.len() > 300 {
        format!("of {} bytes", c.token.len())
    } else {
        format!("{:?}", String::from_utf8_lossy(&c.token))
    };
    format!("{:?} token {token} ttl {} on {stored}, remaining {:?}", c.op, c.ttl, c.remaining)
}

/// Tokens worth trying on a value: its owner as the scripts see it, the raw
/// value, and near misses.
fn tokens_for(value: &[u8], rng: &mut StdRng, g: &mut gen::Gen) -> Vec<u8> {
    let decoded_owner = match cjson::decode(value) {
        Decoded::Table { owner: Field::Str(s), .. } => Some(s.to_vec()),
        _ => None,
    };
    match rng.gen_range(0..10) {
        0..=3 if decoded_owner.as_ref().is_some_and(|o| !o.is_empty()) => decoded_owner.unwrap_or_default(),
        0..=5 if !value.is_empty() => value.to_vec(),
        6 if !value.is_empty() => {
            let mut t = value.to_vec();
            t.pop();
            if t.is_empty() {
                g.token()
            } else {
                t
            }
        }
        _ => g.token(),
    }
}

fn run_id_for(value: &[u8], rng: &mut StdRng, g: &mut gen::Gen, fallback: &[u8]) -> Vec<u8> {
    let decoded = match cjson::decode(value) {
        Decoded::Table { run_id: Field::Str(s), .. } => Some(s.to_vec()).filter(|r| std::str::from_utf8(r).is_ok()),
        _ => None,
    };
    match rng.gen_range(0..10) {
        0..=4 if decoded.as_ref().is_some_and(|r| !r.is_empty()) => decoded.unwrap_or_default(),
        5 => Vec::new(),
        6..=7 if std::str::from_utf8(fallback).is_ok() && !fallback.is_empty() => fallback.to_vec(),
        _ => {
            let n = rng.gen_range(1..6);
            g.utf8_text(n).into_bytes()
        }
    }
}

/// A TTL for the operation and, for a stored key, a remaining TTL that is
/// not within `MARGIN_MS` of the takeover threshold floor(ttl / 2).
fn ttls(rng: &mut StdRng, persistent: bool) -> (i64, Option<i64>) {
    let ttl = match rng.gen_range(0..20) {
        0 => rng.gen_range(1..10),
        1 => (1i64 << 53) + rng.gen_range(-3..4),
        2 => i64::MAX / 4,
        _ => rng.gen_range(1_000..120_000),
    };
    if persistent {
        return (ttl, None);
    }
    loop {
        let r = rng.gen_range(2 * MARGIN_MS..240_000);
        if (r - ttl / 2).abs() > MARGIN_MS {
            return (ttl, Some(r));
        }
    }
}

fn case_for(value: Option<Vec<u8>>, rng: &mut StdRng, g: &mut gen::Gen, run: &[u8]) -> Case {
    let persistent = rng.gen_bool(0.15);
    let (ttl, remaining) = ttls(rng, persistent);
    let (stored, bytes) = match value {
        Some(v) => (Stored::Str(v.clone()), v),
        None if rng.gen_bool(0.5) => (Stored::Absent, Vec::new()),
        None => (Stored::List, Vec::new()),
    };
    let remaining = if matches!(stored, Stored::Absent) { None } else { remaining };
    let op = match rng.gen_range(0..10) {
        0 => Op::Acquire,
        1..=3 => Op::Renew,
        4..=6 => Op::Release,
        _ => Op::Takeover { run_id: run_id_for(&bytes, rng, g, run) },
    };
    let mut token = tokens_for(&bytes, rng, g);
    if let Op::Takeover { run_id } = &op {
        // A non-empty run-id needs UTF-8 (the module refuses the rest).
        if !run_id.is_empty() && std::str::from_utf8(&token).is_err() {
            let n = rng.gen_range(1..8);
            token = g.utf8_text(n).into_bytes();
        }
    }
    Case { stored, remaining, op, token, ttl }
}

fn seed() -> u64 {
    std::env::var("DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x10c4_2026)
}

#[test]
fn module_and_scripts_agree_on_generated_values() {
    let n: usize = std::env::var("DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(4_000);
    let mut rng = StdRng::seed_from_u64(seed());
    let mut g = gen::Gen { rng: StdRng::seed_from_u64(seed() ^ 0x5eed) };
    let cases: Vec<Case> = (0..n)
        .map(|_| {
            let owner = g.token();
            let run = g.utf8_text(rng.gen_range(1..6)).into_bytes();
            let value = if rng.gen_bool(0.92) { Some(g.value(&owner, &run)) } else { None };
            case_for(value, &mut rng, &mut g, &run)
        })
        .collect();
    let mut h = Harness::new();
    h.run(&cases);
    h.assert_agreement(&format!("seed {} ({n} cases)", seed()));
}

#[test]
fn module_and_scripts_agree_on_the_corpus() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut g = gen::Gen { rng: StdRng::seed_from_u64(8) };
    let mut cases = Vec::new();
    for value in corpus::values() {
        // Every operation, with the tokens the value suggests, each TTL state.
        for round in 0..24 {
            let mut c = case_for(Some(value.clone()), &mut rng, &mut g, b"run-1");
            c.op = match round % 4 {
                0 => Op::Acquire,
                1 => Op::Renew,
                2 => Op::Release,
                _ => Op::Takeover { run_id: run_id_for(&value, &mut rng, &mut g, b"run-1") },
            };
            if let Op::Takeover { run_id } = &c.op {
                if !run_id.is_empty() && std::str::from_utf8(&c.token).is_err() {
                    c.token = b"tok".to_vec();
                }
            }
            cases.push(c);
        }
    }
    let mut h = Harness::new();
    h.run(&cases);
    h.assert_agreement("corpus");
}
