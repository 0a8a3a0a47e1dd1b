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

/// The largest class set a [`Tally`] holds.
const MAX_CLASSES: usize = 64;

/// How many times each class of `C` was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally<C> {
    counts: [u64; MAX_CLASSES],
    classes: PhantomData<C>,
}

impl<C> Default for Tally<C> {
    fn default() -> Self {
        Self {
            counts: [0; MAX_CLASSES],
            classes: PhantomData,
        }
    }
}

impl<C: Class> Tally<C> {
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
