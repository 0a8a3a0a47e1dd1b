//! Several OS processes hammer the same keys on one Redis through their own Coordinators,
//! and the card statement (kept in Redis, so that it spans processes) is checked against
//! what the processes report.
//!
//! - **Plain:** every call runs to its end. The total number of charges equals the number
//!   of distinct keys, and every caller of a key, in every process, gets the same answer. A
//!   result cache in place of the store is caught charging twice.
//! - **Drops:** every client drops its call at a random point (the task that awaits it is
//!   aborted 0 to 60 ms in) and retries at once with the same key. Detached calls
//!   (`execute`): every key is charged exactly once, and every answer of a key is the same.
//!   Attached calls (`execute_attached`): a call dropped mid-action leaves its key held
//!   until the lease ends, after which a retry takes over and charges again; so the extra
//!   charges must not exceed what the processes count as `left_to_lease`, and no key may be
//!   charged twice before a lease could have ended. Both checks are shown catching the old
//!   behaviour, a client that releases the key of the call it dropped (with the owner token
//!   the action learned from its claim): `idem_check`'s driver variant `release-on-abandon`.
//!
//! The worker is this test binary itself: the parent test runs it again as child processes
//! (`hammer_worker`, with the server's URL and the mode in the environment). Run on its own,
//! without that environment, `hammer_worker` is a one-process plain check against a server
//! of its own. Charges are pushed onto a Redis list per key (`charges:{key}`), each with the
//! instant it was made, and read back into `idem_check`'s card statement to be judged.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::record::{Command as StoreCommand, Reply};
use idem::{
    Claim, Coordinator, Error, Fingerprint, Key, Operation, Options, OwnerToken, Store,
    StoreFailurePolicy,
};
use idem_check::{Statement, Variant};
use idem_redis::RedisStore;
use redis::AsyncCommands;
use support::RedisServer;
use support::broken::InFront;

const OP: &str = "hammer.charge";
const WORKERS: usize = 4;
/// Plain runs: keys, and concurrent callers of each key in each process.
const KEYS: usize = 30;
const CALLERS_PER_KEY: usize = 3;
/// Runs with drops: keys; each process runs one client per key.
const DROP_KEYS: usize = 48;
/// A client drops its call at a uniformly drawn point in `0..=DROP_WITHIN_MS` ms.
const DROP_WITHIN_MS: u64 = 60;
/// How long an action takes after its charge in a run with drops.
const ACTION_AFTER_CHARGE: Duration = Duration::from_millis(40);
/// The lease of runs with drops: short, so that a key left to its lease frees within the
/// run.
const DROP_LEASE: Duration = Duration::from_secs(1);

const ENV_URL: &str = "IDEM_HAMMER_URL";
const ENV_WORKER: &str = "IDEM_HAMMER_WORKER";
const ENV_START: &str = "IDEM_HAMMER_START_MS";
const ENV_MODE: &str = "IDEM_HAMMER_MODE";

/// What the processes do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every call runs to its end.
    Plain,
    /// Plain, with the catalogue's result cache in front of the store: broken on purpose.
    ResultCache,
    /// Every client drops its call at a random point and retries at once.
    Drops {
        attached: bool,
        /// The client: `Correct`, or (broken on purpose) `ReleaseOnAbandon`, which releases
        /// the key of the call it dropped.
        client: Variant,
    },
}

impl Mode {
    const ALL: [Mode; 6] = [
        Mode::Plain,
        Mode::ResultCache,
        Mode::Drops {
            attached: false,
            client: Variant::Correct,
        },
        Mode::Drops {
            attached: true,
            client: Variant::Correct,
        },
        Mode::Drops {
            attached: false,
            client: Variant::ReleaseOnAbandon,
        },
        Mode::Drops {
            attached: true,
            client: Variant::ReleaseOnAbandon,
        },
    ];

    fn name(self) -> String {
        format!("{self:?}")
    }

    fn from_name(name: &str) -> Mode {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.name() == name)
            .unwrap_or_else(|| panic!("unknown mode {name}"))
    }

    fn keys(self) -> usize {
        match self {
            Mode::Plain | Mode::ResultCache => KEYS,
            Mode::Drops { .. } => DROP_KEYS,
        }
    }
}

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// SplitMix64: a client's drop point, drawn from its own seed.
fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fingerprint(k: usize) -> Fingerprint {
    Fingerprint::of_bytes(format!("charge {k}").as_bytes())
}

/// Charges the card for key `k`: pushes the instant onto the key's statement; returns the
/// charge's position on it.
async fn charge(
    statement: &mut redis::aio::MultiplexedConnection,
    k: usize,
) -> redis::RedisResult<u64> {
    statement.rpush(format!("charges:{k}"), unix_ms()).await
}

/// What one process counted in a run with drops.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Calls dropped before they ended.
    drops: u64,
    /// Of those, calls whose action had started and not finished when dropped.
    mid_action: u64,
    /// Keys the broken client released after dropping its call.
    released: u64,
    /// The coordinator's counters.
    abandoned: u64,
    left_to_lease: u64,
    lease_lost: u64,
    failed_open: u64,
}

impl Counts {
    const NAMES: [&'static str; 7] = [
        "drops",
        "mid_action",
        "released",
        "abandoned",
        "left_to_lease",
        "lease_lost",
        "failed_open",
    ];

    fn values(&self) -> [u64; 7] {
        [
            self.drops,
            self.mid_action,
            self.released,
            self.abandoned,
            self.left_to_lease,
            self.lease_lost,
            self.failed_open,
        ]
    }

    fn line(&self) -> String {
        Self::NAMES
            .iter()
            .zip(self.values())
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn parse(line: &str) -> Self {
        let mut values = HashMap::new();
        for field in line.split_whitespace() {
            let (name, value) = field.split_once('=').unwrap();
            values.insert(name, value.parse::<u64>().unwrap());
        }
        let get = |name: &str| values[name];
        Self {
            drops: get("drops"),
            mid_action: get("mid_action"),
            released: get("released"),
            abandoned: get("abandoned"),
            left_to_lease: get("left_to_lease"),
            lease_lost: get("lease_lost"),
            failed_open: get("failed_open"),
        }
    }

    fn add(&mut self, other: Counts) {
        self.drops += other.drops;
        self.mid_action += other.mid_action;
        self.released += other.released;
        self.abandoned += other.abandoned;
        self.left_to_lease += other.left_to_lease;
        self.lease_lost += other.lease_lost;
        self.failed_open += other.failed_open;
    }
}

/// One process's work: (key, answer) pairs, and its counts in a run with drops.
async fn work(
    url: &str,
    worker: usize,
    start_ms: u64,
    mode: Mode,
) -> (Vec<(usize, String)>, Counts) {
    let store = RedisStore::connect(url).await.unwrap();
    let statement = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(start_ms.saturating_sub(unix_ms()))).await;
    match mode {
        Mode::Plain => {
            let payments = Coordinator::new(store, Options::default());
            (calls(payments, statement, worker).await, Counts::default())
        }
        Mode::ResultCache => {
            let broken = InFront {
                variant: Variant::ResultCache,
                store,
            };
            let payments = Coordinator::new(broken, Options::default());
            (calls(payments, statement, worker).await, Counts::default())
        }
        Mode::Drops { attached, client } => {
            let options = Options::builder()
                .lease(DROP_LEASE)
                .reply_timeout(Duration::from_millis(300))
                .on_store_failure(StoreFailurePolicy::FailClosed)
                .wait_deadline(Duration::from_secs(5))
                .build()
                .unwrap();
            let payments = Coordinator::new(store, options);
            let seed = start_ms ^ ((worker as u64) << 48);
            dropping_clients(
                &payments,
                statement,
                worker,
                seed,
                attached,
                client.releases_on_abandon(),
            )
            .await
        }
    }
}

/// Plain: `CALLERS_PER_KEY` concurrent calls on each key, each run to its end.
async fn calls<S: Store>(
    payments: Coordinator<S>,
    statement: redis::aio::MultiplexedConnection,
    worker: usize,
) -> Vec<(usize, String)> {
    let mut tasks = Vec::new();
    for i in 0..KEYS {
        // Each process walks the keys from another place.
        let k = (i + worker * 7) % KEYS;
        for _ in 0..CALLERS_PER_KEY {
            let (payments, mut statement) = (payments.clone(), statement.clone());
            tasks.push(tokio::spawn(async move {
                let answer = payments
                    .execute(
                        OP,
                        format!("key-{k}"),
                        fingerprint(k),
                        move |_claim| async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let n = charge(&mut statement, k).await?;
                            Ok::<String, redis::RedisError>(format!("w{worker}-charge{n}"))
                        },
                    )
                    .await
                    .unwrap_or_else(|e| panic!("key {k}: {e}"));
                (k, answer)
            }));
        }
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// One call of key `k` whose action charges at once and answers `ACTION_AFTER_CHARGE`
/// later; the action tells `owner` its claim's owner token and `finished` when it is done.
async fn one_call(
    payments: Coordinator<RedisStore>,
    mut statement: redis::aio::MultiplexedConnection,
    (worker, k): (usize, usize),
    attached: bool,
    owner: Arc<Mutex<Option<OwnerToken>>>,
    finished: Arc<AtomicBool>,
) -> Result<String, Error<redis::RedisError>> {
    let action = move |claim: Claim| async move {
        *owner.lock().unwrap() = Some(claim.owner());
        let n = charge(&mut statement, k).await?;
        tokio::time::sleep(ACTION_AFTER_CHARGE).await;
        finished.store(true, Ordering::SeqCst);
        Ok(format!("w{worker}-charge{n}"))
    };
    let key = format!("key-{k}");
    if attached {
        payments
            .execute_attached(OP, key, fingerprint(k), action)
            .await
    } else {
        payments.execute(OP, key, fingerprint(k), action).await
    }
}

/// Runs with drops: one client per key; each drops its call at a random point and retries
/// at once with the same key until it gets an answer.
async fn dropping_clients(
    payments: &Coordinator<RedisStore>,
    statement: redis::aio::MultiplexedConnection,
    worker: usize,
    seed: u64,
    attached: bool,
    release_on_abandon: bool,
) -> (Vec<(usize, String)>, Counts) {
    let mut tasks = Vec::new();
    for k in 0..DROP_KEYS {
        let (payments, statement) = (payments.clone(), statement.clone());
        tasks.push(tokio::spawn(async move {
            let mut counts = Counts::default();
            let mut answers = Vec::new();
            let owner = Arc::new(Mutex::new(None));
            let finished = Arc::new(AtomicBool::new(false));
            let call = tokio::spawn(one_call(
                payments.clone(),
                statement.clone(),
                (worker, k),
                attached,
                Arc::clone(&owner),
                Arc::clone(&finished),
            ));
            let drop_after = splitmix(seed ^ k as u64) % (DROP_WITHIN_MS + 1);
            tokio::time::sleep(Duration::from_millis(drop_after)).await;
            call.abort();
            let ran = *owner.lock().unwrap();
            let done = finished.load(Ordering::SeqCst);
            match call.await {
                Ok(Ok(answer)) => answers.push(answer),
                // Ended before the drop without an answer; the retry below asks again.
                Ok(Err(Error::InProgress | Error::StoreUnavailable(_))) => {}
                Ok(Err(error)) => panic!("key {k}: {error}"),
                Err(error) => {
                    assert!(error.is_cancelled(), "key {k}: {error}");
                    counts.drops += 1;
                    if ran.is_some() && !done {
                        counts.mid_action += 1;
                    }
                    if let (true, Some(owner)) = (release_on_abandon, ran) {
                        // The old behaviour: the dropped call's key is given back.
                        let (operation, key) = (
                            Operation::new(OP).unwrap(),
                            Key::new(format!("key-{k}")).unwrap(),
                        );
                        let release = StoreCommand::Release { owner };
                        if let Ok(Reply::Released) =
                            payments.store().apply(&operation, &key, release).await
                        {
                            counts.released += 1;
                        }
                    }
                }
            }
            // Retried at once, with the same key, until answered.
            let mut tries = 0;
            let answer = loop {
                tries += 1;
                let call = one_call(
                    payments.clone(),
                    statement.clone(),
                    (worker, k),
                    attached,
                    Arc::default(),
                    Arc::default(),
                );
                match call.await {
                    Ok(answer) => break answer,
                    Err(Error::InProgress | Error::StoreUnavailable(_)) if tries < 20 => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(error) => panic!("key {k}: {error}"),
                }
            };
            answers.push(answer);
            (k, answers, counts)
        }));
    }
    let mut answers = Vec::new();
    let mut counts = Counts::default();
    for task in tasks {
        let (k, theirs, their_counts) = task.await.unwrap();
        answers.extend(theirs.into_iter().map(|answer| (k, answer)));
        counts.add(their_counts);
    }
    let metrics = payments.metrics();
    counts.abandoned = metrics.abandoned;
    counts.left_to_lease = metrics.left_to_lease;
    counts.lease_lost = metrics.lease_lost;
    counts.failed_open = metrics.failed_open;
    (answers, counts)
}

/// The card statement, read back from Redis: each key's charges, with the instants they
/// were made, in order of key.
async fn statement(url: &str, keys: usize) -> Statement<usize> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut statement = Statement::default();
    for k in 0..keys {
        let instants: Vec<u64> = conn.lrange(format!("charges:{k}"), 0, -1).await.unwrap();
        for at in instants {
            statement.charge(k, None, at);
        }
    }
    statement
}

/// Every caller of a key got the same answer, and every key was answered.
fn same_answers(answers: &[(usize, String)], keys: usize) -> Result<(), String> {
    let mut by_key: HashMap<usize, &str> = HashMap::new();
    for (k, answer) in answers {
        let first = by_key.entry(*k).or_insert(answer);
        if *first != answer {
            return Err(format!("key {k}: answers {first} and {answer}"));
        }
    }
    if by_key.len() != keys {
        return Err(format!("answers for {} keys, not {keys}", by_key.len()));
    }
    Ok(())
}

/// Attached calls: extra charges only where a dropped call left its key to the lease.
/// Each is counted (`left_to_lease`), and each comes after a lease could have ended: no
/// key is charged twice within half a lease.
fn extra_charges_have_their_cause(
    charges: &Statement<usize>,
    keys: usize,
    counts: Counts,
) -> Result<(), String> {
    let mut failures: Vec<String> = (0..keys)
        .filter(|k| charges.count(k) == 0)
        .map(|k| format!("key {k} never charged"))
        .collect();
    let half_a_lease = u64::try_from(DROP_LEASE.as_millis() / 2).unwrap();
    for (k, gap) in charges.charged_again_within(half_a_lease) {
        failures.push(format!(
            "key {k} charged twice within {gap} ms, before its lease could end"
        ));
    }
    let extra = charges.extra() as u64;
    if extra > counts.left_to_lease {
        failures.push(format!(
            "{extra} extra charges, but only {} calls left to their lease",
            counts.left_to_lease
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Judges a run by the statement and the answers.
async fn check(
    url: &str,
    mode: Mode,
    answers: &[(usize, String)],
    counts: Counts,
) -> Result<String, String> {
    let charges = statement(url, mode.keys()).await;
    let keys: Vec<usize> = (0..mode.keys()).collect();
    let summary = format!(
        "{}: {} keys, {} charges ({} extra), {}",
        mode.name(),
        mode.keys(),
        charges.len(),
        charges.extra(),
        counts.line()
    );
    let judged = match mode {
        Mode::Drops { attached: true, .. } => {
            extra_charges_have_their_cause(&charges, mode.keys(), counts)
        }
        Mode::Plain | Mode::ResultCache | Mode::Drops { .. } => charges
            .one_effect_per_key(&keys)
            .and_then(|()| same_answers(answers, mode.keys())),
    };
    match judged {
        Ok(()) => Ok(summary),
        Err(failure) => Err(format!("{summary}\n{failure}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_worker() {
    if let Ok(url) = std::env::var(ENV_URL) {
        let worker: usize = std::env::var(ENV_WORKER).unwrap().parse().unwrap();
        let start: u64 = std::env::var(ENV_START).unwrap().parse().unwrap();
        let mode = Mode::from_name(&std::env::var(ENV_MODE).unwrap());
        let (answers, counts) = work(&url, worker, start, mode).await;
        for (k, answer) in answers {
            println!("HAMMER {k} {answer}");
        }
        println!("COUNTS {}", counts.line());
        return;
    }
    let server = RedisServer::start();
    let (answers, counts) = work(&server.url(), 0, unix_ms(), Mode::Plain).await;
    check(&server.url(), Mode::Plain, &answers, counts)
        .await
        .unwrap();
}

/// Runs `WORKERS` worker processes in `mode` against a fresh server and checks the run;
/// returns its summary, or what the check found.
async fn run_processes(mode: Mode) -> Result<String, String> {
    let server = RedisServer::start();
    let url = server.url();
    let exe = std::env::current_exe().unwrap();
    let start = unix_ms() + 700;
    let children: Vec<_> = (0..WORKERS)
        .map(|worker| {
            Command::new(&exe)
                .args(["hammer_worker", "--exact", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(ENV_URL, &url)
                .env(ENV_WORKER, worker.to_string())
                .env(ENV_START, start.to_string())
                .env(ENV_MODE, mode.name())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut answers = Vec::new();
    let mut counts = Counts::default();
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "worker failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // The harness may print "test hammer_worker ... " on the same line as the first.
        for line in stdout.lines() {
            if let Some((_, rest)) = line.split_once("HAMMER ") {
                let (k, answer) = rest.split_once(' ').unwrap();
                answers.push((k.parse::<usize>().unwrap(), answer.to_owned()));
            } else if let Some((_, rest)) = line.split_once("COUNTS ") {
                counts.add(Counts::parse(rest));
            }
        }
    }
    match mode {
        Mode::Plain | Mode::ResultCache => {
            assert_eq!(answers.len(), WORKERS * KEYS * CALLERS_PER_KEY);
        }
        // Every client's retry answered; a first call that ended before its drop did too.
        Mode::Drops { .. } => assert!(answers.len() >= WORKERS * DROP_KEYS),
    }
    let judged = check(&url, mode, &answers, counts).await;
    println!("{}", judged.as_ref().unwrap_or_else(|e| e));
    judged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_hammering_one_redis_charge_once_per_key() {
    run_processes(Mode::Plain).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hammer_check_catches_a_result_cache() {
    let failure = run_processes(Mode::ResultCache)
        .await
        .expect_err("a result cache charges twice");
    assert!(failure.contains("charged"), "{failure}");
}

/// Detached calls dropped at random points and retried at once: one charge per key,
/// whoever dropped what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_calls_dropped_at_random_charge_once_per_key() {
    let summary = run_processes(Mode::Drops {
        attached: false,
        client: Variant::Correct,
    })
    .await
    .unwrap();
    assert!(summary.contains("(0 extra)"), "{summary}");
}

/// Attached calls dropped at random points: extra charges only where a dropped call left
/// its key to the lease, each counted by the processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_calls_dropped_at_random_charge_again_only_after_a_counted_lease_end() {
    run_processes(Mode::Drops {
        attached: true,
        client: Variant::Correct,
    })
    .await
    .unwrap();
}

/// The old behaviour, releasing on abandon, in the detached run: keys charged twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hammer_check_catches_releasing_on_abandon_in_detached_calls() {
    let failure = run_processes(Mode::Drops {
        attached: false,
        client: Variant::ReleaseOnAbandon,
    })
    .await
    .expect_err("releasing on abandon charges twice");
    assert!(failure.contains("charged 2 times"), "{failure}");
}

/// The old behaviour in the attached run: keys charged twice long before a lease could
/// end, even where the drop itself was counted as left to the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hammer_check_catches_releasing_on_abandon_in_attached_calls() {
    let failure = run_processes(Mode::Drops {
        attached: true,
        client: Variant::ReleaseOnAbandon,
    })
    .await
    .expect_err("releasing on abandon charges twice");
    assert!(failure.contains("charged twice within"), "{failure}");
}
