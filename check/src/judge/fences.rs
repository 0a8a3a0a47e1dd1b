//! `F1`: every grant of a key carries a fence above every fence granted for that key before,
//! on a store that hands fences out; the holder keeps its fence through renewals and its
//! repeated reserve. Judged on the records the store wrote, in the order it wrote them: a
//! reservation written for an owner that did not hold the key under that fence is a grant.

use idem_core::record::Record;
use idem_core::{Fence, OwnerToken};

use super::{Rule, Run, Violation};

/// What the judge knows of one stored record's fences so far.
#[derive(Debug, Clone, Copy, Default)]
struct Granted {
    /// The holder of the latest grant and its fence.
    holder: Option<(OwnerToken, Fence)>,
    /// The highest fence granted, and the event that granted it.
    highest: Option<(Fence, usize)>,
}

/// The fences granted so far, per stored record.
pub(super) struct Fences {
    records: Vec<Granted>,
}

impl Fences {
    pub(super) fn new(records: usize) -> Self {
        Self {
            records: vec![Granted::default(); records],
        }
    }

    /// Store step `index`, which left stored record `record` as `after`.
    pub(super) fn step(
        &mut self,
        run: &Run<'_>,
        index: usize,
        record: usize,
        after: Option<&Record>,
        found: &mut Vec<Violation>,
    ) {
        let (
            Some(granted),
            Some(Record::Pending {
                owner,
                fence: Some(fence),
                ..
            }),
        ) = (self.records.get_mut(record), after)
        else {
            return;
        };
        if granted.holder == Some((*owner, *fence)) {
            return;
        }
        if let Some((highest, at)) = granted.highest
            && *fence <= highest
        {
            found.push(run.violation(
                Rule::FenceIncreasing,
                Some(index),
                format!(
                    "{} was granted the key under fence {fence}, not above fence {highest} \
                     granted at event {at}: a provider that honours fences cannot tell the \
                     two holders apart",
                    run.owner_label(*owner)
                ),
            ));
        }
        granted.holder = Some((*owner, *fence));
        if granted.highest.is_none_or(|(highest, _)| *fence > highest) {
            granted.highest = Some((*fence, index));
        }
    }
}
