//! The article's table on simulated time: every row gives the responses and charges the
//! article reports, and the checks see the result cache's second charge.

use idem_sim::{Rule, SCENARIOS, TableStore};

#[test]
fn every_row_gives_the_articles_responses_and_charges() {
    assert_eq!(SCENARIOS.len(), 8);
    for scenario in SCENARIOS {
        let (row, report) = scenario.simulate(false).unwrap();
        assert!(
            row.matches(scenario),
            "{}: got {row:?}, expected {:?} {:?}",
            scenario.label,
            scenario.expected_responses,
            scenario.expected_charges
        );
        let line = row.line(scenario);
        assert!(line.starts_with(scenario.label), "{line}");
        assert!(
            line.contains("responses=[") && line.contains("charges=["),
            "{line}"
        );
        if scenario.store != TableStore::ResultCache {
            assert!(
                report.violations.is_empty(),
                "{}: {:?}",
                scenario.label,
                report.violations
            );
        }
    }
}

#[test]
fn the_first_table_is_the_articles() {
    let row = |label: &str| {
        let scenario = SCENARIOS.iter().find(|s| s.label == label).unwrap();
        scenario.simulate(false).unwrap().0
    };
    let cache = row("result-cache");
    assert_eq!(cache.responses, ["ch_1", "ch_1"]);
    assert_eq!(cache.charges, ["ch_1", "ch_2"]);
    let wait = row("wait");
    assert_eq!(wait.responses, ["ch_1", "ch_1"]);
    assert_eq!(wait.charges, ["ch_1"]);
    let raise = row("raise");
    assert_eq!(raise.responses, ["ch_1", "InProgressError"]);
    assert_eq!(raise.charges, ["ch_1"]);
    assert_eq!(row("other-amount").responses, ["ch_1", "KeyReuseError"]);
    assert_eq!(row("fail-closed").charges, Vec::<String>::new());
}

#[test]
fn the_result_cache_row_is_caught_as_an_unexplained_second_charge() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.label == "result-cache")
        .unwrap();
    let (_, report) = scenario.simulate(false).unwrap();
    assert!(
        report.violations.iter().any(|v| v.rule == Rule::I7),
        "{:?}",
        report.violations
    );
}

#[test]
fn a_row_that_does_not_match_its_expectation_is_reported() {
    let mut scenario = SCENARIOS[1];
    scenario.expected_charges = &["ch_1", "ch_2"];
    let (row, _) = scenario.simulate(false).unwrap();
    assert!(!row.matches(&scenario));
}
