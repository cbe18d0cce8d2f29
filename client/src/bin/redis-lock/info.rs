//! `redis-lock info`: one key's lock state, one `name: value` line each.

use std::process::ExitCode;

use redis_lock_client::{Backend, ClientOptions, Error, HoldersInfo, LockClient, LockKind};

use crate::args::Target;
use crate::fail::{redis_fail, usage, Fail};

/// `redis-lock info [--url URL] [--cluster] KEY`
pub fn cmd_info(target: &Target, key: &str) -> Result<ExitCode, Fail> {
    let client = target.open(ClientOptions::new())?;
    let info = match client.info(key) {
        Ok(Some(info)) => info,
        Ok(None) => {
            println!("key: {key}\nstate: absent (not locked)");
            return Ok(ExitCode::from(1));
        }
        // The key exists, so acquire is refused, but it is no lock value:
        // perhaps a semaphore or a read-write lock.
        Err(Error::Redis(e)) if e.code() == Some("WRONGTYPE") => {
            match holders_info(&client, key) {
                Some(h) => print_holders(key, &h),
                None => println!("key: {key}\nstate: holds another type (not a lock value)"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e @ Error::InvalidArgument(_)) => return Err(usage(e.to_string())),
        Err(e) => return Err(redis_fail(e)),
    };
    // LOCK.INFO's field names, one per line.
    println!("key: {key}");
    println!("owner: {}", info.owner.as_deref().unwrap_or("(none: no token can own this value)"));
    println!("run-id: {}", info.run_id.as_deref().unwrap_or("(none)"));
    println!("format: {}", info.format.as_str());
    match info.ttl {
        Some(ttl) => println!("ttl-ms: {}", ttl.as_millis()),
        None => println!("ttl-ms: -1 (no expiry)"),
    }
    match info.fence {
        Some(f) => println!("fence: {f}"),
        None => println!("fence: (unknown)"),
    }
    println!("waiters: {}", info.waiters);
    if let Some(reason) = &info.revoked {
        println!("revoked: {reason} (the holder is asked to give it up; the server ends it at its hold limit)");
    }
    if client.backend() == Backend::Scripts {
        println!("backend: scripts (no lock module: no fences, no server-side waiters)");
    }
    Ok(ExitCode::SUCCESS)
}

/// `SEM.INFO`, else `RWLOCK.INFO`: `None` when the key is of
/// neither family (or gone meanwhile, or the server cannot say).
fn holders_info(client: &LockClient, key: &str) -> Option<HoldersInfo> {
    // INFO does not send the limit: any one names the family.
    client.semaphore(key, 1).info().ok().flatten().or_else(|| client.rw_lock(key).info().ok().flatten())
}

/// SEM.INFO's and RWLOCK.INFO's fields, one per line; a line per holder.
fn print_holders(key: &str, h: &HoldersInfo) {
    println!("key: {key}");
    match h.kind {
        LockKind::Permit { limit } => println!("kind: semaphore\nlimit: {limit}"),
        LockKind::Write => println!("kind: read-write lock\nmode: write"),
        _ => println!("kind: read-write lock\nmode: read"),
    }
    for holder in &h.holders {
        println!("holder: {} ttl-ms {}", holder.token, holder.ttl.as_millis());
    }
    println!("waiters: {}", h.waiters);
}
