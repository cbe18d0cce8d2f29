//! The runtime behind the quorum client's *sync* API.
//!
//! A quorum operation talks to all servers at once, which is what async
//! code does well; the sync API runs the same async code on one private
//! current-thread runtime, driven by one background thread for the whole
//! process, and waits for the result on a channel. Waiting on a channel
//! (not `Runtime::block_on`) works from any thread, including one inside
//! the caller's own tokio runtime, where `block_on` would panic. The sync
//! locks' watchdogs run there too, as tasks.

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
                .name("redis-lock quorum".into())
                // Runs the tasks spawned through the handle, for ever.
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .map_err(|e| e.to_string())?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|e| Error::InvalidArgument(format!("cannot start the quorum client's background runtime: {e}")))
}

/// Spawns `fut` on the background runtime (detached).
pub(crate) fn spawn<F>(fut: F) -> Result<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(handle()?.spawn(fut))
}

/// Runs `fut` on the background runtime and blocks until it is done.
pub(crate) fn block<T, F>(fut: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    spawn(async move {
        let _ = tx.send(fut.await);
    })?;
    // A task that panicked drops its sender: an error, not a hang.
    rx.recv().unwrap_or_else(|_| Err(Error::Redis(std::io::Error::other("the quorum operation was aborted").into())))
}

/// The handle of the background runtime, for sync locks' watchdogs.
pub(crate) fn background() -> Result<tokio::runtime::Handle> {
    handle().cloned()
}
