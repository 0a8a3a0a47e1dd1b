//! What an operator scrapes, end to end: the payments example as a real process on loopback,
//! real charges sent to it, and its `GET /metrics` read back as a Prometheus server reads it.
//! Each request moves exactly the counters it should; METRICS.md describes every metric the
//! code can emit; and the Grafana dashboard (`dashboards/idem.json`) queries only names a real
//! scrape holds, so a metric renamed in the code breaks this test, not a dashboard in
//! production.
//!
//! The servers are this test binary itself, started again with the example's arguments in
//! `IDEM_METRICS_PAYMENTS_ARGS`: it then serves the example's own code (included below), whose
//! recorder is the process's global one, instead of testing. Hence `harness = false`.

#[allow(dead_code, unused_imports)]
#[path = "../examples/payments.rs"]
mod payments;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser;
use idem_http::metrics::{MetricKind, exported};
use serde_json::{Value, json};
use support::process::{ExampleProcess, child_args, free_port, run_test, serve};
use support::promql;
use support::scrape::{self, Scrape};

const CHILD: &str = "IDEM_METRICS_PAYMENTS_ARGS";
const CHARGES: (&str, &str) = ("route", "POST /charges");
const PAYMENTS: (&str, &str) = ("coordinator", "payments");

/// The scrapes the counting test took after its traffic, for the dashboard's test.
static SCRAPES: OnceLock<Vec<Scrape>> = OnceLock::new();

fn main() {
    if let Some(args) = child_args(CHILD, "payments") {
        serve(payments::run(payments::Args::parse_from(args)));
        return;
    }
    run_test("the_readers_read_what_they_must", async {
        scrape::check_the_reader();
        promql::check_the_reader();
    });
    run_test(
        "metrics_md_describes_every_metric_the_code_can_emit",
        async { metrics_md_describes_every_metric_the_code_can_emit() },
    );
    run_test(
        "a_scrape_of_the_payments_example_counts_each_request",
        a_scrape_of_the_payments_example_counts_each_request(),
    );
    run_test("the_dashboard_queries_only_scraped_metrics", async {
        the_dashboard_queries_only_scraped_metrics()
    });
    run_test(
        "the_dashboard_check_catches_a_metric_no_scrape_has",
        async { the_dashboard_check_catches_a_metric_no_scrape_has() },
    );
}

fn repository_file(name: &str) -> String {
    let path = format!("{}/../{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn kind_word(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Counter => "counter",
        MetricKind::Gauge => "gauge",
    }
}

/// Each metric of `exported()` has one row in METRICS.md's tables (`` | `name` | kind | ...``)
/// that names its kind, every label and every label value the code emits; and each row
/// names a metric the code emits.
fn metrics_md_describes_every_metric_the_code_can_emit() {
    let page = repository_file("METRICS.md");
    let rows: Vec<&str> = page
        .lines()
        .filter(|line| line.starts_with("| `idem_"))
        .collect();
    let metrics = exported();
    assert!(metrics.len() >= 20, "{metrics:?}");
    let mut faults = Vec::new();
    for metric in &metrics {
        let own: Vec<&&str> = rows
            .iter()
            .filter(|row| row.starts_with(&format!("| `{}`", metric.name)))
            .collect();
        let [row] = own.as_slice() else {
            faults.push(format!("{}: {} rows in METRICS.md", metric.name, own.len()));
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.get(2) != Some(&kind_word(metric.kind)) {
            faults.push(format!(
                "{}: the kind is not {:?}",
                metric.name, metric.kind
            ));
        }
        for word in metric.labels.iter().chain(&metric.values) {
            if !row.contains(&format!("`{word}`")) {
                faults.push(format!("{}: `{word}` is not in its row", metric.name));
            }
        }
    }
    for row in &rows {
        let named = row
            .trim_start_matches("| `")
            .split('`')
            .next()
            .unwrap_or_default();
        if !metrics.iter().any(|metric| metric.name == named) {
            faults.push(format!(
                "METRICS.md describes {named}, which the code does not emit"
            ));
        }
    }
    assert!(
        faults.is_empty(),
        "METRICS.md is out of date:\n{}",
        faults.join("\n")
    );
    assert!(
        repository_file("README.md").contains("(METRICS.md)"),
        "README.md links METRICS.md"
    );
}

/// One payments process: its port, and the process itself (killed when dropped).
struct Server {
    port: u16,
    _process: ExampleProcess,
}

impl Server {
    fn start(in_flight: &str) -> Self {
        let port = free_port();
        let process = ExampleProcess::start(
            CHILD,
            &[
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--action-ms",
                "1000",
                "--in-flight",
                in_flight,
            ],
            "payments on",
        );
        Self {
            port,
            _process: process,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// A charge's answer: its status, whether it was a replay, its problem type if any, its body.
#[derive(Debug)]
struct Answer {
    status: u16,
    replayed: bool,
    body: Value,
}

async fn charge(client: &reqwest::Client, server: &Server, key: &str, amount: u64) -> Answer {
    let response = client
        .post(server.url("/charges"))
        .header("idempotency-key", key)
        .json(&json!({ "amount": amount, "currency": "eur" }))
        .send()
        .await
        .expect("the example answers");
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        replayed,
        body,
    }
}

async fn scrape(client: &reqwest::Client, server: &Server) -> Scrape {
    let response = client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("the example answers /metrics");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.expect("a body");
    Scrape::parse(&text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

/// Every outcome of `idem_calls_total` for the payments coordinator, by its label.
fn calls(scrape: &Scrape) -> BTreeMap<String, f64> {
    scrape
        .all("idem_calls_total")
        .into_iter()
        .filter(|s| s.labels.get("coordinator").map(String::as_str) == Some("payments"))
        .map(|s| (s.labels["outcome"].clone(), s.value))
        .collect()
}

/// The outcomes that moved, with their values.
fn moved(scrape: &Scrape) -> BTreeMap<String, f64> {
    calls(scrape)
        .into_iter()
        .filter(|(_, value)| *value > 0.0)
        .collect()
}

fn route(scrape: &Scrape, name: &str) -> Option<f64> {
    scrape.value(name, &[CHARGES])
}

/// Every `idem_` sample is a metric `exported()` lists, with exactly its labels and one of
/// its values, typed as its kind; and every coordinator metric is there from zero.
fn check_against_the_list(scrape: &Scrape) {
    let metrics = exported();
    for sample in scrape
        .samples
        .iter()
        .filter(|s| s.name.starts_with("idem_"))
    {
        let metric = metrics
            .iter()
            .find(|metric| metric.name == sample.name)
            .unwrap_or_else(|| panic!("{} is scraped but not in exported()", sample.name));
        let labels: BTreeSet<&str> = sample.labels.keys().map(String::as_str).collect();
        let listed: BTreeSet<&str> = metric.labels.iter().copied().collect();
        assert_eq!(labels, listed, "{sample:?}");
        if let Some(last) = metric.labels.last()
            && !metric.values.is_empty()
        {
            assert!(
                metric.values.contains(&sample.labels[*last].as_str()),
                "{sample:?}"
            );
        }
        assert_eq!(
            scrape.types.get(&sample.name).map(String::as_str),
            Some(kind_word(metric.kind))
        );
    }
    for metric in metrics
        .iter()
        .filter(|m| m.labels.first() == Some(&"coordinator"))
    {
        let found = scrape.all(metric.name);
        let expected = metric.values.len().max(1);
        assert_eq!(found.len(), expected, "{}: {found:?}", metric.name);
    }
}

async fn a_scrape_of_the_payments_example_counts_each_request() {
    let wait = Server::start("wait");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();

    // Before any request: the coordinator's metrics, all zero but the bound; no route yet.
    let before = scrape(&client, &wait).await;
    check_against_the_list(&before);
    assert_eq!(moved(&before), BTreeMap::new());
    assert_eq!(calls(&before).len(), 17, "{:?}", calls(&before));
    assert_eq!(before.value("idem_max_detached", &[PAYMENTS]), Some(4096.0));
    assert!(
        !before
            .names()
            .iter()
            .any(|name| name.starts_with("idem_http_")),
        "a route counter before any request: {:?}",
        before.names()
    );

    // A fresh charge, its replay, the key reused for another amount, a key over 255 characters.
    let fresh = charge(&client, &wait, "\"k-1\"", 100).await;
    assert_eq!((fresh.status, fresh.replayed), (201, false), "{fresh:?}");
    let replay = charge(&client, &wait, "\"k-1\"", 100).await;
    assert_eq!((replay.status, replay.replayed), (201, true), "{replay:?}");
    assert_eq!(replay.body, fresh.body);
    let reuse = charge(&client, &wait, "\"k-1\"", 200).await;
    assert_eq!(reuse.status, 422, "{reuse:?}");
    let long = format!("\"{}\"", "x".repeat(256));
    let invalid = charge(&client, &wait, &long, 100).await;
    assert_eq!(invalid.status, 400, "{invalid:?}");
    assert!(
        invalid.body["type"]
            .as_str()
            .unwrap_or_default()
            .ends_with("KeyInvalid"),
        "{invalid:?}"
    );

    let after = scrape(&client, &wait).await;
    check_against_the_list(&after);
    // The coordinator decided three calls; the invalid key was refused by the layer before
    // it, so `invalid_input` stays zero.
    let expected = BTreeMap::from([
        ("executed".to_owned(), 1.0),
        ("key_reuse".to_owned(), 1.0),
        ("replayed".to_owned(), 1.0),
    ]);
    assert_eq!(moved(&after), expected);
    assert_eq!(route(&after, "idem_http_executed_total"), Some(1.0));
    assert_eq!(route(&after, "idem_http_replays_total"), Some(1.0));
    assert_eq!(route(&after, "idem_http_key_reuse_total"), Some(1.0));
    let problem = |scrape: &Scrape, kind: &str| {
        scrape.value("idem_http_problems_total", &[CHARGES, ("type", kind)])
    };
    assert_eq!(problem(&after, "KeyReuse"), Some(1.0));
    assert_eq!(problem(&after, "KeyInvalid"), Some(1.0));
    assert_eq!(after.all("idem_http_problems_total").len(), 2);
    assert_eq!(
        route(&after, "idem_http_waits_total"),
        None,
        "nothing waited"
    );
    for quiet in [
        "idem_failed_open_total",
        "idem_lease_lost_total",
        "idem_left_to_lease_total",
        "idem_shutdown_cut_total",
        "idem_abandoned_total",
        "idem_detached_running",
    ] {
        assert_eq!(after.value(quiet, &[PAYMENTS]), Some(0.0), "{quiet}");
    }
    for error in after.all("idem_store_errors_total") {
        assert_eq!(error.value, 0.0, "{error:?}");
    }

    // A retry while the first is running: the detached action is a gauge of one meanwhile,
    // and the retry waits for the first's answer and replays it.
    let first = tokio::spawn({
        let client = client.clone();
        let url = wait.url("/charges");
        async move {
            let response = client
                .post(url)
                .header("idempotency-key", "\"k-2\"")
                .json(&json!({ "amount": 100, "currency": "eur" }))
                .send()
                .await
                .expect("an answer");
            response.status().as_u16()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = scrape(&client, &wait).await;
    assert_eq!(
        during.value("idem_detached_running", &[PAYMENTS]),
        Some(1.0)
    );
    let retry = charge(&client, &wait, "\"k-2\"", 100).await;
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    assert_eq!(first.await.unwrap(), 201);
    let waited = scrape(&client, &wait).await;
    check_against_the_list(&waited);
    assert_eq!(route(&waited, "idem_http_waits_total"), Some(1.0));
    assert_eq!(route(&waited, "idem_http_executed_total"), Some(2.0));
    assert_eq!(route(&waited, "idem_http_replays_total"), Some(2.0));
    assert_eq!(calls(&waited)["executed"], 2.0);
    assert_eq!(calls(&waited)["replayed"], 2.0);
    assert_eq!(
        waited.value("idem_detached_running", &[PAYMENTS]),
        Some(0.0)
    );
    let statement: Vec<String> = client
        .get(wait.url("/statement"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(statement.len(), 2, "one charge per key: {statement:?}");

    // Under policy raise, the retry while the first is running is told 409.
    let raise = Server::start("raise");
    let first = tokio::spawn({
        let client = client.clone();
        let url = raise.url("/charges");
        async move {
            let response = client
                .post(url)
                .header("idempotency-key", "\"k-3\"")
                .json(&json!({ "amount": 100, "currency": "eur" }))
                .send()
                .await
                .expect("an answer");
            response.status().as_u16()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let conflict = charge(&client, &raise, "\"k-3\"", 100).await;
    assert_eq!(conflict.status, 409, "{conflict:?}");
    assert_eq!(first.await.unwrap(), 201);
    let raised = scrape(&client, &raise).await;
    check_against_the_list(&raised);
    let expected = BTreeMap::from([
        ("executed".to_owned(), 1.0),
        ("in_progress".to_owned(), 1.0),
    ]);
    assert_eq!(moved(&raised), expected);
    assert_eq!(route(&raised, "idem_http_conflicts_total"), Some(1.0));
    assert_eq!(problem(&raised, "InProgress"), Some(1.0));
    assert_eq!(route(&raised, "idem_http_waits_total"), None);

    let _ = SCRAPES.set(vec![waited, raised]);
}

fn dashboard() -> Value {
    serde_json::from_str(&repository_file("dashboards/idem.json")).expect("the dashboard is JSON")
}

/// The dashboard is a Grafana dashboard model on a Prometheus data source variable, and
/// every metric its queries name is in a real scrape of the payments example.
fn the_dashboard_queries_only_scraped_metrics() {
    let dashboard = dashboard();
    check_the_model(&dashboard);
    let scrapes = SCRAPES.get().expect("the counting test's scrapes");
    let scraped: BTreeSet<&str> = scrapes.iter().flat_map(Scrape::names).collect();
    let missing = promql::missing(&dashboard, &scraped);
    assert!(missing.is_empty(), "queried, never scraped: {missing:?}");

    // Every one of the coordinator's metrics has a panel, and the I7 panel is the four
    // counted causes.
    let queried: BTreeSet<String> = promql::queries(&dashboard)
        .iter()
        .flat_map(|(_, expr)| promql::metric_names(expr))
        .collect();
    for metric in exported()
        .iter()
        .filter(|m| m.labels.first() == Some(&"coordinator"))
    {
        assert!(
            queried.contains(metric.name),
            "no panel queries {}",
            metric.name
        );
    }
    let i7 = panel(&dashboard, "I7");
    let causes: BTreeSet<String> = i7["targets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|target| promql::metric_names(target["expr"].as_str().unwrap()))
        .collect();
    let expected = [
        "idem_failed_open_total",
        "idem_lease_lost_total",
        "idem_left_to_lease_total",
        "idem_shutdown_cut_total",
    ];
    assert_eq!(causes, expected.iter().map(|s| s.to_string()).collect());
}

/// The one panel whose title contains `part`.
fn panel<'a>(dashboard: &'a Value, part: &str) -> &'a Value {
    let found: Vec<&Value> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["title"].as_str().unwrap_or_default().contains(part))
        .collect();
    assert_eq!(found.len(), 1, "panels titled with {part:?}");
    found[0]
}

/// What Grafana needs of a dashboard model to import it, and what this one promises: every
/// panel on the `${datasource}` variable, ids unique, on the 24-column grid without overlap.
fn check_the_model(dashboard: &Value) {
    for field in ["title", "uid"] {
        assert!(
            dashboard[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field}"
        );
    }
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let source = variables
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(
        (&source["type"], &source["query"]),
        (&json!("datasource"), &json!("prometheus"))
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 9, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "id of {title} twice"
        );
        let grid = &panel["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| grid[k].as_u64().expect("gridPos"));
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {grid}");
        for column in x..x + w {
            for row in y..y + h {
                assert!(
                    cells.insert((column, row)),
                    "{title} overlaps another panel"
                );
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            ["timeseries", "stat"].contains(&panel["type"].as_str().unwrap()),
            "{title}"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title}"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert!(
                refs.insert(target["refId"].as_str().expect("a refId")),
                "{title}"
            );
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}"
            );
        }
    }
}

/// A dashboard with a query on a name no scrape has (a counter renamed in the code, here
/// `idem_http_replayed_total` for `idem_http_replays_total`) is reported, with its panel.
fn the_dashboard_check_catches_a_metric_no_scrape_has() {
    let scrapes = SCRAPES.get().expect("the counting test's scrapes");
    let scraped: BTreeSet<&str> = scrapes.iter().flat_map(Scrape::names).collect();
    let mut broken = dashboard();
    let panels = broken["panels"].as_array_mut().unwrap();
    let mut renamed = panels[1].clone();
    renamed["title"] = json!("Replays, renamed");
    renamed["targets"] = json!([{
        "refId": "A",
        "datasource": { "type": "prometheus", "uid": "${datasource}" },
        "expr": "sum by (route) (rate(idem_http_replayed_total{route=~\"$route\"}[$__rate_interval]))",
    }]);
    panels.push(renamed);
    let missing = promql::missing(&broken, &scraped);
    assert_eq!(
        missing,
        [(
            "panel \"Replays, renamed\", target \"A\"".to_owned(),
            vec!["idem_http_replayed_total".to_owned()]
        )]
    );
    // And a variable that reads its values from a name no scrape has.
    let mut broken = dashboard();
    broken["templating"]["list"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "gone", "type": "query", "query": "label_values(idem_calls, coordinator)" }));
    let missing = promql::missing(&broken, &scraped);
    assert_eq!(
        missing,
        [(
            "variable \"gone\"".to_owned(),
            vec!["idem_calls".to_owned()]
        )]
    );
}
