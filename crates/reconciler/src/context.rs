//! What every reconcile shares: the operator's [`Config`] (from its flags) and the [`Context`]
//! (client, Event queue, metrics, reflector caches of managed objects, per-User backoff),
//! passed to each reconcile as `Arc<Context>`.

use std::collections::BTreeSet;
use std::sync::Arc;

use homestead_api::{DirectoryGroup, Profile};
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;

use crate::cache::{CachedNamespace, CachedRoleBinding};
use crate::error::Backoffs;
use crate::events::EventQueue;
use crate::metrics::Metrics;
use crate::recent::Recent;
use crate::store::CompactStore;

pub use crate::fence::Fence;

pub use homestead_api::PodSecurityLevel;

/// `--namespace-prefix`: derived Namespace names are `user-<User name>`.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "user-";
/// `--reserved-key`: the service meshes' keys, which would move a tenant's Pods in or out of a
/// mesh, beyond the keys Homestead always reserves.
pub const DEFAULT_RESERVED_KEYS: [&str; 3] = ["istio-injection", "istio.io/", "linkerd.io/"];
/// `--allowed-role`: Kubernetes' aggregated user-facing ClusterRoles.
pub const DEFAULT_ALLOWED_ROLES: [&str; 3] = ["admin", "edit", "view"];
/// `--operator-namespace` (`POD_NAMESPACE` in a Pod).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "homestead-system";
/// `--expiry-warning`: 14 days, in seconds as a [`Duration`](std::time::Duration).
pub const DEFAULT_EXPIRY_WARNING: std::time::Duration = std::time::Duration::from_secs(14 * 86_400);
/// `--pod-security-enforce|warn|audit`: enforce `baseline`, warn and audit `restricted`.
pub const DEFAULT_POD_SECURITY: PodSecurity = PodSecurity {
    enforce: PodSecurityLevel::Baseline,
    warn: PodSecurityLevel::Restricted,
    audit: PodSecurityLevel::Restricted,
};

/// The Pod Security admission levels every managed Namespace is labelled with (the API's
/// [`homestead_api::PodSecurityLevels`] with every level decided).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodSecurity {
    /// `pod-security.kubernetes.io/enforce`: Pods violating it are refused. Default `baseline`.
    pub enforce: PodSecurityLevel,
    /// `pod-security.kubernetes.io/warn`: violations warn the client. Default `restricted`.
    pub warn: PodSecurityLevel,
    /// `pod-security.kubernetes.io/audit`: violations are annotated in the audit log. Default
    /// `restricted`.
    pub audit: PodSecurityLevel,
}

impl Default for PodSecurity {
    fn default() -> Self {
        DEFAULT_POD_SECURITY
    }
}

/// The operator's configuration, from its command-line flags. [`Config::default`] is what the
/// flags default to (the `DEFAULT_*` constants; a test of the CLI checks they agree).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Prefix of derived Namespace names: `<prefix><User name>`. Default `user-`.
    pub namespace_prefix: String,
    /// Shell-style patterns (`*`, `?`, `[...]`) a Namespace name given in
    /// `spec.namespace.name` must match one of. Default: `<prefix>*`.
    pub allowed_namespaces: Vec<glob::Pattern>,
    /// Extra label and annotation keys Users may not set (see
    /// [`homestead_api::key_matches`]): a `domain/` prefix with its subdomains, or an exact key.
    pub reserved_keys: Vec<String>,
    /// The Pod Security labels of every managed Namespace.
    pub pod_security: PodSecurity,
    /// ClusterRoles a User may ask for. `cluster-admin` is refused even if listed.
    pub allowed_roles: BTreeSet<String>,
    /// Namespaces never touched, beyond `default`, `kube-*` and the operator's own.
    pub reserved_namespaces: BTreeSet<String>,
    /// The namespace the operator runs in (reserved too).
    pub operator_namespace: String,
    /// The Profile of every User that names none (`--default-profile`); `None`: such Users get
    /// only what their spec says.
    pub default_profile: Option<String>,
    /// How long before a User's `validUntil` its `Expiring` condition turns `True` (with an
    /// Event). Default 14 days.
    pub expiry_warning: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace_prefix: DEFAULT_NAMESPACE_PREFIX.to_owned(),
            allowed_namespaces: vec![
                glob::Pattern::new(&format!("{DEFAULT_NAMESPACE_PREFIX}*"))
                    .expect("a valid pattern"),
            ],
            reserved_keys: DEFAULT_RESERVED_KEYS.map(String::from).into(),
            pod_security: DEFAULT_POD_SECURITY,
            allowed_roles: DEFAULT_ALLOWED_ROLES.map(String::from).into(),
            reserved_namespaces: BTreeSet::new(),
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.to_owned(),
            default_profile: None,
            expiry_warning: DEFAULT_EXPIRY_WARNING,
        }
    }
}

impl Config {
    /// Whether Homestead must never touch `namespace`: `default`, any `kube-*`, the operator's
    /// own namespace, or one listed in [`Config::reserved_namespaces`].
    pub fn is_reserved(&self, namespace: &str) -> bool {
        namespace == "default"
            || namespace.starts_with("kube-")
            || namespace == self.operator_namespace
            || self.reserved_namespaces.contains(namespace)
    }

    /// Whether a Namespace name given in `spec.namespace.name` is one the platform allows
    /// (matches one of [`Config::allowed_namespaces`]).
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.allowed_namespaces.iter().any(|p| p.matches(namespace))
    }

    /// Whether a label or annotation key is reserved, by Homestead itself
    /// ([`homestead_api::is_reserved_key`]) or by [`Config::reserved_keys`].
    pub fn is_reserved_key(&self, key: &str) -> bool {
        homestead_api::is_reserved_key(key)
            || self
                .reserved_keys
                .iter()
                .any(|p| homestead_api::key_matches(key, p))
    }
}

/// The reflector caches reconciles read instead of the API server wherever possible, in the
/// compact forms of [`crate::cache`].
#[derive(Clone)]
pub struct Caches {
    /// Namespaces labelled as Homestead's (`app.kubernetes.io/managed-by=homestead`).
    pub namespaces: CompactStore<CachedNamespace>,
    /// Every RoleBinding in the cluster: revoking access removes the ones a person made too.
    pub role_bindings: CompactStore<CachedRoleBinding>,
    /// ResourceQuotas labelled as Homestead's.
    pub quotas: Store<ResourceQuota>,
    /// LimitRanges labelled as Homestead's.
    pub limit_ranges: Store<LimitRange>,
    /// NetworkPolicies labelled as Homestead's.
    pub network_policies: Store<NetworkPolicy>,
    /// Every Profile.
    pub profiles: Store<Profile>,
    /// Every DirectoryGroup.
    pub groups: Store<DirectoryGroup>,
    /// Which User holds each identity, from the User watch.
    pub identities: crate::identity::Identities,
}

/// Everything a reconcile needs, shared by all reconciles as `Arc<Context>`.
pub struct Context {
    /// Client authenticated as the operator.
    pub client: Client,
    /// The operator's configuration.
    pub config: Config,
    /// Publishes Events on Users (in namespace `default`, as for every cluster-scoped object),
    /// off the reconcile path.
    pub events: EventQueue,
    /// The operator's Prometheus metrics.
    pub metrics: Metrics,
    /// Caches of managed objects.
    pub caches: Caches,
    /// Retry delays of Users whose reconcile failed.
    pub(crate) backoffs: Backoffs,
    /// Writes this replica made moments ago that the caches may not show yet.
    pub recent: Recent,
    /// Whether Homestead is being uninstalled, as last read ([`crate::offboard`]).
    pub(crate) uninstall_check: crate::offboard::UninstallCheck,
    /// Whether every cache has seen its first list; reconciles wait for it, so nothing is
    /// written from a half-filled cache after a restart. Set by the operator.
    synced: tokio::sync::watch::Sender<bool>,
    /// Whether this replica may write (it holds the leader-election Lease). [`Context::client`]
    /// checks it on every request that writes ([`crate::fence::fenced`]); reconciles and the
    /// Event queue read it to skip work a refused write would waste.
    pub fence: Arc<Fence>,
}

impl Context {
    /// A Context whose Events are reported by `reporter` (controller `homestead` and this
    /// replica's identity), with fresh backoff state, remembering its writes in `recent` (whose
    /// creates the watches also read), writing only while `fence` is held ([`Fence::always`]
    /// without leader election). Starts the [`EventQueue`]'s publisher.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        client: Client,
        config: Config,
        reporter: Reporter,
        metrics: Metrics,
        caches: Caches,
        recent: Recent,
        fence: Arc<Fence>,
    ) -> Self {
        let client = crate::fence::fenced(client, fence.clone());
        Self {
            events: EventQueue::start(&client, &reporter, fence.clone(), metrics.clone()),
            client,
            config,
            metrics,
            caches,
            backoffs: Backoffs::default(),
            recent,
            uninstall_check: crate::offboard::UninstallCheck::default(),
            synced: tokio::sync::watch::Sender::new(false),
            fence,
        }
    }

    /// Marks every cache as synced: reconciles may proceed.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    /// Waits until [`Context::mark_synced`] was called.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = synced.wait_for(|synced| *synced).await;
    }
}

#[cfg(test)]
pub(crate) mod test {
    //! A [`Context`] on a mock API server ([`tower_test`]), with caches the test fills itself.

    use crate::store::{CompactWriter, compact_store};
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher;
    use kube::{Client, Resource};
    use tower_test::mock;

    use super::*;

    /// The API server side of a test [`Context`]: receives each request and answers it.
    pub type ApiServer =
        mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;

    /// The cache writers of a test [`Context`].
    pub struct Writers {
        pub namespaces: CompactWriter<CachedNamespace>,
        pub role_bindings: CompactWriter<CachedRoleBinding>,
        pub quotas: Writer<ResourceQuota>,
        pub limit_ranges: Writer<LimitRange>,
        pub network_policies: Writer<NetworkPolicy>,
        pub profiles: Writer<Profile>,
        pub groups: Writer<DirectoryGroup>,
    }

    impl Writers {
        /// Puts `object` into its cache, in the cache's form, as a watch event would.
        pub fn insert<K>(writer: &mut Writer<K>, object: impl Into<K>)
        where
            K: Resource<DynamicType = ()> + Clone + 'static,
        {
            writer.apply_watcher_event(&watcher::Event::Apply(object.into()));
        }
    }

    impl Context {
        /// A Context with the default [`Config`], empty caches and a client whose requests
        /// go to the returned [`ApiServer`].
        pub fn test() -> (Self, ApiServer, Writers) {
            Self::test_fenced(Fence::always())
        }

        /// [`Context::test`] writing only while `fence` is held.
        pub fn test_fenced(fence: Fence) -> (Self, ApiServer, Writers) {
            let (service, server) = mock::pair();
            let client = Client::new(service, "default");
            let (namespaces, ns_writer) = compact_store();
            let (role_bindings, rb_writer) = compact_store();
            let (quotas, quota_writer) = reflector::store();
            let (limit_ranges, limit_range_writer) = reflector::store();
            let (network_policies, network_policy_writer) = reflector::store();
            let (profiles, profile_writer) = reflector::store();
            let (groups, group_writer) = reflector::store();
            let registry = prometheus::Registry::new();
            let context = Self::new(
                client,
                Config::default(),
                Reporter {
                    controller: "homestead".into(),
                    instance: Some("test".into()),
                },
                Metrics::new(&registry).expect("fresh registry"),
                Caches {
                    namespaces,
                    role_bindings,
                    quotas,
                    limit_ranges,
                    network_policies,
                    profiles,
                    groups,
                    identities: crate::identity::Identities::default(),
                },
                Recent::default(),
                Arc::new(fence),
            );
            context.mark_synced();
            let writers = Writers {
                namespaces: ns_writer,
                role_bindings: rb_writer,
                quotas: quota_writer,
                limit_ranges: limit_range_writer,
                network_policies: network_policy_writer,
                profiles: profile_writer,
                groups: group_writer,
            };
            (context, server, writers)
        }
    }
}
