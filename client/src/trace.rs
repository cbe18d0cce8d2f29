//! The names of the client's [`tracing`](https://docs.rs/tracing) spans,
//! events and fields, in one place (docs/observability.md, "Client
//! tracing", documents each). Every span and event has the target
//! [`TARGET`], so a filter such as `redis_lock=debug` selects them all.
//!
//! With no subscriber installed, or one whose filter leaves them out,
//! each span or event costs one branch on tracing's global level filter:
//! their fields are computed only when something will record them.
//!
//! Spans and events:
//!
//! | name | kind | level | fields |
//! | --- | --- | --- | --- |
//! | [`ACQUIRE`] | span, one per acquire, takeover or campaign call (one server, a cluster or a quorum) | INFO | [`KEY`], [`KIND`], [`OP`], [`WAIT_MS`], then [`OUTCOME`], [`WAITED_MS`], [`FENCE`], [`SERVER`], [`ERROR`] |
//! | [`HELD`] | span, from the grant to the end of the hold | INFO | [`KEY`], [`KIND`], [`FENCE`], [`SERVER`], then [`HELD_MS`], [`ENDED`], [`REASON`] |
//! | [`LOST`] | event, in [`HELD`] | WARN | [`KEY`], [`REASON`] |
//! | [`BATCH`] | event, per pipeline of the renewal engine | DEBUG | [`COMMAND`], [`NODE`], [`COUNT`], [`FAILED`], [`RTT_MS`] |
//! | [`RETRY`] | event, per redirect or retried failure | INFO | [`KEY`], [`NODE`], [`CAUSE`], [`PAUSE_MS`] |

/// The target of every span and event of the client.
pub const TARGET: &str = "redis_lock";

/// Span: one acquire call (`try_acquire`, `acquire`, `takeover` and their
/// `_with`/`_async` variants, semaphores and read-write locks alike, a
/// `QuorumClient`'s acquires, an `Election`'s `campaign`), from the call
/// to its outcome.
pub const ACQUIRE: &str = "redis_lock.acquire";
/// Span: one held lock, from its grant to its release, drop or loss. It
/// follows from its [`ACQUIRE`] span and has the caller's span as parent.
pub const HELD: &str = "redis_lock.held";
/// Event: a held lock was lost (in its [`HELD`] span).
pub const LOST: &str = "redis_lock.lost";
/// Event: one pipeline of renewals or releases sent by the renewal engine
/// to one node.
pub const BATCH: &str = "redis_lock.batch";
/// Event: a command redirected (`MOVED`, `ASK`) or retried after a
/// failure (`TRYAGAIN`, `CLUSTERDOWN`, a refused or dropped connection).
pub const RETRY: &str = "redis_lock.retry";

/// The lock's key.
pub const KEY: &str = "key";
/// What is acquired: `exclusive`, `semaphore`, `read`, `write` or
/// `election` (a campaign and its leadership).
pub const KIND: &str = "kind";
/// The operation: `acquire`, `takeover` or `campaign`.
pub const OP: &str = "op";
/// The longest wait asked for, in ms (0 for `try_acquire`).
pub const WAIT_MS: &str = "wait_ms";
/// How the acquire ended: [`GRANTED`], [`NOT_ACQUIRED`] or [`FAILED_OUTCOME`].
pub const OUTCOME: &str = "outcome";
/// From the call to its outcome, in ms.
pub const WAITED_MS: &str = "waited_ms";
/// The grant's fencing token (absent without the module).
pub const FENCE: &str = "fence";
/// The server that granted the lock (`host:port`; in a cluster the
/// slot's master when the client knows it, else `cluster`). For a quorum
/// lock, the servers known to hold it when the acquire was decided (a
/// majority at least; one still answering then is not listed),
/// `host:port` comma-separated in the client's order of the servers.
pub const SERVER: &str = "server";
/// The error of a failed acquire.
pub const ERROR: &str = "error";
/// From the grant to the end of the hold, in ms.
pub const HELD_MS: &str = "held_ms";
/// How a hold ended: `released`, `dropped` (the handle was dropped while
/// held: its release is sent in the background) or `lost`.
pub const ENDED: &str = "ended";
/// Why a lock was lost: `not_owner`, `expired`, `max_lifetime`.
pub const REASON: &str = "reason";
/// The batch's command (`LOCK.RENEW`, `LOCK.RELEASE`, `SEM.RENEW`, …).
pub const COMMAND: &str = "command";
/// The node a batch went to (`host:port`), or where a redirect or
/// failure came from.
pub const NODE: &str = "node";
/// Commands in the batch.
pub const COUNT: &str = "count";
/// Commands of the batch that failed (no answer: an error or a timeout;
/// a renewal answered 0 is an answer, and a [`LOST`] event).
pub const FAILED: &str = "failed";
/// The batch's round trip, in ms.
pub const RTT_MS: &str = "rtt_ms";
/// What caused a redirect or retry: the error code (`MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`, …) or the error.
pub const CAUSE: &str = "cause";
/// The pause before the next attempt, in ms.
pub const PAUSE_MS: &str = "pause_ms";

/// [`OUTCOME`]: the lock was granted.
pub const GRANTED: &str = "granted";
/// [`OUTCOME`]: someone else held it (for the whole wait).
pub const NOT_ACQUIRED: &str = "not_acquired";
/// [`OUTCOME`]: an error ([`ERROR`] says which).
pub const FAILED_OUTCOME: &str = "error";

/// [`KIND`] of an election's campaign and leadership.
pub(crate) const ELECTION: &str = "election";

/// The [`ACQUIRE`] span of one call on `key` (`op`: `acquire`, `takeover`
/// or `campaign`), waiting up to `wait`; [`acquired`] records its outcome.
pub(crate) fn acquire_span(key: &str, kind: &str, op: &'static str, wait: std::time::Duration) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        ACQUIRE,
        { KEY } = key,
        { KIND } = kind,
        { OP } = op,
        { WAIT_MS } = ms(wait),
        { OUTCOME } = tracing::field::Empty,
        { WAITED_MS } = tracing::field::Empty,
        { FENCE } = tracing::field::Empty,
        { SERVER } = tracing::field::Empty,
        { ERROR } = tracing::field::Empty,
    )
}

/// Records on an [`ACQUIRE`] span the outcome `r` of the call that began
/// at `started`: for a grant, its fence and `server()` (computed only
/// when the span is recorded).
pub(crate) fn acquired<T>(
    span: &tracing::Span,
    started: std::time::Instant,
    r: &crate::Result<T>,
    fence: impl FnOnce(&T) -> Option<u64>,
    server: impl FnOnce() -> String,
) {
    if span.is_disabled() {
        return;
    }
    span.record(WAITED_MS, ms(started.elapsed()));
    match r {
        Ok(granted) => {
            span.record(OUTCOME, GRANTED);
            span.record(FENCE, fence(granted));
            span.record(SERVER, server());
        }
        Err(crate::Error::NotAcquired { .. }) => {
            span.record(OUTCOME, NOT_ACQUIRED);
        }
        Err(e) => {
            span.record(OUTCOME, FAILED_OUTCOME);
            span.record(ERROR, tracing::field::display(e));
        }
    }
}

/// Whole milliseconds of `d`, as the fields carry them.
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A `trace::BATCH` event: `count` commands named `command` sent to
/// `node` at `sent`, `failed` of them without an answer.
pub(crate) fn batch_event(
    node: impl std::fmt::Display,
    command: &str,
    count: usize,
    failed: usize,
    sent: std::time::Instant,
) {
    tracing::debug!(
        name: BATCH,
        target: TARGET,
        {
            { COMMAND } = command,
            { NODE } = tracing::field::display(node),
            { COUNT } = count,
            { FAILED } = failed,
            { RTT_MS } = ms(sent.elapsed())
        },
        "{}",
        BATCH
    );
}

/// A `trace::RETRY` event: a command on `key` to `node` failed with `e`
/// (a redirect, or a failure worth another attempt after `pause`).
pub(crate) fn retry_event(key: &str, node: impl std::fmt::Display, e: &redis::RedisError, pause: std::time::Duration) {
    tracing::info!(
        name: RETRY,
        target: TARGET,
        {
            { KEY } = key,
            { NODE } = tracing::field::display(node),
            { CAUSE } = e.code().map_or_else(|| e.to_string(), str::to_string),
            { PAUSE_MS } = ms(pause)
        },
        "{}",
        RETRY
    );
}
