//! State: what this replica knows of the cluster, from its watches. The caches reconciles read
//! instead of the API server ([`Caches`], one facade over every store), the compact forms
//! Namespaces and RoleBindings are kept in ([`cache`], [`store`], [`trim`]), and the indexes the
//! watches keep beside them: which User holds each identity ([`identity`]) and which Users use
//! each Profile ([`index`]). State imports only [`crate::plan`] (docs/development.md, "Layers").

pub mod cache;
pub mod identity;
pub mod index;
pub mod shares;
pub mod store;
pub mod trim;

use std::sync::Arc;

use homestead_api::{DirectoryGroup, Profile, User};
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};

use cache::{CachedNamespace, CachedRoleBinding, CachedShare};
use identity::Identities;
use index::ProfileIndex;
use shares::ShareIndex;
use store::{CompactStore, compact_store};

/// The reflector caches reconciles read instead of the API server wherever possible, in the
/// compact forms of [`cache`].
#[derive(Clone)]
pub struct Caches {
    /// Namespaces labelled as Homestead's (`app.kubernetes.io/managed-by=homestead`).
    pub(crate) namespaces: CompactStore<CachedNamespace>,
    /// Every RoleBinding in the cluster: revoking access removes the ones a person made too.
    pub(crate) role_bindings: CompactStore<CachedRoleBinding>,
    /// ResourceQuotas labelled as Homestead's.
    pub(crate) quotas: Store<ResourceQuota>,
    /// LimitRanges labelled as Homestead's.
    pub(crate) limit_ranges: Store<LimitRange>,
    /// NetworkPolicies labelled as Homestead's.
    pub(crate) network_policies: Store<NetworkPolicy>,
    /// Every Profile.
    pub(crate) profiles: Store<Profile>,
    /// Every DirectoryGroup.
    pub(crate) groups: Store<DirectoryGroup>,
    /// Which User holds each identity, from the User watch.
    pub(crate) identities: Identities,
    /// Every User (the Controller over Users' own cache).
    pub(crate) users: Store<User>,
    /// Which Users use which Profile, from the User watch.
    pub(crate) index: ProfileIndex,
    /// Every Share (the Controller over Shares' own cache).
    pub(crate) shares: Store<CachedShare>,
    /// Which Shares name each grantee and are in each namespace, from the Share watch.
    pub(crate) share_index: ShareIndex,
}

impl Caches {
    /// Caches no watch fills: every read misses, so a reconcile reads the cluster for each
    /// decision (a reconcile run outside the operator, in tests).
    pub fn empty() -> Self {
        Self {
            namespaces: compact_store().0,
            role_bindings: compact_store().0,
            quotas: reflector::store().0,
            limit_ranges: reflector::store().0,
            network_policies: reflector::store().0,
            profiles: reflector::store().0,
            groups: reflector::store().0,
            identities: Identities::default(),
            users: reflector::store().0,
            index: ProfileIndex::default(),
            shares: reflector::store().0,
            share_index: ShareIndex::default(),
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

    /// The LimitRange `namespace/name`, if cached.
    pub fn limit_range(&self, namespace: &str, name: &str) -> Option<Arc<LimitRange>> {
        cached(&self.limit_ranges, namespace, name)
    }

    /// The NetworkPolicy `namespace/name`, if cached.
    pub fn network_policy(&self, namespace: &str, name: &str) -> Option<Arc<NetworkPolicy>> {
        cached(&self.network_policies, namespace, name)
    }

    /// Every cached Profile.
    pub fn profiles(&self) -> Vec<Arc<Profile>> {
        self.profiles.state()
    }

    /// The Profile `name`, if cached.
    pub fn profile(&self, name: &str) -> Option<Arc<Profile>> {
        self.profiles.get(&ObjectRef::new(name))
    }

    /// The Users of the Profile `profile` (by name), as cached.
    pub fn users_of(&self, profile: &str) -> Vec<Arc<User>> {
        let names = self.index.users_of(profile);
        names
            .iter()
            .filter_map(|user| self.users.get(&ObjectRef::new(user)))
            .collect()
    }

    /// Every cached DirectoryGroup.
    pub fn groups(&self) -> Vec<Arc<DirectoryGroup>> {
        self.groups.state()
    }

    /// The DirectoryGroup `name`, if cached.
    pub fn group(&self, name: &str) -> Option<Arc<DirectoryGroup>> {
        self.groups.get(&ObjectRef::new(name))
    }

    /// The User `name`, if cached.
    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.get(&ObjectRef::new(name))
    }

    /// Every cached Share.
    pub fn shares(&self) -> Vec<Arc<CachedShare>> {
        self.shares.state()
    }

    /// Which Shares name each grantee and are in each namespace.
    pub fn share_index(&self) -> &ShareIndex {
        &self.share_index
    }
}

/// The object `namespace/name` from a reflector cache.
fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}
