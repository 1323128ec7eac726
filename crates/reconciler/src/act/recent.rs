//! Writes this replica made moments ago that its caches may not show yet.
//!
//! A reconcile can run before a watch delivers the operator's own write: another watch (a
//! Namespace's, a RoleBinding's) triggered it, and the cache it reads still has the state from
//! before. Without a memory of its own writes it would write again: the same status twice
//! ([`RecentWrites`], a fingerprint of each status written, for [`RECENT`]), or a create that
//! fails with 409 Conflict and is then applied ([`OwnCreates`]).
//!
//! The other way round, a watch delivering the operator's own create would trigger a reconcile
//! only to confirm what the reconcile that created the object already did; [`OwnCreates`]
//! lets the Controller's trigger recognise that echo and drop it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::Resource;

use crate::state::cache::{CachedNamespace, CachedRoleBinding};
use kube::runtime::watcher;

/// The key a User's recent writes are remembered by ([`Recent::statuses`],
/// [`Recent::convergence`]): its uid, since a User deleted and made again under the same name
/// is another User, whose status must not pass for the first one's unconfirmed write; its name
/// when it has no uid (a User not stored yet, in unit tests).
pub fn user_key(user: &homestead_api::User) -> String {
    user.metadata
        .uid
        .clone()
        .unwrap_or_else(|| kube::ResourceExt::name_any(user))
}

/// How long a write counts as made while the cache does not show it yet: far longer than a
/// watch event takes to arrive, far shorter than a resync.
pub const RECENT: Duration = Duration::from_secs(10);

/// Everything this replica wrote moments ago that its caches may not show yet: one memory,
/// read by the reconcile (no second status write or create) and by the watches (no reconcile
/// for the echo of a create).
#[derive(Debug, Default)]
pub struct Recent {
    /// Statuses written, by User ([`user_key`]).
    pub statuses: RecentWrites,
    /// Generations converged (a `Ready=True` status written), by User ([`user_key`]), as
    /// [`crate::plan::status::convergence_print`]s: a reconcile triggered by the echo of one of its
    /// own writes must not take the User for respecified and apply its Namespace again.
    pub convergence: RecentWrites,
    /// Share statuses written, by Share uid, as [`crate::plan::share::status_print`]s: a second
    /// trigger before the Share watch delivers the first write must not write it again.
    pub share_statuses: RecentWrites,
    /// Namespaces created that the Namespace watch has not delivered yet.
    pub namespaces: Arc<OwnCreates<CachedNamespace>>,
    /// RoleBindings created that the RoleBinding watch has not delivered yet.
    pub role_bindings: Arc<OwnCreates<CachedRoleBinding>>,
    /// Namespaces deleted (offboarding), by name, as a fingerprint of their uid
    /// (`cache::print`): until the Namespace watch shows the deletion, a reconcile another
    /// watch triggers must not delete the Namespace and revoke its bindings a second time.
    pub namespace_deletes: RecentWrites,
    /// Namespaces the Namespace watch reported gone (deleted, or no longer labelled as
    /// Homestead's): what lets an offboarding trust the cache's word that a Namespace is gone
    /// without asking the API server.
    pub namespaces_gone: Arc<Gone>,
}

/// How long a [`Gone`] entry is kept if no offboarding takes it: far longer than an offboarding
/// waits for its Namespace's watch event.
pub const GONE_FOR: Duration = Duration::from_secs(600);

/// Names of objects whose watch delivered their deletion, each kept until taken or for
/// [`GONE_FOR`].
#[derive(Debug, Default)]
pub struct Gone(Mutex<Expiring<String, ()>>);

impl Gone {
    /// Remembers that the watch delivered the deletion of `name` (forgetting entries older than
    /// [`GONE_FOR`] now and then, `Expiring::insert`).
    pub fn remember(&self, name: String) {
        lock(&self.0).insert(name, (), GONE_FOR);
    }

    /// What the Namespace watch's `event` says of names: a deletion is remembered
    /// ([`Gone::remember`]); a Namespace it delivers (created, relabelled as Homestead's again,
    /// re-listed) is no longer gone, and its name is forgotten. Without that, a name that left
    /// the watch (deleted, or retained and so unlabelled) and came back within [`GONE_FOR`]
    /// would still read as gone, and a reconcile would skip the read that finds it.
    pub fn note<K: Resource>(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Delete(gone) => {
                self.remember(gone.meta().name.clone().unwrap_or_default())
            }
            watcher::Event::Apply(seen) | watcher::Event::InitApply(seen) => {
                if let Some(name) = seen.meta().name.as_deref() {
                    lock(&self.0).remove(name);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// Whether the watch delivered the deletion of `name` less than [`GONE_FOR`] ago; forgets
    /// it either way.
    pub fn take(&self, name: &str) -> bool {
        lock(&self.0)
            .remove(name)
            .is_some_and(|((), at)| at.elapsed() < GONE_FOR)
    }
}

/// Writes made in the last [`RECENT`] seconds, by key (a User's name), as
/// fingerprints of what was written. An entry is dropped as soon as the cache shows the write
/// ([`RecentWrites::forget`]) and no longer counts after [`RECENT`], so a change someone else
/// makes afterwards is still repaired.
#[derive(Debug, Default)]
pub struct RecentWrites(Mutex<Expiring<String, u64>>);

impl RecentWrites {
    fn entries(&self) -> std::sync::MutexGuard<'_, Expiring<String, u64>> {
        lock(&self.0)
    }

    /// How much longer a write with fingerprint `print` under `key` counts as made: `Some`
    /// (less than [`RECENT`]) when it was made less than [`RECENT`] ago, else `None`.
    pub fn unconfirmed(&self, key: &str, print: u64) -> Option<Duration> {
        self.entries()
            .get(key)
            .filter(|(p, _)| *p == print)
            .and_then(|(_, at)| left_since(*at))
    }

    /// Remembers that a write with fingerprint `print` was just made under `key` (forgetting
    /// entries older than [`RECENT`] now and then, `Expiring::insert`).
    pub fn remember(&self, key: String, print: u64) {
        self.entries().insert(key, print, RECENT);
    }

    /// Forgets `key`'s entry (the cache shows the write now).
    pub fn forget(&self, key: &str) {
        self.entries().remove(key);
    }
}

/// Objects this replica created moments ago that their watch has not delivered yet, each
/// kept as the cache will hold it (a compact form of [`crate::state::cache`], trimmed by
/// [`homestead_model::trim::trim`]), by namespace and name.
///
/// When the watch delivers an object exactly as it was created, the reconcile that created it
/// has already gone on from there; triggering another one would only read the caches and
/// write nothing. [`OwnCreates::is_echo`] tells the Controller's trigger to drop that event.
/// Anything else about the object (someone changed it before the watch caught up, a delete)
/// triggers as usual, and so does a create the watch delivers before it was remembered here.
/// Until the watch delivers it, [`OwnCreates::unconfirmed`] tells a reconcile that finds the
/// object missing from the cache not to create it again. Entries the watch never delivers (the
/// object deleted during a re-list) are forgotten once [`RECENT`] old, at the next insert or
/// lookup one [`RECENT`] after the last pass (`Expiring`).
#[derive(Debug)]
pub struct OwnCreates<K>(Mutex<Created<K>>);

/// Created objects by namespace and name, with when each was remembered.
type Created<K> = Expiring<(Option<String>, String), K>;

impl<K> OwnCreates<K>
where
    K: Resource + PartialEq + Send + 'static,
{
    /// The objects of watch `events` whose change triggers their User's reconcile (as
    /// kube-runtime's `touched_objects`): every new, changed or deleted one, except the watch's
    /// first delivery of an object exactly as this replica created it ([`OwnCreates::is_echo`]):
    /// the reconcile that created it went on from there.
    pub fn touched_except_echoes<S>(
        self: Arc<Self>,
        events: S,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        events.filter_map(move |event| {
            std::future::ready(match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    (!self.is_echo(&o)).then_some(Ok(o))
                }
                Ok(watcher::Event::Delete(o)) => {
                    self.forget(&o);
                    Some(Ok(o))
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            })
        })
    }
}

impl<K> Default for OwnCreates<K> {
    fn default() -> Self {
        Self(Mutex::new(Expiring::default()))
    }
}

impl<K: Resource + PartialEq> OwnCreates<K> {
    fn entries(&self) -> std::sync::MutexGuard<'_, Created<K>> {
        lock(&self.0)
    }

    fn key(object: &K) -> (Option<String>, String) {
        let meta = object.meta();
        (
            meta.namespace.clone(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    /// Remembers `created`, the API server's response to a create, in its cached form
    /// (trimmed here as the watch trims it).
    pub fn remember(&self, created: impl Into<K>) {
        let mut object: K = created.into();
        homestead_model::trim::trim(object.meta_mut());
        self.entries().insert(Self::key(&object), object, RECENT);
    }

    /// How much longer the object `name` in `namespace` counts as created by this replica and
    /// not delivered by its watch yet: `Some` (less than [`RECENT`]) when it was created less
    /// than [`RECENT`] ago, is still undelivered, and `same` says it is the object wanted now;
    /// else `None`.
    pub fn unconfirmed(
        &self,
        namespace: Option<&str>,
        name: &str,
        same: impl FnOnce(&K) -> bool,
    ) -> Option<Duration> {
        let key = (namespace.map(str::to_owned), name.to_owned());
        self.entries()
            .get(&key)
            .filter(|(created, _)| same(created))
            .and_then(|(_, at)| left_since(*at))
    }

    /// Forgets the created object with `deleted`'s namespace and name: its watch has delivered
    /// its deletion.
    pub fn forget(&self, deleted: &K) {
        self.entries().remove(&Self::key(deleted));
    }

    /// Whether `delivered`, an object the watch has just delivered as created or changed
    /// (trimmed for the cache), is exactly what this replica created: its echo. Forgets the
    /// created object either way, so only the first delivery can be an echo. A delivery more
    /// than [`RECENT`] after the create may find it forgotten already: it then triggers a
    /// reconcile that finds nothing to do, the safe side.
    pub fn is_echo(&self, delivered: &K) -> bool {
        self.entries()
            .remove(&Self::key(delivered))
            .is_some_and(|(created, _)| created == *delivered)
    }
}

/// What is left of [`RECENT`] since `at`: `None` once it has passed.
fn left_since(at: Instant) -> Option<Duration> {
    RECENT
        .checked_sub(at.elapsed())
        .filter(|left| !left.is_zero())
}

/// `mutex`'s guard, whether or not a thread panicked holding it (every map here stays
/// consistent between its own operations).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The size from which [`Expiring::insert`] looks for expired entries on every doubling.
const PRUNE_FROM: usize = 1024;

/// A map whose entries each carry the moment they were inserted and count for a time to live
/// given on insertion; readers check it ([`left_since`], `GONE_FOR`). Expired entries are
/// dropped in one pass once the map has doubled since the last pass (and holds at least
/// [`PRUNE_FROM`]), so an insert costs O(1) amortized however many entries are still live (a
/// bulk import keeps thousands within [`RECENT`]), and the map holds at most about twice its
/// live entries. A pass also runs on an insert or a lookup one time to live after the last, so
/// a burst's entries do not stay until the map next doubles; and a pass that leaves the table
/// at most a quarter full shrinks it to twice what is left: a hash table keeps the capacity of
/// its largest moment otherwise (at the end of bench-scale's mix, 1.2 MiB of tables for the
/// Shares' and Namespaces' writes of phases long over: docs/performance.md, "A leaner echo
/// memory and group memberships").
#[derive(Debug)]
struct Expiring<Q, V> {
    entries: HashMap<Q, (V, Instant)>,
    /// The size at which the next insert first drops expired entries.
    prune_at: usize,
    /// When expired entries were last dropped, and the time to live of the last insert.
    pruned: (Instant, Duration),
}

impl<Q, V> Default for Expiring<Q, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            prune_at: PRUNE_FROM,
            pruned: (Instant::now(), Duration::ZERO),
        }
    }
}

impl<Q: Eq + Hash, V> Expiring<Q, V> {
    /// Inserts `value` under `key`, stamped now; first, when the map has reached its pruning
    /// size or the last pass is `ttl` old, drops every entry older than `ttl` and sets the next
    /// pruning size to twice what is left (at least [`PRUNE_FROM`]).
    fn insert(&mut self, key: Q, value: V, ttl: Duration) {
        let now = Instant::now();
        // A pass judges every entry by one time to live: each map is used with one.
        debug_assert!(self.pruned.1.is_zero() || self.pruned.1 == ttl);
        self.pruned.1 = ttl;
        if self.entries.len() >= self.prune_at || self.pass_due(now) {
            self.prune(now);
        }
        self.entries.insert(key, (value, now));
    }

    /// Whether the last pass is one time to live (the last insert's) old and the table holds
    /// anything: entries to look at, or room a pass may give back (a map emptied by removals
    /// keeps its capacity until then).
    fn pass_due(&self, now: Instant) -> bool {
        self.entries.capacity() > 0 && now.saturating_duration_since(self.pruned.0) >= self.pruned.1
    }

    /// Drops every entry older than the last insert's time to live, and shrinks the table to
    /// twice what is left once that fills at most a quarter of it (or nothing is left).
    fn prune(&mut self, now: Instant) {
        let ttl = self.pruned.1;
        self.entries
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
        let left = self.entries.len();
        self.prune_at = (left * 2).max(PRUNE_FROM);
        if self.entries.capacity() > 4 * left.max(16) {
            self.entries.shrink_to(2 * left);
        }
        self.pruned.0 = now;
    }

    /// The value under `key` and when it was inserted (dropping expired entries first when a
    /// pass is due).
    fn get<B>(&mut self, key: &B) -> Option<&(V, Instant)>
    where
        Q: std::borrow::Borrow<B>,
        B: Eq + Hash + ?Sized,
    {
        let now = Instant::now();
        if self.pass_due(now) {
            self.prune(now);
        }
        self.entries.get(key)
    }

    /// Removes and returns the value under `key` and when it was inserted.
    fn remove<B>(&mut self, key: &B) -> Option<(V, Instant)>
    where
        Q: std::borrow::Borrow<B>,
        B: Eq + Hash + ?Sized,
    {
        self.entries.remove(key)
    }
}

/// The last answer to "is the `users.homestead.dev` CRD being deleted?", with when the GET
/// that gave it was sent; shared by every offboarding.
#[derive(Debug, Default)]
pub struct UninstallCheck(pub(super) tokio::sync::Mutex<Option<(Instant, bool)>>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_entries_go_once_the_map_has_doubled_and_live_ones_stay() {
        let mut live = Expiring::default();
        for i in 0..3 * PRUNE_FROM {
            live.insert(i, (), Duration::from_secs(60));
        }
        assert_eq!(live.entries.len(), 3 * PRUNE_FROM, "nothing has expired");
        assert_eq!(
            live.prune_at,
            4 * PRUNE_FROM,
            "the next pass waits until the map has doubled again"
        );

        // A burst below the doubling size: its entries go on the first insert one time to
        // live after the last pass, and the table shrinks with them.
        let mut expired = Expiring::default();
        let ttl = Duration::from_secs(60);
        for i in 0..PRUNE_FROM / 2 {
            expired.insert(i, (), ttl);
        }
        assert!(expired.entries.capacity() >= PRUNE_FROM / 2);
        age(&mut expired, ttl);
        expired.insert(PRUNE_FROM, (), ttl);
        assert_eq!(expired.entries.len(), 1, "every older entry expired");
        assert_eq!(expired.prune_at, PRUNE_FROM);
        assert!(
            expired.entries.capacity() <= 64,
            "the table shrank to what is left, not {}",
            expired.entries.capacity()
        );
        assert!(expired.get(&PRUNE_FROM).is_some());
        assert!(expired.remove(&PRUNE_FROM).is_some());
        assert!(expired.get(&PRUNE_FROM).is_none());
    }

    /// Makes every entry of `map`, and its last pass, `by` older.
    fn age<Q, V>(map: &mut Expiring<Q, V>, by: Duration) {
        let back = |at: Instant| at.checked_sub(by).expect("the clock is older than `by`");
        map.pruned.0 = back(map.pruned.0);
        for (_, at) in map.entries.values_mut() {
            *at = back(*at);
        }
    }

    #[test]
    fn a_lookup_one_time_to_live_after_a_burst_drops_it_and_frees_the_table() {
        let recent = RecentWrites::default();
        for i in 0..2 * PRUNE_FROM {
            recent.remember(format!("user-{i}"), 1);
        }
        assert!(recent.entries().entries.capacity() >= 2 * PRUNE_FROM);
        age(&mut recent.entries(), RECENT);
        assert!(recent.unconfirmed("user-0", 1).is_none(), "expired");
        let entries = recent.entries();
        assert!(entries.entries.is_empty());
        assert!(
            entries.entries.capacity() <= 64,
            "the table is freed, not {} slots",
            entries.entries.capacity()
        );
    }

    #[test]
    fn a_pass_keeps_what_is_younger_than_its_time_to_live() {
        let recent = RecentWrites::default();
        for i in 0..2 * PRUNE_FROM {
            recent.remember(format!("old-{i}"), 1);
        }
        age(&mut recent.entries(), RECENT);
        // Written just now: the pass this insert runs keeps it, and drops the burst.
        recent.remember("alice".into(), 7);
        assert!(recent.unconfirmed("alice", 7).is_some(), "still counts");
        assert!(recent.unconfirmed("old-0", 1).is_none());
        let entries = recent.entries();
        assert_eq!(entries.entries.len(), 1);
        assert!(
            entries.entries.capacity() <= 64,
            "shrunk around what is left"
        );
    }

    #[test]
    fn a_map_emptied_by_removals_gives_its_table_back_one_time_to_live_later() {
        let created = OwnCreates::<crate::state::cache::CachedNamespace>::default();
        let mut delivered = Vec::new();
        for i in 0..PRUNE_FROM {
            let ns = namespace(&format!("user-{i}"), "a");
            created.remember(ns.clone());
            let mut object = crate::state::cache::CachedNamespace::from(ns);
            homestead_model::trim::trim(&mut object.metadata);
            delivered.push(object);
        }
        for object in &delivered {
            assert!(created.is_echo(object));
        }
        assert!(created.entries().entries.is_empty());
        assert!(created.entries().entries.capacity() >= PRUNE_FROM);
        age(&mut created.entries(), RECENT);
        assert_eq!(created.unconfirmed(None, "user-0", |_| true), None);
        assert_eq!(
            created.entries().entries.capacity(),
            0,
            "the table is freed"
        );
    }

    #[test]
    fn a_write_counts_until_forgotten_and_only_with_its_fingerprint() {
        let recent = RecentWrites::default();
        assert!(recent.unconfirmed("alice", 1).is_none());
        recent.remember("alice".into(), 1);
        let left = recent.unconfirmed("alice", 1).expect("just written");
        assert!(left <= RECENT);
        assert!(
            recent.unconfirmed("alice", 2).is_none(),
            "another write is made"
        );
        assert!(recent.unconfirmed("bob", 1).is_none());
        recent.forget("alice");
        assert!(
            recent.unconfirmed("alice", 1).is_none(),
            "the cache shows it"
        );
    }

    fn namespace(name: &str, label: &str) -> k8s_openapi::api::core::v1::Namespace {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "uid": "u1", "resourceVersion": "7",
                "labels": { "homestead.dev/user": label },
            },
        }))
        .unwrap()
    }

    #[test]
    fn only_the_first_delivery_of_exactly_what_was_created_is_an_echo() {
        use crate::state::cache::CachedNamespace;
        let created = OwnCreates::<CachedNamespace>::default();
        let delivered = |name, label| {
            let mut object = CachedNamespace::from(namespace(name, label));
            homestead_model::trim::trim(&mut object.metadata);
            object
        };
        assert!(
            !created.is_echo(&delivered("user-a", "a")),
            "nothing created"
        );
        created.remember(namespace("user-a", "a"));
        assert!(created.is_echo(&delivered("user-a", "a")));
        assert!(
            !created.is_echo(&delivered("user-a", "a")),
            "delivered twice"
        );
        created.remember(namespace("user-a", "a"));
        assert!(
            !created.is_echo(&delivered("user-a", "mallory")),
            "changed before the watch caught up"
        );
        assert!(
            !created.is_echo(&delivered("user-a", "a")),
            "forgotten by the changed delivery"
        );
        created.remember(namespace("user-b", "b"));
        assert!(
            !created.is_echo(&delivered("user-a", "a")),
            "another object"
        );
        assert!(created.is_echo(&delivered("user-b", "b")));
    }

    #[test]
    fn a_create_is_unconfirmed_until_delivered_or_deleted() {
        use crate::state::cache::CachedNamespace;
        let created = OwnCreates::<CachedNamespace>::default();
        let any = |_: &CachedNamespace| true;
        assert_eq!(created.unconfirmed(None, "user-a", any), None);
        created.remember(namespace("user-a", "a"));
        let left = created
            .unconfirmed(None, "user-a", any)
            .expect("just created");
        assert!(left <= RECENT);
        assert_eq!(
            created.unconfirmed(None, "user-a", |ns| ns.user().is_none()),
            None,
            "not the object wanted now"
        );
        assert_eq!(created.unconfirmed(Some("other"), "user-a", any), None);
        let mut delivered = CachedNamespace::from(namespace("user-a", "a"));
        homestead_model::trim::trim(&mut delivered.metadata);
        assert!(created.is_echo(&delivered));
        assert_eq!(created.unconfirmed(None, "user-a", any), None, "delivered");
        created.remember(namespace("user-a", "a"));
        created.forget(&delivered);
        assert_eq!(created.unconfirmed(None, "user-a", any), None, "deleted");
    }

    #[test]
    fn a_name_seen_gone_is_forgotten_once_the_watch_delivers_it_again() {
        use crate::state::cache::CachedNamespace;
        let seen = |name| CachedNamespace::from(namespace(name, "a"));
        let gone = Gone::default();
        gone.note(&watcher::Event::Delete(seen("user-a")));
        gone.note(&watcher::Event::Delete(seen("user-b")));
        assert!(gone.take("user-a"), "the watch saw it go");
        assert!(!gone.take("user-a"), "taken once");

        // user-b left the watch (retained, say), then a namespace of that name is Homestead's
        // again: a reconcile must read it, not take it as gone.
        gone.note(&watcher::Event::Apply(seen("user-b")));
        assert!(!gone.take("user-b"), "it came back");

        // A re-list delivers it too; then it goes again.
        gone.note(&watcher::Event::Delete(seen("user-c")));
        gone.note(&watcher::Event::InitApply(seen("user-c")));
        assert!(!gone.take("user-c"), "re-listed");
        gone.note(&watcher::Event::Delete(seen("user-c")));
        gone.note(&watcher::Event::<CachedNamespace>::InitDone);
        assert!(gone.take("user-c"), "gone again");
    }
}
