//! A `BTreeMap` kept dense: rebuilt with full nodes whenever the keys added and removed since its
//! last rebuild reach a quarter of its size, a list included (docs/performance.md, "Full B-tree
//! nodes" and "A restart's peak").
//!
//! The standard library's B-tree holds eleven keys and values inline in each node. Filled in key
//! order, as a list from the API server (sorted by key) or a run of creations fills it, each
//! split leaves a half-full node behind, so the map ends up about 55 % full; rebuilt from its
//! sorted entries the same map is nearly full, 40-45 % smaller for records of 70-250 bytes.
//! Rebuilding after every quarter of change (and at least 64 changes) moves about four entries
//! per change, amortised O(1) per change.
//!
//! A rebuild merges the map into a new one with `BTreeMap::append`, which fills full nodes from
//! the two sorted iterators as it drains them, freeing the old nodes as it goes: at most one
//! node more than the larger of the two maps. (`collect` into a new map first gathers every
//! entry into a vector and sorts it: at 10,000 entries of 40 bytes, 0.9 MB for a moment on top
//! of the old map.)

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

    /// Rebuilds the map with full nodes: one pass, the old nodes freed as the new fill.
    pub fn rebuild(&mut self) {
        let mut old = std::mem::take(&mut self.map);
        // `append` into an empty map would only swap the two: start it with the first entry.
        if let Some((key, value)) = old.pop_first() {
            self.map.insert(key, value);
            self.map.append(&mut old);
        }
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
