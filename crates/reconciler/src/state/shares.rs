//! Which Shares each User and DirectoryGroup is a grantee of, and which Shares each namespace
//! holds ([`ShareIndex`]), kept from the Share watch: a change to a User (their home's owner, or
//! a grantee) or to a group's members reaches exactly the Shares it concerns.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use homestead_api::Share;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// The Shares by grantee and by namespace; cheap to clone (a shared handle).
#[derive(Clone, Default)]
pub struct ShareIndex(Arc<Mutex<Index>>);

#[derive(Default)]
struct Index {
    /// User grantee (by name) → Shares naming them.
    users: HashMap<String, HashSet<ObjectRef<Share>>>,
    /// DirectoryGroup grantee (by name) → Shares naming it.
    groups: HashMap<String, HashSet<ObjectRef<Share>>>,
    /// Namespace → the Shares in it.
    namespaces: HashMap<String, HashSet<ObjectRef<Share>>>,
    /// Share → what it was indexed under (its grantees), to unindex it.
    indexed: HashMap<ObjectRef<Share>, Vec<(bool, String)>>,
}

impl Index {
    fn remove(&mut self, share: &ObjectRef<Share>) {
        for (is_group, name) in self.indexed.remove(share).unwrap_or_default() {
            let map = if is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            unlink(map, &name, share);
        }
        if let Some(namespace) = share.namespace.clone() {
            unlink(&mut self.namespaces, &namespace, share);
        }
    }

    fn insert(&mut self, share: &Share) {
        let reference = ObjectRef::from_obj(share);
        self.remove(&reference);
        let grantees: Vec<(bool, String)> = share
            .spec
            .to
            .iter()
            .filter_map(|g| match (&g.user, &g.group) {
                (Some(user), _) => Some((false, user.clone())),
                (None, Some(group)) => Some((true, group.clone())),
                (None, None) => None,
            })
            .collect();
        for (is_group, name) in &grantees {
            let map = if *is_group {
                &mut self.groups
            } else {
                &mut self.users
            };
            map.entry(name.clone())
                .or_default()
                .insert(reference.clone());
        }
        if let Some(namespace) = share.namespace() {
            self.namespaces
                .entry(namespace)
                .or_default()
                .insert(reference.clone());
        }
        self.indexed.insert(reference, grantees);
    }
}

fn unlink(
    map: &mut HashMap<String, HashSet<ObjectRef<Share>>>,
    key: &str,
    share: &ObjectRef<Share>,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(share);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl ShareIndex {
    /// Keeps the index in step with one event of the Share watch. A relist starts over.
    pub fn observe(&self, event: &watcher::Event<Share>) {
        let mut index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => *index = Index::default(),
            watcher::Event::Apply(share) | watcher::Event::InitApply(share) => index.insert(share),
            watcher::Event::Delete(share) => index.remove(&ObjectRef::from_obj(share)),
            watcher::Event::InitDone => {}
        }
    }

    /// The Shares a change to the User `user` (by name) concerns: those naming it as a grantee
    /// and those in `home`, its namespace, if it has one.
    pub fn of_user(&self, user: &str, home: Option<&str>) -> Vec<ObjectRef<Share>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let named = index.users.get(user).into_iter().flatten();
        let in_home = home
            .and_then(|ns| index.namespaces.get(ns))
            .into_iter()
            .flatten();
        named.chain(in_home).cloned().collect()
    }

    /// The Shares naming the DirectoryGroup `group` (by name) as a grantee.
    pub fn of_group(&self, group: &str) -> Vec<ObjectRef<Share>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        index
            .groups
            .get(group)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The Shares in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<ObjectRef<Share>> {
        let index = self.0.lock().unwrap_or_else(|e| e.into_inner());
        index
            .namespaces
            .get(namespace)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
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
}
