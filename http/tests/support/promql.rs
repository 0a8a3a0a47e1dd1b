//! The metric names a Grafana dashboard's PromQL queries, so a test can hold the dashboard to
//! the names a real scrape holds: a metric renamed in the code, or misspelled in the
//! dashboard, is a name the dashboard queries and no scrape has.
//!
//! An expression is read token by token: strings, label matchers (`{...}`), ranges (`[...]`),
//! Grafana's variables (`$name`, `${name}`, `[[name]]`), numbers and durations are skipped;
//! a name followed by `(` is a function or an aggregation; `by`, `without`, `on`, `ignoring`,
//! `group_left` and `group_right` are followed by a list of label names, skipped with them;
//! the remaining names that are not keywords are metric names.

use std::collections::BTreeSet;

use serde_json::Value;

/// Aggregations, which may be followed by `by (...)` before their `(`.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Words that are neither metrics nor followed by `(`.
const KEYWORDS: [&str; 7] = ["and", "or", "unless", "bool", "offset", "inf", "nan"];

/// The metric names `expr` queries.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_group(&chars, i, '{', '}'),
            '[' => i = skip_group(&chars, i, '[', ']'),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_group(&chars, i, '{', '}');
                } else {
                    while i < chars.len() && is_name_char(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                // A number or a duration (`1e-9`, `0.5`, `5m`).
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let call = chars.get(next) == Some(&'(');
                if LABEL_LISTS.contains(&word.as_str()) {
                    if call {
                        i = skip_group(&chars, next, '(', ')');
                    }
                } else if call
                    || AGGREGATIONS.contains(&word.as_str())
                    || KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
                {
                    // A function, an aggregation or a keyword.
                } else {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string that starts at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after the group that opens at `start`, strings inside it skipped whole.
fn skip_group(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Every query of a dashboard, with where it is: each panel's targets' `expr` (panels in
/// rows too), and each query variable's `label_values(<selector>, <label>)` (its selector
/// alone) or other PromQL query.
pub fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let at = format!("panel {title:?}, target {}", target["refId"]);
                found.push((at, expr.to_owned()));
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = match &variable["query"] {
            Value::String(query) => query.clone(),
            object => object["query"].as_str().unwrap_or_default().to_owned(),
        };
        let query = query.trim();
        let query = match query.strip_prefix("label_values(") {
            // The selector, without the label: `label_values(idem_calls_total, coordinator)`.
            Some(arguments) => arguments
                .rsplit_once(',')
                .map_or(arguments.trim_end_matches(')'), |(selector, _)| selector)
                .to_owned(),
            None => query.to_owned(),
        };
        found.push((format!("variable {}", variable["name"]), query));
    }
    found
}

/// Each query of `dashboard` that names a metric not in `scraped`, with the names it lacks.
pub fn missing(dashboard: &Value, scraped: &BTreeSet<&str>) -> Vec<(String, Vec<String>)> {
    queries(dashboard)
        .into_iter()
        .filter_map(|(at, expr)| {
            let absent: Vec<String> = metric_names(&expr)
                .into_iter()
                .filter(|name| !scraped.contains(name.as_str()))
                .collect();
            (!absent.is_empty()).then_some((at, absent))
        })
        .collect()
}

/// The reader on expressions whose names are known.
pub fn check_the_reader() {
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (route) (rate(idem_http_replays_total{route=~"$route", x="a{b}"}[$__rate_interval]))"#
        ),
        ["idem_http_replays_total"]
    );
    assert_eq!(
        names(
            "sum(rate(a_total{outcome=\"replayed\"}[5m])) / clamp_min(sum without (outcome) (rate(b_total[${__rate_interval}])), 1e-9) > bool 0.5"
        ),
        ["a_total", "b_total"]
    );
    assert_eq!(
        names(
            "max(idem_detached_running) by (coordinator) or on(coordinator) group_left(outcome) vector(0) offset 5m"
        ),
        ["idem_detached_running"]
    );
    assert_eq!(
        names(r#"label_replace(up, "dst", "$1", "src", "(.*)") and ignoring (job) c:rule:rate5m"#),
        ["c:rule:rate5m", "up"]
    );
    assert!(names(r#"vector(1) # a comment naming not_a_metric"#).is_empty());
}
