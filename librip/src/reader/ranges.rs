//! Address lookup in a module table by binary search.

use std::collections::BTreeMap;

/// Sorted, disjoint address ranges, each naming an entry of a table:
/// where entries overlap, the later one (the newer mapping, as
/// docs/FORMAT.md says) wins. Built in O(n log n), queried in O(log n),
/// so a table of 100,000 modules costs no scan per address.
#[derive(Clone, Debug, Default)]
pub struct RangeIndex {
    ranges: Vec<(u64, u64, usize)>,
}

impl RangeIndex {
    /// Indexes `[start, end)` ranges, in table order; empty ones are skipped.
    pub fn new(ranges: impl IntoIterator<Item = (u64, u64)>) -> RangeIndex {
        let mut map: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        for (i, (start, end)) in ranges.into_iter().enumerate() {
            if start >= end {
                continue;
            }
            let mut cut: Vec<u64> = map
                .range(..start)
                .next_back()
                .filter(|(_, (e, _))| *e > start)
                .map(|(&s, _)| s)
                .into_iter()
                .collect();
            cut.extend(map.range(start..end).map(|(&s, _)| s));
            for s in cut {
                let Some((e, j)) = map.remove(&s) else {
                    continue;
                };
                if s < start {
                    map.insert(s, (start, j));
                }
                if e > end {
                    map.insert(end, (e, j));
                }
            }
            map.insert(start, (end, i));
        }
        RangeIndex {
            ranges: map.into_iter().map(|(s, (e, i))| (s, e, i)).collect(),
        }
    }

    /// The table index of the range holding `addr`.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let k = self
            .ranges
            .partition_point(|r| r.0 <= addr)
            .checked_sub(1)?;
        let (_, end, i) = self.ranges[k];
        (addr < end).then_some(i)
    }

    /// The disjoint ranges, sorted: `(start, end, table index)`.
    pub fn ranges(&self) -> &[(u64, u64, usize)] {
        &self.ranges
    }
}
