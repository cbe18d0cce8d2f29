//! `redis-lock revoke`: ask a lock's holder to give it up by a deadline
//! the server enforces (LOCK.REVOKE, docs/revocation.md).

use std::process::ExitCode;
use std::time::Duration;

use redis_lock_client::{ClientOptions, Error, RevokeOptions, RevokeOutcome};

use crate::args::RevokeArgs;
use crate::fail::{redis_fail, usage, Fail};
use crate::target::Servers;

/// `redis-lock revoke [--url URL] [--cluster] [--token T] [--grace MS] [--reason R] KEY`
pub fn cmd_revoke(a: RevokeArgs) -> Result<ExitCode, Fail> {
    if let Servers::Quorum(_) = a.target.servers() {
        return Err(usage("revoke works with one --url (or --cluster), not a quorum"));
    }
    let opts =
        RevokeOptions { token: a.token.clone(), grace: Duration::from_millis(a.grace), reason: a.reason.clone() };
    let key = a.key.as_str();
    let reply = match a.target.open(ClientOptions::new())?.revoke(key, &opts) {
        Ok(r) => r,
        Err(e @ Error::InvalidArgument(_)) => return Err(usage(e.to_string())),
        Err(e) => return Err(redis_fail(e)),
    };
    let token = reply.token.as_deref().unwrap_or("");
    let deadline = reply.deadline_unix_ms.map_or(String::new(), |d| d.to_string());
    match reply.outcome {
        RevokeOutcome::Revoked => println!("revoked {key} token {token} deadline {deadline}"),
        RevokeOutcome::Ended => println!("ended {key} token {token} deadline {deadline}"),
        RevokeOutcome::NotHolder => return Err(Fail(1, format!("{key:?} is not held by {token:?}"))),
        _ => return Err(Fail(1, format!("{key:?} has no holder"))),
    }
    Ok(ExitCode::SUCCESS)
}
