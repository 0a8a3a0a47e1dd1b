//! The binary: exit statuses and what each command prints.

use std::process::Command;

fn idem_sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem-sim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn table_prints_every_row_and_succeeds() {
    let (code, out, _) = idem_sim(&["table"]);
    assert_eq!(code, 0, "{out}");
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("result-cache"), "{first}");
    assert!(first.contains("responses=[ch_1, ch_1]") && first.contains("charges=[ch_1, ch_2]"));
    assert!(
        out.lines()
            .any(|l| l.starts_with("wait") && l.contains("charges=[ch_1]"))
    );
    assert!(!out.contains("MISMATCH"), "{out}");
}

#[test]
fn explore_prints_a_summary_and_fails_on_a_broken_store() {
    let (code, out, _) = idem_sim(&["explore", "--seeds", "50", "--from", "10"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("runs: 50") && out.contains("violations: 0"),
        "{out}"
    );
    assert!(out.contains("seeds/s"), "{out}");
    let (code, out, _) = idem_sim(&["explore", "--seeds", "100", "--variant", "result-cache"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("violated I7 "), "{out}");
    // A broken driver is chosen the same way.
    let (code, out, _) = idem_sim(&[
        "explore",
        "--seeds",
        "100",
        "--variant",
        "release-on-abandon",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("R11 dropped-action-keeps-key"), "{out}");
    assert!(out.contains("--variant release-on-abandon"), "{out}");
}

#[test]
fn replay_prints_the_trace_of_one_seed() {
    let (code, out, _) = idem_sim(&["replay", "--seed", "3"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("sends #1 reserve") && out.contains("store applies"),
        "{out}"
    );
    assert_eq!(out, idem_sim(&["replay", "--seed", "3"]).1);
}

#[test]
fn bad_arguments_exit_with_status_two_and_say_why() {
    for args in [
        &["explore"][..],
        &["explore", "--seeds", "many"],
        &["replay", "--seed", "1", "--faults", "gremlins"],
        &["jump"],
    ] {
        let (code, _, err) = idem_sim(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains("idem-sim: ") && err.contains("USAGE"), "{err}");
    }
    let (code, out, _) = idem_sim(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("explore --seeds N"));
}

#[test]
fn help_and_version_go_to_stdout_with_status_zero() {
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let (code, out, err) = idem_sim(args);
        assert_eq!(code, 0, "{args:?}");
        assert!(err.is_empty(), "{args:?}: {err}");
        for command in ["table", "explore", "replay"] {
            assert!(
                out.contains(command),
                "{args:?} does not name {command}: {out}"
            );
        }
        assert!(out.contains("EXIT STATUS"), "{out}");
    }
    // Each command has its own, naming its options.
    let (code, out, _) = idem_sim(&["explore", "--help"]);
    assert_eq!(code, 0);
    for option in [
        "--seeds",
        "--from",
        "--callers",
        "--faults",
        "--without",
        "--variant",
    ] {
        assert!(out.contains(option), "explore --help lacks {option}: {out}");
    }
    assert!(out.contains("result-cache") && out.contains("release-on-abandon"));
    let (code, out, _) = idem_sim(&["help", "replay"]);
    assert_eq!(code, 0);
    assert!(out.contains("--seed <S>"), "{out}");
    let (code, out, err) = idem_sim(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("idem-sim {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(err.is_empty(), "{err}");
    assert_eq!(idem_sim(&["-V"]).1, out);
}

#[test]
fn a_usage_error_prints_the_usage_of_the_command_given() {
    let (code, out, err) = idem_sim(&["explore", "--seeds", "1", "--callers", "0"]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with("idem-sim: ") && err.contains("--callers"),
        "{err}"
    );
    assert!(err.contains("USAGE: idem-sim explore"), "{err}");
    // The Redis modes are idem-bench's now.
    let (code, _, err) = idem_sim(&["table", "--redis", "redis://127.0.0.1:6379"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--redis'"), "{err}");
    let (code, _, _) = idem_sim(&["bench", "--redis", "redis://127.0.0.1:6379"]);
    assert_eq!(code, 2);
}

#[test]
fn an_exploration_draws_nothing_on_a_stderr_that_is_not_a_terminal() {
    // Long enough that a terminal would get a progress bar.
    let (code, out, err) = idem_sim(&["explore", "--seeds", "3000", "--callers", "30"]);
    assert_eq!(code, 0, "{out}");
    assert!(err.is_empty(), "{err}");
    assert!(out.contains("runs: 3000"), "{out}");
}
