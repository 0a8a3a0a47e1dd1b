//! `idem-bench`: idem on real stores. `table` runs the article's scenarios through the
//! driver and compares every row with the simulated one; `bench` measures idem's calls
//! against the least work each could do, in the same run.

use std::process::ExitCode;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use idem_bench::redis::bench::compare::{self, CompareConfig};
use idem_bench::redis::bench::{self, BenchConfig, CallsPhase};
use idem_bench::redis::table;

const EXIT_STATUS: &str =
    "EXIT STATUS: 0 done (every row matches), 1 a row differs or the run failed, 2 bad arguments.";

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "idem-bench",
    version,
    about = "idem on real stores: the article's table and the throughput bench",
    override_usage = "idem-bench table --redis URL\n       \
        idem-bench bench --redis URL [--concurrency N[,N...]] [--window-ms MS] [--json]\n       \
        idem-bench calls --redis URL --phase raw_fresh|fresh --calls N [--concurrency N]\n       \
        idem-bench compare --redis URL [--concurrency N[,N...]] [--rounds N] [--calls N]",
    after_help = EXIT_STATUS,
    arg_required_else_help = false
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// The article's scenarios on a real store, each row checked against the simulated one
    #[command(after_help = EXIT_STATUS)]
    Table {
        /// The Redis server (standalone), e.g. redis://127.0.0.1:6379
        #[arg(long, value_name = "URL")]
        redis: String,
    },
    /// idem's calls on a real store against raw PING and the store's own commands
    #[command(after_help = EXIT_STATUS)]
    Bench {
        /// The Redis server (standalone), e.g. redis://127.0.0.1:6379
        #[arg(long, value_name = "URL")]
        redis: String,
        /// Concurrency levels, each measured in full (repeatable or comma-separated)
        #[arg(
            long,
            value_name = "N",
            value_delimiter = ',',
            default_values_t = BenchConfig::default().concurrency,
            value_parser = RangedU64ValueParser::<usize>::new().range(1..)
        )]
        concurrency: Vec<usize>,
        /// How long each phase runs, in milliseconds
        #[arg(
            long,
            value_name = "MS",
            default_value_t = 2_000,
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        window_ms: u64,
        /// Also print one JSON object, as the last line
        #[arg(long)]
        json: bool,
    },
    /// Exactly N calls of one phase and nothing else: run under callgrind to count what a
    /// call costs the client
    #[command(after_help = EXIT_STATUS)]
    Calls {
        /// The Redis server (standalone), e.g. redis://127.0.0.1:6379
        #[arg(long, value_name = "URL")]
        redis: String,
        /// raw_fresh (the store's two commands) or fresh (`Coordinator::execute`)
        #[arg(long, value_name = "PHASE", value_parser = ["raw_fresh", "fresh"])]
        phase: String,
        /// How many calls
        #[arg(long, value_name = "N")]
        calls: u64,
        /// Calls at once
        #[arg(
            long,
            value_name = "N",
            default_value_t = 64,
            value_parser = RangedU64ValueParser::<usize>::new().range(1..)
        )]
        concurrency: usize,
    },
    /// Fresh calls against the store's own two commands, alternated in rounds: the median
    /// and pooled ratio of fresh to raw_fresh at each concurrency
    #[command(after_help = EXIT_STATUS)]
    Compare {
        /// The Redis server (standalone), e.g. redis://127.0.0.1:6379
        #[arg(long, value_name = "URL")]
        redis: String,
        /// Concurrency levels, each compared in full (repeatable or comma-separated)
        #[arg(
            long,
            value_name = "N",
            value_delimiter = ',',
            default_values_t = CompareConfig::default().concurrency,
            value_parser = RangedU64ValueParser::<usize>::new().range(1..)
        )]
        concurrency: Vec<usize>,
        /// Rounds at each level, each running both phases (the order reversed every round)
        #[arg(
            long,
            value_name = "N",
            default_value_t = CompareConfig::default().rounds,
            value_parser = RangedU64ValueParser::<usize>::new().range(1..)
        )]
        rounds: usize,
        /// Calls of each phase in each round
        #[arg(
            long,
            value_name = "N",
            default_value_t = CompareConfig::default().calls,
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        calls: u64,
    },
}

/// What the command line asked for.
#[derive(Debug, Clone)]
enum Command {
    Table {
        url: String,
    },
    Bench {
        config: BenchConfig,
        json: bool,
    },
    Calls {
        url: String,
        phase: CallsPhase,
        concurrency: usize,
        calls: u64,
    },
    Compare {
        config: CompareConfig,
    },
}

/// Parses the arguments after the program's name.
fn parse(args: &[String]) -> Result<Command, clap::Error> {
    let program = std::iter::once("idem-bench".to_owned());
    let matches = Cli::command().try_get_matches_from(program.chain(args.iter().cloned()))?;
    Ok(match Cli::from_arg_matches(&matches)?.command {
        Sub::Table { redis } => Command::Table { url: redis },
        Sub::Bench {
            redis,
            mut concurrency,
            window_ms,
            json,
        } => {
            concurrency.sort_unstable();
            concurrency.dedup();
            let config = BenchConfig {
                url: redis,
                concurrency,
                window: Duration::from_millis(window_ms),
            };
            Command::Bench { config, json }
        }
        Sub::Calls {
            redis,
            phase,
            calls,
            concurrency,
        } => Command::Calls {
            url: redis,
            phase: if phase == "fresh" {
                CallsPhase::Fresh
            } else {
                CallsPhase::RawFresh
            },
            concurrency,
            calls,
        },
        Sub::Compare {
            redis,
            mut concurrency,
            rounds,
            calls,
        } => {
            concurrency.sort_unstable();
            concurrency.dedup();
            Command::Compare {
                config: CompareConfig {
                    url: redis,
                    concurrency,
                    rounds,
                    calls,
                },
            }
        }
    })
}

/// A usage error as this tool prints it: `idem-bench: ` and clap's message (with its tips),
/// then the usage of the command that was given, or of them all.
fn usage_error(err: &clap::Error, args: &[String]) -> String {
    let text = err.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let message = text
        .split("\n\n")
        .filter(|part| !part.starts_with("Usage:") && !part.starts_with("For more information"))
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut command = Cli::command();
    command.build();
    let sub = args.iter().find_map(|arg| {
        command
            .find_subcommand(arg)
            .map(|sub| sub.get_name().to_owned())
    });
    let (usage, help) = match sub.and_then(|name| command.find_subcommand_mut(&name)) {
        Some(sub) => (
            sub.render_usage(),
            format!("idem-bench {} --help", sub.get_name()),
        ),
        None => (command.render_usage(), "idem-bench --help".to_owned()),
    };
    let usage = usage.to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    format!(
        "idem-bench: {}\n\nUSAGE: {usage}\n\nFor more, run {help}.",
        message.trim_end()
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            // `--help`, `help` and `--version`: printed on stdout, exit status 0.
            return match err.print() {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            };
        }
        Err(err) => {
            eprintln!("{}", usage_error(&err, &args));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("idem-bench: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let ok = match command {
        Command::Table { url } => runtime.block_on(redis_table(&url)),
        Command::Bench { config, json } => runtime.block_on(redis_bench(&config, json)),
        Command::Calls {
            url,
            phase,
            concurrency,
            calls,
        } => runtime.block_on(redis_calls(&url, phase, concurrency, calls)),
        Command::Compare { config } => runtime.block_on(redis_compare(&config)),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The table on Redis, one line per row as `idem-sim table` prints it; true when every row
/// matches.
async fn redis_table(url: &str) -> bool {
    match table::run(url).await {
        Ok(rows) => {
            let mut ok = true;
            for (scenario, row) in rows {
                println!("{}", row.line(scenario));
                if !row.matches(scenario) {
                    ok = false;
                    println!(
                        "  MISMATCH: expected responses=[{}] charges=[{}]",
                        scenario.expected_responses.join(", "),
                        scenario.expected_charges.join(", ")
                    );
                }
            }
            ok
        }
        Err(err) => {
            println!("table --redis: {err}");
            false
        }
    }
}

/// The bench on Redis: the table of phases, and with `json` one JSON object as the last
/// line; true when it ran.
async fn redis_bench(config: &BenchConfig, json: bool) -> bool {
    match bench::run(config).await {
        Ok(report) => {
            print!("{}", report.text());
            if json {
                println!("{}", report.json());
            }
            true
        }
        Err(err) => {
            eprintln!("idem-bench bench: {err}");
            false
        }
    }
}

/// A fixed number of calls of one phase: one line of what ran; true when every call
/// succeeded.
async fn redis_calls(url: &str, phase: CallsPhase, concurrency: usize, calls: u64) -> bool {
    match bench::calls(url, phase, concurrency, calls).await {
        Ok(load) => {
            println!(
                "{phase:?} at {concurrency}: {} calls, {} errors, {:.0}/s, p50 {:?}, p99 {:?}",
                load.calls,
                load.errors,
                load.per_second(),
                load.p50,
                load.p99
            );
            load.errors == 0
        }
        Err(err) => {
            eprintln!("idem-bench calls: {err}");
            false
        }
    }
}

/// Fresh against raw_fresh in alternated rounds: each round, then each level's median and
/// pooled ratio; true when it ran and no call failed.
async fn redis_compare(config: &CompareConfig) -> bool {
    match compare::compare(config).await {
        Ok(levels) => {
            print!("{}", compare::text(&levels));
            levels
                .iter()
                .flat_map(|level| &level.rounds)
                .all(|round| round.raw_fresh.errors == 0 && round.fresh.errors == 0)
        }
        Err(err) => {
            eprintln!("idem-bench compare: {err}");
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
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_arguments_parse_and_refuse_clearly() {
        let Ok(Command::Bench { config, json }) = parse(&args(
            "bench --redis redis://h:1 --concurrency 256,1 --concurrency 64,1 --json",
        )) else {
            panic!("bench did not parse");
        };
        assert_eq!(config.url, "redis://h:1");
        assert_eq!(config.concurrency, vec![1, 64, 256]);
        assert_eq!(config.window, Duration::from_secs(2));
        assert!(json);
        let Ok(Command::Bench { config, json }) =
            parse(&args("bench --redis redis://h:1 --window-ms 150"))
        else {
            panic!("bench did not parse");
        };
        assert_eq!(config.concurrency, vec![1, 64, 256]);
        assert_eq!(config.window, Duration::from_millis(150));
        assert!(!json);
        let Ok(Command::Table { url }) = parse(&args("table --redis redis://h:2")) else {
            panic!("table did not parse");
        };
        assert_eq!(url, "redis://h:2");
        let Ok(Command::Calls {
            url,
            phase,
            concurrency,
            calls,
        }) = parse(&args("calls --redis redis://h:3 --phase fresh --calls 500"))
        else {
            panic!("calls did not parse");
        };
        assert_eq!(
            (url.as_str(), phase, concurrency, calls),
            ("redis://h:3", CallsPhase::Fresh, 64, 500)
        );
        let Ok(Command::Calls {
            phase, concurrency, ..
        }) = parse(&args(
            "calls --redis u --phase raw_fresh --calls 1 --concurrency 8",
        ))
        else {
            panic!("calls did not parse");
        };
        assert_eq!((phase, concurrency), (CallsPhase::RawFresh, 8));
        let Ok(Command::Compare { config }) = parse(&args("compare --redis redis://h:4")) else {
            panic!("compare did not parse");
        };
        let defaults = CompareConfig::default();
        assert_eq!(
            (
                config.url.as_str(),
                config.concurrency,
                config.rounds,
                config.calls
            ),
            (
                "redis://h:4",
                defaults.concurrency,
                defaults.rounds,
                defaults.calls
            )
        );
        let Ok(Command::Compare { config }) = parse(&args(
            "compare --redis u --concurrency 256,64,256 --rounds 3 --calls 1000",
        )) else {
            panic!("compare did not parse");
        };
        assert_eq!(
            (config.concurrency, config.rounds, config.calls),
            (vec![64, 256], 3, 1000)
        );
        for (bad, says) in [
            ("compare --redis u --rounds 0", "--rounds"),
            ("compare --redis u --calls 0", "--calls"),
            ("compare --redis u --concurrency 0", "--concurrency"),
            ("compare --rounds 2", "--redis"),
            ("calls --redis u --phase other --calls 1", "--phase"),
            ("calls --redis u --phase fresh", "--calls"),
            ("bench --concurrency 4", "--redis"),
            ("bench --redis u --concurrency 0", "--concurrency"),
            ("bench --redis u --concurrency x", "--concurrency"),
            ("bench --redis u --window-ms 0", "--window-ms"),
            ("bench --redis u --bogus", "--bogus"),
            ("bench --redis", "--redis"),
            ("table", "--redis"),
            ("table --redis u --json", "--json"),
            ("", "idem-bench"),
        ] {
            let line = args(bad);
            let err = parse(&line).expect_err(bad);
            let text = usage_error(&err, &line);
            assert!(text.starts_with("idem-bench: "), "{bad}: {text}");
            assert!(text.contains(says), "{bad}: {text}");
            assert!(text.contains("USAGE: idem-bench"), "{bad}: {text}");
        }
    }
}
