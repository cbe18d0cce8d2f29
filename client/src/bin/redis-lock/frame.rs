//! What one refresh of `top` shows: text lines (the terminal view and
//! `--once`) or one JSON object (`--json`).

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use crate::render::printable;
use crate::stats::{rate, Delta, Sort, TopKey};

/// One refresh: the servers read, what changed since the last one, the
/// contended keys (sorted), and the servers that could not be read.
pub struct Snapshot {
    pub servers: Vec<String>,
    pub elapsed: Duration,
    pub delta: Delta,
    pub keys: Vec<TopKey>,
    pub errors: Vec<String>,
}

const HEADER: [&str; 8] = ["KEY", "FAMILY", "WAITERS", "OLDEST-WAIT-MS", "HOLDERS", "TTL-MS", "OWNER", "SERVER"];

fn quantile(d: &Delta, p: f64) -> String {
    d.wait_quantile(p).map_or_else(|| "-".into(), |ms| format!("{ms} ms"))
}

/// The frame as lines: a title, the rates, the errors, the key table.
pub fn text(s: &Snapshot, sort: Sort, interval: Duration) -> Vec<String> {
    let servers = match s.servers.as_slice() {
        [one] => one.clone(),
        many => format!("{} servers", many.len()),
    };
    let secs = s.elapsed;
    let d = &s.delta;
    let mut lines = vec![
        format!(
            "redis-lock top - {servers} - every {:.1}s - sort: {} - q quits, s sorts",
            interval.as_secs_f64(),
            sort.name()
        ),
        format!(
            "grants/s {:.1}  waits/s {:.1}  timeouts/s {:.1}  expired-while-held/s {:.1}  wait p50 {}  p99 {}  waiting {}",
            rate(d.grants, secs),
            rate(d.waits, secs),
            rate(d.timeouts, secs),
            rate(d.expired, secs),
            quantile(d, 0.50),
            quantile(d, 0.99),
            d.waiting
        ),
    ];
    for e in &s.errors {
        lines.push(format!("! {e}"));
    }
    lines.push(String::new());
    let cells: Vec<[String; 8]> = s
        .keys
        .iter()
        .map(|k| {
            [
                printable(&k.key),
                k.family.clone(),
                k.waiters.to_string(),
                k.oldest_wait_ms.to_string(),
                k.holders.to_string(),
                k.ttl_ms.to_string(),
                k.owner.as_deref().map_or_else(|| "-".into(), printable),
                k.server.clone(),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    for row in std::iter::once(HEADER.map(String::from)).chain(cells) {
        let mut line = String::new();
        for (c, w) in row.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ");
        }
        lines.push(line.trim_end().to_string());
    }
    if s.keys.is_empty() {
        lines.push("(no key has waiters)".into());
    }
    lines
}

#[derive(Serialize)]
struct Json<'a> {
    servers: &'a [String],
    interval_ms: u64,
    grants_per_s: f64,
    waits_per_s: f64,
    timeouts_per_s: f64,
    expired_while_held_per_s: f64,
    wait_p50_ms: Option<u64>,
    wait_p99_ms: Option<u64>,
    waiting: u64,
    keys: Vec<JsonKey<'a>>,
    errors: &'a [String],
}

#[derive(Serialize)]
struct JsonKey<'a> {
    server: &'a str,
    key: String,
    family: &'a str,
    waiters: u64,
    oldest_wait_ms: u64,
    holders: u64,
    owner: Option<String>,
    ttl_ms: i64,
}

/// The frame as one line of JSON.
pub fn json(s: &Snapshot) -> String {
    let d = &s.delta;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let j = Json {
        servers: &s.servers,
        interval_ms: u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX),
        grants_per_s: rate(d.grants, s.elapsed),
        waits_per_s: rate(d.waits, s.elapsed),
        timeouts_per_s: rate(d.timeouts, s.elapsed),
        expired_while_held_per_s: rate(d.expired, s.elapsed),
        wait_p50_ms: d.wait_quantile(0.50),
        wait_p99_ms: d.wait_quantile(0.99),
        waiting: d.waiting,
        keys: s
            .keys
            .iter()
            .map(|k| JsonKey {
                server: &k.server,
                key: text(&k.key),
                family: &k.family,
                waiters: k.waiters,
                oldest_wait_ms: k.oldest_wait_ms,
                holders: k.holders,
                owner: k.owner.as_deref().map(text),
                ttl_ms: k.ttl_ms,
            })
            .collect(),
        errors: &s.errors,
    };
    serde_json::to_string(&j).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn snapshot() -> Snapshot {
        Snapshot {
            servers: vec!["h:1".into()],
            elapsed: Duration::from_secs(2),
            delta: Delta {
                grants: 10,
                waits: 4,
                timeouts: 2,
                expired: 0,
                wait_hist: BTreeMap::from([(8, 3), (100, 1)]),
                waiting: 3,
            },
            keys: vec![TopKey {
                server: "h:1".into(),
                key: b"jobs:a".to_vec(),
                family: "exclusive".into(),
                waiters: 3,
                oldest_wait_ms: 1200,
                holders: 1,
                owner: Some(b"tok".to_vec()),
                ttl_ms: 25_000,
            }],
            errors: vec![],
        }
    }

    #[test]
    fn text_frame() {
        let lines = text(&snapshot(), Sort::Waiters, Duration::from_secs(1));
        assert_eq!(lines[0], "redis-lock top - h:1 - every 1.0s - sort: waiters - q quits, s sorts");
        assert_eq!(
            lines[1],
            "grants/s 5.0  waits/s 2.0  timeouts/s 1.0  expired-while-held/s 0.0  wait p50 8 ms  p99 100 ms  waiting 3"
        );
        assert_eq!(lines[3], "KEY     FAMILY     WAITERS  OLDEST-WAIT-MS  HOLDERS  TTL-MS  OWNER  SERVER");
        assert_eq!(lines[4], "jobs:a  exclusive  3        1200            1        25000   tok    h:1");
    }

    #[test]
    fn json_frame() {
        let v: serde_json::Value = serde_json::from_str(&json(&snapshot())).unwrap();
        assert_eq!(v["grants_per_s"], 5.0);
        assert_eq!(v["wait_p99_ms"], 100);
        assert_eq!(v["keys"][0]["key"], "jobs:a");
        assert_eq!(v["keys"][0]["waiters"], 3);
    }
}
