//! The synchronisation primitives the harness needs, for each model checker.
//!
//! The harness needs very little: one lock around the [`World`], one atomic logical clock,
//! and threads. Every operation on them is a point where the model checker may switch
//! threads, so the fewer the harness uses, the more of the protocol each schedule covers.

use std::sync::atomic::Ordering::SeqCst;

use crate::world::World;

/// One model checker's primitives.
pub trait Platform: 'static {
    /// The checker's lock around the shared world.
    type Lock: Send + Sync + 'static;
    /// The checker's atomic logical clock, in milliseconds.
    type Clock: Send + Sync + 'static;
    /// A spawned thread.
    type Thread;

    /// Wraps the world in the checker's lock.
    fn lock(world: World) -> Self::Lock;
    /// Runs `f` with the world locked.
    fn with<R>(lock: &Self::Lock, f: impl FnOnce(&mut World) -> R) -> R;
    /// A clock at zero.
    fn clock() -> Self::Clock;
    /// Reads the clock.
    fn now(clock: &Self::Clock) -> u64;
    /// Moves the clock forward to `t` unless it is already past; returns the new time.
    fn advance_to(clock: &Self::Clock, t: u64) -> u64;
    /// Moves the clock forward by `d`.
    fn advance_by(clock: &Self::Clock, d: u64);
    /// Starts a thread of the model.
    fn spawn(f: impl FnOnce() + Send + 'static) -> Self::Thread;
    /// Waits for a thread of the model; a panic in it fails the run.
    fn join(thread: Self::Thread);
}

/// Implements [`Platform`] for a checker whose crate mirrors `std`'s paths (`sync::Mutex`,
/// `sync::atomic::AtomicU64`, `thread::spawn`), as loom and shuttle both do.
macro_rules! platform {
    ($(#[$doc:meta])* $name:ident, $checker:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl Platform for $name {
            type Lock = $checker::sync::Mutex<World>;
            type Clock = $checker::sync::atomic::AtomicU64;
            type Thread = $checker::thread::JoinHandle<()>;

            fn lock(world: World) -> Self::Lock {
                $checker::sync::Mutex::new(world)
            }
            fn with<R>(lock: &Self::Lock, f: impl FnOnce(&mut World) -> R) -> R {
                let mut guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                f(&mut guard)
            }
            fn clock() -> Self::Clock {
                $checker::sync::atomic::AtomicU64::new(0)
            }
            fn now(clock: &Self::Clock) -> u64 {
                clock.load(SeqCst)
            }
            fn advance_to(clock: &Self::Clock, t: u64) -> u64 {
                clock.fetch_max(t, SeqCst).max(t)
            }
            fn advance_by(clock: &Self::Clock, d: u64) {
                clock.fetch_add(d, SeqCst);
            }
            fn spawn(f: impl FnOnce() + Send + 'static) -> Self::Thread {
                $checker::thread::spawn(f)
            }
            fn join(thread: Self::Thread) {
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    };
}

platform!(
    /// loom: every schedule up to a preemption bound.
    Loom,
    loom
);

platform!(
    /// shuttle: randomized schedules (random and PCT schedulers), many threads, replayable
    /// from the schedule a failure prints.
    Shuttle,
    shuttle
);
