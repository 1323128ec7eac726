//! How many watches the homes API holds open, and for whom (docs/security.md, "The homes API's
//! bounds"). A watch holds a task, the homes it told its client, and wakes at every change to
//! any cache; kube-apiserver carries up to 250 of them on each HTTP/2 connection and opens more,
//! so without bounds people could hold as many as they liked. Three bounds, each a count:
//!
//! - [`WatchLimits::total`] in the process;
//! - [`WatchLimits::per_person`] for each person (a caller a User holds the identity of), so
//!   one person cannot take everyone's places;
//! - [`WatchLimits::nobody`] for every other caller together (ServiceAccounts, people without
//!   a User), whom a tenant can mint by the dozen in their own namespace, and who see no homes.
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

/// The watches open now, by holder: a person's username, or `None` for every caller who is not
/// a person.
pub struct WatchPlaces {
    limits: WatchLimits,
    total: Arc<Semaphore>,
    held: Mutex<HashMap<Option<String>, usize>>,
}

/// Why a watch was refused: the bound it would have passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// [`WatchLimits::total`].
    #[error("the homes API has {0} watches open; watch again later")]
    Total(usize),
    /// [`WatchLimits::per_person`].
    #[error("you have {0} watches of homes open; end one or watch again later")]
    Person(usize),
    /// [`WatchLimits::nobody`].
    #[error("callers who hold no User have {0} watches of homes open; watch again later")]
    Nobody(usize),
}

/// One open watch's place, given back when it is dropped (when the watch ends, or its client
/// goes).
pub struct WatchPlace {
    places: Arc<WatchPlaces>,
    holder: Option<String>,
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

    /// A place for one more watch of `holder` (a person's username, or `None`).
    ///
    /// # Errors
    /// [`Full`] when the holder's bound or the process's is reached.
    pub fn take(self: &Arc<Self>, holder: Option<&str>) -> Result<WatchPlace, Full> {
        let holder = holder.map(str::to_owned);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.get(&holder).copied().unwrap_or(0);
        match holder {
            Some(_) if count >= self.limits.per_person => {
                return Err(Full::Person(self.limits.per_person));
            }
            None if count >= self.limits.nobody => return Err(Full::Nobody(self.limits.nobody)),
            _ => {}
        }
        let total = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Full::Total(self.limits.total))?;
        *held.entry(holder.clone()).or_default() += 1;
        Ok(WatchPlace {
            places: Arc::clone(self),
            holder,
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
        if let Entry::Occupied(mut count) = held.entry(self.holder.take()) {
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
            total: 5,
            per_person: 2,
            nobody: 1,
        });
        let bob: Vec<WatchPlace> = (0..2).map(|_| places.take(Some("bob")).unwrap()).collect();
        assert_eq!(places.take(Some("bob")).err(), Some(Full::Person(2)));
        let nobody = places.take(None).unwrap();
        assert_eq!(places.take(None).err(), Some(Full::Nobody(1)));
        // Alice is not held back by bob's or nobody's watches, only by the total.
        let alice: Vec<WatchPlace> = (0..2)
            .map(|_| places.take(Some("alice")).unwrap())
            .collect();
        assert_eq!(places.take(Some("carol")).err(), Some(Full::Total(5)));
        drop(nobody);
        assert!(
            places.take(None).is_ok(),
            "nobody's place was not given back"
        );
        let mut bob = bob;
        drop(bob.pop());
        let again = places.take(Some("bob")).unwrap();
        assert_eq!(
            places.held.lock().unwrap().get(&Some("bob".into())),
            Some(&2)
        );
        drop((again, bob, alice));
        assert!(places.held.lock().unwrap().is_empty(), "counts left behind");
        assert_eq!(places.total.available_permits(), 5);
    }
}
