//! `idem-sim`: the article's table on simulated time, seeded exploration under faults, and
//! the replay of one seed. Run with no arguments, it prints the table and a short
//! exploration: the project's main job.

mod cli;
mod commands;

use std::process::ExitCode;

/// The binary's allocator: a run allocates and frees its history, records and labels by the
/// hundred, and with mimalloc it takes about four fifths of the time it takes with the
/// system's allocator (MODEL.md, "Simulation"; the library leaves the choice to its users).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::error::ErrorKind;
use idem_sim::Config;

use cli::{Command, parse, usage_error};
use commands::{default_jobs, replay, run_explore, table};

/// Seeds explored by the main job (no arguments): under a second in a release build.
const MAIN_SEEDS: u64 = 10_000;

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
    let ok = match command {
        Command::Table { trace } => table(trace),
        Command::Explore {
            from,
            seeds,
            config,
            jobs,
        } => run_explore(from, seeds, &config, jobs.unwrap_or_else(default_jobs)),
        Command::Replay { seed, config } => replay(seed, &config),
        Command::Main => {
            let table_ok = table(false);
            println!();
            run_explore(0, MAIN_SEEDS, &Config::default(), default_jobs()) && table_ok
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
