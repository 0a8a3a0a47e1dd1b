//! The binary: exit statuses, help and version, without a server.

use std::process::Command;

fn idem_bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem-bench"))
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
fn help_and_version_go_to_stdout_with_status_zero() {
    let (code, out, err) = idem_bench(&["--help"]);
    assert_eq!(code, 0);
    assert!(err.is_empty(), "{err}");
    assert!(out.contains("table --redis URL") && out.contains("bench --redis URL"));
    assert!(out.contains("calls --redis URL --phase raw_fresh|fresh --calls N"));
    assert!(out.contains("compare --redis URL [--concurrency N[,N...]] [--rounds N]"));
    let (code, out, _) = idem_bench(&["bench", "--help"]);
    assert_eq!(code, 0);
    for option in ["--redis", "--concurrency", "--window-ms", "--json"] {
        assert!(out.contains(option), "bench --help lacks {option}: {out}");
    }
    let (code, out, _) = idem_bench(&["compare", "--help"]);
    assert_eq!(code, 0);
    for option in ["--redis", "--concurrency", "--rounds", "--calls"] {
        assert!(out.contains(option), "compare --help lacks {option}: {out}");
    }
    let (code, out, _) = idem_bench(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("idem-bench {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_arguments_exit_with_status_two_and_say_why() {
    for args in [
        &[][..],
        &["table"],
        &[
            "bench",
            "--redis",
            "redis://127.0.0.1:1",
            "--concurrency",
            "0",
        ],
        &["explore", "--seeds", "1"],
    ] {
        let (code, out, err) = idem_bench(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(
            err.starts_with("idem-bench: ") && err.contains("USAGE: idem-bench"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_server_that_cannot_be_reached_exits_with_status_one() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let (code, out, _) = idem_bench(&["table", "--redis", "redis://127.0.0.1:1"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("table --redis: "), "{out}");
    let (code, _, err) = idem_bench(&["bench", "--redis", "redis://127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(err.contains("idem-bench bench: cannot connect"), "{err}");
    let (code, out, err) = idem_bench(&[
        "calls",
        "--redis",
        "redis://127.0.0.1:1",
        "--phase",
        "fresh",
        "--calls",
        "10",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("idem-bench calls: cannot connect"), "{err}");
    let (code, out, err) = idem_bench(&["compare", "--redis", "redis://127.0.0.1:1"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("idem-bench compare: cannot connect"), "{err}");
}
