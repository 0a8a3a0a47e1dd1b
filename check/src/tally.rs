//! Counts per class (fault classes reached, causes of extra effects), and the error for a
//! class name that does not exist.

use std::fmt;
use std::marker::PhantomData;

/// A closed set of named classes that can be counted and parsed by name.
pub trait Class: Copy + 'static {
    /// Every class, in the order summaries print them.
    const ALL: &'static [Self];
    /// What the classes are called, for error messages ("fault", "variant").
    const KIND: &'static str;
    /// The class's name.
    fn name(self) -> &'static str;
    /// The class's position in [`Class::ALL`].
    fn index(self) -> usize;
}

/// The largest class set a [`Tally`] holds unless it says otherwise.
pub const MAX_CLASSES: usize = 64;

/// How many times each class of `C` was counted, in room for `N` classes: `C`'s classes
/// must number at most `N` (checked when the tally is made). A small class set says its
/// own `N`, so that a tally that is made, copied and merged once a run stays small (the
/// judge's verdict holds seven tallies of causes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally<C, const N: usize = MAX_CLASSES> {
    counts: [u64; N],
    classes: PhantomData<C>,
}

impl<C: Class, const N: usize> Default for Tally<C, N> {
    fn default() -> Self {
        const { assert!(C::ALL.len() <= N, "a tally has room for every class") };
        Self {
            counts: [0; N],
            classes: PhantomData,
        }
    }
}

impl<C: Class, const N: usize> Tally<C, N> {
    /// Counts one occurrence.
    pub fn add(&mut self, class: C) {
        self.counts[class.index()] += 1;
    }

    /// The count for `class`.
    pub fn get(&self, class: C) -> u64 {
        self.counts[class.index()]
    }

    /// Every occurrence of every class.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
    }

    /// The classes never counted.
    pub fn missing(&self) -> Vec<C> {
        C::ALL
            .iter()
            .copied()
            .filter(|class| self.get(*class) == 0)
            .collect()
    }
}

/// A name that is none of the known classes of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being named ("fault", "variant").
    pub kind: &'static str,
    /// The name given.
    pub given: String,
    /// The names known.
    pub known: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?}; known: {}",
            self.kind,
            self.given,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

/// The class named `name`, or an [`UnknownName`] listing the known ones.
pub fn parse_name<C: Class>(name: &str) -> Result<C, UnknownName> {
    C::ALL
        .iter()
        .copied()
        .find(|class| class.name() == name)
        .ok_or_else(|| UnknownName {
            kind: C::KIND,
            given: name.to_owned(),
            known: C::ALL.iter().map(|class| class.name()).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cause, CauseCounts};

    /// A tally in room for its own classes alone (the causes: six) counts, totals, merges
    /// and misses every one of them as a tally of the default size does.
    #[test]
    fn a_tally_sized_to_its_classes_counts_every_class() {
        assert_eq!(
            std::mem::size_of::<CauseCounts>(),
            Cause::ALL.len() * std::mem::size_of::<u64>()
        );
        let mut small = CauseCounts::default();
        let mut large = Tally::<Cause>::default();
        assert_eq!(small.missing(), Cause::ALL.to_vec());
        for (n, cause) in Cause::ALL.iter().enumerate() {
            for _ in 0..=n {
                small.add(*cause);
                large.add(*cause);
            }
        }
        for (n, cause) in Cause::ALL.iter().enumerate() {
            assert_eq!(small.get(*cause), n as u64 + 1);
            assert_eq!(large.get(*cause), n as u64 + 1);
        }
        assert_eq!(small.total(), 21);
        assert_eq!(large.total(), 21);
        assert!(small.missing().is_empty());
        let mut merged = CauseCounts::default();
        merged.add(Cause::RetentionExpired);
        merged.merge(&small);
        assert_eq!(merged.get(Cause::RetentionExpired), 7);
        assert_eq!(merged.get(Cause::FailOpen), 1);
        assert_eq!(merged.total(), 22);
    }
}
