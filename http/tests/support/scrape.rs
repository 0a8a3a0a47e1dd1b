//! Prometheus's text exposition format (version 0.0.4), read back: what a scrape of
//! `GET /metrics` says, sample by sample, so a test asserts on the values a Prometheus server
//! would store.
//!
//! Each line is a comment (`# HELP`, `# TYPE`, or any other `#`), blank, or a sample:
//! `name{label="value",...} value [timestamp]`, where a label value escapes `\`, `"` and a
//! newline as `\\`, `\"` and `\n`.

use std::collections::{BTreeMap, BTreeSet};

/// One sample: a name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A scrape: its samples in order, and the type each `# TYPE` line gave a name.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    /// Reads `text`; the first line that is not the format is the error, with its number.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut scrape = Scrape::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let fail = |why: &str| format!("line {}: {why}: {line:?}", number + 1);
            if let Some(comment) = line.strip_prefix('#') {
                let words: Vec<&str> = comment.split_whitespace().collect();
                if let ["TYPE", name, kind] = words.as_slice() {
                    let known = ["counter", "gauge", "histogram", "summary", "untyped"];
                    if !known.contains(kind) {
                        return Err(fail("an unknown type"));
                    }
                    if scrape
                        .types
                        .insert((*name).to_owned(), (*kind).to_owned())
                        .is_some()
                    {
                        return Err(fail("a second TYPE for one name"));
                    }
                }
                continue;
            }
            scrape.samples.push(sample(line).map_err(|why| fail(&why))?);
        }
        Ok(scrape)
    }

    /// The names of every sample.
    pub fn names(&self) -> BTreeSet<&str> {
        self.samples.iter().map(|s| s.name.as_str()).collect()
    }

    /// The value of the one sample named `name` whose labels include `labels`; `None` if
    /// there is none. Panics if there are several: the test named too few labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(
            found.len() <= 1,
            "{name} {labels:?} names several samples: {found:?}"
        );
        found.first().map(|s| s.value)
    }

    /// Every sample named `name`.
    pub fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("no metric name".to_owned());
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = label_set(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other
            .parse()
            .map_err(|_| format!("a value that is not a number: {other}"))?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("a timestamp that is not an integer: {timestamp}"))?;
    }
    if fields.next().is_some() {
        return Err("more after the timestamp".to_owned());
    }
    if !rest.starts_with(char::is_whitespace) {
        return Err("no space before the value".to_owned());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `label="value",...}` into `labels`; returns what follows the `}`.
fn label_set<'a>(
    mut text: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        text = text.trim_start();
        if let Some(after) = text.strip_prefix('}') {
            return Ok(after);
        }
        let end = text
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or("an unterminated label set")?;
        let label = &text[..end];
        if label.is_empty() {
            return Err(format!("no label name at {text:?}"));
        }
        text = text[end..]
            .trim_start()
            .strip_prefix('=')
            .ok_or("no = after a label name")?
            .trim_start()
            .strip_prefix('"')
            .ok_or("a label value that is not quoted")?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let close = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("an unknown escape: {other:?}")),
                },
                Some((_, c)) => value.push(c),
                None => return Err("an unterminated label value".to_owned()),
            }
        };
        if labels.insert(label.to_owned(), value).is_some() {
            return Err(format!("the label {label} twice"));
        }
        text = text[close + 1..].trim_start();
        if let Some(after) = text.strip_prefix(',') {
            text = after;
        } else if !text.starts_with('}') {
            return Err(format!("neither , nor }} after a label: {text:?}"));
        }
    }
}

/// The reader on what it must accept and what it must refuse.
pub fn check_the_reader() {
    let text = "# HELP a_total A counter.\n# TYPE a_total counter\n\
                a_total{route=\"POST /charges\",type=\"say \\\"hi\\\"\\\\\"} 3\n\
                b 1.5 1700000000000\n\
                c{} -Inf\n";
    let scrape = Scrape::parse(text).expect("the format");
    assert_eq!(scrape.types["a_total"], "counter");
    assert_eq!(
        scrape.value(
            "a_total",
            &[("route", "POST /charges"), ("type", "say \"hi\"\\")]
        ),
        Some(3.0)
    );
    assert_eq!(scrape.value("a_total", &[("route", "GET /")]), None);
    assert_eq!(scrape.value("b", &[]), Some(1.5));
    assert_eq!(scrape.value("c", &[]), Some(f64::NEG_INFINITY));
    for broken in [
        "a{route=\"x} 1",
        "a{route=x} 1",
        "a{route=\"x\"}",
        "a 1 2 3",
        "a one",
        "{route=\"x\"} 1",
        "a{route=\"x\",route=\"y\"} 1",
        "# TYPE a countr",
    ] {
        assert!(Scrape::parse(broken).is_err(), "accepted {broken:?}");
    }
}
