//! Where blocking work (file I/O, directory walks) runs.
//!
//! A tool runs either on a thread that may block (the dispatcher runs every in-process call
//! on one: the MCP transport's own thread, or a runtime worker that handed its tasks over) or,
//! called directly (an embedder, a test), on an async thread that must not. [`blocking`] runs
//! its work right where it is in the first case, saving a hand-off to the blocking pool, and
//! on the pool in the second.

use std::cell::Cell;

thread_local! {
    static MAY_BLOCK: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with this thread marked as one that may block, for [`blocking`] within it.
pub fn on_blocking_thread<R>(f: impl FnOnce() -> R) -> R {
    let before = MAY_BLOCK.replace(true);
    let out = f();
    MAY_BLOCK.set(before);
    out
}

/// Run blocking `work`: here, when this thread may block ([`on_blocking_thread`]), else on
/// tokio's blocking pool. `Err` only when the pool's task panicked or was cancelled.
pub async fn blocking<T, F>(work: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if MAY_BLOCK.get() {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_here_only_on_a_thread_that_may_block() {
        let here = std::thread::current().id();
        let pooled = blocking(move || std::thread::current().id()).await;
        assert_ne!(
            pooled.ok(),
            Some(here),
            "an async thread hands the work to the pool"
        );
        let runtime = tokio::runtime::Handle::current();
        let inline = std::thread::spawn(move || {
            on_blocking_thread(|| {
                let me = std::thread::current().id();
                (
                    me,
                    runtime.block_on(blocking(move || std::thread::current().id())),
                )
            })
        })
        .join()
        .ok();
        let (me, ran_on) = inline.unwrap_or_else(|| panic!("the thread panicked"));
        assert_eq!(
            ran_on.ok(),
            Some(me),
            "a thread that may block runs the work itself"
        );
    }
}
