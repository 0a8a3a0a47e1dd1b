//! The same seed gives the same run, byte for byte; another seed gives another run.

use idem_sim::{Config, explore, run_seed};

#[test]
fn one_seed_gives_one_trace_byte_for_byte() {
    let config = Config::default();
    for seed in [0, 1, 191, 12_345, u64::MAX] {
        let first = run_seed(seed, &config, true).unwrap();
        let second = run_seed(seed, &config, true).unwrap();
        let (a, b) = (first.trace.clone().unwrap(), second.trace.clone().unwrap());
        assert!(
            a.lines().count() > 10,
            "seed {seed}: a trace too short to compare"
        );
        assert_eq!(a.as_bytes(), b.as_bytes(), "seed {seed}");
        // The broker is on by default: its deliveries and dispositions are in the run.
        assert!(first.broker.deliveries > 0, "seed {seed}");
        assert!(a.contains("broker delivers m0"), "seed {seed}");
        assert!(a.contains("tells the broker"), "seed {seed}");
        assert_eq!(first.charges(), second.charges());
        assert_eq!(first.history, second.history);
        assert_eq!(first.responses, second.responses);
    }
    let a = run_seed(7, &config, true).unwrap().trace.unwrap();
    let b = run_seed(8, &config, true).unwrap().trace.unwrap();
    assert_ne!(a, b);
}

#[test]
fn tracing_changes_nothing_but_the_trace() {
    let config = Config::default();
    for seed in 0..50 {
        let quiet = run_seed(seed, &config, false).unwrap();
        let loud = run_seed(seed, &config, true).unwrap();
        assert!(quiet.trace.is_none());
        assert_eq!(quiet.events, loud.events, "seed {seed}");
        assert_eq!(quiet.charges(), loud.charges(), "seed {seed}");
        assert_eq!(quiet.history, loud.history, "seed {seed}");
        assert_eq!(quiet.exercised, loud.exercised, "seed {seed}");
    }
}

#[test]
fn an_exploration_summary_is_the_same_every_time() {
    let config = Config::default();
    let a = explore(100, 200, &config, |_| {}).unwrap();
    let b = explore(100, 200, &config, |_| {}).unwrap();
    assert_eq!(a.to_string(), b.to_string());
    assert_eq!(a.runs, 200);
}

#[test]
fn every_attempt_ends_exactly_once() {
    let config = Config::default();
    assert!(config.shape.faults.has(idem_sim::FaultKind::Broker));
    for seed in 0..100 {
        let report = run_seed(seed, &config, true).unwrap();
        let trace = report.trace.unwrap();
        let ended = trace
            .lines()
            .filter(|line| line.contains(" done: "))
            .count();
        let crashed = trace
            .lines()
            .filter(|line| line.contains(" crashes ("))
            .count();
        // Every client's try and every delivery of a message is an attempt.
        assert_eq!(
            ended + crashed,
            (report.requests + report.broker.deliveries) as usize,
            "seed {seed}: an attempt ended twice or never"
        );
    }
}
