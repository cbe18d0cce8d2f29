//! `redis-lock list`: every lock matching a pattern, on each server.

use std::process::ExitCode;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

use crate::args::ListArgs;
use crate::masters::masters;
use crate::scan::{scan, Row};
use crate::target::{seed_urls, Servers};
use crate::{render, usage, Fail, EXIT_REDIS};

/// Connect and reply timeout of each server: a dead one is reported,
/// not waited for.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// `redis-lock list [--url URL]... [--cluster] [--json] [--count N] [PATTERN]`
pub fn cmd_list(a: ListArgs) -> Result<ExitCode, Fail> {
    let servers: Vec<ConnectionInfo> = match a.target.servers() {
        Servers::One(url) => vec![parse(&url)?],
        Servers::Quorum(urls) => urls.iter().map(|u| parse(u)).collect::<Result<_, _>>()?,
        Servers::Cluster(seeds) => masters(&seed_urls(&seeds)).map_err(|e| Fail(EXIT_REDIS, e))?,
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
    let mut con = redis::Client::open(info)?.get_connection_with_timeout(TIMEOUT)?;
    con.set_read_timeout(Some(TIMEOUT))?;
    con.set_write_timeout(Some(TIMEOUT))?;
    scan(&mut con, name, pattern, count)
}
