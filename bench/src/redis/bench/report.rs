//! What a bench run found, as a table for people ([`BenchReport::text`]) and as one JSON
//! object for tools ([`BenchReport::json`]), with the ratios BENCHMARKS.md sets targets for.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::{BenchReport, Phase};

impl BenchReport {
    fn phase(&self, concurrency: usize, name: &str) -> Option<&Phase> {
        self.levels
            .iter()
            .find(|(c, _, _)| *c == concurrency)
            .and_then(|(_, phases, _)| phases.iter().find(|p| p.name == name))
    }

    fn per_s(&self, concurrency: usize, name: &str) -> Option<f64> {
        self.phase(concurrency, name).map(|p| p.load.per_second())
    }

    /// The highest concurrency measured: the headline figures are at this level (256 by
    /// default).
    pub fn headline_concurrency(&self) -> usize {
        self.levels.iter().map(|(c, _, _)| *c).max().unwrap_or(0)
    }

    /// A human-readable table, one line per phase, then the ratios.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "redis {}", self.redis_version);
        for (c, phases, hot) in &self.levels {
            let _ = writeln!(out, "concurrency {c}");
            for p in phases {
                let _ = writeln!(
                    out,
                    "  {:<10} {:>10.0} calls/s  p50 {:>8.3} ms  p99 {:>8.3} ms  errors {:>4}  requests/call {:.2}  server: {}",
                    p.name,
                    p.load.per_second(),
                    p.load.p50.as_secs_f64() * 1e3,
                    p.load.p99.as_secs_f64() * 1e3,
                    p.load.errors,
                    p.requests_per_call(),
                    p.commands.per_call(p.load.calls + p.load.errors),
                );
            }
            let _ = writeln!(
                out,
                "  one_key: {} keys, {} effects, {} waiters, {:.1} waiter requests per second of waiting",
                hot.keys,
                hot.effects,
                hot.waiters,
                self.waiter_requests_per_s(*c).unwrap_or(0.0),
            );
        }
        let _ = writeln!(
            out,
            "record bytes (MEMORY USAGE): pending {}, completed {}",
            self.pending_bytes.map_or("?".into(), |b| b.to_string()),
            self.completed_bytes.map_or("?".into(), |b| b.to_string()),
        );
        for (name, value) in self.ratios() {
            let _ = writeln!(out, "{name}: {value:.3}");
        }
        out
    }

    /// Requests a waiter sends per second of waiting in the `one_key` phase: all requests
    /// less the two of each executing call, over the time waiters spent.
    pub fn waiter_requests_per_s(&self, concurrency: usize) -> Option<f64> {
        let (_, _, hot) = self.levels.iter().find(|(c, _, _)| *c == concurrency)?;
        let phase = self.phase(concurrency, "one_key")?;
        if hot.waiting_secs == 0.0 {
            return None;
        }
        let waiter_requests = phase.requests.saturating_sub(2 * hot.effects);
        Some(waiter_requests as f64 / hot.waiting_secs)
    }

    /// The ratios BENCHMARKS.md sets targets for.
    pub fn ratios(&self) -> Vec<(&'static str, f64)> {
        let top = self.headline_concurrency();
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        [
            (
                "fresh / raw_fresh",
                ratio(self.per_s(top, "fresh"), self.per_s(top, "raw_fresh")),
            ),
            (
                "replay / raw_replay",
                ratio(self.per_s(top, "replay"), self.per_s(top, "raw_replay")),
            ),
            (
                "fresh / ping",
                ratio(self.per_s(top, "fresh"), self.per_s(top, "ping")),
            ),
            (
                "replay / ping",
                ratio(self.per_s(top, "replay"), self.per_s(top, "ping")),
            ),
            (
                "fresh / ping at concurrency 1",
                ratio(self.per_s(1, "fresh"), self.per_s(1, "ping")),
            ),
        ]
        .into_iter()
        .filter_map(|(name, r)| r.map(|r| (name, r)))
        .collect()
    }

    /// One JSON object: the headline fields BENCHMARKS.md names, then every phase.
    pub fn json(&self) -> Value {
        let top = self.headline_concurrency();
        let mut o = Map::new();
        let mut put = |name: &str, v: Option<f64>| {
            o.insert(name.to_owned(), v.map_or(Value::Null, Value::from));
        };
        put("fresh_per_s", self.per_s(top, "fresh"));
        put("replay_per_s", self.per_s(top, "replay"));
        put(
            "commands_per_fresh",
            self.phase(top, "fresh").map(Phase::requests_per_call),
        );
        put(
            "commands_per_replay",
            self.phase(top, "replay").map(Phase::requests_per_call),
        );
        put("baseline_ping_per_s", self.per_s(top, "ping"));
        put("baseline_fresh_per_s", self.per_s(top, "raw_fresh"));
        put("baseline_replay_per_s", self.per_s(top, "raw_replay"));
        put("fresh_per_s_c1", self.per_s(1, "fresh"));
        put("baseline_ping_per_s_c1", self.per_s(1, "ping"));
        put("waiter_commands_per_s", self.waiter_requests_per_s(top));
        o.insert("concurrency".into(), json!(top));
        o.insert("pending_record_bytes".into(), json!(self.pending_bytes));
        o.insert("completed_record_bytes".into(), json!(self.completed_bytes));
        o.insert("redis_version".into(), json!(self.redis_version));
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|(c, phases, hot)| {
                let phases: Map<String, Value> = phases
                    .iter()
                    .map(|p| {
                        let calls = p.load.calls + p.load.errors;
                        (
                            p.name.to_owned(),
                            json!({
                                "per_s": p.load.per_second(),
                                "calls": p.load.calls,
                                "errors": p.load.errors,
                                "p50_us": p.load.p50.as_micros() as u64,
                                "p99_us": p.load.p99.as_micros() as u64,
                                "requests_per_call": p.requests_per_call(),
                                "server_commands_per_call":
                                    p.commands.executed() as f64 / calls.max(1) as f64,
                            }),
                        )
                    })
                    .collect();
                json!({
                    "concurrency": c,
                    "phases": phases,
                    "one_key": {
                        "keys": hot.keys,
                        "effects": hot.effects,
                        "waiters": hot.waiters,
                        "waiting_secs": hot.waiting_secs,
                    },
                })
            })
            .collect();
        o.insert("levels".into(), Value::Array(levels));
        for (name, r) in self.ratios() {
            o.insert(format!("ratio {name}"), json!(r));
        }
        Value::Object(o)
    }
}
