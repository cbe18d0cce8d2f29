//! Following an election: [`LeaderStream`], the leader changes of one key
//! as an async `Stream`, and [`LeaderIter`], the same stream as a blocking
//! iterator (a thin layer: each `next` drives the stream's next item on
//! the background runtime; there is one implementation).
//!
//! The stream loops `LOCK.OBSERVE key AFTER <last rev> WAIT <OBSERVE_WAIT>`
//! on a connection of its own (the transport's [`Observer`]): the server
//! answers at once when the key's leadership is not the one last seen,
//! else when it changes, else after the wait with the unchanged state.
//! Every change of leader or value takes a new rev (a fence), so passing
//! the last rev seen never misses the latest state: a change made while
//! the stream was not waiting (between two calls, while reconnecting) is
//! answered at once by the next call. Intermediate states that came and
//! went in between are not replayed: the stream reports the latest state,
//! not every state (as etcd's `Observe` does not guarantee either).
//!
//! Connection failures are retried by the stream itself after a growing
//! pause (`retry::pause`: 50 ms doubling to 800 ms, with jitter), on a new
//! connection, for as long as the stream is polled; a cluster's observer
//! also follows `MOVED` and rides out failovers. Any other error (the
//! server has no `LOCK.OBSERVE`, `WRONGTYPE`, the server's limit on
//! blocked clients) is the stream's last item.
//!
//! It costs one connection and no task or thread of its own: the caller
//! polls it (the connection's driver runs on the background runtime).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{self, Stream, StreamExt};

use crate::cmd::observe_cmd;
use crate::error::{Error, Result};
use crate::info::{parse_leader, Leader};
use crate::retry;
use crate::runtime;
use crate::transport::Observer;

/// How long one `LOCK.OBSERVE` may block in the server before it answers
/// the unchanged state and the stream asks again. It bounds how long a
/// connection to a server that vanished without closing it (a network
/// partition) goes unnoticed: this plus the response timeout.
pub const OBSERVE_WAIT: Duration = Duration::from_secs(10);

/// The leader changes of one election key, from
/// [`Election::observe`](crate::Election::observe): a `Stream` of
/// `Result<Option<Leader>>` items, `None` meaning "no leader".
///
/// - The first item is the key's state when the stream first asks.
/// - Then one item per change seen: a new leader (a greater term), a
///   proclaimed value (same term, new [`rev`](Leader::rev)), or the end of
///   a leadership (`None`: resigned, expired, deleted). Every item differs
///   from the one before; the last one is always the latest state the
///   server had when it answered.
/// - Items never repeat a rev, and on one server the terms come in
///   increasing order. (After a failover that lost writes, a replica's
///   older state may come back: it is reported as the change it is.)
/// - Connection failures are retried by the stream, forever; an `Err`
///   item is a failure that retrying cannot mend (no module, a key of
///   another type, the server's limit on blocked clients), and the stream
///   ends after it.
///
/// Not `Sync`-shared: one consumer polls it. For a blocking consumer, see
/// [`LeaderStream::blocking`].
pub struct LeaderStream {
    inner: Pin<Box<dyn Stream<Item = Result<Option<Leader>>> + Send>>,
}

impl std::fmt::Debug for LeaderStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderStream").finish_non_exhaustive()
    }
}

/// What the stream keeps between items.
struct State {
    observer: Box<dyn Observer>,
    key: String,
    /// The state last yielded; `None` before the first item.
    last: Option<Option<Leader>>,
    /// Failed calls in a row, for the pause.
    failed: usize,
    done: bool,
}

/// Whether `now` is news after `last`: always the first time; else a
/// different rev, or a leader appearing or going.
pub(crate) fn changed(last: &Option<Option<Leader>>, now: &Option<Leader>) -> bool {
    match (last, now) {
        (None, _) => true,
        (Some(Some(a)), Some(b)) => a.rev != b.rev,
        (Some(None), None) => false,
        (Some(_), _) => true,
    }
}

/// The `AFTER` of the next call: none the first time (the current state
/// at once), else the last rev seen, 0 for "no leader".
pub(crate) fn after(last: &Option<Option<Leader>>) -> Option<u64> {
    last.as_ref().map(|l| l.as_ref().map_or(0, |l| l.rev))
}

/// A failure the stream retries by itself: the connection or the node,
/// not the request (see `retry::classify`), a timeout, or `CLIENT
/// UNBLOCK` (`UNBLOCKED`), which only ends this call. A redirect reaching
/// the stream comes from a cluster node that a single-server client was
/// pointed at: a mistake no retry mends.
fn retried(e: &Error) -> bool {
    let Error::Redis(e) = e else { return false };
    if e.redirect_node().is_some() {
        return false;
    }
    e.is_timeout() || e.code() == Some("UNBLOCKED") || retry::classify(e) != retry::Failure::Final
}

impl LeaderStream {
    pub(crate) fn new(observer: Box<dyn Observer>, key: &str) -> LeaderStream {
        let st = State { observer, key: key.into(), last: None, failed: 0, done: false };
        LeaderStream { inner: Box::pin(stream::unfold(st, next)) }
    }

    /// The same stream as a blocking iterator (for the sync API): each
    /// `next` waits for the stream's next item.
    pub fn blocking(self) -> LeaderIter {
        LeaderIter { stream: Some(self) }
    }
}

async fn next(mut st: State) -> Option<(Result<Option<Leader>>, State)> {
    loop {
        if st.done {
            return None;
        }
        let wait = st.last.as_ref().map(|_| OBSERVE_WAIT);
        let wait_ms = wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
        let cmd = observe_cmd(&st.key, after(&st.last), wait_ms);
        let r = st.observer.call(&cmd, wait.unwrap_or(Duration::ZERO)).await;
        let parsed = r.and_then(|v| parse_leader(v).map_err(Error::from));
        match parsed {
            Ok(now) => {
                st.failed = 0;
                if changed(&st.last, &now) {
                    st.last = Some(now.clone());
                    return Some((Ok(now), st));
                }
            }
            Err(e) if retried(&e) => {
                let pause = retry::pause(st.failed, rand::random::<f64>());
                st.failed += 1;
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                st.done = true;
                return Some((Err(explain(e)), st));
            }
        }
    }
}

/// "unknown command" is a server without the module (or an older one).
fn explain(e: Error) -> Error {
    match e {
        Error::Redis(r) if crate::cmd::is_unknown_command(&r) => Error::Unsupported { command: "LOCK.OBSERVE" },
        e => e,
    }
}

impl Stream for LeaderStream {
    type Item = Result<Option<Leader>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// [`LeaderStream`] as a blocking iterator, from
/// [`Election::observe_blocking`](crate::Election::observe_blocking) or
/// [`LeaderStream::blocking`]: the same items, each `next` blocking the
/// calling thread until the stream yields it (which may be long: until the
/// leadership changes). Runs the one stream on the client's background
/// runtime; it is not a second implementation.
pub struct LeaderIter {
    /// `None` once the stream ended (or the runtime failed).
    stream: Option<LeaderStream>,
}

impl std::fmt::Debug for LeaderIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderIter").field("ended", &self.stream.is_none()).finish()
    }
}

impl Iterator for LeaderIter {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut s = self.stream.take()?;
        match runtime::block(async move {
            let item = s.next().await;
            Ok((s, item))
        }) {
            Ok((s, item)) => {
                if item.is_some() {
                    self.stream = Some(s);
                }
                item
            }
            Err(e) => Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, rev: u64) -> Option<Leader> {
        Some(Leader { value: "v".into(), term, rev, ttl: None, revoked: None })
    }

    #[test]
    fn observing_asks_after_the_last_rev_and_reports_only_changes() {
        assert_eq!(after(&None), None, "first: the current state at once");
        assert_eq!(after(&Some(None)), Some(0), "0: no leader was seen");
        assert_eq!(after(&Some(leader(3, 5))), Some(5));
        assert!(changed(&None, &None), "the first state is always reported");
        assert!(changed(&None, &leader(1, 1)));
        assert!(!changed(&Some(None), &None), "still no leader");
        assert!(changed(&Some(None), &leader(1, 1)));
        assert!(changed(&Some(leader(1, 1)), &None), "the leadership ended");
        assert!(changed(&Some(leader(1, 1)), &leader(1, 4)), "same term, proclaimed value");
        assert!(changed(&Some(leader(1, 4)), &leader(5, 5)), "a new leader");
        let mut older_ttl = leader(1, 4);
        if let Some(l) = older_ttl.as_mut() {
            l.ttl = Some(Duration::from_secs(1));
        }
        assert!(!changed(&Some(leader(1, 4)), &older_ttl), "a renewal (ttl) is not a change");
    }

    #[test]
    fn only_connection_failures_are_retried() {
        let server = |line: &str| {
            Error::Redis(
                redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                    .and_then(redis::Value::extract_error)
                    .unwrap_err(),
            )
        };
        let io = |k| Error::Redis(std::io::Error::from(k).into());
        assert!(retried(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(retried(&io(std::io::ErrorKind::ConnectionRefused)));
        assert!(retried(&io(std::io::ErrorKind::TimedOut)));
        assert!(retried(&server("UNBLOCKED client unblocked via CLIENT UNBLOCK")));
        assert!(retried(&server("TRYAGAIN Multiple keys request during rehashing of slot")));
        assert!(!retried(&server("MOVED 12 127.0.0.1:7001")), "a cluster's observer follows it before");
        assert!(retried(&server("LOADING Redis is loading the dataset in memory")));
        assert!(!retried(&server("WRONGTYPE Operation against a key holding the wrong kind of value")));
        assert!(!retried(&server("ERR unknown command 'LOCK.OBSERVE', with args beginning with: ")));
        assert!(matches!(
            explain(server("ERR unknown command 'LOCK.OBSERVE', with args beginning with: ")),
            Error::Unsupported { command: "LOCK.OBSERVE" }
        ));
        assert!(!retried(&Error::InvalidArgument("x".into())));
    }
}
