//! Which Shares each User and DirectoryGroup is a grantee of, and which Shares each namespace
//! holds ([`ShareIndex`]), kept from the Share watch: a change to a User (their home's owner, or
//! a grantee) or to a group's members reaches exactly the Shares it concerns.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::state::cache::CachedShare;

/// A Share as `namespace/name` (neither may contain a `/`), shared between the index's maps.
/// Ordered by namespace first, so the Shares of one namespace are one range of [`Index::indexed`].
type Key = Arc<str>;

/// A Share's grantees as indexed: `(true, group)` or `(false, user)`.
type Grantees = Box<[(bool, Box<str>)]>;

/// The Shares by grantee and by namespace; cheap to clone (a shared handle). Kept small (about
/// 300 bytes a Share): a Share is keyed once and its key shared, each grantee's Shares are a
/// short list, not a hash set, and a namespace's Shares are a range of the ordered map of every
/// Share, not a map of their own.
#[derive(Clone, Default)]
pub struct ShareIndex(Arc<Mutex<Index>>);

#[derive(Default)]
struct Index {
    /// User grantee (by name) → Shares naming them.
    users: HashMap<Box<str>, Vec<Key>>,
    /// DirectoryGroup grantee (by name) → Shares naming it.
    groups: HashMap<Box<str>, Vec<Key>>,
    /// Every Share, in `namespace/name` order → its grantees as indexed (`true` for a group),
    /// to unindex it.
    indexed: BTreeMap<Key, Grantees>,
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

    fn insert(&mut self, share: &CachedShare) {
        let key = key_of(&share.namespace().unwrap_or_default(), &share.name_any());
        let grantees: Grantees = share
            .spec
            .to
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

fn references<'a>(keys: impl Iterator<Item = &'a Key>) -> Vec<ObjectRef<CachedShare>> {
    keys.filter_map(|key| key.split_once('/'))
        .map(|(namespace, name)| ObjectRef::new(name).within(namespace))
        .collect()
}

impl ShareIndex {
    /// Keeps the index in step with one event of the Share watch (a re-list reports the Shares
    /// it no longer finds as deletions).
    pub fn observe(&self, event: &watcher::Event<CachedShare>) {
        let mut index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(share) | watcher::Event::InitApply(share) => index.insert(share),
            watcher::Event::Delete(share) => {
                index.remove(&key_of(
                    &share.namespace().unwrap_or_default(),
                    &share.name_any(),
                ));
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// The Shares a change to the User `user` (by name) concerns: those naming it as a grantee
    /// and those in `home`, its namespace, if it has one.
    pub fn of_user(&self, user: &str, home: Option<&str>) -> Vec<ObjectRef<CachedShare>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let named = index.users.get(user).into_iter().flatten();
        let in_home = home.into_iter().flat_map(|ns| index.in_namespace(ns));
        references(named.chain(in_home))
    }

    /// The Shares naming the DirectoryGroup `group` (by name) as a grantee.
    pub fn of_group(&self, group: &str) -> Vec<ObjectRef<CachedShare>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.groups.get(group).into_iter().flatten())
    }

    /// The Shares in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<ObjectRef<CachedShare>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.in_namespace(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Grantee, Share, ShareSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn share(name: &str, namespace: &str, to: Vec<Grantee>) -> CachedShare {
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
        CachedShare::from(share)
    }

    #[test]
    fn a_share_is_found_by_grantee_and_namespace_until_it_changes_or_goes() {
        let index = ShareIndex::default();
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
        let index = ShareIndex::default();
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
        let names = |refs: Vec<ObjectRef<CachedShare>>| -> Vec<String> {
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
}
