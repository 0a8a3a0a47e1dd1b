//! A failing shuttle schedule can be replayed from what the failure leaves behind.
//!
//! shuttle writes the failing schedule (the same string it prints under
//! `FailurePersistence::Print`) to a file and prints the file's path; this test finds a
//! failure of a broken store variant, reads the schedule back, replays exactly that one
//! schedule, and asserts that the replay breaks the same rules with the same history.
//!
//! It runs in a test binary of its own because shuttle installs its failure hook once per
//! process, with the configuration of the first failing run.

use shuttle::FailurePersistence;

use idem_tests::{Scenario, ShuttleSchedules, Variant, shuttle_check, shuttle_replay};

fn broken() -> Scenario {
    Scenario::random(Variant::CompleteWithoutOwnerCheck).expect("model options are valid")
}

#[test]
fn shuttle_replays_a_printed_failing_schedule() {
    let dir = std::env::temp_dir().join(format!("idem-shuttle-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let found = shuttle_check(
        broken,
        ShuttleSchedules::Random {
            seed: 11,
            iterations: 10_000,
        },
        FailurePersistence::File(Some(dir.clone())),
        None,
    );
    let original = found
        .counterexample
        .expect("the broken variant must be found");
    let file = std::fs::read_dir(&dir)
        .expect("the schedule directory")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "txt"))
        .expect("shuttle wrote the failing schedule");
    let schedule = std::fs::read_to_string(&file).expect("the schedule file");
    std::fs::remove_dir_all(&dir).ok();
    assert!(!schedule.trim().is_empty(), "an empty schedule");

    let replayed = shuttle_replay(broken, schedule.trim());
    assert_eq!(replayed.schedules, 1, "a replay runs one schedule");
    let again = replayed
        .counterexample
        .expect("the replayed schedule must fail again");
    assert_eq!(again.rules(), original.rules());
    assert_eq!(
        again.to_string(),
        original.to_string(),
        "the replay tells the same story"
    );
}
