//! `redis-lock leader`: an election's leader, once or as it changes.

use std::io::Write;
use std::process::ExitCode;

use redis_lock_client::{ClientOptions, Leader};
use serde::Serialize;

use crate::args::LeaderArgs;
use crate::fail::{redis_fail, Fail};

/// `redis-lock leader [--url URL]... [--cluster] [--watch] [--json] KEY`
pub fn cmd_leader(a: LeaderArgs) -> Result<ExitCode, Fail> {
    let client = a.target.open(ClientOptions::new())?;
    let election = client.election(&a.key);
    let line = |l: &Option<Leader>| if a.json { json(&a.key, l) } else { text(l) };
    if !a.watch {
        let l = election.leader().map_err(redis_fail)?;
        println!("{}", line(&l));
        return Ok(ExitCode::from(if l.is_some() { 0 } else { 1 }));
    }
    let mut out = std::io::stdout().lock();
    for item in election.observe_blocking().map_err(redis_fail)? {
        let l = item.map_err(redis_fail)?;
        // One line per change, flushed at once: a reader may be a pipe.
        if writeln!(out, "{}", line(&l)).and_then(|()| out.flush()).is_err() {
            // The reader is gone (a closed pipe): nothing left to tell.
            return Ok(ExitCode::SUCCESS);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `term N rev N ttl-ms N value V`, the value last and with control
/// characters escaped, so that it is one line whatever it holds; `none`
/// without a leader.
fn text(l: &Option<Leader>) -> String {
    let Some(l) = l else { return "none".into() };
    let ttl = l.ttl.map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let value: String =
        l.value.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect();
    format!("term {} rev {} ttl-ms {ttl} value {value}", l.term, l.rev)
}

/// One JSON object: key, value, term, rev, ttl_ms (-1: no expiry); the
/// last four null without a leader.
fn json(key: &str, l: &Option<Leader>) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        key: &'a str,
        value: Option<&'a str>,
        term: Option<u64>,
        rev: Option<u64>,
        ttl_ms: Option<i64>,
    }
    let line = Line {
        key,
        value: l.as_ref().map(|l| l.value.as_str()),
        term: l.as_ref().map(|l| l.term),
        rev: l.as_ref().map(|l| l.rev),
        ttl_ms: l.as_ref().map(|l| l.ttl.map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
    };
    // A struct of strings and numbers always serialises.
    serde_json::to_string(&line).unwrap_or_default()
}
