//! What a quorum client shares with its locks ([`Ctx`]): its servers,
//! options and renewal engine, and the rules every step reads (the
//! majority, the validity, a failure's report).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineSlot};
use crate::error::{Error, Result};
use crate::failure::QuorumFailure;
use crate::options::ClientOptions;
use crate::quorum::node::Node;
use crate::quorum::options::QuorumOptions;
use crate::quorum::round::Tally;

/// What a quorum client shares with its locks.
pub(crate) struct Ctx {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) opts: QuorumOptions,
    /// `0..nodes.len()`.
    pub(crate) all: Vec<usize>,
    /// Renews every watchdog lock of this client, and keeps its sessions
    /// (`sessions.rs`).
    pub(crate) engine: EngineSlot,
    /// Each server's client options (its sessions').
    pub(crate) client: ClientOptions,
    /// The shortest session TTL in use, in ms (`sessions.rs`).
    pub(crate) session_ttl_ms: AtomicU64,
}

impl Ctx {
    /// The client's renewal engine (see [`EngineSlot::get`]).
    pub(crate) fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>> {
        self.engine.get(|| self.clone(), self.opts.watchdog_batch, self.client.session_checks)
    }
}

impl Ctx {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, opts: QuorumOptions) -> Ctx {
        let all = (0..nodes.len()).collect();
        let client = opts.client_options();
        Ctx { nodes, opts, all, engine: EngineSlot::default(), client, session_ttl_ms: AtomicU64::new(u64::MAX) }
    }

    /// ⌊N/2⌋ + 1.
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    pub(crate) fn failure(
        &self,
        operation: &'static str,
        key: &str,
        t: &Tally,
        asked: &[usize],
        succeeded: usize,
        validity_ran_out: bool,
    ) -> Error {
        Error::NoQuorum(Box::new(QuorumFailure {
            key: key.into(),
            operation,
            nodes: self.nodes.len(),
            needed: self.quorum(),
            succeeded,
            refused: t.no(),
            failed: t.failures(&self.nodes, asked),
            validity_ran_out,
        }))
    }

    /// `start − drift`, refusing a TTL the drift allowance eats up whole.
    pub(crate) fn valid_from(&self, start: Instant, ttl: Duration) -> Result<Instant> {
        let drift = self.opts.drift_for(ttl);
        if drift >= ttl {
            return Err(Error::InvalidArgument(format!(
                "ttl-ms {} leaves no validity after the clock-drift allowance of {} ms",
                ttl.as_millis(),
                drift.as_millis()
            )));
        }
        start
            .checked_sub(drift)
            .ok_or_else(|| Error::InvalidArgument("the monotonic clock is too close to its origin".into()))
    }
}
