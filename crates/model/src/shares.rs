//! Which Shares each User and DirectoryGroup is a grantee of, and which Shares each namespace
//! holds ([`ShareIndex`]), kept from a Share watch: the one index of Shares, for the operator (a
//! change to a User, their home's owner or a grantee, or to a group's members reaches exactly
//! the Shares it concerns) and the homes API (a caller's Shares without a scan of every Share)
//! alike.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use homestead_api::{Grantee, Share};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// A kind whose objects name grantees: a Share, whole or as a cache keeps it.
pub trait Granted: Resource<DynamicType = ()> {
    /// The grantees (`spec.to`).
    fn grantees(&self) -> &[Grantee];
}

impl Granted for Share {
    fn grantees(&self) -> &[Grantee] {
        &self.spec.to
    }
}

/// A Share as `namespace/name` (neither may contain a `/`), shared between the index's maps.
/// Ordered by namespace first, so the Shares of one namespace are one range of [`Index::indexed`].
type Key = Arc<str>;

/// A Share's grantees as indexed: `(true, group)` or `(false, user)`.
type Grantees = Box<[(bool, Box<str>)]>;

/// The Shares (`K`: a Share, or a cache's form of one) by grantee and by namespace; cheap to
/// clone (a shared handle). Kept small (about 300 bytes a Share): a Share is keyed once and its
/// key shared, each grantee's Shares are a short list, not a hash set, and a namespace's Shares
/// are a range of the ordered map of every Share, not a map of their own.
pub struct ShareIndex<K>(Arc<Mutex<Index>>, PhantomData<fn() -> K>);

impl<K> Clone for ShareIndex<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone(), PhantomData)
    }
}

impl<K> Default for ShareIndex<K> {
    fn default() -> Self {
        Self(Arc::default(), PhantomData)
    }
}

#[derive(Default)]
struct Index {
    /// User grantee (by name) → Shares naming them.
    users: HashMap<Box<str>, Vec<Key>>,
    /// DirectoryGroup grantee (by name) → Shares naming it.
    groups: HashMap<Box<str>, Vec<Key>>,
    /// Every Share, in `namespace/name` order → its grantees as indexed (`true` for a group),
    /// to unindex it.
    indexed: BTreeMap<Key, Grantees>,
    /// The Shares a list in progress has named (from `Init` to `InitDone`): the others are gone.
    relisted: Option<HashSet<Key>>,
}

/// The key of the Share `name` in `namespace`.
fn key_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Index {
    fn remove(&mut self, key: &str) {
        let Some((key, grantees)) = self.indexed.remove_entry(key) else {
            return;
        };
        for (is_group, grantee) in &grantees {
            let map = if *is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            unlink(map, grantee, &key);
        }
    }

    fn insert(&mut self, share: &impl Granted) {
        let key = key_of(&share.namespace().unwrap_or_default(), &share.name_any());
        if let Some(seen) = self.relisted.as_mut() {
            seen.insert(key.as_str().into());
        }
        let grantees: Grantees = share
            .grantees()
            .iter()
            .filter_map(|g| match (&g.user, &g.group) {
                (Some(user), _) => Some((false, user.as_str().into())),
                (None, Some(group)) => Some((true, group.as_str().into())),
                (None, None) => None,
            })
            .collect();
        if self.indexed.get(key.as_str()) == Some(&grantees) {
            // A status update, or a change of anything but the grantees: indexed as it is.
            return;
        }
        self.remove(&key);
        let key: Key = key.into();
        // Most lists hold one Share: room for exactly one, not the four a first push reserves.
        for (is_group, grantee) in &grantees {
            let map = if *is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            map.entry(grantee.clone())
                .or_insert_with(|| Vec::with_capacity(1))
                .push(key.clone());
        }
        self.indexed.insert(key, grantees);
    }

    /// The keys of the Shares in `namespace`: those from `namespace/` up to the next namespace.
    fn in_namespace<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a Key> + 'a {
        let prefix = format!("{namespace}/");
        self.indexed
            .range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .map(|(key, _)| key)
            .take_while(move |key| key.starts_with(&prefix))
    }
}

fn unlink(map: &mut HashMap<Box<str>, Vec<Key>>, at: &str, key: &Key) {
    if let Some(keys) = map.get_mut(at) {
        keys.retain(|k| k != key);
        if keys.is_empty() {
            map.remove(at);
        }
    }
}

fn references<'a, K: Resource<DynamicType = ()>>(
    keys: impl Iterator<Item = &'a Key>,
) -> Vec<ObjectRef<K>> {
    keys.filter_map(|key| key.split_once('/'))
        .map(|(namespace, name)| ObjectRef::new(name).within(namespace))
        .collect()
}

impl<K: Granted> ShareIndex<K> {
    /// Keeps the index in step with one event of the Share watch: a list (`Init` to `InitDone`)
    /// drops at its end the Shares it did not name.
    pub fn observe(&self, event: &watcher::Event<K>) {
        let mut index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(share) | watcher::Event::InitApply(share) => index.insert(share),
            watcher::Event::Delete(share) => {
                index.remove(&key_of(
                    &share.namespace().unwrap_or_default(),
                    &share.name_any(),
                ));
            }
            watcher::Event::Init => index.relisted = Some(HashSet::new()),
            watcher::Event::InitDone => {
                let Some(seen) = index.relisted.take() else {
                    return;
                };
                let gone: Vec<Key> = index
                    .indexed
                    .keys()
                    .filter(|key| !seen.contains(*key))
                    .cloned()
                    .collect();
                for key in gone {
                    index.remove(&key);
                }
            }
        }
    }

    /// The Shares a change to the User `user` (by name) concerns: those naming it as a grantee
    /// and those in `home`, its namespace, if it has one.
    pub fn of_user(&self, user: &str, home: Option<&str>) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let named = index.users.get(user).into_iter().flatten();
        let in_home = home.into_iter().flat_map(|ns| index.in_namespace(ns));
        references(named.chain(in_home))
    }

    /// The Shares naming the DirectoryGroup `group` (by name) as a grantee.
    pub fn of_group(&self, group: &str) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.groups.get(group).into_iter().flatten())
    }

    /// The Shares in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.in_namespace(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::ShareSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn share(name: &str, namespace: &str, to: Vec<Grantee>) -> Share {
        let mut share = Share::new(
            name,
            ShareSpec {
                to,
                role: "view".into(),
                expires_at: Time("2026-12-01T00:00:00Z".parse().unwrap()),
                reason: "r".into(),
            },
        );
        share.metadata.namespace = Some(namespace.into());
        share
    }

    #[test]
    fn a_share_is_found_by_grantee_and_namespace_until_it_changes_or_goes() {
        let index = ShareIndex::<Share>::default();
        let bob = Grantee {
            user: Some("bob".into()),
            group: None,
        };
        let analysts = Grantee {
            user: None,
            group: Some("analysts".into()),
        };
        let first = share("s", "user-alice", vec![bob.clone(), analysts]);
        index.observe(&watcher::Event::Apply(first.clone()));
        // Seen again (its status written): still indexed once.
        index.observe(&watcher::Event::Apply(first.clone()));
        assert_eq!(index.of_user("bob", None).len(), 1);
        assert_eq!(index.of_user("alice", Some("user-alice")).len(), 1);
        assert_eq!(index.of_group("analysts").len(), 1);
        // Re-indexed on change: the group is no longer a grantee.
        index.observe(&watcher::Event::Apply(share("s", "user-alice", vec![bob])));
        assert!(index.of_group("analysts").is_empty());
        index.observe(&watcher::Event::Delete(first));
        assert!(index.of_user("bob", None).is_empty());
        assert!(index.in_namespace("user-alice").is_empty());
    }

    #[test]
    fn a_namespace_holds_only_its_own_shares_not_a_neighbour_s() {
        // `user-al-b` sorts before `user-al/` and `user-al0` after it: neither is in `user-al`.
        let index = ShareIndex::<Share>::default();
        let bob = || Grantee {
            user: Some("bob".into()),
            group: None,
        };
        for (name, namespace) in [
            ("one", "user-al"),
            ("two", "user-al"),
            ("x", "user-al-b"),
            ("y", "user-al0"),
            ("z", "user-a"),
        ] {
            index.observe(&watcher::Event::Apply(share(name, namespace, vec![bob()])));
        }
        let names = |refs: Vec<ObjectRef<Share>>| -> Vec<String> {
            refs.into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap(), r.name))
                .collect()
        };
        assert_eq!(
            names(index.in_namespace("user-al")),
            ["user-al/one", "user-al/two"]
        );
        assert_eq!(names(index.of_user("carol", Some("user-a"))), ["user-a/z"]);
        assert_eq!(index.of_user("bob", None).len(), 5);
    }

    #[test]
    fn a_list_drops_the_shares_it_no_longer_names() {
        let index = ShareIndex::<Share>::default();
        let bob = || {
            vec![Grantee {
                user: Some("bob".into()),
                group: None,
            }]
        };
        index.observe(&watcher::Event::Apply(share("gone", "user-alice", bob())));
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(share(
            "kept",
            "user-alice",
            bob(),
        )));
        index.observe(&watcher::Event::InitDone);
        let refs = index.of_user("bob", None);
        assert_eq!(refs, [ObjectRef::new("kept").within("user-alice")]);
    }
}
