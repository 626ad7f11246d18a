//! One pool of compute threads for every CPU kernel of a run.
//!
//! The fused CPU ops, the built-in GEMMs and candle's matmul (the `gemm` crate, which sizes its work by
//! `RAYON_NUM_THREADS`) run on rayon's global pool; a CBLAS library is called single-threaded from inside that
//! pool's tasks ([`super::gemm::blas`]). [`use_threads`] fixes the count once, before any of them runs: it builds
//! the global pool with it, sets `RAYON_NUM_THREADS` to it so the `gemm` crate splits its work the same way, and
//! sets `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS` and `OMP_NUM_THREADS` to 1 so that a library opened later starts
//! no pool of its own beside rayon's. No core then runs two compute threads.

/// Why the thread count could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ThreadsError {
    /// `--threads 0`.
    #[error("--threads: at least 1 compute thread is needed")]
    Zero,
    /// The global pool was already built with another count (a second call in one process).
    #[error("--threads {asked}: the compute pool already runs {running} threads")]
    AlreadyBuilt { asked: usize, running: usize },
}

/// The count [`use_threads`] applies for `asked` (`--threads`): it, else `RAYON_NUM_THREADS` where set to a
/// positive number, else the CPUs this process may run on.
pub fn thread_count(asked: Option<usize>) -> usize {
    asked
        .or_else(|| {
            std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&n: &usize| n > 0)
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Run every compute kernel of this process on [`thread_count`]`(asked)` threads (see the module's text); returns
/// the count. Call it at the start of a command, before other threads exist and before any parallel work.
pub fn use_threads(asked: Option<usize>) -> Result<usize, ThreadsError> {
    if asked == Some(0) {
        return Err(ThreadsError::Zero);
    }
    let count = thread_count(asked);
    // Setting variables is sound here: the command has not started other threads yet.
    std::env::set_var("RAYON_NUM_THREADS", count.to_string());
    for library_pool in ["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"] {
        std::env::set_var(library_pool, "1");
    }
    match rayon::ThreadPoolBuilder::new()
        .num_threads(count)
        .build_global()
    {
        Ok(()) => Ok(count),
        Err(_) if rayon::current_num_threads() == count => Ok(count),
        Err(_) => Err(ThreadsError::AlreadyBuilt {
            asked: count,
            running: rayon::current_num_threads(),
        }),
    }
}

/// `f`, run on a thread of the compute pool (on the calling thread where it is one already), the caller
/// waiting for it, while the pool's other threads stay awake ([`awake`]). A decode step does this on the CPU:
/// its kernels then start their parallel work from inside the pool, where the thread that starts it takes a
/// share and waits by working or spinning, instead of each of them (hundreds per step) handing its work to the
/// pool and putting the calling thread to sleep until the pool wakes it, and the other threads take each
/// section's work at once instead of being woken for it.
pub(crate) fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| awake::with_pool_awake(f))
}

/// Keeping the compute pool's threads awake through a run of short parallel sections.
///
/// A rayon thread that finds no work spins briefly, then sleeps until new work wakes it; on a virtual machine a
/// sleep and a wake cost tens of µs, and a decode step has over a hundred sections of tens to hundreds of µs
/// each, so without help the other threads sleep between sections (measured on 2 cores: ~125 context switches
/// a step) and come late to each one. [`with_pool_awake`](awake::with_pool_awake) gives each of them a helper
/// that takes the pool's pending jobs one at a time and yields its core while there are none, until `f` returns.
mod awake {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Whether some thread's `f` keeps the pool awake now. One at a time: a helper then never sits, on a
    /// thread's stack, above a job that another holder's `f` waits for.
    static HELD: AtomicBool = AtomicBool::new(false);

    /// Helpers running now (read by the tests).
    pub(super) static HELPING: AtomicUsize = AtomicUsize::new(0);

    /// The right to keep the pool awake, given back when dropped (also when `f` unwinds).
    pub(super) struct Hold(());

    impl Hold {
        /// The right, where no other thread holds it and this is a thread of a pool of two or more.
        pub(super) fn take() -> Option<Self> {
            if rayon::current_thread_index().is_none() || rayon::current_num_threads() < 2 {
                return None;
            }
            HELD.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .ok()
                .map(|_| Hold(()))
        }

        /// `f` on this thread while every other thread of the pool runs a helper.
        pub(super) fn run<R>(self, f: impl FnOnce() -> R) -> R {
            let owner = rayon::current_thread_index();
            let done = AtomicBool::new(false);
            rayon::in_place_scope(|s| {
                s.spawn_broadcast(|_, ctx| {
                    // This thread's own copy runs when it next looks for work: it returns at once.
                    if Some(ctx.index()) != owner {
                        help(&done);
                    }
                });
                let _stop = Stop(&done);
                f()
            })
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            HELD.store(false, Ordering::Release);
        }
    }

    /// Tells the helpers to return when dropped (also when `f` unwinds).
    struct Stop<'a>(&'a AtomicBool);

    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    /// `f` with the pool's other threads awake where this thread can hold them ([`Hold::take`]), else plainly.
    pub(super) fn with_pool_awake<R>(f: impl FnOnce() -> R) -> R {
        match Hold::take() {
            Some(hold) => hold.run(f),
            None => f(),
        }
    }

    /// Run the pool's pending jobs until `done`, yielding the core while there are none.
    fn help(done: &AtomicBool) {
        HELPING.fetch_add(1, Ordering::Relaxed);
        while !done.load(Ordering::Acquire) {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::thread::yield_now();
            }
        }
        HELPING.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_handed_to_the_compute_pool_runs_on_one_of_its_threads() {
        assert_eq!(rayon::current_thread_index(), None);
        let inside = on_compute_pool(|| {
            let here = rayon::current_thread_index();
            // Nested: it stays on the thread it is already on.
            (here, on_compute_pool(rayon::current_thread_index))
        });
        assert!(inside.0.is_some());
        assert_eq!(inside.0, inside.1);
    }

    /// The hold, once no other test holds it (bounded).
    fn hold() -> awake::Hold {
        for _ in 0..10_000 {
            if let Some(h) = awake::Hold::take() {
                return h;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the pool was held for over 10 s");
    }

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn while_held_every_other_thread_of_the_pool_helps_and_the_work_still_gets_done() {
        use rayon::prelude::*;
        use std::sync::atomic::Ordering;
        let sum = pool(3).install(|| {
            hold().run(|| {
                let start = std::time::Instant::now();
                while awake::HELPING.load(Ordering::Relaxed) < 2 {
                    assert!(start.elapsed().as_secs() < 10, "the helpers did not start");
                    std::thread::yield_now();
                }
                (0..10_000u64).into_par_iter().map(|x| x * 2).sum::<u64>()
            })
        });
        assert_eq!(sum, 9_999 * 10_000);
    }

    #[test]
    fn a_panic_while_held_stops_the_helpers_and_gives_the_hold_back() {
        let pool = pool(2);
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| hold().run(|| panic!("inside")))
        }));
        assert!(out.is_err());
        // Taken again (a hold left set would time out here).
        pool.install(|| drop(hold()));
    }

    #[test]
    fn many_threads_handing_work_to_one_pool_all_finish() {
        use rayon::prelude::*;
        let pool = std::sync::Arc::new(pool(2));
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..4u64 {
            let (pool, tx) = (pool.clone(), tx.clone());
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let s = pool.install(|| {
                        on_compute_pool(|| (0..1000u64).into_par_iter().map(|x| x + t).sum::<u64>())
                    });
                    tx.send(s).unwrap();
                }
            });
        }
        for i in 0..80 {
            let s = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("only {i} of 80 runs finished"));
            assert_eq!((s - 999 * 500) % 1000, 0);
        }
    }

    #[test]
    fn an_asked_count_wins_and_zero_is_refused() {
        assert_eq!(thread_count(Some(3)), 3);
        assert!(thread_count(None) >= 1);
        assert!(matches!(use_threads(Some(0)), Err(ThreadsError::Zero)));
    }
}
