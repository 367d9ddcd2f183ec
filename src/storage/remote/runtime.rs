//! The library's own async runtime for object-store requests.
//!
//! Created on first remote use (local-only use starts none); never the host's runtime: work
//! is spawned onto ours and the calling thread waits on a channel, so a call from a thread
//! that is itself inside some other tokio runtime neither panics nor borrows that runtime.
//!
//! Fork: a child process inherits the runtime only as memory (its worker threads, and the
//! sockets of connection pools registered with its I/O driver, belong to the parent). The
//! runtime records the process id that started it; the first remote use in another process
//! retires it without dropping it (dropping would join threads that do not exist) and starts
//! a new one with the next generation number. Stores built for an older generation are
//! rebuilt (see `ObjectRoot::store`), so a child never touches the parent's connections.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::runtime::Runtime;

use crate::error::{Error, ErrorKind, Result};

/// I/O worker threads: requests are network-bound; decoding runs on the library's pools.
const WORKER_THREADS: usize = 2;

struct Current {
    pid: u32,
    generation: u64,
    runtime: Arc<Runtime>,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// The runtime of this process and its generation (which changes after a fork).
pub(crate) fn runtime() -> Result<(Arc<Runtime>, u64)> {
    let pid = std::process::id();
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = current.as_ref().filter(|c| c.pid == pid) {
        return Ok((c.runtime.clone(), c.generation));
    }
    let generation = match current.take() {
        Some(inherited) => {
            let next = inherited.generation + 1;
            // Inherited through fork: its threads do not exist here; never drop it.
            std::mem::forget(inherited);
            next
        }
        None => 0,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("deltacells-io")
        // Its threads run only library work: a panic in a task (a dependency on a malformed
        // response) reaches the caller as an error and is not printed (docs/reliability.md §1).
        .on_thread_start(crate::contain::quiet_thread)
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot start the I/O runtime for remote storage: {e}"),
            )
        })?;
    let runtime = Arc::new(runtime);
    *current = Some(Current {
        pid,
        generation,
        runtime: runtime.clone(),
    });
    Ok((runtime, generation))
}

/// The current generation (starting the runtime if needed).
pub(crate) fn generation() -> Result<u64> {
    runtime().map(|(_, g)| g)
}

/// Runs `fut` on the library's runtime and waits for it on the calling thread.
pub(crate) fn block_on<T, F>(fut: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let (runtime, _) = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| {
        Error::new(
            ErrorKind::Internal,
            "a remote-storage task ended without a result (it panicked)",
        )
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_returns_results_and_reuses_the_runtime() {
        let g = generation().unwrap();
        assert_eq!(block_on(async { Ok(7) }).unwrap(), 7);
        let e = block_on(async { Err::<(), _>(Error::format("x")) }).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Format);
        assert_eq!(generation().unwrap(), g);
    }

    #[test]
    fn block_on_inside_another_runtime_does_not_panic() {
        let host = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = host.block_on(async { block_on(async { Ok(3) }) });
        assert_eq!(got.unwrap(), 3);
    }
}
