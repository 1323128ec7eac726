//! State: what this replica knows of the cluster, from its watches. The caches reconciles read
//! instead of the API server ([`Caches`], one facade over every store), the compact forms
//! Namespaces, RoleBindings, LimitRanges, NetworkPolicies and Shares are kept in ([`cache`], in
//! the model's [`homestead_model::store`], where Users are kept packed), and the indexes the
//! watches keep beside them: which User holds each identity ([`homestead_model::identity`]),
//! which Users use each Profile ([`index`]) and which Shares name each grantee ([`ShareIndex`],
//! the model's). State imports only [`crate::plan`] and the model (docs/development.md,
//! "Layers").

pub mod cache;
pub mod declared;
pub mod index;

use std::sync::Arc;

use homestead_api::{DirectoryGroup, Profile, User, Workspace};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};

use cache::{
    CachedLimitRange, CachedNamespace, CachedNetworkPolicy, CachedRoleBinding, CachedShare,
};
use declared::Cache;

/// The one index of Shares ([`homestead_model::names`]), over the Shares as cached here.
pub type ShareIndex = homestead_model::names::ShareIndex<CachedShare>;
use homestead_model::identity::Identities;
use homestead_model::names::NameIndex;
use homestead_model::store::{CompactStore, compact_store};
use index::ProfileIndex;

/// The caches (reflector or compact) reconciles read instead of the API server wherever
/// possible, in the compact forms of [`cache`].
#[derive(Clone)]
pub struct Caches {
    /// Namespaces labelled as Homestead's (`app.kubernetes.io/managed-by=homestead`).
    pub(crate) namespaces: CompactStore<CachedNamespace>,
    /// Every RoleBinding in the cluster: revoking access removes the ones a person made too.
    pub(crate) role_bindings: CompactStore<CachedRoleBinding>,
    /// ResourceQuotas labelled as Homestead's.
    pub(crate) quotas: Store<ResourceQuota>,
    /// LimitRanges labelled as Homestead's, compact ([`cache::CachedGuard`]).
    pub(crate) limit_ranges: CompactStore<CachedLimitRange>,
    /// NetworkPolicies labelled as Homestead's, compact ([`cache::CachedGuard`]).
    pub(crate) network_policies: CompactStore<CachedNetworkPolicy>,
    /// Every Profile.
    pub(crate) profiles: Store<Profile>,
    /// Every DirectoryGroup.
    pub(crate) groups: Store<DirectoryGroup>,
    /// Which User holds each identity, from the User watch.
    pub(crate) identities: Identities,
    /// Every User (the Controller over Users' own cache), packed ([`homestead_model::packed`]).
    pub(crate) users: CompactStore<User>,
    /// Which Users use which Profile, from the User watch.
    pub(crate) index: ProfileIndex,
    /// Every Share (the Controller over Shares' own cache), packed
    /// (`Compact for CachedShare` in [`cache`]).
    pub(crate) shares: CompactStore<CachedShare>,
    /// Which Shares name each grantee and are in each namespace, from the Share watch.
    pub(crate) share_index: ShareIndex,
    /// Every Workspace (the Controller over Workspaces' own cache), packed
    /// ([`homestead_model::packed`]).
    pub(crate) workspaces: CompactStore<Workspace>,
    /// The Workspaces by the User or DirectoryGroup that owns each and by their admins, from
    /// the Workspace watch.
    pub(crate) workspace_index: NameIndex<Workspace>,
}

impl Caches {
    /// Caches no watch fills: every read misses, so a reconcile reads the cluster for each
    /// decision (a reconcile run outside the operator, in tests).
    pub fn empty() -> Self {
        Self {
            namespaces: compact_store().0,
            role_bindings: compact_store().0,
            quotas: reflector::store().0,
            limit_ranges: compact_store().0,
            network_policies: compact_store().0,
            profiles: reflector::store().0,
            groups: reflector::store().0,
            identities: Identities::default(),
            users: compact_store().0,
            index: ProfileIndex::default(),
            shares: compact_store().0,
            share_index: ShareIndex::default(),
            workspaces: compact_store().0,
            workspace_index: NameIndex::default(),
        }
    }

    /// Waits until every cache a reconcile reads has seen its first complete list: this is
    /// the operator's readiness (docs/design.md, rule 29), derived from the one list of watches
    /// ([`declared::WATCHES`]): every watch that keeps a cache is waited for. Returns only once
    /// all have listed; never fails (a watch that cannot list keeps retrying, and this keeps
    /// waiting).
    pub async fn synced(&self) {
        for cache in declared::caches() {
            self.wait_for(cache).await;
            tracing::debug!(cache = <&str>::from(cache), "cache listed");
        }
    }

    /// Waits until `cache` has seen its first complete list. Every [`Cache`] has its store
    /// here (the match has no wildcard); the indexes (identities, Profile to Users, Shares by
    /// grantee) are fed by the watches of Users and Shares, so they are complete when those are.
    pub async fn wait_for(&self, cache: Cache) {
        match cache {
            Cache::Namespaces => wait_until_listed(&self.namespaces).await,
            Cache::RoleBindings => wait_until_listed(&self.role_bindings).await,
            Cache::Quotas => wait_until_ready(&self.quotas).await,
            Cache::LimitRanges => wait_until_listed(&self.limit_ranges).await,
            Cache::NetworkPolicies => wait_until_listed(&self.network_policies).await,
            Cache::Profiles => wait_until_ready(&self.profiles).await,
            Cache::Groups => wait_until_ready(&self.groups).await,
            Cache::Users => wait_until_listed(&self.users).await,
            Cache::Shares => wait_until_listed(&self.shares).await,
            Cache::Workspaces => wait_until_listed(&self.workspaces).await,
        }
    }

    /// The managed Namespace `name`, if cached.
    pub fn namespace(&self, name: &str) -> Option<Arc<CachedNamespace>> {
        self.namespaces.get(None, name).map(Arc::new)
    }

    /// The RoleBinding `namespace/name`, if cached.
    pub fn role_binding(&self, namespace: &str, name: &str) -> Option<Arc<CachedRoleBinding>> {
        self.role_bindings.get(Some(namespace), name).map(Arc::new)
    }

    /// The names of every RoleBinding in `namespace` the cache knows of.
    pub fn role_bindings_in(&self, namespace: &str) -> Vec<String> {
        self.role_bindings.names_in(namespace)
    }

    /// The ResourceQuota `namespace/name`, if cached.
    pub fn quota(&self, namespace: &str, name: &str) -> Option<Arc<ResourceQuota>> {
        cached(&self.quotas, namespace, name)
    }

    /// The LimitRange `namespace/name`, if cached: its facts and the print of its spec
    /// ([`cache::CachedGuard`]), not the object.
    pub fn limit_range(&self, namespace: &str, name: &str) -> Option<Arc<CachedLimitRange>> {
        self.limit_ranges.get(Some(namespace), name).map(Arc::new)
    }

    /// The NetworkPolicy `namespace/name`, if cached: its facts and the print of its spec
    /// ([`cache::CachedGuard`]), not the object.
    pub fn network_policy(&self, namespace: &str, name: &str) -> Option<Arc<CachedNetworkPolicy>> {
        self.network_policies
            .get(Some(namespace), name)
            .map(Arc::new)
    }

    /// Every cached Profile.
    pub fn profiles(&self) -> Vec<Arc<Profile>> {
        self.profiles.state()
    }

    /// The Profile `name`, if cached.
    pub fn profile(&self, name: &str) -> Option<Arc<Profile>> {
        self.profiles.get(&ObjectRef::new(name))
    }

    /// The Users of the Profile `profile` (by name), as cached, each decoded as the iterator
    /// reaches it (a Profile's status reads 1,250 of them at 10,000 Users over 8 Profiles:
    /// about 2 MB with their statuses, held at once when they were collected first).
    pub fn users_of(&self, profile: &str) -> impl Iterator<Item = User> + '_ {
        self.index
            .users_of(profile)
            .into_iter()
            .filter_map(|user| self.users.get(None, &user))
    }

    /// Every cached DirectoryGroup.
    pub fn groups(&self) -> Vec<Arc<DirectoryGroup>> {
        self.groups.state()
    }

    /// The DirectoryGroup `name`, if cached.
    pub fn group(&self, name: &str) -> Option<Arc<DirectoryGroup>> {
        self.groups.get(&ObjectRef::new(name))
    }

    /// Whether `user` is refused as `DuplicateIdentity`: another User holds its identity
    /// ([`Identities::holder_other_than`]).
    pub fn is_duplicate(&self, user: &User) -> bool {
        self.identities.holder_other_than(user).is_some()
    }

    /// The Share `namespace/name`, if cached.
    pub fn share(&self, namespace: &str, name: &str) -> Option<Arc<CachedShare>> {
        self.shares.get(Some(namespace), name).map(Arc::new)
    }

    /// Whether the Share `namespace/name` is cached.
    pub fn has_share(&self, namespace: &str, name: &str) -> bool {
        self.shares.contains(Some(namespace), name)
    }

    /// The User `name`, if cached.
    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.get(None, name).map(Arc::new)
    }

    /// Which Shares name each grantee and are in each namespace.
    pub fn share_index(&self) -> &ShareIndex {
        &self.share_index
    }

    /// The cached Workspaces that name the User `user` as their owner or an admin, from the
    /// index of names: only those are decoded from their packed records.
    pub fn workspaces_of_user(&self, user: &str) -> Vec<Arc<Workspace>> {
        self.workspace_index
            .of_user(user, None)
            .iter()
            .filter_map(|w| self.workspace(&w.name))
            .collect()
    }

    /// The Workspace `name`, if cached.
    pub fn workspace(&self, name: &str) -> Option<Arc<Workspace>> {
        self.workspaces.get(None, name).map(Arc::new)
    }
}

/// The object `namespace/name` from a reflector cache.
fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// Waits until the compact cache `store` has seen its first complete list; forever when its
/// writer is gone first (its watch stopped): nothing may judge from a cache that never listed.
async fn wait_until_listed<C: homestead_model::store::Compact>(store: &CompactStore<C>) {
    if store.wait_until_ready().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits until `store` has seen its first complete list.
///
/// `Store::wait_until_ready` wakes only the most recent of several concurrent waiters (its
/// oneshot receiver keeps one waker), and the Workspace and status Controllers wait on them too; so this
/// polls again every 250 ms instead of relying on a wake-up. Once ready, it returns at once.
async fn wait_until_ready<K>(store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let poll = std::time::Duration::from_millis(250);
    while tokio::time::timeout(poll, store.wait_until_ready())
        .await
        .is_err()
    {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    /// Marks a reflector store as having listed (an empty first list).
    fn listed<K>(writer: &mut Writer<K>)
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
    }

    /// Rule 29: `synced` waits for every cache, DirectoryGroups included (an operator that
    /// judged people before its groups had listed moved them off their group's Profile).
    #[tokio::test(start_paused = true)]
    async fn synced_waits_for_every_cache_the_groups_included() {
        let (namespaces, mut namespace_writer) = compact_store();
        let (role_bindings, mut role_binding_writer) = compact_store();
        let (quotas, mut quota_writer) = reflector::store();
        let (limit_ranges, mut limit_range_writer) = compact_store();
        let (network_policies, mut network_policy_writer) = compact_store();
        let (profiles, mut profile_writer) = reflector::store();
        let (groups, mut group_writer) = reflector::store::<DirectoryGroup>();
        let (users, mut user_writer) = compact_store::<User>();
        let (shares, mut share_writer) = compact_store::<CachedShare>();
        let (workspaces, mut workspace_writer) = compact_store::<Workspace>();
        let caches = Caches {
            namespaces,
            role_bindings,
            quotas,
            limit_ranges,
            network_policies,
            profiles,
            groups,
            identities: Identities::default(),
            users,
            index: ProfileIndex::default(),
            shares,
            share_index: ShareIndex::default(),
            workspaces,
            workspace_index: NameIndex::default(),
        };
        namespace_writer.apply(&Event::Init);
        namespace_writer.apply(&Event::InitDone);
        role_binding_writer.apply(&Event::Init);
        role_binding_writer.apply(&Event::InitDone);
        listed(&mut quota_writer);
        limit_range_writer.apply(&Event::Init);
        limit_range_writer.apply(&Event::InitDone);
        network_policy_writer.apply(&Event::Init);
        network_policy_writer.apply(&Event::InitDone);
        listed(&mut profile_writer);
        user_writer.apply(&Event::Init);
        user_writer.apply(&Event::InitDone);
        share_writer.apply(&Event::Init);
        share_writer.apply(&Event::InitDone);
        workspace_writer.apply(&Event::Init);
        workspace_writer.apply(&Event::InitDone);
        let wait = std::time::Duration::from_secs(60);
        assert!(
            tokio::time::timeout(wait, caches.synced()).await.is_err(),
            "synced returned before the DirectoryGroups had listed"
        );
        listed(&mut group_writer);
        assert!(
            tokio::time::timeout(wait, caches.synced()).await.is_ok(),
            "synced kept waiting once every cache had listed"
        );
    }
}
