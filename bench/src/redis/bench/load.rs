//! A closed-loop load generator: `concurrency` workers each issue one call after another
//! for a fixed wall-clock window, and every call's latency is kept.
//!
//! Closed loop (a worker waits for its call before the next) is what a service with a
//! bounded number of in-flight requests does, and it makes "calls per second at
//! concurrency N" directly comparable between idem and the raw commands measured in the
//! same run.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What one window of load measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadStats {
    /// Workers calling at once.
    pub concurrency: usize,
    /// Calls that returned `Ok`.
    pub calls: u64,
    /// Calls that returned `Err` (counted, not timed).
    pub errors: u64,
    /// The wall-clock window the calls ran in.
    pub elapsed: Duration,
    /// Median latency of the successful calls.
    pub p50: Duration,
    /// 99th percentile latency of the successful calls.
    pub p99: Duration,
}

impl LoadStats {
    /// Successful calls per second of wall time.
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs == 0.0 {
            0.0
        } else {
            self.calls as f64 / secs
        }
    }
}

/// When a load stops handing out calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Once this much wall time has passed since the start: calls per second.
    Window(Duration),
    /// Once this many calls were handed out: a fixed amount of work, for counting what each
    /// call costs (instructions under callgrind) rather than timing it.
    Calls(u64),
}

/// Runs `call(i)` for i = 0, 1, 2, ... from `concurrency` tokio tasks until `window` has
/// passed, and returns what was measured. Each `i` is handed out once, so calls can map it
/// to a distinct key.
pub async fn run<F, Fut, E>(concurrency: usize, window: Duration, call: F) -> LoadStats
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Send + 'static,
{
    run_until(concurrency, Until::Window(window), call).await
}

/// As [`run`], stopping as `until` says.
pub async fn run_until<F, Fut, E>(concurrency: usize, until: Until, call: F) -> LoadStats
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Send + 'static,
{
    let concurrency = concurrency.max(1);
    let call = Arc::new(call);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let call = Arc::clone(&call);
        let next = Arc::clone(&next);
        let errors = Arc::clone(&errors);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = match until {
                    Until::Window(window) if start.elapsed() >= window => break,
                    Until::Window(_) => next.fetch_add(1, Ordering::Relaxed),
                    Until::Calls(total) => match next.fetch_add(1, Ordering::Relaxed) {
                        i if i >= total => break,
                        i => i,
                    },
                };
                let began = Instant::now();
                match call(i).await {
                    Ok(()) => latencies.push(began.elapsed()),
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        // A worker that panicked lost its latencies; its calls count as nothing.
        if let Ok(mut own) = worker.await {
            latencies.append(&mut own);
        }
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    LoadStats {
        concurrency,
        calls: latencies.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        p50: percentile(&latencies, 50),
        p99: percentile(&latencies, 99),
    }
}

/// The `pct`th percentile of sorted samples (nearest rank), zero when there are none.
pub fn percentile(sorted: &[Duration], pct: u32) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() as u64 * u64::from(pct.min(100))).div_ceil(100);
    let index = usize::try_from(rank.saturating_sub(1)).unwrap_or(usize::MAX);
    sorted[index.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples = ms(&(1..=100).collect::<Vec<_>>());
        assert_eq!(percentile(&samples, 50), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 100), Duration::from_millis(100));
        assert_eq!(percentile(&ms(&[7]), 99), Duration::from_millis(7));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    /// A load of `until` at `concurrency` whose calls fail for every tenth index: what it
    /// measured, and the indices it handed out, in the order they were handed.
    async fn recorded(concurrency: usize, until: Until) -> (LoadStats, Vec<u64>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let stats = run_until(concurrency, until, move |i| {
            let record = Arc::clone(&record);
            async move {
                record.lock().unwrap().push(i);
                tokio::task::yield_now().await;
                if i % 10 == 0 { Err(()) } else { Ok(()) }
            }
        })
        .await;
        let seen = seen.lock().unwrap().clone();
        (stats, seen)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_index_is_handed_out_once_and_errors_are_counted() {
        let (stats, mut seen) = recorded(8, Until::Window(Duration::from_millis(50))).await;
        let total = seen.len() as u64;
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len() as u64, total, "an index was handed out twice");
        assert_eq!(stats.calls + stats.errors, total);
        assert_eq!(
            stats.errors,
            seen.iter().filter(|i| *i % 10 == 0).count() as u64
        );
        assert!(stats.calls > 0 && stats.per_second() > 0.0);
        assert!(stats.p50 <= stats.p99);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_count_of_calls_hands_out_exactly_that_many() {
        let (stats, mut seen) = recorded(7, Until::Calls(100)).await;
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        assert_eq!((stats.calls, stats.errors), (90, 10));
    }
}
