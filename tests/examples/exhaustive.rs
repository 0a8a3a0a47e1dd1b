//! Walks the exhaustive model's correct-store scenarios for 2 or 3 callers and prints each
//! one's counts (MODEL.md, "The exhaustive model"):
//!
//! ```text
//! cargo run -p idem-tests --release --example exhaustive -- --callers 3 [--threads N]
//! ```
//!
//! `--store-faults N` sets every model's budget of store faults, `--only TEXT` walks only the
//! models whose name holds `TEXT`.

use idem_tests::exhaustive::Model;

fn main() {
    let mut callers = 2;
    let mut threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut faults = None;
    let mut only = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        let number = value.as_deref().and_then(|v| v.parse::<usize>().ok());
        match (arg.as_str(), number) {
            ("--callers", Some(n)) if (2..=3).contains(&n) => callers = n,
            ("--threads", Some(n)) if n > 0 => threads = n,
            ("--store-faults", Some(n)) => faults = u8::try_from(n).ok(),
            ("--only", _) if value.is_some() => only = value,
            _ => {
                eprintln!(
                    "usage: exhaustive [--callers 2|3] [--threads N] [--store-faults N] [--only TEXT]"
                );
                std::process::exit(2);
            }
        }
    }
    let models = match Model::correct(callers) {
        Ok(models) => models,
        Err(error) => {
            eprintln!("the model's options are invalid: {error}");
            std::process::exit(2);
        }
    };
    let mut failed = false;
    let (mut states, mut runs) = (0, 0);
    let started = std::time::Instant::now();
    for mut model in models {
        if only
            .as_ref()
            .is_some_and(|text| !model.name.contains(text.as_str()))
        {
            continue;
        }
        if let Some(faults) = faults {
            model.budget.store_faults = faults;
        }
        let report = model.check(threads);
        println!("{report}");
        states += report.walked.states;
        runs += report.walked.runs;
        if let Some((_, counterexample)) = &report.walked.counterexample {
            println!("{counterexample}");
            failed = true;
        }
    }
    println!(
        "total: {states} states, {runs} runs, {:.1} s on {threads} threads",
        started.elapsed().as_secs_f64()
    );
    if failed {
        std::process::exit(1);
    }
}
