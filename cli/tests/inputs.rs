//! What `idem` does before it reaches a store: completions, and bad input refused with a
//! message and exit code 1, never a panic and never a connection made up.

use std::process::{Command, Output};

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_REDIS")
        .env_remove("IDEM_REDIS_CLUSTER")
        .env_remove("IDEM_POSTGRES")
        .env_remove("IDEM_MARIADB")
        .env_remove("IDEM_SQLITE")
        .output()
        .expect("run idem")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let output = idem(&["completions", shell]);
        assert!(output.status.success(), "{shell}: {}", stderr(&output));
        let script = String::from_utf8_lossy(&output.stdout);
        for command in ["inspect", "list", "release", "sweep", "health", "stats"] {
            assert!(
                script.contains(command),
                "{shell} completions lack {command}"
            );
        }
    }
}

#[test]
fn bad_input_is_refused_before_any_store() {
    let none = idem(&["list"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(stderr(&none).contains("name a store"), "{}", stderr(&none));

    let missing = idem(&["--sqlite", "/nonexistent/idem.db", "stats"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no SQLite database at"),
        "{}",
        stderr(&missing)
    );
    assert!(!std::path::Path::new("/nonexistent/idem.db").exists());

    let two = idem(&[
        "--redis",
        "redis://a",
        "--postgres",
        "postgres://b",
        "health",
    ]);
    assert_eq!(two.status.code(), Some(2), "clap refuses two stores");

    let brace = idem(&[
        "--redis",
        "redis://127.0.0.1:1",
        "--prefix",
        "{x}",
        "health",
    ]);
    assert_eq!(brace.status.code(), Some(1));
    assert!(stderr(&brace).contains("brace"), "{}", stderr(&brace));
}

#[test]
fn an_unreachable_store_is_an_error_with_json_too() {
    let port = idem_tests::net::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let output = idem(&["--json", "--redis", &url, "inspect", "op", "k"]);
    assert_eq!(output.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        json["error"]
            .as_str()
            .unwrap()
            .contains("could not connect"),
        "{json}"
    );
}
