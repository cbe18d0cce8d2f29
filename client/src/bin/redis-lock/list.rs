//! `redis-lock list`: every lock matching a pattern, on each server.

use std::process::ExitCode;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};
use redis_lock_client::cluster_seed_urls;

use crate::args::ListArgs;
use crate::fail::{usage, Fail, EXIT_REDIS};
use crate::masters::masters;
use crate::render;
use crate::scan::{connect, scan, Row};
use crate::target::Servers;

/// `redis-lock list [--url URL]... [--cluster] [--json] [--count N] [PATTERN]`
pub fn cmd_list(a: ListArgs) -> Result<ExitCode, Fail> {
    let servers: Vec<ConnectionInfo> = match a.target.servers() {
        Servers::One(url) => vec![parse(&url)?],
        Servers::Quorum(urls) => urls.iter().map(|u| parse(u)).collect::<Result<_, _>>()?,
        Servers::Cluster(seeds) => masters(&cluster_seed_urls(&seeds)).map_err(|e| Fail(EXIT_REDIS, e))?,
    };
    let count = usize::try_from(a.count).unwrap_or(100);
    let mut rows: Vec<Row> = Vec::new();
    let mut failed = false;
    for info in servers {
        let name = info.addr().to_string();
        match list_one(info, &name, &a.pattern, count) {
            Ok(r) => rows.extend(r),
            // The other servers are still listed.
            Err(e) => {
                eprintln!("redis-lock: {name}: {e}");
                failed = true;
            }
        }
    }
    // SCAN's order is the hash table's; a sorted list is one a reader
    // (or diff) can compare from one run to the next.
    rows.sort_by(|x, y| (&x.key, &x.server).cmp(&(&y.key, &y.server)));
    print!("{}", if a.json { render::json(&rows) } else { render::table(&rows) });
    Ok(ExitCode::from(if failed { EXIT_REDIS } else { 0 }))
}

fn parse(url: &str) -> Result<ConnectionInfo, Fail> {
    url.into_connection_info().map_err(|e| usage(format!("bad URL {url:?}: {e}")))
}

fn list_one(info: ConnectionInfo, name: &str, pattern: &str, count: usize) -> RedisResult<Vec<Row>> {
    scan(&mut connect(info)?, name, pattern, count)
}
