//! `idem`: the operator's command for idem's stores.
//!
//! When a payment is stuck "in progress", the person on call asks what the store holds for
//! its key, who holds it, how long its lease has left, and whether the customer may retry
//! now. `idem inspect`, `list`, `release`, `sweep`, `health` and `stats` answer on every store
//! idem has (Redis standalone and Cluster, PostgreSQL, MariaDB, SQLite), reading records
//! through each store's own layout and codec (`idem::admin::AdminStore`) and judging leases by
//! the store's clock. Every subcommand prints JSON with `--json`; text fits 80 columns.
//!
//! Exit codes: 0 done; 1 failed (bad input, a store that failed); 2 refused (a live lease, a
//! completed record without `--completed`, a prompt not confirmed) or a failed health check.

mod args;
mod commands;
mod connect;
mod error;
mod render;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};
use crate::commands::{Confirm, Report};
use crate::connect::with_store;
use crate::error::{CliError, exit};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completions { shell } = &cli.command {
        clap_complete::generate(*shell, &mut Cli::command(), "idem", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(cli.json, &CliError::Io(error)),
    };
    match runtime.block_on(run(&cli)) {
        Ok(report) => {
            let mut out = std::io::stdout().lock();
            let written = if cli.json {
                writeln!(out, "{}", report.json)
            } else {
                writeln!(out, "{}", report.text)
            };
            match written {
                Ok(()) => ExitCode::from(report.code),
                Err(_) => ExitCode::from(exit::FAILED),
            }
        }
        Err(error) => fail(cli.json, &error),
    }
}

async fn run(cli: &Cli) -> Result<Report, CliError> {
    let connected = connect::connect(&cli.store).await?;
    with_store!(&connected, store => match &cli.command {
        Command::Inspect { target, show_body } => {
            let (operation, key) = commands::target(target)?;
            commands::inspect(store, &operation, &key, *show_body).await
        }
        Command::List { operation, all, limit, after } => {
            commands::list(store, operation.as_deref(), *all, *limit, after.clone()).await
        }
        Command::Release { target, force, yes, completed } => {
            let (operation, key) = commands::target(target)?;
            let confirm = Confirm { force: *force, completed: *completed, yes: *yes };
            commands::release(store, &operation, &key, confirm).await
        }
        Command::Sweep { batch } => commands::sweep(store, *batch, cli.json).await,
        Command::Health => commands::health(store).await,
        Command::Stats => commands::stats(store).await,
        Command::Completions { .. } => Err(CliError::Input("handled above".to_owned())),
    })
}

/// Prints `error` (as JSON with `--json`) and gives the failing exit code.
fn fail(json: bool, error: &CliError) -> ExitCode {
    if json {
        println!("{}", serde_json::json!({ "error": error.to_string() }));
    } else {
        eprintln!("{}", render::wrap("idem: ", 6, &error.to_string()));
    }
    ExitCode::from(exit::FAILED)
}
