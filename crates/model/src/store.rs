//! Compact caches: the operator's of Users, Shares, Namespaces, RoleBindings, LimitRanges and
//! NetworkPolicies (one or more of each per User: its largest) and of Workspaces, and the homes
//! API's of Users and Shares (docs/performance.md, Memory).
//!
//! kube-runtime's reflector [`kube::runtime::reflector::Store`] keeps each object as an
//! `Arc<K>` under an `ObjectRef<K>`: for the reconciler's compact Namespaces and RoleBindings
//! that is still about 470 bytes of `ObjectMeta` (fifteen fields, all but three empty) and 96
//! bytes of key per object, 0.8 KiB a Namespace and 0.7 KiB a RoleBinding in a heap profile at
//! 10,000 Users, and 1.6 KiB a User. A [`CompactStore`] keeps a [`Compact::Record`] instead
//! (what readers need, no `ObjectMeta`; for Users, Shares and Workspaces their packed JSON,
//! [`crate::packed`]) under one `namespace/name` string, in a B-tree kept dense ([`crate::dense`]), so the RoleBindings of
//! one Namespace are a range rather than a scan of every binding in the cluster.
//!
//! Guarantees, as the reflector's: the store applies watch events in order; after its first
//! complete list it is ready ([`CompactStore::wait_until_ready`]); a re-list updates it in
//! place, and what the re-list no longer lists is removed and handed back to the caller as a
//! deletion ([`CompactWriter::apply`]), so the watch that feeds the Controller's triggers
//! learns of it too. Readers get a whole object back ([`Compact::from_record`]), rebuilt from
//! the record: the same value the watch delivered, less what [`crate::trim`] dropped (and, for the
//! packed kinds, its times kept to the second: [`crate::packed::as_kept`]).

use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;

use crate::dense::DenseMap;

/// A kind whose cache keeps a compact record of each object rather than the object.
pub trait Compact: Sized {
    /// What the cache keeps of one object.
    type Record: Send + Sync + 'static;

    /// The object's namespace (`None` for a cluster-scoped kind) and name.
    fn namespace_and_name(&self) -> (Option<&str>, &str);

    /// The record of this object.
    fn record(&self) -> Self::Record;

    /// The object back from its `namespace`, `name` and `record`.
    fn from_record(namespace: Option<&str>, name: &str, record: &Self::Record) -> Self;
}

/// A cached record and the number of the list (or re-list) that last saw it.
struct Entry<R> {
    record: R,
    list: u32,
}

/// Records by [`key`].
type Entries<R> = DenseMap<Box<str>, Entry<R>>;

struct Shared<C: Compact> {
    /// Records by [`key`].
    entries: RwLock<Entries<C::Record>>,
}

/// The namespace (`None` for a cluster-scoped object) and name in `meta`, as
/// [`Compact::namespace_and_name`] returns them; an empty name when it has none.
pub fn namespace_and_name(meta: &ObjectMeta) -> (Option<&str>, &str) {
    (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The key of an object: `namespace/name`, or `name` for a cluster-scoped kind (`/` is in
/// no Kubernetes name, so keys of one namespace sort together).
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// The namespace (`None` for a cluster-scoped kind) and name a [`key`] names.
fn split(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, key),
    }
}

/// A reader of a compact cache; cheap to clone (all clones read one cache).
pub struct CompactStore<C: Compact> {
    shared: Arc<Shared<C>>,
    /// Whether the first list is complete; closed once the writer is gone.
    ready: tokio::sync::watch::Receiver<bool>,
}

impl<C: Compact> Clone for CompactStore<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The writer of a compact cache was dropped before the cache's first complete list (its watch
/// task ended or panicked): the cache will never be ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterDropped;

impl std::fmt::Display for WriterDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the cache's writer stopped before its first list")
    }
}

impl std::error::Error for WriterDropped {}

/// The one writer of a compact cache: applies the watch's events to it.
pub struct CompactWriter<C: Compact> {
    shared: Arc<Shared<C>>,
    /// Tells the readers the first list is complete.
    ready: tokio::sync::watch::Sender<bool>,
    /// The number of the current (or last) list.
    list: u32,
}

/// A new, empty cache (not ready until its first complete list): its reader and its writer.
pub fn compact_store<C: Compact>() -> (CompactStore<C>, CompactWriter<C>) {
    let shared = Arc::new(Shared {
        entries: RwLock::new(DenseMap::default()),
    });
    let (ready, listed) = tokio::sync::watch::channel(false);
    (
        CompactStore {
            shared: shared.clone(),
            ready: listed,
        },
        CompactWriter {
            shared,
            ready,
            list: 0,
        },
    )
}

impl<C: Compact> CompactStore<C> {
    fn entries(&self) -> std::sync::RwLockReadGuard<'_, Entries<C::Record>> {
        self.shared
            .entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The object `name` (in `namespace`, for a namespaced kind), if the cache has it.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<C> {
        let entries = self.entries();
        let entry = entries.get(key(namespace, name).as_str())?;
        Some(C::from_record(namespace, name, &entry.record))
    }

    /// The object under `key` (`namespace/name`, or `name` for a cluster-scoped kind), if the
    /// cache has it.
    pub fn get_by_key(&self, key: &str) -> Option<C> {
        let entries = self.entries();
        let entry = entries.get(key)?;
        let (namespace, name) = split(key);
        Some(C::from_record(namespace, name, &entry.record))
    }

    /// Whether the cache has the object `name` (in `namespace`, for a namespaced kind).
    pub fn contains(&self, namespace: Option<&str>, name: &str) -> bool {
        self.entries().contains_key(key(namespace, name).as_str())
    }

    /// The key of every object the cache has, in order.
    pub fn keys(&self) -> Vec<Box<str>> {
        self.entries().keys().cloned().collect()
    }

    /// Calls `visit` with every object the cache has, in key order, each rebuilt from its
    /// record in turn (one at a time: neither the cache nor its keys are copied, and the writer
    /// waits only for one object's lookup at a time, not for the whole walk). The walk goes
    /// on after the last key it visited: an object removed during it is skipped, one added
    /// after that key is visited.
    pub fn for_each(&self, mut visit: impl FnMut(C)) {
        let mut after: Option<Box<str>> = None;
        while let Some((key, object)) = self.first_after(after.as_deref(), |key, record| {
            let (namespace, name) = split(key);
            (Box::from(key), C::from_record(namespace, name, record))
        }) {
            after = Some(key);
            visit(object);
        }
    }

    /// The first key the cache has after `after` (from the first when `None`), in key order:
    /// a walk of the cache one key at a time, which sees the changes made meanwhile as
    /// [`CompactStore::for_each`] does.
    pub fn key_after(&self, after: Option<&str>) -> Option<Box<str>> {
        self.first_after(after, |key, _| key.into())
    }

    /// `read` of the first entry after the key `after` (from the first when `None`), under
    /// the read lock.
    fn first_after<T>(
        &self,
        after: Option<&str>,
        read: impl FnOnce(&str, &C::Record) -> T,
    ) -> Option<T> {
        use std::ops::Bound::{Excluded, Unbounded};
        let entries = self.entries();
        let from = after.map_or(Unbounded, Excluded);
        let (key, entry) = entries.range::<str, _>((from, Unbounded)).next()?;
        Some(read(key, &entry.record))
    }

    /// The objects the cache has whose namespace and name `pick` accepts, in key order.
    pub fn filtered(&self, mut pick: impl FnMut(Option<&str>, &str) -> bool) -> Vec<C> {
        let mut picked = Vec::new();
        for (key, entry) in self.entries().iter() {
            let (namespace, name) = split(key);
            if pick(namespace, name) {
                picked.push(C::from_record(namespace, name, &entry.record));
            }
        }
        picked
    }

    /// The names of every object the cache has in `namespace`, in order.
    pub fn names_in(&self, namespace: &str) -> Vec<String> {
        let prefix = format!("{namespace}/");
        self.entries()
            .range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .map_while(|(key, _)| key.strip_prefix(prefix.as_str()).map(str::to_owned))
            .collect()
    }

    /// Returns once the cache has seen its first complete list (at once after that).
    ///
    /// # Errors
    /// [`WriterDropped`] when the writer is gone before that (its watch stopped).
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WriterDropped)
    }
}

impl<C: Compact + Clone> CompactWriter<C> {
    fn entries(&self) -> std::sync::RwLockWriteGuard<'_, Entries<C::Record>> {
        self.shared
            .entries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one watch event. At the end of a re-list, returns the objects it no longer
    /// listed, now removed (the caller passes them on as deletions); else nothing.
    pub fn apply(&mut self, event: &watcher::Event<C>) -> Vec<C> {
        match event {
            watcher::Event::Init => {
                self.list = self.list.wrapping_add(1);
                Vec::new()
            }
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                let (namespace, name) = object.namespace_and_name();
                let entry = Entry {
                    record: object.record(),
                    list: self.list,
                };
                // A list's new keys count as changes too: the map stays dense as it fills.
                self.entries().insert(key(namespace, name).into(), entry);
                Vec::new()
            }
            watcher::Event::Delete(object) => {
                let (namespace, name) = object.namespace_and_name();
                self.entries().remove_entry(key(namespace, name).as_str());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let gone = self.remove_unlisted();
                self.ready.send_replace(true);
                gone
            }
        }
    }

    /// Removes every record the current list did not see (and rebuilds the map dense); returns
    /// them as objects.
    fn remove_unlisted(&mut self) -> Vec<C> {
        let list = self.list;
        let mut gone = Vec::new();
        self.entries().retain(|key, entry| {
            let listed = entry.list == list;
            if !listed {
                let (namespace, name) = split(key);
                gone.push(C::from_record(namespace, name, &entry.record));
            }
            listed
        });
        gone
    }

    /// Puts `object` into the cache, as an `Apply` watch event would (tests of readers).
    pub fn insert(&mut self, object: impl Into<C>) {
        self.apply(&watcher::Event::Apply(object.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::Share;
    use serde_json::json;

    fn share(namespace: &str, name: &str, role: &str) -> Share {
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": namespace },
            "spec": { "to": [{ "user": "ada" }], "role": role, "reason": "pairing",
                      "expiresAt": "2027-01-01T00:00:00Z" },
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn objects_come_back_as_they_went_in_and_a_namespace_is_a_range() {
        let (store, mut writer) = compact_store::<Share>();
        let ready = tokio::spawn({
            let store = store.clone();
            async move { store.wait_until_ready().await.unwrap() }
        });
        writer.apply(&watcher::Event::Init);
        for (ns, name) in [
            ("user-a", "x"),
            ("user-a", "y"),
            ("user-ab", "z"),
            ("user-", "w"),
        ] {
            writer.apply(&watcher::Event::InitApply(share(ns, name, "edit")));
        }
        assert!(
            !ready.is_finished(),
            "not ready before the list is complete"
        );
        assert!(writer.apply(&watcher::Event::InitDone).is_empty());
        ready.await.unwrap();
        assert_eq!(
            store.get(Some("user-a"), "x"),
            Some(share("user-a", "x", "edit"))
        );
        assert_eq!(
            store.get_by_key("user-a/x"),
            Some(share("user-a", "x", "edit"))
        );
        assert!(store.contains(Some("user-ab"), "z"));
        assert_eq!(store.get(Some("user-ab"), "x"), None);
        assert_eq!(store.names_in("user-a"), ["x", "y"]);
        assert_eq!(store.names_in("user-ab"), ["z"]);
        assert_eq!(store.names_in("user"), Vec::<String>::new());
        writer.apply(&watcher::Event::Apply(share("user-a", "x", "view")));
        assert_eq!(store.get(Some("user-a"), "x").unwrap().spec.role, "view");
        writer.apply(&watcher::Event::Delete(share("user-a", "x", "view")));
        assert_eq!(store.names_in("user-a"), ["y"]);
        let mut names = Vec::new();
        store.for_each(|s| names.push(s.metadata.name.unwrap()));
        assert_eq!(names, ["w", "y", "z"], "in key order");
        let picked = store.filtered(|namespace, _| namespace == Some("user-ab"));
        assert_eq!(picked, [share("user-ab", "z", "edit")]);
        assert_eq!(store.keys().len(), 3);
    }

    #[test]
    fn a_walk_goes_on_after_the_last_key_it_visited_as_the_cache_changes() {
        let (store, mut writer) = compact_store::<Share>();
        for ns in ["user-a", "user-c", "user-e"] {
            writer.insert(share(ns, "s", "edit"));
        }
        let mut seen = Vec::new();
        store.for_each(|s| {
            let namespace = s.metadata.namespace.unwrap();
            if namespace == "user-a" {
                // The writer is not held back by the walk (no lock is held during a visit).
                writer.apply(&watcher::Event::Delete(share("user-c", "s", "edit")));
                writer.insert(share("user-d", "s", "edit"));
                writer.insert(share("user-0", "s", "edit"));
            }
            seen.push(namespace);
        });
        assert_eq!(
            seen,
            ["user-a", "user-d", "user-e"],
            "user-c removed is skipped, user-d added after user-a is visited, user-0 is not"
        );
        assert_eq!(store.key_after(None).as_deref(), Some("user-0/s"));
        assert_eq!(store.key_after(Some("user-a")).as_deref(), Some("user-a/s"));
        assert_eq!(
            store.key_after(Some("user-a/s")).as_deref(),
            Some("user-d/s")
        );
        assert_eq!(store.key_after(Some("user-e/s")), None);
    }

    #[test]
    fn rebuilding_the_map_as_keys_come_and_go_loses_nothing() {
        let (store, mut writer) = compact_store::<Share>();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(share("user-0000", "s", "edit")));
        writer.apply(&watcher::Event::InitDone);
        // Enough creations and deletions, in key order, to cross the rebuild threshold many times.
        for i in 1..1000 {
            writer.insert(share(&format!("user-{i:04}"), "s", "edit"));
        }
        for i in (0..1000).step_by(2) {
            writer.apply(&watcher::Event::Delete(share(
                &format!("user-{i:04}"),
                "s",
                "edit",
            )));
        }
        writer.insert(share("user-0001", "t", "view"));
        assert_eq!(store.keys().len(), 501);
        assert_eq!(store.names_in("user-0001"), ["s", "t"]);
        assert_eq!(store.get(Some("user-0002"), "s"), None);
        assert_eq!(
            store.get(Some("user-0999"), "s"),
            Some(share("user-0999", "s", "edit"))
        );
    }

    #[test]
    fn a_relist_removes_what_it_no_longer_lists_and_hands_it_back() {
        let (store, mut writer) = compact_store::<Share>();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(share("user-a", "x", "edit")));
        writer.apply(&watcher::Event::InitApply(share("user-b", "y", "edit")));
        writer.apply(&watcher::Event::InitDone);
        // The watch breaks; the re-list sees only y, changed.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(share("user-b", "y", "view")));
        assert_eq!(
            store.keys().len(),
            2,
            "updated in place: nothing removed mid-list"
        );
        let gone = writer.apply(&watcher::Event::InitDone);
        assert_eq!(gone, [share("user-a", "x", "edit")]);
        assert_eq!(store.get(Some("user-a"), "x"), None);
        assert_eq!(store.get(Some("user-b"), "y").unwrap().spec.role, "view");
    }
}
