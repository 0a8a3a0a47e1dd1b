//! Items grouped by a small index (a key's, a record's), all in one allocation: the judge
//! groups a run's store steps by record and its charges by key once a run, and a vector per
//! group cost more than the grouping itself.

/// Items under groups `0..len`, each group's in the order they were given.
#[derive(Debug, Clone)]
pub(super) struct Grouped<T> {
    /// Every item, group after group.
    items: Vec<T>,
    /// Where each group's items start in `items`, and after the last group, where they end:
    /// group `g` is `items[starts[g]..starts[g + 1]]`.
    starts: Vec<usize>,
}

impl<T: Copy> Grouped<T> {
    /// `len` groups, holding each `(group, item)` of `entries` in its group, in the order
    /// given; an entry whose group is `len` or above is left out. Reads `entries` twice:
    /// once to count each group's items, once to place them.
    pub(super) fn new<I>(len: usize, entries: I) -> Self
    where
        I: Iterator<Item = (usize, T)> + Clone,
    {
        // First `starts[g + 1]` counts group `g`'s items, then says where they start; as
        // each item is placed it moves on, ending where the group ends.
        let mut starts = vec![0; len + 1];
        let mut filler = None;
        for (group, item) in entries.clone() {
            filler.get_or_insert(item);
            if let Some(count) = starts.get_mut(group + 1) {
                *count += 1;
            }
        }
        let mut placed = 0;
        for start in starts.iter_mut().skip(1) {
            let count = *start;
            *start = placed;
            placed += count;
        }
        let Some(filler) = filler else {
            return Self {
                items: Vec::new(),
                starts,
            };
        };
        let mut items = vec![filler; placed];
        for (group, item) in entries {
            if let Some(next) = starts.get_mut(group + 1) {
                items[*next] = item;
                *next += 1;
            }
        }
        Self { items, starts }
    }
}

impl<T> Grouped<T> {
    /// How many groups.
    pub(super) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Group `group`'s items, in order; `None` when there is no such group.
    pub(super) fn get(&self, group: usize) -> Option<&[T]> {
        let start = *self.starts.get(group)?;
        let end = *self.starts.get(group + 1)?;
        Some(&self.items[start..end])
    }

    /// Every group's items, group by group.
    pub(super) fn iter(&self) -> impl Iterator<Item = &[T]> {
        self.starts
            .windows(2)
            .map(|bounds| &self.items[bounds[0]..bounds[1]])
    }
}

#[cfg(test)]
mod tests {
    use super::Grouped;

    /// Each group holds exactly its entries, in the order given; an empty group and a group
    /// past the last are told apart; entries beyond the groups are left out.
    #[test]
    fn each_group_holds_its_entries_in_order() {
        let entries = [(2, 'a'), (0, 'b'), (2, 'c'), (5, 'x'), (0, 'd'), (3, 'e')];
        let grouped = Grouped::new(4, entries.iter().copied());
        assert_eq!(grouped.len(), 4);
        assert_eq!(grouped.get(0), Some(&['b', 'd'][..]));
        assert_eq!(grouped.get(1), Some(&[][..]));
        assert_eq!(grouped.get(2), Some(&['a', 'c'][..]));
        assert_eq!(grouped.get(3), Some(&['e'][..]));
        assert_eq!(grouped.get(4), None);
        let all: Vec<&[char]> = grouped.iter().collect();
        assert_eq!(all, [&['b', 'd'][..], &[], &['a', 'c'], &['e']]);
    }

    /// Groups without entries, and no groups at all, are empty, not missing.
    #[test]
    fn groups_without_entries_are_empty() {
        let none = Grouped::<usize>::new(3, std::iter::empty());
        assert_eq!(none.len(), 3);
        assert!(none.iter().all(<[usize]>::is_empty));
        assert_eq!(none.get(2), Some(&[][..]));
        let only_beyond = Grouped::new(1, [(1, 7usize), (9, 8)].into_iter());
        assert_eq!(only_beyond.get(0), Some(&[][..]));
        let no_groups = Grouped::new(0, [(0, 1usize)].into_iter());
        assert_eq!(no_groups.len(), 0);
        assert_eq!(no_groups.iter().count(), 0);
        assert_eq!(no_groups.get(0), None);
    }

    /// Against a vector per group, on many groupings.
    #[test]
    fn it_groups_as_a_vector_per_group_does() {
        let mut seed = 0x2545_f491_u64;
        for round in 0..200 {
            let groups = round % 7;
            let mut entries = Vec::new();
            for item in 0..(round % 23) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                entries.push(((seed % 9) as usize, item));
            }
            let mut expected = vec![Vec::new(); groups];
            for &(group, item) in &entries {
                if let Some(list) = expected.get_mut(group) {
                    list.push(item);
                }
            }
            let grouped = Grouped::new(groups, entries.iter().copied());
            let got: Vec<Vec<usize>> = grouped.iter().map(<[usize]>::to_vec).collect();
            assert_eq!(got, expected, "round {round}");
            for (group, list) in expected.iter().enumerate() {
                assert_eq!(grouped.get(group), Some(list.as_slice()));
            }
        }
    }
}
