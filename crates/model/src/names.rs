//! Which objects name each User and each DirectoryGroup ([`NameIndex`]), kept from a watch of
//! their kind: the one index of people and groups to homes, for the operator and the homes API
//! alike, so that a question about one person or group reaches exactly the objects it concerns,
//! without a scan of every object. What "names" means is the kind's ([`Names`]):
//!
//! - a Share names its grantees (`spec.to`): the Shares a person or group is given;
//! - a DirectoryGroup names its members (`spec.members`): the groups that list a person;
//! - a Workspace names its owner (a User or a DirectoryGroup) and its admins: the workspaces a
//!   person or team reaches.
//!
//! The index also answers which Shares a namespace holds (a home's Shares).

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use homestead_api::{DirectoryGroup, Share, Workspace};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::dense::DenseMap;

/// A kind whose objects name Users and DirectoryGroups (see the module docs): a Share, whole or
/// as a cache keeps it, a DirectoryGroup, a Workspace.
pub trait Names: Resource<DynamicType = ()> {
    /// What the object names, each as `(true, group)` for a DirectoryGroup or `(false, user)`
    /// for a User, both by `metadata.name`.
    fn names(&self) -> impl Iterator<Item = (bool, &str)>;
}

impl Names for Share {
    fn names(&self) -> impl Iterator<Item = (bool, &str)> {
        grantees(&self.spec.to)
    }
}

/// The grantees of a Share's `spec.to` as [`Names::names`] says them (each grantee is exactly
/// one of a User and a group, a CEL rule of the Share's schema).
pub fn grantees(to: &[homestead_api::Grantee]) -> impl Iterator<Item = (bool, &str)> {
    to.iter().filter_map(|g| match (&g.user, &g.group) {
        (Some(user), _) => Some((false, user.as_str())),
        (None, Some(group)) => Some((true, group.as_str())),
        (None, None) => None,
    })
}

impl Names for DirectoryGroup {
    /// Its members, Users by name (whether each counts is [`DirectoryGroup::counts_member`]'s).
    fn names(&self) -> impl Iterator<Item = (bool, &str)> {
        self.spec.members.iter().map(|m| (false, m.as_str()))
    }
}

impl Names for Workspace {
    /// Its owner, a User or a DirectoryGroup, and its admins (Users).
    fn names(&self) -> impl Iterator<Item = (bool, &str)> {
        let owner = &self.spec.owner;
        let owner = match (&owner.user, &owner.group) {
            (Some(user), _) => Some((false, user.as_str())),
            (None, Some(group)) => Some((true, group.as_str())),
            (None, None) => None,
        };
        owner
            .into_iter()
            .chain(self.spec.admins.iter().map(|a| (false, a.as_str())))
    }
}

/// An object as `namespace/name` (neither may contain a `/`; a cluster-scoped object's
/// namespace is empty), shared between the index's maps. Ordered by namespace first, so the
/// objects of one namespace are one range of [`Index::indexed`].
type Key = Arc<str>;

/// What an object names as indexed: `(true, group)` or `(false, user)`.
type Named = Box<[(bool, Box<str>)]>;

/// The objects of a kind (`K`: see [`Names`]) by the Users and DirectoryGroups they name, and
/// by namespace; cheap to clone (a shared handle). Kept small (about 300 bytes an object naming
/// one User): an object is keyed once and its key shared, each name's objects are a short
/// list, not a hash set, and a namespace's objects are a range of the ordered map of every
/// object, not a map of their own.
pub struct NameIndex<K>(Arc<Mutex<Index>>, PhantomData<fn() -> K>);

/// The index of Shares by grantee and by namespace.
pub type ShareIndex<K> = NameIndex<K>;

impl<K> Clone for NameIndex<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone(), PhantomData)
    }
}

impl<K> Default for NameIndex<K> {
    fn default() -> Self {
        Self(Arc::default(), PhantomData)
    }
}

#[derive(Default)]
struct Index {
    /// User (by name) → the objects naming them.
    users: HashMap<Box<str>, Vec<Key>>,
    /// DirectoryGroup (by name) → the objects naming it.
    groups: HashMap<Box<str>, Vec<Key>>,
    /// Every object, in `namespace/name` order → what it names as indexed (`true` for a
    /// group), to unindex it.
    indexed: DenseMap<Key, Named>,
    /// The objects a list in progress has named (from `Init` to `InitDone`): the others are
    /// gone.
    relisted: Option<HashSet<Key>>,
}

/// The key of the object `name` in `namespace` (empty for a cluster-scoped one).
fn key_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Index {
    fn remove(&mut self, key: &str) {
        let Some((key, named)) = self.indexed.remove_entry(key) else {
            return;
        };
        for (is_group, name) in &named {
            let map = if *is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            unlink(map, name, &key);
        }
    }

    fn insert(&mut self, object: &impl Names) {
        let key = key_of(&object.namespace().unwrap_or_default(), &object.name_any());
        if let Some(seen) = self.relisted.as_mut() {
            seen.insert(key.as_str().into());
        }
        let named: Named = object
            .names()
            .map(|(is_group, name)| (is_group, name.into()))
            .collect();
        if self.indexed.get(key.as_str()) == Some(&named) {
            // A status update, or a change of anything but what it names: indexed as it is.
            return;
        }
        self.remove(&key);
        let key: Key = key.into();
        // Most lists hold one object: room for exactly one, not the four a first push reserves.
        for (is_group, name) in &named {
            let map = if *is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            map.entry(name.clone())
                .or_insert_with(|| Vec::with_capacity(1))
                .push(key.clone());
        }
        self.indexed.insert(key, named);
    }

    /// The keys of the objects in `namespace`: those from `namespace/` up to the next one.
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
        .map(|(namespace, name)| match namespace {
            "" => ObjectRef::new(name),
            namespace => ObjectRef::new(name).within(namespace),
        })
        .collect()
}

impl<K: Names> NameIndex<K> {
    /// Keeps the index in step with one event of the watch of `K`: a list (`Init` to
    /// `InitDone`) drops at its end the objects it did not name.
    pub fn observe(&self, event: &watcher::Event<K>) {
        let mut index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                index.insert(object);
            }
            watcher::Event::Delete(object) => {
                index.remove(&key_of(
                    &object.namespace().unwrap_or_default(),
                    &object.name_any(),
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
                index.indexed.rebuild();
            }
        }
    }

    /// The objects naming the User `user` (by name), and those in `home`, a namespace, if given:
    /// for a Share, those a change to the User concerns (naming it as a grantee, or in its
    /// home).
    pub fn of_user(&self, user: &str, home: Option<&str>) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let named = index.users.get(user).into_iter().flatten();
        let in_home = home.into_iter().flat_map(|ns| index.in_namespace(ns));
        references(named.chain(in_home))
    }

    /// The objects naming the DirectoryGroup `group` (by name).
    pub fn of_group(&self, group: &str) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.groups.get(group).into_iter().flatten())
    }

    /// The objects naming a DirectoryGroup `pick` accepts (by name): `pick` is called once for
    /// every group the index has objects for, with the index locked (a walk of those groups).
    pub fn of_groups(&self, mut pick: impl FnMut(&str) -> bool) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let picked = index
            .groups
            .iter()
            .filter(|(group, _)| pick(group))
            .flat_map(|(_, keys)| keys);
        references(picked)
    }

    /// The objects in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<ObjectRef<K>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        references(index.in_namespace(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Grantee, ShareSpec};
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

    #[test]
    fn groups_are_found_by_member_and_workspaces_by_owner_and_admin() {
        let groups = NameIndex::<DirectoryGroup>::default();
        let team = DirectoryGroup::test("team", "Team").with_members(&["ada", "bob"]);
        groups.observe(&watcher::Event::Apply(team.clone()));
        // Cluster-scoped: found by name alone, as the cache keeps it.
        assert_eq!(groups.of_user("ada", None), [ObjectRef::new("team")]);
        groups.observe(&watcher::Event::Apply(team.with_members(&["bob"])));
        assert!(groups.of_user("ada", None).is_empty(), "ada left the team");
        assert_eq!(groups.of_user("bob", None).len(), 1);

        let workspaces = NameIndex::<Workspace>::default();
        let workspace = |name: &str, owner: serde_json::Value, admins: &[&str]| -> Workspace {
            serde_json::from_value(serde_json::json!({
                "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
                "metadata": { "name": name },
                "spec": { "owner": owner, "admins": admins, "reason": "r" },
            }))
            .unwrap()
        };
        let shared = workspace("shared", serde_json::json!({ "group": "team" }), &["cy"]);
        let own = workspace("ada-lab", serde_json::json!({ "user": "ada" }), &[]);
        for w in [&shared, &own] {
            workspaces.observe(&watcher::Event::Apply(w.clone()));
        }
        assert_eq!(workspaces.of_group("team"), [ObjectRef::new("shared")]);
        assert_eq!(workspaces.of_user("cy", None), [ObjectRef::new("shared")]);
        assert_eq!(workspaces.of_user("ada", None), [ObjectRef::new("ada-lab")]);
        assert!(
            workspaces.of_user("bob", None).is_empty(),
            "a member is the group's"
        );
        assert_eq!(
            workspaces.of_groups(|g| g == "team"),
            [ObjectRef::new("shared")]
        );
        assert!(workspaces.of_groups(|g| g == "ops").is_empty());
        workspaces.observe(&watcher::Event::Delete(shared));
        assert!(workspaces.of_group("team").is_empty());
        assert!(workspaces.of_groups(|_| true).is_empty());
    }
}
