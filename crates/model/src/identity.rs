//! One person, one User (docs/security.md, "One person, one User"): which User holds each
//! identity. Suspension, expiry and offboarding belong to a User object, so a second User with
//! the username of a suspended person would give that person access again. [`Identities`]
//! maps every `spec.identity.username`, compared case-insensitively, to the Users that name
//! it; the oldest (by `metadata.creationTimestamp`, then name) holds it, and the operator
//! refuses every other one (`Ready=False`, reason `DuplicateIdentity`), revoking whatever
//! access it had.
//!
//! Kept current from the User watch ([`Identities::observe`]), which also says which other
//! Users an event concerns: those that share the identity a User took, gave up or released by
//! being deleted, so the next holder is provisioned as soon as the older User is gone.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use homestead_api::User;
use kube::ResourceExt;
use kube::runtime::watcher;

/// The Users that name each identity (see the module docs). Cheap to clone: clones share one
/// index.
#[derive(Clone, Debug, Default)]
pub struct Identities(Arc<Mutex<Index>>);

/// Kept small (about 140 bytes a User, where growable strings and vectors took 450 in a heap
/// profile at 10,000 Users, a uid each 60 more, and the identity kept twice as text 80 more):
/// an identity is almost always named by one User, so its holders are a boxed slice of exactly
/// that many, names are boxed strings, and identities are kept as their [`Print`].
#[derive(Debug, Default)]
struct Index {
    /// Identity (its print) to the Users that name it, oldest first.
    holders: HashMap<Print, Box<[Holder]>>,
    /// User name to the identity it names (its print).
    of_user: HashMap<Box<str>, Print>,
    /// The Users seen since the watch's last `Init`, to drop the others at `InitDone`.
    relisted: Option<HashSet<String>>,
    /// The key of the prints: random, drawn once per process.
    prints: RandomState,
}

/// An identity as the index keeps it: a 64-bit hash of it in lower case, keyed at random per
/// process (SipHash, `std::hash::RandomState`), so nobody can choose two usernames that hash
/// alike. Two different identities that did (less than one chance in 10^11 among 10,000 Users)
/// would read as one: the younger User refused as a duplicate, never a second User let in
/// for one identity. A holder found by identity is the caller's to compare exactly
/// ([`Identities::holder`]). The key is drawn again by each process, so such a collision would
/// not outlive a restart, and two processes (the operator, the homes API) would not share it.
type Print = u64;

/// A User naming an identity, ordered oldest first.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Holder {
    /// `metadata.creationTimestamp` in seconds since the epoch (`i64::MAX` when unset).
    created: i64,
    /// `metadata.name`.
    name: Box<str>,
}

/// The User that holds an identity, as [`Identities::holder_other_than`] names it (its uid,
/// for an Event about it, is the User cache's to tell: 10,000 uids held here took 0.6 MiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityHolder {
    /// `metadata.name`.
    pub name: String,
}

impl Identities {
    /// Applies a User watch `event` to the index. Returns the names of the other Users the
    /// event concerns: those naming an identity this User took or gave up (an identity change,
    /// or its deletion), whose holder may now be another.
    pub fn observe(&self, event: &watcher::Event<User>) -> Vec<String> {
        let mut index = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => {
                index.relisted = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(user) => {
                if let Some(seen) = index.relisted.as_mut() {
                    seen.insert(user.name_any());
                }
                index.upsert(user)
            }
            watcher::Event::Apply(user) => index.upsert(user),
            watcher::Event::Delete(user) => index.remove(&user.name_any()),
            watcher::Event::InitDone => {
                let seen = index.relisted.take().unwrap_or_default();
                let gone: Vec<String> = index
                    .of_user
                    .keys()
                    .filter(|name| !seen.contains(&***name))
                    .map(|name| name.to_string())
                    .collect();
                gone.iter().flat_map(|name| index.remove(name)).collect()
            }
        }
    }

    /// The name of the User that holds `user`'s identity when it is another User: `user` is
    /// then a duplicate. `None` when `user` holds it, or the index does not know the identity
    /// yet (its watch event is on its way).
    pub fn holder_other_than(&self, user: &User) -> Option<IdentityHolder> {
        let index = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let first = index.holders.get(&index.print(user))?.first()?;
        (*first.name != *user.name_any()).then(|| IdentityHolder {
            name: first.name.to_string(),
        })
    }

    /// The User that holds the identity `username` (compared without case, as every identity
    /// is here): the oldest of those naming it. `None` when no User names it, or its watch
    /// event is on its way. Whether `username` is exactly that User's (as RBAC compares
    /// subjects) is the caller's to check.
    pub fn holder(&self, username: &str) -> Option<IdentityHolder> {
        let index = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let first = index.holders.get(&index.print_of(username))?.first()?;
        Some(IdentityHolder {
            name: first.name.to_string(),
        })
    }
}

impl Index {
    /// The print of the identity `username`, compared without case.
    fn print_of(&self, username: &str) -> Print {
        self.prints.hash_one(username.to_lowercase())
    }

    /// The print of the identity `user` names (`spec.identity.username`).
    fn print(&self, user: &User) -> Print {
        self.print_of(&user.spec.identity.username)
    }

    /// Records that `user` names its identity; returns the other Users of the identity it
    /// left and of the one it now names when either changed.
    fn upsert(&mut self, user: &User) -> Vec<String> {
        let name: Box<str> = user.name_any().into();
        let identity = self.print(user);
        if self.of_user.get(&name) == Some(&identity) {
            return Vec::new();
        }
        let mut concerned = self.remove(&name);
        let holder = Holder {
            created: user
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second()),
            name: name.clone(),
        };
        let holders = self.holders.entry(identity).or_default();
        concerned.extend(holders.iter().map(|h| h.name.to_string()));
        let mut grown = std::mem::take(holders).into_vec();
        let at = grown.partition_point(|h| *h < holder);
        grown.insert(at, holder);
        *holders = grown.into_boxed_slice();
        self.of_user.insert(name, identity);
        concerned
    }

    /// Forgets the User `name`; returns the other Users of the identity it named.
    fn remove(&mut self, name: &str) -> Vec<String> {
        let Some(identity) = self.of_user.remove(name) else {
            return Vec::new();
        };
        let Some(holders) = self.holders.get_mut(&identity) else {
            return Vec::new();
        };
        let mut rest = std::mem::take(holders).into_vec();
        rest.retain(|h| &*h.name != name);
        let others: Vec<String> = rest.iter().map(|h| h.name.to_string()).collect();
        if rest.is_empty() {
            self.holders.remove(&identity);
        } else {
            *holders = rest.into_boxed_slice();
        }
        others
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, username: &str, created: i64) -> User {
        User::test(name).with_username(username).created_at(created)
    }

    fn holder(ids: &Identities, user: &User) -> Option<String> {
        ids.holder_other_than(user).map(|h| h.name)
    }

    #[test]
    fn the_oldest_user_holds_an_identity_compared_without_case() {
        let ids = Identities::default();
        let frank = user("frank", "frank@example.com", 100);
        let two = user("frank-two", "Frank@Example.com", 200);
        assert!(ids.observe(&watcher::Event::Apply(two.clone())).is_empty());
        assert_eq!(
            ids.observe(&watcher::Event::Apply(frank.clone())),
            ["frank-two"],
            "the younger User is reconciled again once the older one appears"
        );
        assert_eq!(ids.holder_other_than(&frank), None);
        assert_eq!(holder(&ids, &two).as_deref(), Some("frank"));
        // By identity alone (the homes API's question), without case: the same holder.
        let by_identity = |username: &str| ids.holder(username).map(|h| h.name);
        assert_eq!(by_identity("FRANK@example.com").as_deref(), Some("frank"));
        assert_eq!(by_identity("nobody@example.com"), None);

        // The same second: the first by name holds it.
        let same = user("a-frank", "frank@example.com", 100);
        ids.observe(&watcher::Event::Apply(same.clone()));
        assert_eq!(holder(&ids, &frank).as_deref(), Some("a-frank"));

        // Deleting the holder hands the identity to the next and says so.
        let mut concerned = ids.observe(&watcher::Event::Delete(same));
        concerned.sort();
        assert_eq!(concerned, ["frank", "frank-two"]);
        assert_eq!(ids.holder_other_than(&frank), None);
    }

    #[test]
    fn an_identity_change_concerns_both_identities_and_a_relist_drops_the_missing() {
        let ids = Identities::default();
        ids.observe(&watcher::Event::Apply(user("a", "x@example.com", 1)));
        ids.observe(&watcher::Event::Apply(user("b", "x@example.com", 2)));
        ids.observe(&watcher::Event::Apply(user("c", "y@example.com", 3)));
        let moved = user("b", "y@example.com", 2);
        let mut concerned = ids.observe(&watcher::Event::Apply(moved.clone()));
        concerned.sort();
        assert_eq!(concerned, ["a", "c"]);
        assert_eq!(ids.holder_other_than(&moved), None, "b is older than c");
        assert_eq!(
            holder(&ids, &user("c", "y@example.com", 3)).as_deref(),
            Some("b")
        );
        assert!(
            ids.observe(&watcher::Event::Apply(moved.clone()))
                .is_empty(),
            "an unchanged identity concerns nobody"
        );

        // A re-list that no longer has c (deleted while the watch was down).
        ids.observe(&watcher::Event::Init);
        ids.observe(&watcher::Event::InitApply(user("a", "x@example.com", 1)));
        ids.observe(&watcher::Event::InitApply(moved.clone()));
        assert_eq!(ids.observe(&watcher::Event::InitDone), ["b"]);
        assert_eq!(ids.holder_other_than(&moved), None);
    }
}
