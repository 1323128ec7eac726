//! Objects by key, kept from watch events (docs/homes.md, "How it is served"): the homes API
//! finds a caller's Shares by grantee here instead of scanning every Share.
//!
//! An index follows its watch as kube-runtime's reflector does: an initial list (or a re-list
//! after the watch lost its place) builds a new index beside the one in use and replaces it when
//! the list is done, so a request never sees a half-built one.

use std::collections::{HashMap, HashSet};

use homestead_api::Share;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

/// Keys to the objects that carry them, and each object's keys (to drop them when it changes).
struct Keys<K: Resource<DynamicType = ()>> {
    objects: HashMap<String, HashSet<ObjectRef<K>>>,
    keys_of: HashMap<ObjectRef<K>, Vec<String>>,
}

impl<K: Resource<DynamicType = ()>> Default for Keys<K> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            keys_of: HashMap::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Keys<K> {
    fn set(&mut self, object: ObjectRef<K>, keys: Vec<String>) {
        self.remove(&object);
        for key in &keys {
            self.objects
                .entry(key.clone())
                .or_default()
                .insert(object.clone());
        }
        if !keys.is_empty() {
            self.keys_of.insert(object, keys);
        }
    }

    fn remove(&mut self, object: &ObjectRef<K>) {
        for key in self.keys_of.remove(object).unwrap_or_default() {
            if let Some(objects) = self.objects.get_mut(&key) {
                objects.remove(object);
                if objects.is_empty() {
                    self.objects.remove(&key);
                }
            }
        }
    }
}

/// An index of `K` by the keys `keys_of` gives each object.
pub struct Index<K: Resource<DynamicType = ()>> {
    live: Keys<K>,
    listing: Option<Keys<K>>,
    keys_of: fn(&K) -> Vec<String>,
}

impl<K: Resource<DynamicType = ()>> Index<K> {
    /// An empty index by `keys_of`.
    pub fn new(keys_of: fn(&K) -> Vec<String>) -> Self {
        Self {
            live: Keys::default(),
            listing: None,
            keys_of,
        }
    }

    /// Takes in one watch event (the ones a reflector takes in, in the same order).
    pub fn observe(&mut self, event: &Event<K>) {
        match event {
            Event::Init => self.listing = Some(Keys::default()),
            Event::InitApply(object) => {
                let keys = (self.keys_of)(object);
                if let Some(listing) = self.listing.as_mut() {
                    listing.set(ObjectRef::from_obj(object), keys);
                }
            }
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.live = listing;
                }
            }
            Event::Apply(object) => {
                let keys = (self.keys_of)(object);
                self.live.set(ObjectRef::from_obj(object), keys);
            }
            Event::Delete(object) => self.live.remove(&ObjectRef::from_obj(object)),
        }
    }

    /// The objects carrying `key`.
    pub fn get(&self, key: &str) -> Vec<ObjectRef<K>> {
        self.live
            .objects
            .get(key)
            .map(|objects| objects.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The key of a Share grantee that is the User `name`.
pub fn user_grantee(name: &str) -> String {
    format!("user/{name}")
}

/// The key of a Share grantee that is the DirectoryGroup `name`.
pub fn group_grantee(name: &str) -> String {
    format!("group/{name}")
}

/// A Share's keys: each of its grantees.
pub fn share_keys(share: &Share) -> Vec<String> {
    share
        .spec
        .to
        .iter()
        .filter_map(|grantee| match (&grantee.user, &grantee.group) {
            (Some(user), _) => Some(user_grantee(user)),
            (None, Some(group)) => Some(group_grantee(group)),
            (None, None) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Grantee, ShareSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn share(name: &str, to: &[&str]) -> Share {
        let to = to
            .iter()
            .map(|user| Grantee {
                user: Some((*user).to_owned()),
                group: None,
            })
            .collect();
        let mut share = Share::new(
            name,
            ShareSpec {
                to,
                role: "view".into(),
                expires_at: Time("2026-12-01T00:00:00Z".parse().unwrap()),
                reason: "review".into(),
            },
        );
        share.metadata.namespace = Some("user-alice".into());
        share
    }

    fn at(name: &str) -> ObjectRef<Share> {
        ObjectRef::new(name).within("user-alice")
    }

    #[test]
    fn an_object_is_found_by_its_current_keys_only() {
        let mut index = Index::new(share_keys);
        index.observe(&Event::Apply(share("review", &["bob"])));
        assert_eq!(index.get(&user_grantee("bob")), [at("review")]);
        // New grantees move it; a delete removes it.
        index.observe(&Event::Apply(share("review", &["carol"])));
        assert!(index.get(&user_grantee("bob")).is_empty());
        assert_eq!(index.get(&user_grantee("carol")), [at("review")]);
        index.observe(&Event::Delete(share("review", &["carol"])));
        assert!(index.get(&user_grantee("carol")).is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_is_done() {
        let mut index = Index::new(share_keys);
        index.observe(&Event::Apply(share("gone", &["bob"])));
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(share("new", &["carol"])));
        // Until the list is done, the index in use answers.
        assert_eq!(index.get(&user_grantee("bob")), [at("gone")]);
        assert!(index.get(&user_grantee("carol")).is_empty());
        index.observe(&Event::InitDone);
        assert!(index.get(&user_grantee("bob")).is_empty());
        assert_eq!(index.get(&user_grantee("carol")), [at("new")]);
    }
}
