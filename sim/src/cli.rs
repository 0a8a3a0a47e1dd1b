//! The command line: its commands and run options (faults and variants listed from their
//! catalogues), parsed into a [`Command`], and usage errors as the tool prints them.

use std::num::NonZeroUsize;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use idem_sim::{Config, FaultKind, Faults, Provider, Shape, Variant};

const EXIT_STATUS: &str =
    "EXIT STATUS: 0 all checks hold, 1 a violation or a table mismatch, 2 bad arguments.";

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "idem-sim",
    version,
    about = "A seeded deterministic simulation of idem under faults",
    long_about = "A seeded deterministic simulation of idem under faults.\n\n\
        With no command, the project's main job: the article's table on simulated time, then \
        10,000 seeds under every fault. The same rows on a real Redis, and the Redis bench, \
        are idem-bench's.",
    override_usage = "idem-sim                      the table, then explore --seeds 10000\n       \
        idem-sim table [--trace]      the article's scenarios on simulated time\n       \
        idem-sim explore --seeds N [--from S] [RUN OPTIONS]\n       \
        idem-sim replay --seed S [RUN OPTIONS]",
    after_help = EXIT_STATUS
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Sub {
    /// The article's scenarios on simulated time (on a real Redis: idem-bench table)
    #[command(after_help = EXIT_STATUS)]
    Table {
        /// Print each row's full event trace
        #[arg(long)]
        trace: bool,
    },
    /// Run seeds S..S+N and print a summary
    #[command(after_help = EXIT_STATUS)]
    Explore {
        /// How many seeds to run
        #[arg(long, value_name = "N")]
        seeds: u64,
        /// The first seed
        #[arg(long, value_name = "S", default_value_t = 0)]
        from: u64,
        /// Threads to run seeds on (default: one per core); the summary is the same for any number
        #[arg(long, value_name = "N")]
        jobs: Option<NonZeroUsize>,
        #[command(flatten)]
        run: RunOptions,
    },
    /// The full event trace of one run
    #[command(after_help = EXIT_STATUS)]
    Replay {
        /// The seed to run
        #[arg(long, value_name = "S")]
        seed: u64,
        #[command(flatten)]
        run: RunOptions,
    },
}

/// What each run of `explore` and `replay` looks like.
#[derive(Debug, Args)]
#[command(next_help_heading = "Run options")]
pub(crate) struct RunOptions {
    /// Clients per run
    #[arg(
        long,
        value_name = "N",
        default_value_t = Shape::default().callers,
        value_parser = clap::value_parser!(u32).range(1..=1_000)
    )]
    callers: u32,
    /// Keys per operation
    #[arg(
        long,
        value_name = "N",
        default_value_t = Shape::default().keys,
        value_parser = clap::value_parser!(u32).range(1..=1_000)
    )]
    keys: u32,
    /// Comma-separated faults to switch on (default all)
    #[arg(long, value_name = "LIST", value_parser = faults, long_help = faults_help())]
    faults: Option<Faults>,
    /// Comma-separated faults to switch off
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = fault)]
    without: Vec<FaultKind>,
    /// A DELIBERATELY BROKEN store or driver, for checking the checker (default: correct)
    #[arg(long, value_name = "NAME", value_parser = variant, long_help = variant_help())]
    variant: Option<Variant>,
    /// What the provider makes of the requests it gets (MODEL.md D1): `plain` (every request
    /// an effect) or `keyed` (one effect per downstream key)
    #[arg(long, value_name = "NAME", value_parser = provider, default_value = "plain")]
    provider: Provider,
}

pub(crate) fn faults(list: &str) -> Result<Faults, String> {
    Faults::parse_list(list).map_err(|e| e.to_string())
}

pub(crate) fn fault(name: &str) -> Result<FaultKind, String> {
    name.parse()
        .map_err(|e: idem_sim::UnknownName| e.to_string())
}

pub(crate) fn provider(name: &str) -> Result<Provider, String> {
    name.parse()
        .map_err(|e: idem_sim::UnknownName| e.to_string())
}

pub(crate) fn variant(name: &str) -> Result<Variant, String> {
    name.parse()
        .map_err(|e: idem_sim::UnknownName| e.to_string())
}

pub(crate) fn faults_help() -> String {
    let names: Vec<&str> = FaultKind::ALL.into_iter().map(FaultKind::name).collect();
    format!(
        "Comma-separated faults to switch on (default all):\n{}\nor all, none",
        lines(&names)
    )
}

pub(crate) fn variant_help() -> String {
    let names = |driver: bool| {
        Variant::ALL
            .into_iter()
            .filter(|v| *v != Variant::Correct && v.is_driver() == driver)
            .map(Variant::name)
            .collect::<Vec<_>>()
    };
    format!(
        "A DELIBERATELY BROKEN store or driver, for checking the checker (default: correct).\n\
         stores:\n{}\ndrivers:\n{}",
        lines(&names(false)),
        lines(&names(true))
    )
}

/// `names`, comma-separated, on lines of at most 72 characters.
pub(crate) fn lines(names: &[&str]) -> String {
    let mut out = String::new();
    let mut line = 0;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let word = if last {
            (*name).to_owned()
        } else {
            format!("{name},")
        };
        if line > 0 && line + 1 + word.len() > 72 {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        line += word.len();
        out.push_str(&word);
    }
    out
}

impl RunOptions {
    fn config(&self) -> Config {
        let mut faults = self.faults.unwrap_or_default();
        for kind in &self.without {
            faults = faults.without(*kind);
        }
        Config {
            shape: Shape {
                callers: self.callers,
                keys: self.keys,
                faults,
            },
            variant: self.variant.unwrap_or_default(),
            provider: self.provider,
        }
    }
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Main,
    Table {
        trace: bool,
    },
    Explore {
        from: u64,
        seeds: u64,
        config: Config,
        jobs: Option<NonZeroUsize>,
    },
    Replay {
        seed: u64,
        config: Config,
    },
}

/// Parses the arguments after the program's name.
pub(crate) fn parse(args: &[String]) -> Result<Command, clap::Error> {
    let program = std::iter::once("idem-sim".to_owned());
    let matches = Cli::command().try_get_matches_from(program.chain(args.iter().cloned()))?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok(match cli.command {
        None => Command::Main,
        Some(Sub::Table { trace }) => Command::Table { trace },
        Some(Sub::Explore {
            seeds,
            from,
            jobs,
            run,
        }) => Command::Explore {
            from,
            seeds,
            config: run.config(),
            jobs,
        },
        Some(Sub::Replay { seed, run }) => Command::Replay {
            seed,
            config: run.config(),
        },
    })
}

/// A usage error as this tool prints it: `idem-sim: ` and clap's message (with its tips),
/// then the usage of the command that was given, or of them all.
pub(crate) fn usage_error(err: &clap::Error, args: &[String]) -> String {
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
            format!("idem-sim {} --help", sub.get_name()),
        ),
        None => (command.render_usage(), "idem-sim --help".to_owned()),
    };
    let usage = usage.to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    format!(
        "idem-sim: {}\n\nUSAGE: {usage}\n\nFor more, run {help}.",
        message.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run_options;
    use clap::error::ErrorKind;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn command_lines_parse_or_are_refused() {
        assert_eq!(parse(&args("")).ok(), Some(Command::Main));
        assert_eq!(
            parse(&args("table")).ok(),
            Some(Command::Table { trace: false })
        );
        assert_eq!(
            parse(&args("table --trace")).ok(),
            Some(Command::Table { trace: true })
        );
        let Ok(Command::Explore {
            from,
            seeds,
            config,
            jobs,
        }) = parse(&args(
            "explore --seeds 10 --from 5 --callers 3 --without skew,crash",
        ))
        else {
            panic!("explore did not parse");
        };
        assert_eq!((from, seeds, config.shape.callers), (5, 10, 3));
        assert_eq!(jobs, None);
        let Ok(Command::Explore { jobs, .. }) = parse(&args("explore --seeds 10 --jobs 3")) else {
            panic!("explore --jobs did not parse");
        };
        assert_eq!(jobs, NonZeroUsize::new(3));
        assert!(parse(&args("explore --seeds 10 --jobs 0")).is_err());
        assert_eq!(config.shape.keys, Shape::default().keys);
        assert!(!config.shape.faults.has(FaultKind::Skew));
        assert!(!config.shape.faults.has(FaultKind::Crash));
        assert!(config.shape.faults.has(FaultKind::Pause));
        assert_eq!(config.variant, Variant::Correct);
        let Ok(Command::Replay { seed, config }) =
            parse(&args("replay --seed 7 --variant result-cache"))
        else {
            panic!("replay did not parse");
        };
        assert_eq!((seed, config.variant), (7, Variant::ResultCache));
        assert_eq!(config.shape, Shape::default());
        // `--without` takes faults off the list `--faults` gives.
        let Ok(Command::Replay { config, .. }) = parse(&args(
            "replay --seed 1 --faults pause,crash --without crash",
        )) else {
            panic!("replay did not parse");
        };
        assert_eq!(config.shape.faults, Faults::none().with(FaultKind::Pause));
        // The options printed for a failing seed parse back to the same run.
        let mut config = Config::default();
        config.shape.callers = 5;
        config.shape.faults = Faults::none().with(FaultKind::Pause);
        config.variant = Variant::CachedFailure;
        let line = format!("replay --seed 9 {}", run_options(&config));
        assert_eq!(
            parse(&args(&line)).ok(),
            Some(Command::Replay { seed: 9, config })
        );
        let none = Config {
            shape: Shape {
                faults: Faults::none(),
                ..Shape::default()
            },
            ..Config::default()
        };
        let line = format!("replay --seed 1 {}", run_options(&none));
        assert_eq!(
            parse(&args(&line)).ok(),
            Some(Command::Replay {
                seed: 1,
                config: none
            })
        );
        for bad in [
            "explore",
            "explore --seeds",
            "explore --seeds ten",
            "explore --seeds 1 --callers 0",
            "explore --seeds 1 --callers 1001",
            "explore --seeds 1 --faults gremlins",
            "explore --seeds 1 --without gremlins",
            "replay --seed 1 --variant nope",
            "replay",
            "frobnicate",
            "table --seeds 3",
            "table --redis redis://127.0.0.1:1",
        ] {
            let err = parse(&args(bad)).expect_err(bad);
            assert!(
                !matches!(
                    err.kind(),
                    ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                ),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_usage_error_names_the_tool_the_fault_and_the_usage_of_its_command() {
        let line = args("explore --seeds 1 --faults gremlins");
        let err = parse(&line).expect_err("an unknown fault");
        let text = usage_error(&err, &line);
        assert!(text.starts_with("idem-sim: "), "{text}");
        assert!(
            text.contains("gremlins") && text.contains("known: "),
            "{text}"
        );
        assert!(text.contains("USAGE: idem-sim explore"), "{text}");
        assert!(text.contains("idem-sim explore --help"), "{text}");
        let line = args("jump");
        let text = usage_error(&parse(&line).expect_err("no such command"), &line);
        assert!(text.contains("'jump'"), "{text}");
        assert!(
            text.contains("USAGE: idem-sim ") && text.contains("idem-sim replay --seed S"),
            "{text}"
        );
    }
}
