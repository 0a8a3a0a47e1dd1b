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
