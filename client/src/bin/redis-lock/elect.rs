//! `redis-lock elect`: a command that runs only while its campaign leads.

use std::process::ExitCode;
use std::time::Duration;

use redis_lock_client::{Error, Leadership};

use crate::args::ElectArgs;
use crate::fail::{usage, Fail};
use crate::run::{acquire_fail, client_options, run_under};
use crate::target::Servers;

/// Without a wait, a campaign waits in the server's queue for as long as it
/// takes: one `LOCK.ELECT ... WAIT` of this long after another, each from
/// the back of the queue again (a day: rarely more than one).
const CAMPAIGN_ROUND: Duration = Duration::from_secs(86_400);

/// `redis-lock elect [--url URL]... [--cluster] --value V [--ttl MS] [--wait MS | -w SECONDS | -n] [-E CODE]
/// [--grace MS] [--max-lifetime MS] [--lock-delay MS] [--max-hold MS] [--token TOKEN]
/// [--on-revoke SIGNAL] [--no-session] KEY -- CMD [ARGS...]`
pub fn cmd_elect(a: ElectArgs) -> Result<ExitCode, Fail> {
    if a.command.is_empty() {
        return Err(usage("elect needs a command after --"));
    }
    // A quorum elects no leader with one order of terms (docs/election.md).
    if let Servers::Quorum(_) = a.target.servers() {
        return Err(usage("elect works with one --url (or --cluster), not a quorum"));
    }
    let ttl = Duration::from_millis(a.ttl);
    let lopts = a.hold.lock_options();
    let client = a.target.open(client_options(&a.hold, ttl))?;
    let election = client.election(&a.key);
    let won: Result<Leadership, Error> = match a.wait() {
        Some(wait) => election.campaign_with(&a.value, ttl, wait, &lopts),
        None => loop {
            match election.campaign_with(&a.value, ttl, CAMPAIGN_ROUND, &lopts) {
                Err(Error::NotAcquired { .. }) => continue,
                r => break r,
            }
        },
    };
    let leadership = match won {
        Ok(l) => l,
        Err(Error::NotAcquired { .. }) => {
            return Err(Fail(a.conflict_exit_code, format!("{:?} has another leader", a.key)))
        }
        Err(e) => return Err(acquire_fail(e)),
    };
    let term = leadership.term();
    run_under(&[&leadership], &a.command, &a.hold, Some(term))
}
