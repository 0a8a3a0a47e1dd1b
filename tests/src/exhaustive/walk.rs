//! The walk: every path out of a model's first state, each finished run judged.
//!
//! A state carries the history written so far, so no two paths reach the same state: the
//! states form a tree, and the walk visits each once, depth first, holding one path of
//! states at a time. The first level or two are spread over threads (each thread walks whole
//! subtrees, taken in order), and the results are put back together in the tree's order, so
//! the counts and the counterexample are the same for any number of threads.
//!
//! A run that ends is judged by `idem_check`'s judge, the one that judges the simulation and
//! loom's and shuttle's runs. The counterexample kept is the shortest (fewest events, then
//! first in the tree's order): once one is found, a path already as long is not followed,
//! since its runs could only be longer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_check::{Counterexample, EventKind, check_run};

use super::state::{Choice, State};
use crate::coverage::Coverage;

/// What a walk saw.
#[derive(Debug, Default)]
pub struct Walked {
    /// States visited, the first included.
    pub states: u64,
    /// Runs that ended (states with no way on), each judged.
    pub runs: u64,
    /// The most steps on one path.
    pub depth: usize,
    /// The most events in one run's history.
    pub events: usize,
    /// What the runs exercised, summed.
    pub coverage: Coverage,
    /// Runs in which a holder paused (the coverage does not count pauses).
    pub paused: u64,
    /// Runs in which a transactional action's writes committed with the record.
    pub committed: u64,
    /// The shortest run the judge found a violation in, and its place in the tree's order.
    pub counterexample: Option<(Vec<usize>, Box<Counterexample>)>,
}

impl Walked {
    /// Adds what another subtree saw. `self`'s subtree comes first in the tree's order.
    fn append(&mut self, other: Walked) {
        self.states += other.states;
        self.runs += other.runs;
        self.depth = self.depth.max(other.depth);
        self.events = self.events.max(other.events);
        self.coverage.add(&other.coverage);
        self.paused += other.paused;
        self.committed += other.committed;
        if let Some((place, found)) = other.counterexample {
            self.keep(place, found);
        }
    }

    /// Keeps `found` if it is shorter than the one kept, or as short and earlier.
    fn keep(&mut self, place: Vec<usize>, found: Box<Counterexample>) {
        let better = match &self.counterexample {
            None => true,
            Some((kept_place, kept)) => {
                let (length, kept_length) = (found.history.events.len(), kept.history.events.len());
                length < kept_length || (length == kept_length && place < *kept_place)
            }
        };
        if better {
            self.counterexample = Some((place, found));
        }
    }

    /// How many events the counterexample kept has, if any.
    pub fn counterexample_events(&self) -> Option<usize> {
        self.counterexample
            .as_ref()
            .map(|(_, found)| found.history.events.len())
    }
}

/// The length of the shortest counterexample any thread has found, for pruning. Pruning makes
/// the count of states of a walk that finds a violation depend on the threads' timing; a walk
/// that finds none prunes nothing.
struct Bound(AtomicUsize);

impl Bound {
    /// Whether a state whose history has `events` events can still end in a run no longer
    /// than the shortest counterexample found. Runs as long are still walked, so the one kept
    /// (the first in the tree's order among the shortest) does not depend on which thread
    /// found what first.
    fn allows(&self, events: usize) -> bool {
        events <= self.0.load(Ordering::Relaxed)
    }

    fn lower(&self, events: usize) {
        self.0.fetch_min(events, Ordering::Relaxed);
    }
}

/// Walks every path out of `first` on `threads` threads.
pub fn walk(first: State, threads: usize) -> Walked {
    let bound = Bound(AtomicUsize::new(usize::MAX));
    // The subtrees to share out: the first levels, expanded until there are enough of them
    // to keep every thread busy. Each keeps its place in the tree's order.
    let mut walked = Walked::default();
    let mut level = vec![(Vec::new(), first)];
    let want = threads.max(1) * 16;
    let mut choices = Vec::new();
    for _ in 0..3 {
        if level.len() >= want {
            break;
        }
        let mut next = Vec::new();
        for (place, state) in level {
            walked.states += 1;
            state.choices(&mut choices);
            if choices.is_empty() {
                walked.depth = walked.depth.max(place.len());
                finish(&mut walked, place, &state, &bound);
                continue;
            }
            for (index, choice) in choices.iter().enumerate() {
                let mut child = state.clone();
                child.apply(*choice);
                let mut child_place = place.clone();
                child_place.push(index);
                next.push((child_place, child));
            }
        }
        level = next;
    }
    // Subtrees are counted from their roots: their roots were not counted above.
    let taken = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Walked)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let index = taken.fetch_add(1, Ordering::Relaxed);
                    let Some((place, state)) = level.get(index) else {
                        break;
                    };
                    let mut subtree = Walked::default();
                    depth_first(state.clone(), place.clone(), &mut subtree, &bound);
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((index, subtree));
                }
            });
        }
    });
    let mut results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(index, _)| *index);
    for (_, subtree) in results {
        walked.append(subtree);
    }
    walked
}

/// Judges a run that ended.
fn finish(walked: &mut Walked, place: Vec<usize>, state: &State, bound: &Bound) {
    walked.runs += 1;
    let history = state.history();
    let events = history.events.len();
    walked.events = walked.events.max(events);
    walked.coverage.add(&Coverage::of(history));
    let happened = |what: fn(&EventKind) -> bool| history.events.iter().any(|e| what(&e.kind));
    walked.paused += u64::from(happened(|kind| matches!(kind, EventKind::Paused { .. })));
    walked.committed += u64::from(happened(|kind| matches!(kind, EventKind::Committed { .. })));
    if let Err(found) = check_run(state.history()) {
        bound.lower(events);
        walked.keep(place, found);
    }
}

/// Walks the subtree under `state` (at `place`) depth first.
fn depth_first(state: State, place: Vec<usize>, walked: &mut Walked, bound: &Bound) {
    // The path being walked: each state with the choices out of it and the next to take.
    let mut path: Vec<(State, Vec<Choice>, usize)> = Vec::new();
    let mut place = place;
    let base = place.len();
    let mut enter = Some(state);
    loop {
        if let Some(state) = enter.take() {
            walked.states += 1;
            walked.depth = walked.depth.max(place.len());
            let mut choices = Vec::new();
            state.choices(&mut choices);
            if choices.is_empty() {
                finish(walked, place.clone(), &state, bound);
            } else if bound.allows(state.history().events.len()) {
                path.push((state, choices, 0));
                place.push(0);
                // Fall through to take the first choice.
            }
        }
        let Some((state, choices, next)) = path.last_mut() else {
            return;
        };
        let Some(choice) = choices.get(*next).copied() else {
            path.pop();
            place.pop();
            continue;
        };
        if let Some(slot) = place.last_mut() {
            *slot = *next;
        }
        *next += 1;
        let mut child = state.clone();
        child.apply(choice);
        enter = Some(child);
        debug_assert!(place.len() > base);
    }
}
