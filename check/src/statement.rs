//! The card statement: the downstream provider's own record of every request that reached
//! it, one line per charge, whatever the callers were told, with the downstream key each
//! request carried (MODEL.md `D1`). The statement itself does not deduplicate: that is
//! idem's job, and the statement is how a test sees whether idem did it. What a provider
//! that deduplicates by the downstream key would have made of the same requests is the
//! [`Provider`] model's ([`Provider::effects`]).
//!
//! A charge's id is `ch_N`, `N` counting every charge on the statement from one; an action
//! that succeeds returns that id as its value, so a recorded or replayed body names the
//! charge it came from.

use std::fmt;
use std::str::FromStr;

use idem_core::{DownstreamKey, Fence};

use crate::tally::{Class, UnknownName, parse_name};

/// One line of the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge<K> {
    /// The key the charge was made under.
    pub key: K,
    /// The charge id, `ch_N`.
    pub id: String,
    /// The attempt that made it (an index into a [`History`](crate::History)'s attempts),
    /// when the statement is part of one.
    pub by: Option<usize>,
    /// When it was made, on the clock of whoever keeps the statement (a history's: the
    /// store's).
    pub at: u64,
    /// The downstream key the request carried (MODEL.md `D1`), if it carried one.
    pub downstream: Option<DownstreamKey>,
    /// The fence the request carried (MODEL.md `F1`): its attempt's grant's, if it had one.
    pub fence: Option<Fence>,
}

/// The provider's statement: every charge, in order. `K` is how the keeper names a key: an
/// index into a history's keys, or the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement<K> {
    lines: Vec<Charge<K>>,
}

impl<K> Default for Statement<K> {
    fn default() -> Self {
        Self { lines: Vec::new() }
    }
}

impl<K: PartialEq + fmt::Debug> Statement<K> {
    /// Charges the card under `key` at `at` (by attempt `by`, if known); returns the new line.
    pub fn charge(&mut self, key: K, by: Option<usize>, at: u64) -> &Charge<K> {
        self.charge_sending(key, by, at, None, None)
    }

    /// As [`charge`](Self::charge), the request carrying `downstream` as the provider's own
    /// idempotency key, and `fence` as its holder's fence.
    pub fn charge_sending(
        &mut self,
        key: K,
        by: Option<usize>,
        at: u64,
        downstream: Option<DownstreamKey>,
        fence: Option<Fence>,
    ) -> &Charge<K> {
        let id = crate::history::numbered("ch_", self.lines.len() + 1);
        self.lines.push(Charge {
            key,
            id,
            by,
            at,
            downstream,
            fence,
        });
        let last = self.lines.len() - 1;
        &self.lines[last]
    }

    /// Writes that committed in the store's own database, with the record of their result
    /// (MODEL.md, "Effects that commit with the record"), under `key` at `at` (by attempt
    /// `by`, if known): a line under the id `id` their action chose when it made them, since
    /// they are named before anyone knows whether they will commit. Returns the new line.
    pub fn commit(&mut self, key: K, by: Option<usize>, at: u64, id: String) -> &Charge<K> {
        self.lines.push(Charge {
            key,
            id,
            by,
            at,
            downstream: None,
            fence: None,
        });
        let last = self.lines.len() - 1;
        &self.lines[last]
    }

    /// Strikes every line, keeping the room they took for the next statement.
    pub fn clear(&mut self) {
        self.lines.clear();
    }

    /// Every line, in order.
    pub fn lines(&self) -> &[Charge<K>] {
        &self.lines
    }

    /// How many charges in all.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether nothing was charged.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Every charge id, in order.
    pub fn ids(&self) -> Vec<&str> {
        self.lines.iter().map(|line| line.id.as_str()).collect()
    }

    /// The charges under `key`, in order.
    pub fn of<'a>(&'a self, key: &'a K) -> impl Iterator<Item = &'a Charge<K>> + 'a {
        self.lines.iter().filter(move |line| line.key == *key)
    }

    /// How many times `key` was charged.
    pub fn count(&self, key: &K) -> usize {
        self.of(key).count()
    }

    /// The line whose id is `id`, if any.
    pub fn find(&self, id: &[u8]) -> Option<(usize, &Charge<K>)> {
        self.lines
            .iter()
            .enumerate()
            .find(|(_, line)| line.id.as_bytes() == id)
    }

    /// Charges beyond the first of each key.
    pub fn extra(&self) -> usize {
        self.lines
            .iter()
            .enumerate()
            .filter(|(i, line)| {
                self.lines[..*i]
                    .iter()
                    .any(|earlier| earlier.key == line.key)
            })
            .count()
    }

    /// `I7` seen from the provider alone: `key` was charged exactly once. The statement
    /// knows no causes; where an extra effect may have one (MODEL.md, "Non-guarantees"),
    /// the judge of a whole [`History`](crate::History) decides.
    pub fn one_effect(&self, key: &K) -> Result<(), String> {
        match self.count(key) {
            1 => Ok(()),
            n => Err(format!(
                "{key:?} was charged {n} times, expected once: {:?}",
                self.of(key)
                    .map(|line| line.id.as_str())
                    .collect::<Vec<_>>()
            )),
        }
    }

    /// [`Statement::one_effect`] for every key of `keys`, all failures told at once.
    pub fn one_effect_per_key<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a K>,
    ) -> Result<(), String>
    where
        K: 'a,
    {
        let failures: Vec<String> = keys
            .into_iter()
            .filter_map(|key| self.one_effect(key).err())
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// The keys charged, each once, in the order of their first charge.
    pub fn keys(&self) -> Vec<&K> {
        let mut keys: Vec<&K> = Vec::new();
        for line in &self.lines {
            if !keys.contains(&&line.key) {
                keys.push(&line.key);
            }
        }
        keys
    }

    /// Something was charged, and every key charged was charged exactly once.
    pub fn one_effect_each(&self) -> Result<(), String> {
        if self.lines.is_empty() {
            return Err("nothing was charged".into());
        }
        self.one_effect_per_key(self.keys())
    }

    /// Pairs of consecutive charges of one key made less than `gap` apart (on the keeper's
    /// clock): the key was charged again before a lease of `gap` could have ended.
    pub fn charged_again_within(&self, gap: u64) -> Vec<(&K, u64)> {
        let mut found = Vec::new();
        for (i, line) in self.lines.iter().enumerate() {
            let previous = self.lines[..i].iter().rev().find(|e| e.key == line.key);
            if let Some(previous) = previous {
                let apart = line.at.saturating_sub(previous.at);
                if apart < gap {
                    found.push((&line.key, apart));
                }
            }
        }
        found
    }
}

/// What the provider does with the requests on the statement (MODEL.md `D1`): which of them
/// are effects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Every request is an effect: a provider with no idempotency of its own.
    #[default]
    Plain,
    /// A request whose downstream key the provider has seen before is answered with the
    /// earlier effect and makes none: a payment API that deduplicates by its own
    /// `Idempotency-Key`, for as long as the run lasts. A request without a downstream key
    /// is always an effect.
    Keyed,
    /// A provider that keeps one value per key and writes it only under a fence (MODEL.md
    /// `F1`) not below the highest it has applied for the key: a table of your own behind
    /// `idem_postgres::FenceGuard`, a storage service with conditional writes. A request
    /// under a lower fence is a stale holder's and is refused; one under the highest or a
    /// higher fence writes the key's value, replacing the write before it, so the key holds
    /// one effect, the newest holder's, however many holders wrote. A request without a
    /// fence (a run that failed open) is a write the provider cannot order against the
    /// holders': an effect of its own. What this buys an effect that adds rather than
    /// replaces (a card charge) is only the refusals: such a provider needs the downstream
    /// key.
    Fenced,
}

impl Provider {
    /// Every provider model, in the order above.
    pub const ALL: [Provider; 3] = [Provider::Plain, Provider::Keyed, Provider::Fenced];

    /// The model's name on the command line: `plain`, `keyed`, `fenced`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Plain => "plain",
            Provider::Keyed => "keyed",
            Provider::Fenced => "fenced",
        }
    }

    /// Of `lines` (a key's requests, in order), the ones the provider applied, in order: every
    /// one at the plain provider, the first of each downstream key at the keyed one, every
    /// one but those under a fence below the highest applied before at the fenced one.
    pub fn applied<'a, K>(self, lines: &[&'a Charge<K>]) -> Vec<&'a Charge<K>> {
        match self {
            Provider::Plain => lines.to_vec(),
            Provider::Keyed => {
                let mut applied: Vec<&Charge<K>> = Vec::with_capacity(1);
                for line in lines {
                    let seen = line.downstream.is_some()
                        && applied.iter().any(|e| e.downstream == line.downstream);
                    if !seen {
                        applied.push(line);
                    }
                }
                applied
            }
            Provider::Fenced => {
                let mut highest: Option<Fence> = None;
                let mut applied: Vec<&Charge<K>> = Vec::with_capacity(1);
                for line in lines {
                    if let Some(fence) = line.fence {
                        if highest.is_some_and(|highest| fence < highest) {
                            continue;
                        }
                        highest = Some(fence);
                    }
                    applied.push(line);
                }
                applied
            }
        }
    }

    /// Of `lines` (a key's requests, in order), the effects that remain at this provider: the
    /// requests it applied, in order, except at the fenced provider, where each fenced write
    /// replaces the one before it, so what remains is every write without a fence, in order,
    /// then the last fenced write (last: it is the key's value, the one effect a fence lets
    /// stand, and the extra effects are the others).
    pub fn effects<'a, K>(self, lines: &[&'a Charge<K>]) -> Vec<&'a Charge<K>> {
        let applied = self.applied(lines);
        if self != Provider::Fenced {
            return applied;
        }
        let (mut effects, fenced): (Vec<_>, Vec<_>) =
            applied.into_iter().partition(|line| line.fence.is_none());
        effects.extend(fenced.last());
        effects
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Class for Provider {
    const ALL: &'static [Self] = &Provider::ALL;
    const KIND: &'static str = "provider";

    fn name(self) -> &'static str {
        Provider::name(self)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Provider {
    type Err = UnknownName;

    fn from_str(name: &str) -> Result<Self, UnknownName> {
        parse_name(name)
    }
}
