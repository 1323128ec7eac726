//! Writes this replica made moments ago that its caches may not show yet.
//!
//! A reconcile can run before a watch delivers the operator's own write: another watch (the new
//! Namespace's, the User's status) triggered it, and the cache it reads still has the state
//! from before. Without a memory of its own writes it would write again: the same status
//! twice, or a create that fails with 409 Conflict and is then applied. [`RecentWrites`]
//! remembers each write for [`RECENT`] as a fingerprint of what was written.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a write counts as made while the cache does not show it yet: far longer than a
/// watch event takes to arrive, far shorter than a resync.
pub const RECENT: Duration = Duration::from_secs(10);

/// Writes made in the last [`RECENT`] seconds, by key (a User's name, a Namespace's name), as
/// fingerprints of what was written. An entry is dropped as soon as the cache shows the write
/// ([`RecentWrites::forget`]) and no longer counts after [`RECENT`], so a change someone else
/// makes afterwards is still repaired.
#[derive(Debug, Default)]
pub struct RecentWrites(Mutex<HashMap<String, (u64, Instant)>>);

impl RecentWrites {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Instant)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How much longer a write with fingerprint `print` under `key` counts as made: `Some`
    /// (less than [`RECENT`]) when it was made less than [`RECENT`] ago, else `None`.
    pub fn unconfirmed(&self, key: &str, print: u64) -> Option<Duration> {
        self.entries()
            .get(key)
            .filter(|(p, _)| *p == print)
            .and_then(|(_, at)| RECENT.checked_sub(at.elapsed()))
            .filter(|left| !left.is_zero())
    }

    /// Whether a write with fingerprint `print` was made under `key` less than [`RECENT`] ago.
    pub fn was_written(&self, key: &str, print: u64) -> bool {
        self.unconfirmed(key, print).is_some()
    }

    /// Remembers that a write with fingerprint `print` was just made under `key`; forgets
    /// entries older than [`RECENT`] once there are many (1,024), so the map stays small.
    pub fn remember(&self, key: String, print: u64) {
        let mut entries = self.entries();
        if entries.len() >= 1024 {
            entries.retain(|_, (_, at)| at.elapsed() < RECENT);
        }
        entries.insert(key, (print, Instant::now()));
    }

    /// Forgets `key`'s entry (the cache shows the write now).
    pub fn forget(&self, key: &str) {
        self.entries().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_counts_until_forgotten_and_only_with_its_fingerprint() {
        let recent = RecentWrites::default();
        assert!(!recent.was_written("alice", 1));
        recent.remember("alice".into(), 1);
        let left = recent.unconfirmed("alice", 1).expect("just written");
        assert!(left <= RECENT);
        assert!(!recent.was_written("alice", 2), "another write is made");
        assert!(!recent.was_written("bob", 1));
        recent.forget("alice");
        assert!(!recent.was_written("alice", 1), "the cache shows it");
    }
}
