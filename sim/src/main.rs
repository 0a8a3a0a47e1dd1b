//! `idem-sim`: the article's table on simulated time, seeded exploration under faults, and
//! the replay of one seed. Run with no arguments, it prints the table and a short
//! exploration: the project's main job.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use idem_sim::{Config, FaultKind, Faults, SCENARIOS, Shape, Variant, explore, run_seed};
use indicatif::{ProgressBar, ProgressStyle};

const USAGE: &str = "\
idem-sim: a seeded deterministic simulation of idem under faults

USAGE:
    idem-sim                      the table, then explore --seeds 10000
    idem-sim table [--trace]      the article's scenarios on simulated time
    idem-sim table --redis URL    the same scenarios through the driver on a real Redis
    idem-sim bench --redis URL [--concurrency N[,N...]] [--window-ms MS] [--json]
                                  idem on Redis against raw PING and the adapter's own
                                  scripts, at concurrency 1, 64 and 256 by default
    idem-sim explore --seeds N [--from S] [RUN OPTIONS]
                                  run seeds S..S+N and print a summary
    idem-sim replay --seed S [RUN OPTIONS]
                                  the full event trace of one run
    idem-sim help                 this text

RUN OPTIONS:
    --callers N        clients per run (default 8)
    --keys N           keys per operation (default 3)
    --faults LIST      comma-separated faults to switch on (default all):
                       network, outage, crash, pause, slow, failure, key-reuse,
                       retention, retries, skew, abandon, panic, corrupt; or all, none
    --without LIST     faults to switch off
    --variant NAME     a DELIBERATELY BROKEN store or driver, for checking the checker:
                       stores: result-cache, complete-without-owner-check,
                       release-without-owner-check, renew-without-owner-check,
                       caller-clock-expiry, cached-failure, key-only-lookup,
                       late-complete-in-time, pending-without-lease,
                       reserve-forgets-owner, truncated-keys, corrupt-read-as-absent;
                       drivers: release-on-abandon, panic-releases, corrupt-fails-open
                       (default: correct)

EXIT STATUS: 0 all checks hold, 1 a violation or a table mismatch, 2 bad arguments.";

/// Seeds explored by the main job (no arguments): under a second in a release build.
const MAIN_SEEDS: u64 = 10_000;

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Main,
    Help,
    Table {
        trace: bool,
    },
    #[cfg(feature = "redis")]
    RedisTable {
        url: String,
    },
    #[cfg(feature = "redis")]
    Bench {
        args: Vec<String>,
    },
    Explore {
        from: u64,
        seeds: u64,
        config: Config,
    },
    Replay {
        seed: u64,
        config: Config,
    },
}

/// A command line that cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArgError(String);

fn number(flag: &str, value: Option<&String>) -> Result<u64, ArgError> {
    let value = value.ok_or_else(|| ArgError(format!("{flag} needs a value")))?;
    value
        .parse()
        .map_err(|_| ArgError(format!("{flag} needs a whole number, not {value:?}")))
}

fn parse(args: &[String]) -> Result<Command, ArgError> {
    let Some((sub, rest)) = args.split_first() else {
        return Ok(Command::Main);
    };
    #[cfg(feature = "redis")]
    if sub == "bench" {
        // The bench parses its own arguments (`idem_sim::bench::parse_args`).
        return Ok(Command::Bench {
            args: rest.to_vec(),
        });
    }
    #[cfg(feature = "redis")]
    let mut redis_url = None;
    let mut trace = false;
    let mut seeds = None;
    let mut from = 0;
    let mut seed = None;
    let mut config = Config::default();
    let mut shape = Shape::default();
    let mut i = 0;
    while i < rest.len() {
        let flag = rest[i].as_str();
        let value = rest.get(i + 1);
        i += 2;
        match (sub.as_str(), flag) {
            (_, "-h" | "--help") => return Ok(Command::Help),
            ("table", "--trace") => {
                trace = true;
                i -= 1;
            }
            #[cfg(feature = "redis")]
            ("table", "--redis") => {
                let url = value.ok_or_else(|| ArgError("--redis needs a URL".into()))?;
                redis_url = Some(url.clone());
            }
            ("explore", "--seeds") => seeds = Some(number(flag, value)?),
            ("explore", "--from") => from = number(flag, value)?,
            ("replay", "--seed") => seed = Some(number(flag, value)?),
            ("explore" | "replay", "--callers") => {
                shape.callers = u32::try_from(number(flag, value)?)
                    .ok()
                    .filter(|n| (1..=1_000).contains(n))
                    .ok_or_else(|| ArgError("--callers must be 1..=1000".into()))?;
            }
            ("explore" | "replay", "--keys") => {
                shape.keys = u32::try_from(number(flag, value)?)
                    .ok()
                    .filter(|n| (1..=1_000).contains(n))
                    .ok_or_else(|| ArgError("--keys must be 1..=1000".into()))?;
            }
            ("explore" | "replay", "--faults") => {
                let list = value.ok_or_else(|| ArgError("--faults needs a list".into()))?;
                shape.faults = Faults::parse_list(list).map_err(|e| ArgError(e.to_string()))?;
            }
            ("explore" | "replay", "--without") => {
                let list = value.ok_or_else(|| ArgError("--without needs a list".into()))?;
                for name in list.split(',').filter(|s| !s.is_empty()) {
                    let kind: FaultKind = name
                        .parse()
                        .map_err(|e: idem_sim::UnknownName| ArgError(e.to_string()))?;
                    shape.faults = shape.faults.without(kind);
                }
            }
            ("explore" | "replay", "--variant") => {
                let name = value.ok_or_else(|| ArgError("--variant needs a name".into()))?;
                config.variant = name
                    .parse::<Variant>()
                    .map_err(|e| ArgError(e.to_string()))?;
            }
            _ => return Err(ArgError(format!("unknown argument {flag:?} for {sub:?}"))),
        }
    }
    config.shape = shape;
    match sub.as_str() {
        "help" | "-h" | "--help" => Ok(Command::Help),
        #[cfg(feature = "redis")]
        "table" if redis_url.is_some() => {
            if trace {
                return Err(ArgError("--trace is for the simulated table".into()));
            }
            Ok(Command::RedisTable {
                url: redis_url.unwrap_or_default(),
            })
        }
        "table" => Ok(Command::Table { trace }),
        "explore" => Ok(Command::Explore {
            from,
            seeds: seeds.ok_or_else(|| ArgError("explore needs --seeds N".into()))?,
            config,
        }),
        "replay" => Ok(Command::Replay {
            seed: seed.ok_or_else(|| ArgError("replay needs --seed S".into()))?,
            config,
        }),
        other => Err(ArgError(format!("unknown command {other:?}"))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(ArgError(message)) => {
            eprintln!("idem-sim: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let ok = match command {
        Command::Help => {
            println!("{USAGE}");
            true
        }
        Command::Table { trace } => table(trace),
        #[cfg(feature = "redis")]
        Command::RedisTable { url } => redis_table(&url),
        #[cfg(feature = "redis")]
        Command::Bench { args } => return idem_sim::bench::main(&args),
        Command::Explore {
            from,
            seeds,
            config,
        } => run_explore(from, seeds, &config),
        Command::Replay { seed, config } => replay(seed, &config),
        Command::Main => {
            let table_ok = table(false);
            println!();
            run_explore(0, MAIN_SEEDS, &Config::default()) && table_ok
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Prints one row of the table and, if it differs from the article's, what was expected;
/// true when it matches.
fn print_row(scenario: &idem_sim::Scenario, row: &idem_sim::RowResult) -> bool {
    println!("{}", row.line(scenario));
    let matches = row.matches(scenario);
    if !matches {
        println!(
            "  MISMATCH: expected responses=[{}] charges=[{}]",
            scenario.expected_responses.join(", "),
            scenario.expected_charges.join(", ")
        );
    }
    matches
}

/// Prints every row; true when each matches its expectation and passes every check.
fn table(trace: bool) -> bool {
    let mut ok = true;
    for scenario in SCENARIOS {
        match scenario.simulate(trace) {
            Ok((row, report)) => {
                ok &= print_row(scenario, &row);
                // The result cache is the deliberately broken row: its second charge is
                // the violation the table exists to show.
                if scenario.store != idem_sim::TableStore::ResultCache {
                    for violation in &report.violations {
                        ok = false;
                        println!("  violation: {violation}");
                    }
                }
                if let Some(text) = report.trace {
                    print!("{text}");
                }
            }
            Err(err) => {
                ok = false;
                println!("{}: {err}", scenario.label);
            }
        }
    }
    ok
}

/// The table through the driver on a real Redis; true when every row matches.
#[cfg(feature = "redis")]
fn redis_table(url: &str) -> bool {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            println!("table --redis: cannot start the runtime: {err}");
            return false;
        }
    };
    match runtime.block_on(idem_sim::redis_table::run(url)) {
        Ok(rows) => {
            let mut ok = true;
            for (scenario, row) in rows {
                ok &= print_row(scenario, &row);
            }
            ok
        }
        Err(err) => {
            println!("table --redis: {err}");
            false
        }
    }
}

fn run_explore(from: u64, seeds: u64, config: &Config) -> bool {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(seeds);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {per_sec} eta {eta}")
        {
            bar.set_style(style);
        }
        bar
    });
    let started = Instant::now();
    let result = explore(from, seeds, config, |seed| {
        if let Some(bar) = &bar
            && (seed - from) % 256 == 255
        {
            bar.inc(256);
        }
    });
    let wall = started.elapsed().as_secs_f64();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    match result {
        Ok(summary) => {
            println!(
                "explore: seeds {from}..{}, {} callers, {} keys, variant {}",
                from.saturating_add(seeds),
                config.shape.callers,
                config.shape.keys,
                config.variant.name()
            );
            println!("{summary}");
            let per_sec = |n: u64| if wall > 0.0 { n as f64 / wall } else { 0.0 };
            println!(
                "wall: {wall:.2}s, {:.0} seeds/s, {:.0} simulated requests/s",
                per_sec(summary.runs),
                per_sec(summary.requests)
            );
            if let Some(seed) = summary.failing_seeds.first() {
                println!(
                    "replay the first: idem-sim replay --seed {seed} {}",
                    run_options(config)
                );
            }
            summary.failing_seeds.is_empty()
        }
        Err(err) => {
            println!("explore: {err}");
            false
        }
    }
}

/// The run options that reproduce `config`, as `replay` takes them.
fn run_options(config: &Config) -> String {
    let faults: Vec<&str> = FaultKind::ALL
        .into_iter()
        .filter(|kind| config.shape.faults.has(*kind))
        .map(FaultKind::name)
        .collect();
    format!(
        "--callers {} --keys {} --faults {} --variant {}",
        config.shape.callers,
        config.shape.keys,
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(",")
        },
        config.variant.name()
    )
}

fn replay(seed: u64, config: &Config) -> bool {
    match run_seed(seed, config, true) {
        Ok(report) => {
            print!("{}", report.trace.unwrap_or_default());
            println!(
                "seed {seed}: {} requests, {} effects, {} extra",
                report.requests,
                report.effects,
                report.extra.total()
            );
            for violation in &report.violations {
                println!("violation: {violation}");
            }
            report.violations.is_empty()
        }
        Err(err) => {
            println!("replay: {err}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn command_lines_parse_or_are_refused() {
        assert_eq!(parse(&args("")), Ok(Command::Main));
        assert_eq!(parse(&args("table")), Ok(Command::Table { trace: false }));
        assert_eq!(
            parse(&args("table --trace")),
            Ok(Command::Table { trace: true })
        );
        let Ok(Command::Explore {
            from,
            seeds,
            config,
        }) = parse(&args(
            "explore --seeds 10 --from 5 --callers 3 --without skew,crash",
        ))
        else {
            panic!("explore did not parse");
        };
        assert_eq!((from, seeds, config.shape.callers), (5, 10, 3));
        assert!(!config.shape.faults.has(FaultKind::Skew));
        assert!(config.shape.faults.has(FaultKind::Pause));
        let Ok(Command::Replay { seed, config }) =
            parse(&args("replay --seed 7 --variant result-cache"))
        else {
            panic!("replay did not parse");
        };
        assert_eq!((seed, config.variant), (7, Variant::ResultCache));
        assert_eq!(
            parse(&args("table --redis redis://127.0.0.1:6379")),
            Ok(Command::RedisTable {
                url: "redis://127.0.0.1:6379".into()
            })
        );
        assert_eq!(
            parse(&args("bench --redis u --json")),
            Ok(Command::Bench {
                args: args("--redis u --json")
            })
        );
        // The options printed for a failing seed parse back to the same run.
        let mut config = Config::default();
        config.shape.callers = 5;
        config.shape.faults = Faults::none().with(FaultKind::Pause);
        config.variant = Variant::CachedFailure;
        let line = format!("replay --seed 9 {}", run_options(&config));
        assert_eq!(parse(&args(&line)), Ok(Command::Replay { seed: 9, config }));
        let none = Config {
            shape: Shape {
                faults: Faults::none(),
                ..Shape::default()
            },
            ..Config::default()
        };
        let line = format!("replay --seed 1 {}", run_options(&none));
        assert_eq!(
            parse(&args(&line)),
            Ok(Command::Replay {
                seed: 1,
                config: none
            })
        );
        for bad in [
            "explore",
            "explore --seeds",
            "explore --seeds ten",
            "explore --seeds 1 --callers 0",
            "explore --seeds 1 --faults gremlins",
            "replay --seed 1 --variant nope",
            "replay",
            "frobnicate",
            "table --seeds 3",
            "table --redis",
            "table --trace --redis redis://127.0.0.1:1",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }
}
