//! The simulation's rows on a real `redis-server` started by the test: the article's table
//! through the driver (`idem-bench table`), and the bench's command counts
//! (`idem-bench bench`).
//!
//! The server is `idem_tests::redis`'s, the one harness every crate's Redis tests use.

use std::time::Duration;

use idem_bench::redis::bench::{self, BenchConfig, CallsPhase, compare};
use idem_bench::redis::table as redis_table;
use idem_tests::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_article_table_on_redis_matches_the_simulated_one() {
    let server = RedisServer::start();
    let rows = redis_table::run(&server.url())
        .await
        .expect("the table runs");
    assert_eq!(rows.len(), idem_sim::SCENARIOS.len());
    for (scenario, row) in &rows {
        assert!(
            row.matches(scenario),
            "{}\n  expected responses={:?} charges={:?}",
            row.line(scenario),
            scenario.expected_responses,
            scenario.expected_charges
        );
    }
    // The rows that matter most, spelled out: the result cache charges twice while both
    // clients see ch_1; wait and raise charge once.
    let row = |label: &str| &rows.iter().find(|(s, _)| s.label == label).unwrap().1;
    assert_eq!(row("result-cache").charges, ["ch_1", "ch_2"]);
    assert_eq!(row("result-cache").responses, ["ch_1", "ch_1"]);
    assert_eq!(row("wait").charges, ["ch_1"]);
    assert_eq!(row("raise").charges, ["ch_1"]);
    assert_eq!(row("raise").responses[1], "InProgressError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_counts_two_requests_per_fresh_call_and_one_per_replay() {
    let server = RedisServer::start();
    let config = BenchConfig {
        url: server.url(),
        concurrency: vec![1, 8],
        window: Duration::from_millis(150),
    };
    let report = bench::run(&config).await.expect("the bench runs");
    for (concurrency, phases, hot) in &report.levels {
        let phase = |name: &str| phases.iter().find(|p| p.name == name).unwrap();
        for name in [
            "ping",
            "raw_fresh",
            "raw_replay",
            "fresh",
            "replay",
            "one_key",
        ] {
            assert!(
                phase(name).load.calls > 0,
                "{name} at {concurrency} made no calls"
            );
            assert_eq!(phase(name).load.errors, 0, "{name} at {concurrency} failed");
        }
        // Round trips are counted, not timed: exact. The store counts what it sends; the
        // server what it executed for it: a fresh call is the fast reserve's `SET` and the fast
        // complete (`EVALSHA`, and inside it `GET` and `SET`); a replay the fast reserve's `SET`
        // alone.
        assert_eq!(phase("ping").requests_per_call(), 1.0);
        assert_eq!(phase("fresh").requests_per_call(), 2.0);
        assert_eq!(phase("replay").requests_per_call(), 1.0);
        assert_eq!(phase("raw_replay").requests_per_call(), 1.0);
        for (name, executed) in [("fresh", 4), ("replay", 1)] {
            let calls = phase(name).load.calls;
            assert_eq!(
                phase(name).commands.executed(),
                executed * calls,
                "{name} at {concurrency}: {:?}",
                phase(name).commands
            );
        }
        assert_eq!(
            phase("replay").commands.0.get("set").copied(),
            Some(phase("replay").load.calls)
        );
        // One effect per hot key, however many callers shared it.
        assert_eq!(hot.effects, hot.keys, "at concurrency {concurrency}");
    }
    assert!(report.pending_bytes.is_some_and(|b| b > 0));
    assert!(report.completed_bytes.is_some_and(|b| b > 0));
    let json = report.json();
    for field in [
        "fresh_per_s",
        "replay_per_s",
        "commands_per_fresh",
        "commands_per_replay",
        "baseline_ping_per_s",
        "baseline_fresh_per_s",
        "baseline_replay_per_s",
        "fresh_per_s_c1",
        "baseline_ping_per_s_c1",
    ] {
        assert!(json[field].is_number(), "{field} missing from {json}");
    }
    assert_eq!(json["commands_per_fresh"], 2.0);
    assert_eq!(json["commands_per_replay"], 1.0);
}

/// `idem-bench calls`, the harness a call's instructions are counted with, runs exactly the
/// calls it is asked for, each of them a success, in both phases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_harness_runs_exactly_the_calls_asked_for() {
    let server = RedisServer::start();
    for phase in [CallsPhase::RawFresh, CallsPhase::Fresh] {
        let load = bench::calls(&server.url(), phase, 8, 300)
            .await
            .expect("the harness runs");
        assert_eq!((load.calls, load.errors), (300, 0), "{phase:?}");
    }
}

/// `idem-bench compare`, the ratio of fresh calls to the store's two commands, alternates
/// the order of the phases from round to round and runs every round on keys of its own: each
/// call, raw or through the driver, wrote a record of its own (a round on an earlier round's
/// keys would replay, and its raw reserves would fail), and every call succeeded, each raw one
/// under an owner token of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comparison_alternates_the_phases_on_keys_of_each_rounds_own() {
    let server = RedisServer::start();
    let config = compare::CompareConfig {
        url: server.url(),
        concurrency: vec![8],
        rounds: 3,
        calls: 200,
    };
    let levels = compare::compare(&config)
        .await
        .expect("the comparison runs");
    assert_eq!(levels.len(), 1);
    let level = &levels[0];
    assert_eq!(level.concurrency, 8);
    let order: Vec<bool> = level.rounds.iter().map(|r| r.raw_first).collect();
    assert_eq!(order, [true, false, true]);
    for round in &level.rounds {
        assert_eq!((round.raw_fresh.calls, round.raw_fresh.errors), (200, 0));
        assert_eq!((round.fresh.calls, round.fresh.errors), (200, 0));
        assert!(round.ratio().is_some_and(|r| r > 0.0));
    }
    assert!(level.median().is_some() && level.pooled().is_some());
    let client = redis::Client::open(server.url()).expect("a client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let records: u64 = redis::cmd("DBSIZE")
        .query_async(&mut conn)
        .await
        .expect("DBSIZE");
    assert_eq!(records, 3 * 2 * 200, "one record per call");
    // The order the phases really ran in, read from the server: a record expires at its
    // complete's instant plus the retention, so in each round every record of the phase
    // that ran first expires no later than any of the phase that ran second.
    let names: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    let mut pipe = redis::pipe();
    for name in &names {
        pipe.cmd("PEXPIRETIME").arg(name);
    }
    let expiries: Vec<i64> = pipe.query_async(&mut conn).await.expect("PEXPIRETIME");
    for (round, raw_first) in order.iter().enumerate() {
        let span = |phase: &str| {
            let tag = format!(".{round}-{phase}-8-");
            let of_phase: Vec<i64> = names
                .iter()
                .zip(&expiries)
                .filter(|(name, _)| name.contains(&tag))
                .map(|(_, &at)| at)
                .collect();
            assert_eq!(of_phase.len(), 200, "round {round}, {phase}");
            assert!(of_phase.iter().all(|&at| at > 0), "round {round}, {phase}");
            let first = of_phase.iter().copied().min().unwrap_or_default();
            let last = of_phase.iter().copied().max().unwrap_or_default();
            (first, last)
        };
        let (raw, fresh) = (span("raw"), span("fresh"));
        let (earlier, later) = if *raw_first {
            (raw, fresh)
        } else {
            (fresh, raw)
        };
        assert!(
            earlier.1 <= later.0,
            "round {round} (raw first: {raw_first}): the first phase's records expire until {}, the second's from {}",
            earlier.1,
            later.0
        );
    }
    // The raw calls' owner tokens are never used twice in the run, across rounds too.
    let raw_names: Vec<&String> = names.iter().filter(|name| name.contains("-raw-")).collect();
    let mut pipe = redis::pipe();
    for name in &raw_names {
        pipe.cmd("GET").arg(name.as_str());
    }
    let values: Vec<Vec<u8>> = pipe.query_async(&mut conn).await.expect("GET");
    let mut owners: Vec<u128> = values
        .iter()
        .map(|value| {
            idem_redis::codec::decode(value)
                .expect("a record")
                .owner
                .as_u128()
        })
        .collect();
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners.len(), 3 * 200, "one owner token per raw call");
    let text = compare::text(&levels);
    assert!(text.contains("fresh / raw_fresh at 8: median "), "{text}");
}
