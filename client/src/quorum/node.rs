//! One server of a quorum, and the single-server steps the quorum
//! algorithm is made of. Each step runs the existing command builder
//! ([`LockCmd`]) through that server's single-server transport, so module
//! and script servers are handled as for a single-server lock.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use redis::{ErrorKind, ServerErrorKind};

use crate::attach::SessionLease;
use crate::cmd::{session_refusal, Backend, Grant, LockCmd};
use crate::error::{Error, Result};
use crate::failure::redact;
use crate::options::ClientOptions;
use crate::single::Single;
use crate::transport::Core;

/// `LOCK.RENEW ... FLOOR` support: not known yet, works, refused.
const FLOOR_UNKNOWN: u8 = 0;
const FLOOR_YES: u8 = 1;
const FLOOR_NO: u8 = 2;

/// One server of the quorum.
pub(crate) struct Node {
    /// The URL without credentials, for messages.
    pub(crate) name: String,
    /// This server's transport (its one connection, shared by both APIs
    /// and the renewal engine), and its sessions' calls.
    pub(crate) core: Arc<Core>,
    /// Whether this server's module takes `FLOOR` (one of `FLOOR_*`). Once
    /// refused, it is not asked again for this client's lifetime: an older
    /// module answers every `FLOOR` with an arity error, which would cost
    /// every renewal a second round trip.
    floor: AtomicU8,
}

/// What one server answered to one step.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Took effect. `fence`: the grant's fence (module, acquire).
    /// `floored`: the server raised its fence mark to the requested floor.
    /// `taken`: a grant (an acquire, or a renewal that took an absent key
    /// again), and what holds it there.
    Yes { fence: Option<u64>, floored: bool, taken: Option<Taken> },
    /// The key is another token's (acquire), or not ours (renew, release).
    No,
    /// An error or no answer in time.
    Failed(String),
}

/// What holds a grant on its server.
#[derive(Clone, Debug)]
pub(crate) enum Taken {
    /// Its own lease.
    Lease,
    /// That server's session (`SESSION id` on the acquire).
    Session(Arc<SessionLease>),
}

impl Taken {
    /// What holds a grant of `acquire`.
    fn of(acquire: &LockCmd) -> Taken {
        acquire.session().map_or(Taken::Lease, |s| Taken::Session(s.clone()))
    }
}

impl Answer {
    /// The same answer, a grant of `acquire` if it took effect.
    fn taken(self, acquire: &LockCmd) -> Answer {
        match self {
            Answer::Yes { fence, floored, .. } => Answer::Yes { fence, floored, taken: Some(Taken::of(acquire)) },
            a => a,
        }
    }
}

impl Node {
    pub(crate) fn open(url: &str, opts: ClientOptions) -> Result<Node> {
        Ok(Node {
            name: redact(url),
            core: Core::new(Arc::new(Single::from_client(redis::Client::open(url)?, opts.clone())), opts),
            floor: AtomicU8::new(FLOOR_UNKNOWN),
        })
    }

    /// Its `host:port` (for traces).
    pub(crate) fn server(&self) -> String {
        self.core.transport.server_of("")
    }

    async fn run(&self, cmd: &LockCmd) -> Result<Grant> {
        self.core.run(cmd).await
    }

    /// One command, its outcome as an answer.
    pub(crate) async fn step(&self, cmd: &LockCmd) -> Answer {
        Self::answer(cmd, self.run(cmd).await)
    }

    fn answer(cmd: &LockCmd, r: Result<Grant>) -> Answer {
        let taken = matches!(cmd, LockCmd::Acquire { .. }).then(|| Taken::of(cmd));
        match r {
            Ok(g) if g.took_effect() => Answer::Yes { fence: g.fence(), floored: false, taken },
            Ok(_) => Answer::No,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    /// An acquire, held by `session` where this server takes it: one it
    /// refuses for its session (it wrote nothing) is made again with its
    /// own lease, as a single server's is.
    pub(crate) async fn acquire(&self, cmd: &LockCmd, session: Option<Arc<SessionLease>>) -> Answer {
        if let Some(s) = session {
            let held = cmd.with_session(s);
            match self.run(&held).await {
                Err(Error::Redis(e)) if session_refusal(&e).is_some() => {}
                r => return Self::answer(&held, r),
            }
        }
        self.step(cmd).await
    }

    /// Renews, raising the server's fence mark to `floor` where it can. A
    /// key that is absent is taken again when `reacquire` is given (see
    /// `QuorumOptions::reacquire_on_renew`) and then floored like a renewal.
    pub(crate) async fn renew(&self, renew: &LockCmd, floor: Option<u64>, reacquire: Option<&LockCmd>) -> Answer {
        let a = self.renew_floor(renew, floor).await;
        let (Answer::No, Some(acquire)) = (&a, reacquire) else { return a };
        match self.run(acquire).await {
            Ok(g) if g.took_effect() && floor.is_some() => self.renew_floor(renew, floor).await.taken(acquire),
            Ok(g) if g.took_effect() => Answer::Yes { fence: None, floored: false, taken: Some(Taken::of(acquire)) },
            Ok(_) => Answer::No,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    async fn renew_floor(&self, renew: &LockCmd, floor: Option<u64>) -> Answer {
        let Some(f) = floor.filter(|_| self.floor.load(Ordering::Relaxed) != FLOOR_NO) else {
            return self.step(renew).await;
        };
        match self.run(&renew.clone().with_floor(f)).await {
            // A quorum lock has no hold limit: never Capped.
            Ok(Grant::Granted(_) | Grant::Capped | Grant::Revoked { .. }) => {
                // The scripts fallback renews without a floor.
                let floored = self.core.transport.backend().get() == Backend::Module;
                if floored {
                    self.floor.store(FLOOR_YES, Ordering::Relaxed);
                }
                Answer::Yes { fence: None, floored, taken: None }
            }
            Ok(Grant::Refused) => Answer::No,
            Err(e) if is_floor_unsupported(&e) => {
                self.floor.store(FLOOR_NO, Ordering::Relaxed);
                self.step(renew).await
            }
            // The floor is too far ahead of this server's clock: it keeps
            // the key (an error changes nothing), renewed without it.
            Err(e) if is_floor_out_of_range(&e) => self.step(renew).await,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }
}

impl Node {
    /// Renews many locks on this server at once (the renewal engine's
    /// batch, pipelines of at most `batch`): `items` are each lock's
    /// renewal, fence floor and acquire (to take an absent key again when
    /// `reacquire`). Answers like [`Node::renew`], per lock; the rare cases
    /// that need a second step (an absent key, a floor this server
    /// refuses) go through it alone.
    pub(crate) async fn renew_batch(
        &self,
        items: &[(LockCmd, Option<u64>, LockCmd)],
        reacquire: bool,
        batch: usize,
    ) -> Vec<Answer> {
        let use_floor = self.floor.load(Ordering::Relaxed) != FLOOR_NO;
        let cmds = items
            .iter()
            .map(|(renew, floor, _)| match floor {
                Some(f) if use_floor => renew.clone().with_floor(*f),
                _ => renew.clone(),
            })
            .collect();
        let ran = self.core.transport.clone().run_batch(cmds, batch).await;
        let module = self.core.transport.backend().get() == Backend::Module;
        let mut out = Vec::with_capacity(items.len());
        for ((renew, floor, acquire), (_, r)) in items.iter().zip(ran) {
            let floored = floor.is_some() && use_floor && module;
            out.push(match r {
                Ok(Grant::Granted(_) | Grant::Capped | Grant::Revoked { .. }) => {
                    if floored {
                        self.floor.store(FLOOR_YES, Ordering::Relaxed);
                    }
                    Answer::Yes { fence: None, floored, taken: None }
                }
                Ok(Grant::Refused) if !reacquire => Answer::No,
                Ok(Grant::Refused) => self.renew(renew, *floor, Some(acquire)).await,
                Err(e) if floor.is_some() && (is_floor_unsupported(&e) || is_floor_out_of_range(&e)) => {
                    self.renew(renew, *floor, reacquire.then_some(acquire)).await
                }
                Err(e) => Answer::Failed(e.to_string()),
            });
        }
        out
    }

    /// Releases many locks on this server at once, best effort.
    pub(crate) async fn release_batch(&self, cmds: Vec<LockCmd>, batch: usize) {
        self.core.transport.clone().run_batch(cmds, batch).await;
    }
}

fn server_error_detail(e: &Error) -> Option<String> {
    match e {
        Error::Redis(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError) => {
            e.detail().map(|d| d.trim_start().to_ascii_lowercase())
        }
        _ => None,
    }
}

/// A module older than `FLOOR`: RENEW takes no options there, so the extra
/// arguments are an arity (or syntax) error.
pub(crate) fn is_floor_unsupported(e: &Error) -> bool {
    server_error_detail(e).is_some_and(|d| d.starts_with("wrong number of arguments") || d.starts_with("syntax error"))
}

/// `ERR fence floor ...`: the floor is more than the module's horizon
/// ahead of that server's clock; nothing changed there.
pub(crate) fn is_floor_out_of_range(e: &Error) -> bool {
    server_error_detail(e).is_some_and(|d| d.starts_with("fence floor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(line: &str) -> Error {
        Error::Redis(
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .and_then(redis::Value::extract_error)
                .unwrap_err(),
        )
    }

    #[test]
    fn floor_errors_are_recognised() {
        assert!(is_floor_unsupported(&server("ERR wrong number of arguments for 'lock.renew' command")));
        assert!(is_floor_unsupported(&server("ERR syntax error")));
        assert!(!is_floor_unsupported(&server("ERR fence floor is more than 24 h ahead of this server's clock")));
        assert!(is_floor_out_of_range(&server("ERR fence floor is more than 24 h ahead of this server's clock")));
        assert!(!is_floor_out_of_range(&server("WRONGTYPE Operation against a key holding the wrong kind of value")));
        assert!(!is_floor_unsupported(&Error::InvalidArgument("wrong number of arguments".into())));
    }
}
