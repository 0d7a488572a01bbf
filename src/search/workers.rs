//! The thread a search's side job runs on: a pool of its own, started once,
//! whose parked workers take a search's side job (the query's embedding
//! beside the lexical side, the vector-only candidates' BM25 beside the
//! rows being read).
//!
//! Why not a thread spawned per search: in a server on this project's 2-core
//! VM, a new thread often started a millisecond or more late while the
//! searching thread kept its core busy, and the hybrid p50 of a server was
//! 10.4-11.9 ms against 8.7 with parked workers (`docs/experiments.md`,
//! "A search's side jobs on parked workers"). For the same reason the
//! workers are kept off the searching thread's core while it does its own
//! part ([`placement`]). Why not rayon's
//! global pool: an index run's embedding batches fill it, and a search's job
//! would queue behind them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// The search workers: one per core, up to [`MOST_WORKERS`] (none if they
/// cannot be started: side jobs then run on the searching thread). While the
/// searching thread does its own part they are kept off its core
/// ([`placement`]), so on two cores the query's embedding runs on one while
/// the lexical side runs on the other; once that part is done each worker
/// gets a core of its own, and what is left of the work a side job splits
/// with rayon spreads over every core. With one worker fewer, a question's
/// embedding ran on one core to its end, the other idle (`docs/experiments.md`,
/// "The searching thread's core, once its part is done").
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.clamp(1, MOST_WORKERS))
            .thread_name(|i| format!("ken-search-{i}"))
            .start_handler(|_| placement::register_worker())
            .build()
            .map_err(|e| tracing::warn!("search workers: {e}; searches run on one thread"))
            .ok()
    })
    .as_ref()
}

/// A query's few rows gain little from more threads, and each worker costs
/// two affinity calls per search.
const MOST_WORKERS: usize = 4;

/// Starts the workers now (a server's warm-up), not on the first search.
pub(super) fn start() {
    pool();
}

/// Runs `side` on a search worker while `main` runs on this thread, and
/// returns both results; `side`'s panic is returned, not raised. Once `main`
/// is done this thread only waits, so a worker takes its core for what is
/// left of `side`.
pub(super) fn beside<S: Send, M>(
    side: impl FnOnce() -> S + Send,
    main: impl FnOnce() -> M,
) -> (std::thread::Result<S>, M) {
    let Some(pool) = pool() else {
        let main = main();
        return (catch_unwind(AssertUnwindSafe(side)), main);
    };
    placement::keep_workers_off_this_core();
    let mut side_result = None;
    let main = pool.in_place_scope(|scope| {
        let slot = &mut side_result;
        scope.spawn(move |_| *slot = Some(catch_unwind(AssertUnwindSafe(side))));
        let main = main();
        placement::spread_workers();
        main
    });
    (side_result.expect("a scope ends after its jobs"), main)
}

/// Where the workers may run. On a VM whose scheduler packs tasks onto few
/// vCPUs, a worker woken after an agent's pause was often queued on the
/// searching thread's own core, where the two took turns (a side job started
/// 1-2 ms late and the search's own part ran slower). Each worker's
/// affinity is kept to the process's cores but the searching thread's while
/// that thread works, then to a core of the worker's own.
#[cfg(target_os = "linux")]
mod placement {
    use std::sync::{Mutex, MutexGuard, OnceLock};

    /// The workers' thread ids, and the core they were last kept off (-1:
    /// none yet). One lock for both, so concurrent searches cannot leave the
    /// workers placed otherwise than the record says.
    struct Placed {
        workers: Vec<libc::pid_t>,
        kept_off: libc::c_int,
    }

    fn placed() -> MutexGuard<'static, Placed> {
        static PLACED: OnceLock<Mutex<Placed>> = OnceLock::new();
        PLACED
            .get_or_init(|| {
                Mutex::new(Placed {
                    workers: Vec::new(),
                    kept_off: -1,
                })
            })
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cores the process may use, read once (a `taskset` or cgroup
    /// limit stays in force).
    pub(super) fn allowed() -> Option<libc::cpu_set_t> {
        static ALLOWED: OnceLock<Option<libc::cpu_set_t>> = OnceLock::new();
        *ALLOWED.get_or_init(|| {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; the call writes at most its size.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            let read = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
            (read == 0).then_some(set)
        })
    }

    /// Called on each worker as it starts.
    pub(super) fn register_worker() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        placed().workers.push(tid);
    }

    /// Moves the workers off the calling thread's core, unless they were
    /// kept off it already (one syscall per worker, only when they may run
    /// anywhere or the searching thread changed cores).
    pub(super) fn keep_workers_off_this_core() {
        // SAFETY: sched_getcpu has no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        let Some(mut set) = allowed() else { return };
        let mut placed = placed();
        if here < 0 || placed.kept_off == here {
            return;
        }
        placed.kept_off = here;
        // SAFETY: `here` is a CPU number the kernel gave; the set is a valid cpu_set_t.
        unsafe { libc::CPU_CLR(here as usize, &mut set) };
        if unsafe { libc::CPU_COUNT(&set) } == 0 {
            return;
        }
        for &tid in &placed.workers {
            // SAFETY: `set` is a valid cpu_set_t of the size given; a worker
            // that has exited makes the call fail, which changes nothing.
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        }
    }

    /// Gives each worker a core of its own, the calling thread's first (it
    /// only waits now). Left to run anywhere, a worker woken to share the
    /// embedding's products was often placed on the other worker's vCPU,
    /// where the two took turns (this VM's scheduler packs tasks).
    pub(super) fn spread_workers() {
        let cores = allowed_cores();
        let mut placed = placed();
        if placed.kept_off < 0 || cores.is_empty() {
            return;
        }
        placed.kept_off = -1;
        // SAFETY: sched_getcpu has no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        let first = cores.iter().position(|&core| core as libc::c_int == here).unwrap_or(0);
        for (i, &tid) in placed.workers.iter().enumerate() {
            // The searching thread's core, then the others in turn.
            let core = cores[(first + i) % cores.len()];
            // SAFETY: a zeroed cpu_set_t is a valid empty set; the core is one
            // the process may use; otherwise as in `keep_workers_off_this_core`.
            unsafe {
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(core, &mut one);
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &one);
            }
        }
    }

    /// The cores in [`allowed`], in order, listed once.
    fn allowed_cores() -> &'static [usize] {
        static CORES: OnceLock<Vec<usize>> = OnceLock::new();
        CORES.get_or_init(|| {
            allowed().map_or_else(Vec::new, |set| {
                (0..libc::CPU_SETSIZE as usize)
                    // SAFETY: `core` is below the set's size.
                    .filter(|&core| unsafe { libc::CPU_ISSET(core, &set) })
                    .collect()
            })
        })
    }

    /// Each worker's affinity mask (tests).
    #[cfg(test)]
    pub(super) fn worker_masks() -> Vec<libc::cpu_set_t> {
        placed()
            .workers
            .iter()
            .map(|&tid| {
                // SAFETY: as in `allowed`.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
                set
            })
            .collect()
    }
}

#[cfg(not(target_os = "linux"))]
mod placement {
    pub(super) fn register_worker() {}
    pub(super) fn keep_workers_off_this_core() {}
    pub(super) fn spread_workers() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

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

    /// The calling thread's affinity mask.
    #[cfg(target_os = "linux")]
    fn own_cores() -> libc::cpu_set_t {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        set
    }

    /// Whether the process may use two cores or more (the placement is moot otherwise).
    #[cfg(target_os = "linux")]
    fn several_cores() -> Option<libc::cpu_set_t> {
        placement::allowed().filter(|allowed| unsafe { libc::CPU_COUNT(allowed) } >= 2)
    }

    /// While the searching thread does its part, the worker is kept off its
    /// core. Other tests' searches share the workers and move them while
    /// they run, so the check is tried until those are done (up to 3 s);
    /// without the placement no try sees it.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_worker_is_kept_off_the_searching_threads_core() {
        if several_cores().is_none() {
            return;
        }
        let mut kept_off = (0..300)
            .map(|_| std::thread::sleep(std::time::Duration::from_millis(10)))
            .filter(|()| {
                let (seen, told) = std::sync::mpsc::channel();
                let (side_mask, here) = beside(
                    move || {
                        let mask = own_cores();
                        let _ = seen.send(());
                        mask
                    },
                    // The searching thread's part lasts until the worker has looked.
                    || {
                        let _ = told.recv_timeout(std::time::Duration::from_secs(1));
                        unsafe { libc::sched_getcpu() }
                    },
                );
                let side_mask = side_mask.expect("the side job ran");
                here >= 0 && !unsafe { libc::CPU_ISSET(here as usize, &side_mask) }
            });
        assert!(
            kept_off.next().is_some(),
            "a worker may still run on the searching thread's core"
        );
    }

    /// Once the searching thread's part is done, each worker has a core of
    /// its own, one of them the searching thread's (what is left of the side
    /// job may use every core). Tried until no other test's search moves the
    /// workers meanwhile (up to 3 s).
    #[cfg(target_os = "linux")]
    #[test]
    fn once_the_searching_thread_waits_each_worker_has_a_core_of_its_own() {
        let Some(allowed) = several_cores() else { return };
        let cores = unsafe { libc::CPU_COUNT(&allowed) } as usize;
        let mut spread = (0..300)
            .map(|_| std::thread::sleep(std::time::Duration::from_millis(10)))
            .filter(|()| {
                let (_, here) = beside(|| (), || unsafe { libc::sched_getcpu() });
                let masks = placement::worker_masks();
                let single: Vec<usize> = masks
                    .iter()
                    .filter(|m| unsafe { libc::CPU_COUNT(m) } == 1)
                    .filter_map(|m| (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, m) }))
                    .collect();
                let distinct: HashSet<usize> = single.iter().copied().collect();
                single.len() == masks.len()
                    && distinct.len() == masks.len().min(cores)
                    && here >= 0
                    && distinct.contains(&(here as usize))
            });
        assert!(
            spread.next().is_some(),
            "the workers did not get a core each, the searching thread's among them"
        );
    }
}
