//! What the Redis server itself reports: per-command call counts (`INFO commandstats`) and
//! the memory a key takes (`MEMORY USAGE`).
//!
//! Redis 7 counts the commands a Lua script runs (`redis.call`) in `commandstats` as well
//! as the script invocation itself, and gives no count of the requests clients sent apart
//! from them: a plain `SET` and a `SET` inside a script look the same. The bench takes a
//! phase's requests from the store's own count and reads here what the server executed
//! for them; a phase without scripts (`ping`) takes its requests from here.

use std::collections::BTreeMap;

/// Calls per command name, as `INFO commandstats` reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandStats(pub BTreeMap<String, u64>);

/// Commands that invoke a script: each is one request from the client.
const SCRIPT_COMMANDS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Commands the measurement itself issues, left out of every count.
const MEASUREMENT_COMMANDS: &[&str] = &["info", "memory|usage", "config|resetstat"];

impl CommandStats {
    /// Parses the text of `INFO commandstats` (lines `cmdstat_NAME:calls=N,usec=...`).
    /// Lines it does not understand are skipped.
    pub fn parse(info: &str) -> Self {
        let mut calls = BTreeMap::new();
        for line in info.lines() {
            let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let count = fields
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(count) = count {
                calls.insert(name.to_ascii_lowercase(), count);
            }
        }
        Self(calls)
    }

    /// The calls made between `before` and `self`, without the measurement's own.
    pub fn since(&self, before: &Self) -> Self {
        let mut delta = BTreeMap::new();
        for (name, &after) in &self.0 {
            if MEASUREMENT_COMMANDS.contains(&name.as_str()) {
                continue;
            }
            let diff = after.saturating_sub(before.0.get(name).copied().unwrap_or(0));
            if diff > 0 {
                delta.insert(name.clone(), diff);
            }
        }
        Self(delta)
    }

    /// Requests the clients sent, where every request was a script invocation or none was:
    /// the script invocations, or, when no script ran, every command. (A mix of plain
    /// commands and scripts cannot be told apart here; the bench counts those requests at
    /// the store.)
    pub fn requests(&self) -> u64 {
        let scripts = self.script_invocations();
        if scripts > 0 {
            scripts
        } else {
            self.0.values().sum()
        }
    }

    /// Script invocations (`EVALSHA`, `EVAL`, `FCALL` and their read-only forms).
    pub fn script_invocations(&self) -> u64 {
        self.0
            .iter()
            .filter(|(name, _)| SCRIPT_COMMANDS.contains(&name.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every command the server executed, those inside scripts included.
    pub fn executed(&self) -> u64 {
        self.0.values().sum()
    }

    /// `name=n/calls` pairs, for the report.
    pub fn per_call(&self, calls: u64) -> String {
        let calls = calls.max(1) as f64;
        self.0
            .iter()
            .map(|(name, n)| format!("{name}={:.2}", *n as f64 / calls))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# Commandstats\r\n\
        cmdstat_ping:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n";
    const AFTER: &str = "# Commandstats\r\n\
        cmdstat_ping:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=4,usec=120,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=200,usec=900,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_time:calls=200,usec=100,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_get:calls=200,usec=100,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        garbage line\r\n";

    #[test]
    fn a_delta_counts_script_invocations_as_the_requests() {
        let delta = CommandStats::parse(AFTER).since(&CommandStats::parse(BEFORE));
        assert_eq!(delta.requests(), 200);
        assert_eq!(delta.executed(), 600);
        assert_eq!(delta.per_call(100), "evalsha=2.00 get=2.00 time=2.00");
    }

    #[test]
    fn without_scripts_every_command_is_a_request() {
        let before = CommandStats::parse(BEFORE);
        let after = CommandStats::parse(&BEFORE.replace("calls=10,", "calls=510,"));
        let delta = after.since(&before);
        assert_eq!(delta.requests(), 500);
        assert_eq!(delta.script_invocations(), 0);
    }
}
