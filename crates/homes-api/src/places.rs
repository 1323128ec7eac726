//! How many watches the homes API holds open, and for whom (docs/security.md, the homes API's
//! connection bounds). A watch holds a task, the homes it told its client, and wakes at every
//! change to any cache; kube-apiserver carries up to 250 of them on each HTTP/2 connection and
//! opens more, so without bounds people could hold as many as they liked. Three bounds, each a
//! count:
//!
//! - [`WatchLimits::total`] in the process;
//! - [`WatchLimits::per_person`] for each caller (a username), so one person cannot take
//!   everyone's places;
//! - [`WatchLimits::nobody`] for every caller who is not a person (a User holds no identity of
//!   theirs: ServiceAccounts, which a tenant can mint by the dozen in their own namespace,
//!   people without a User) together; they see no homes.
//!
//! One more watch gets 429 with `Retry-After`, as kube-apiserver answers past its own limits,
//! and the client watches again later.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds on open watches, each a count (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchLimits {
    /// The most watches open at once in one process.
    pub total: usize,
    /// The most one person holds open at once.
    pub per_person: usize,
    /// The most every caller who is not a person holds open at once, together.
    pub nobody: usize,
}

impl Default for WatchLimits {
    /// 1,024 in all; 32 a person (a `kubectl get homes -w` is one, a dashboard a few); 64 for
    /// everyone else together.
    fn default() -> Self {
        Self {
            total: 1024,
            per_person: 32,
            nobody: 64,
        }
    }
}

/// The watches open now: by caller, and how many of them callers who are not people hold.
pub struct WatchPlaces {
    limits: WatchLimits,
    total: Arc<Semaphore>,
    held: Mutex<Held>,
}

/// What [`WatchPlaces`] counts.
#[derive(Debug, Default)]
struct Held {
    /// Watches open by each caller (a username) that has one.
    by_caller: HashMap<String, usize>,
    /// Watches open by callers who are not people, together.
    nobody: usize,
}

/// Why a watch was refused: the bound it would have passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// [`WatchLimits::total`].
    #[error("the homes API has {0} watches open; watch again later")]
    Total(usize),
    /// [`WatchLimits::per_person`].
    #[error("you have {0} watches of homes open; end one or watch again later")]
    Caller(usize),
    /// [`WatchLimits::nobody`].
    #[error("callers who hold no User have {0} watches of homes open; watch again later")]
    Nobody(usize),
}

/// One open watch's place, given back when it is dropped (when the watch ends, or its client
/// goes).
pub struct WatchPlace {
    places: Arc<WatchPlaces>,
    caller: String,
    person: bool,
    _total: OwnedSemaphorePermit,
}

impl WatchPlaces {
    /// No watch open yet, within `limits`.
    pub fn new(limits: WatchLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            total: Arc::new(Semaphore::new(limits.total)),
            held: Mutex::default(),
        })
    }

    /// A place for one more watch of `caller` (a username), who is a `person` or not.
    ///
    /// # Errors
    /// [`Full`] when the caller's bound, that of callers who are not people, or the process's
    /// is reached.
    pub fn take(self: &Arc<Self>, caller: &str, person: bool) -> Result<WatchPlace, Full> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.by_caller.get(caller).copied().unwrap_or(0) >= self.limits.per_person {
            return Err(Full::Caller(self.limits.per_person));
        }
        if !person && held.nobody >= self.limits.nobody {
            return Err(Full::Nobody(self.limits.nobody));
        }
        let total = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Full::Total(self.limits.total))?;
        *held.by_caller.entry(caller.to_owned()).or_default() += 1;
        if !person {
            held.nobody += 1;
        }
        Ok(WatchPlace {
            places: Arc::clone(self),
            caller: caller.to_owned(),
            person,
            _total: total,
        })
    }
}

impl Drop for WatchPlace {
    fn drop(&mut self) {
        let mut held = self
            .places
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !self.person {
            held.nobody = held.nobody.saturating_sub(1);
        }
        if let Entry::Occupied(mut count) = held.by_caller.entry(std::mem::take(&mut self.caller)) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_refuses_one_more_and_a_dropped_place_is_given_back() {
        let places = WatchPlaces::new(WatchLimits {
            total: 8,
            per_person: 2,
            nobody: 3,
        });
        let bob: Vec<WatchPlace> = (0..2).map(|_| places.take("bob", true).unwrap()).collect();
        assert_eq!(places.take("bob", true).err(), Some(Full::Caller(2)));
        // One ServiceAccount cannot take all of the places of those who are not people.
        let minted: Vec<WatchPlace> = (0..2)
            .map(|_| places.take("sa-1", false).unwrap())
            .collect();
        assert_eq!(places.take("sa-1", false).err(), Some(Full::Caller(2)));
        let other = places.take("sa-2", false).unwrap();
        assert_eq!(places.take("sa-3", false).err(), Some(Full::Nobody(3)));
        // Alice is held back by none of theirs, only by the total.
        let alice = [
            places.take("alice", true).unwrap(),
            places.take("alice", true).unwrap(),
        ];
        let alice_too = places.take("alice", true);
        assert_eq!(alice_too.as_ref().err(), Some(&Full::Caller(2)));
        drop(alice_too);
        let carol = places.take("carol", true).unwrap();
        assert_eq!(places.take("dan", true).err(), Some(Full::Total(8)));
        drop(other);
        assert!(
            places.take("sa-3", false).is_ok(),
            "nobody's place was not given back"
        );
        let mut bob = bob;
        drop(bob.pop());
        let again = places.take("bob", true).unwrap();
        assert_eq!(places.held.lock().unwrap().by_caller.get("bob"), Some(&2));
        drop((again, bob, minted, alice, carol));
        let held = places.held.lock().unwrap();
        assert!(held.by_caller.is_empty() && held.nobody == 0, "{held:?}");
        assert_eq!(places.total.available_permits(), 8);
    }
}
