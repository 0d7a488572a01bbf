//! The thread a search's side job runs on: a pool of its own, started once,
//! whose parked workers take a search's side job (the query's embedding
//! beside the lexical side, the vector-only candidates' BM25 beside the
//! rows being read).
//!
//! Why not a thread spawned per search: in a server on this project's 2-core
//! VM, a new thread often started a millisecond or more late while the
//! searching thread kept its core busy, and the hybrid p50 of a server was
//! 10.4-11.9 ms against 8.7 with parked workers (`docs/experiments.md`,
//! "A search's side jobs on parked workers"). Why not rayon's global pool: an
//! index run's embedding batches fill it, and a search's job would queue
//! behind them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// The search workers: every core but the searching thread's, at least one
/// (none if they cannot be started: side jobs then run on the searching
/// thread). Work a side job splits with rayon stays among them, so on two
/// cores the query's embedding runs on one while the lexical side runs on
/// the other, instead of three threads sharing two cores.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.saturating_sub(1).max(1))
            .thread_name(|i| format!("ken-search-{i}"))
            .build()
            .map_err(|e| tracing::warn!("search workers: {e}; searches run on one thread"))
            .ok()
    })
    .as_ref()
}

/// Starts the workers now (a server's warm-up), not on the first search.
pub(super) fn start() {
    pool();
}

/// Runs `side` on a search worker while `main` runs on this thread, and
/// returns both results; `side`'s panic is returned, not raised.
pub(super) fn beside<S: Send, M>(
    side: impl FnOnce() -> S + Send,
    main: impl FnOnce() -> M,
) -> (std::thread::Result<S>, M) {
    let Some(pool) = pool() else {
        let main = main();
        return (catch_unwind(AssertUnwindSafe(side)), main);
    };
    let mut side_result = None;
    let main = pool.in_place_scope(|scope| {
        let slot = &mut side_result;
        scope.spawn(move |_| *slot = Some(catch_unwind(AssertUnwindSafe(side))));
        main()
    });
    (side_result.expect("a scope ends after its jobs"), main)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_side_job_runs_on_another_thread_and_its_panic_is_returned() {
        let here = std::thread::current().id();
        let (side, main) = beside(|| std::thread::current().id(), || std::thread::current().id());
        assert_eq!(main, here);
        assert_ne!(side.expect("the side job ran"), here);
        let (side, main) = beside(|| -> u8 { panic!("a side job failed") }, || 7);
        assert_eq!(main, 7);
        assert!(side.is_err());
        // The worker survives its job's panic.
        let (side, _) = beside(|| 1 + 1, || ());
        assert_eq!(side.expect("the worker still runs jobs"), 2);
    }
}
