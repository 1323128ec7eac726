//! A `BTreeMap` kept dense: rebuilt with full nodes after a bulk load and whenever the keys added
//! and removed since its last rebuild reach a quarter of its size (docs/performance.md, "Full
//! B-tree nodes").
//!
//! The standard library's B-tree holds eleven keys and values inline in each node. Filled in key
//! order, as a list from the API server (sorted by key) or a run of creations fills it, each
//! split leaves a half-full node behind, so the map ends up about 55 % full; built from its sorted
//! entries (`BTreeMap`'s `FromIterator` builds bottom-up) the same map is nearly full, 40-45 %
//! smaller for records of 70-250 bytes. Rebuilding after every quarter of change (and at least
//! 64 changes) moves about four entries per change, amortised O(1) per change. A rebuild holds,
//! for that moment, the old map and a vector of its entries.

use std::collections::BTreeMap;
use std::ops::Deref;

/// A `BTreeMap` that rebuilds itself with full nodes as keys come and go; reads go through
/// [`Deref`] to the map.
#[derive(Debug)]
pub struct DenseMap<K, V> {
    map: BTreeMap<K, V>,
    /// Keys added and removed since the last rebuild.
    changes: usize,
}

impl<K, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            changes: 0,
        }
    }
}

impl<K, V> Deref for DenseMap<K, V> {
    type Target = BTreeMap<K, V>;

    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

impl<K: Ord, V> DenseMap<K, V> {
    /// The fewest changes that trigger a rebuild: a small map is not worth the pass.
    const MIN_CHANGES: usize = 64;

    /// Inserts `value` under `key` (an existing key keeps its stored key, as `BTreeMap::insert`);
    /// returns the value it replaced. A new key counts as a change.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = self.map.insert(key, value);
        if old.is_none() {
            self.changed();
        }
        old
    }

    /// Inserts without counting a change: for a bulk load, which ends with [`Self::rebuild`].
    pub fn load(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert(key, value)
    }

    /// Removes `key`; returns its key and value, if it was there. A removal counts as a change.
    pub fn remove_entry<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let removed = self.map.remove_entry(key);
        if removed.is_some() {
            self.changed();
        }
        removed
    }

    /// Keeps only the entries `keep` accepts, then rebuilds the map.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(keep);
        self.rebuild();
    }

    /// Rebuilds the map with full nodes: one pass, and for that moment a vector of its entries.
    pub fn rebuild(&mut self) {
        self.map = std::mem::take(&mut self.map).into_iter().collect();
        self.changes = 0;
    }

    /// Counts one key added or removed; rebuilds once the changes reach a quarter of the map.
    fn changed(&mut self) {
        self.changes += 1;
        if self.changes >= Self::MIN_CHANGES && self.changes >= self.map.len() / 4 {
            self.rebuild();
        }
    }

    /// Keys added and removed since the last rebuild (tests).
    #[cfg(test)]
    fn changes(&self) -> usize {
        self.changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_rebuilt_as_keys_come_and_go_keeps_every_entry() {
        let mut map = DenseMap::default();
        for i in 0..1000 {
            assert_eq!(map.insert(i, i * 10), None);
            assert!(
                map.changes() < 64 + map.len() / 4,
                "rebuilt as changes accrue"
            );
        }
        assert_eq!(map.insert(7, 71), Some(70), "a replaced value is no change");
        for i in (0..1000).step_by(2) {
            assert_eq!(map.remove_entry(&i), Some((i, i * 10)));
        }
        assert_eq!(map.remove_entry(&0), None);
        assert_eq!(map.len(), 500);
        assert!(
            map.iter()
                .all(|(k, v)| k % 2 == 1 && *v == if *k == 7 { 71 } else { k * 10 })
        );
        map.retain(|k, _| *k < 100);
        assert_eq!(
            map.keys().copied().collect::<Vec<_>>(),
            (1..100).step_by(2).collect::<Vec<_>>()
        );
        assert_eq!(map.changes(), 0, "retain rebuilds");
    }
}
