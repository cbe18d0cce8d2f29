//! The one background runtime of the process, as `reqwest::blocking` has:
//! a current-thread tokio runtime driven by one thread, started on first
//! use. It runs what must not depend on the caller's runtime (or on the
//! caller having one): the renewal engines and release queues of every
//! client, the async connections they use, and the sync API of the quorum
//! client.
//!
//! Its thread count is one, whatever the number of clients and locks.

use std::future::Future;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The runtime's handle, or why it could not be started.
fn handle() -> Result<&'static tokio::runtime::Handle> {
    static HANDLE: OnceLock<std::result::Result<tokio::runtime::Handle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name("redis-lock".into())
                // Drives the tasks, timers and sockets of the handle, for ever.
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .map_err(|e| e.to_string())?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|e| Error::InvalidArgument(format!("cannot start the client's background runtime: {e}")))
}

/// Spawns `fut` on the background runtime (detached).
pub(crate) fn spawn<F>(fut: F) -> Result<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(handle()?.spawn(fut))
}

/// Runs `fut` to completion for a blocking caller. Outside any runtime
/// the future is polled on the calling thread (`Handle::block_on`; the
/// background thread drives its timers and sockets), which costs no hop
/// to another thread and back. Inside a runtime, where that would panic,
/// it runs as a task on the background runtime and the caller waits on a
/// channel.
pub(crate) fn block<T, F>(fut: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let h = handle()?;
    if tokio::runtime::Handle::try_current().is_err() {
        return h.block_on(fut);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    // The caller's span stays the parent of the operation's spans.
    let fut = tracing::Instrument::in_current_span(fut);
    h.spawn(async move {
        let _ = tx.send(fut.await);
    });
    // A task that panicked drops its sender: an error, not a hang.
    rx.recv().unwrap_or_else(|_| Err(Error::Redis(std::io::Error::other("the lock operation was aborted").into())))
}

/// Runs `fut` on the background runtime and awaits it from any runtime:
/// what it opens (a connection and the task that drives it) lives there,
/// and so outlives the caller's runtime.
pub(crate) async fn on_background<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle()?.spawn(fut).await.map_err(|e| Error::Redis(std::io::Error::other(e.to_string()).into()))
}

/// A background task's idle time: until `notified` fires or `next` comes
/// (with no `next`, only the former).
pub(crate) async fn idle(
    notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    next: Option<std::time::Instant>,
) {
    match next {
        Some(at) => {
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(at.into()) => {}
            }
        }
        None => notified.await,
    }
}
