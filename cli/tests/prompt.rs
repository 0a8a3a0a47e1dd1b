//! `idem release --force` asks on a real terminal (tmux, 80 columns) before it lets a live
//! lease go, says what a second effect would mean, and does nothing unless told `yes`.

use std::process::Command;
use std::time::{Duration, Instant};

use idem::admin::AdminStore;
use idem::record::{Command as RecordCommand, Reply};
use idem::{Fingerprint, Key, Operation, OwnerToken, Store};
use idem_tests::net::unique_name;
use idem_tests::redis::RedisServer;

/// A tmux session running `idem` with `args`, in an 80x24 terminal; killed when dropped.
struct Terminal {
    name: String,
}

impl Terminal {
    fn start(args: &[String]) -> Self {
        let name = unique_name("idem-prompt");
        let mut command = vec![env!("CARGO_BIN_EXE_idem").to_owned()];
        command.extend(args.iter().cloned());
        // The exit code is printed after the tool ends, and the pane kept open to read it.
        let shell = format!("{}; echo EXIT=$?; sleep 60", command.join(" "));
        let started = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "80",
                "-y",
                "24",
                &shell,
            ])
            .status()
            .unwrap_or_else(|error| panic!("cannot run tmux ({error}): this test needs tmux"));
        assert!(started.success(), "tmux new-session failed");
        Self { name }
    }

    /// The screen, once it shows `text` (waited for up to 20 s).
    fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let output = Command::new("tmux")
                .args(["capture-pane", "-p", "-t", &self.name])
                .output()
                .expect("tmux capture-pane");
            let screen = String::from_utf8_lossy(&output.stdout).into_owned();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the terminal never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_line(&self, line: &str) {
        let sent = Command::new("tmux")
            .args(["send-keys", "-t", &self.name, line, "Enter"])
            .status()
            .expect("tmux send-keys");
        assert!(sent.success());
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

async fn held_key(server: &RedisServer) -> (idem_redis::RedisStore, Operation, Key, OwnerToken) {
    let store = idem_redis::RedisStore::connect(&server.url())
        .await
        .unwrap();
    let operation = Operation::new("payment.charge").unwrap();
    let key = Key::new("order-7").unwrap();
    let owner = OwnerToken::from_u128(7);
    let reserve = RecordCommand::Reserve {
        owner,
        fingerprint: Fingerprint::of_bytes(b"order-7"),
        lease: Duration::from_secs(120),
    };
    let reply = store.apply(&operation, &key, reserve).await.unwrap();
    assert!(matches!(reply, Reply::Reserved(_)), "{reply:?}");
    (store, operation, key, owner)
}

fn release_args(server: &RedisServer) -> Vec<String> {
    [
        "--redis",
        &server.url(),
        "release",
        "payment.charge",
        "order-7",
        "--force",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_asks_and_releases_only_on_yes() {
    let server = RedisServer::start();
    let (store, operation, key, owner) = held_key(&server).await;

    // Anything but `yes` leaves the key held.
    let terminal = Terminal::start(&release_args(&server));
    let screen = terminal.wait_for("Type yes to go on:");
    // Read as one line: where the warning wraps depends on the time left.
    let flat = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("may still be running"), "{screen}");
    assert!(flat.contains("second charge"), "{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    terminal.type_line("no");
    let screen = terminal.wait_for("EXIT=");
    assert!(
        screen.contains("not released") && screen.contains("EXIT=2"),
        "{screen}"
    );
    let held = store.inspect(&operation, &key).await.unwrap();
    assert_eq!(held.record.map(|record| record.owner()), Some(owner));
    drop(terminal);

    // `yes` releases it: the key is free for the next request.
    let terminal = Terminal::start(&release_args(&server));
    terminal.wait_for("Type yes to go on:");
    terminal.type_line("yes");
    let screen = terminal.wait_for("EXIT=");
    assert!(
        screen.contains("released: the next request runs"),
        "{screen}"
    );
    assert!(screen.contains("EXIT=0"), "{screen}");
    let free = store.inspect(&operation, &key).await.unwrap();
    assert_eq!(free.record, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_force_needs_yes() {
    let server = RedisServer::start();
    let (store, operation, key, owner) = held_key(&server).await;
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(release_args(&server))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pass --yes"), "{stderr}");
    let held = store.inspect(&operation, &key).await.unwrap();
    assert_eq!(held.record.map(|record| record.owner()), Some(owner));

    let mut scripted = release_args(&server);
    scripted.push("--yes".to_owned());
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(&scripted)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(store.inspect(&operation, &key).await.unwrap().record, None);
}
