//! Homestead's reconciler: everything between "a User changed" and "the cluster matches it".
//!
//! - [`desired`]: pure builders of the desired Namespace, RoleBinding and ResourceQuota,
//!   validation, ownership checks and cache comparisons (no client).
//! - [`reconcile()`] / [`error_policy`]: the kube-runtime reconciler, with the finalizer helper as
//!   its single top-level action (apply on `Event::Apply`, offboarding on `Event::Cleanup`).
//! - [`Context`]: the client, the operator [`Config`], the Event recorder, the [`Metrics`] and
//!   the reflector caches of managed objects, shared as `Arc<Context>`.

pub mod desired;
mod metrics;
mod reconcile;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

pub use metrics::Metrics;
pub use reconcile::{error_policy, reconcile};

/// The operator's configuration, from its command-line flags.
#[derive(Clone, Debug)]
pub struct Config {
    /// Prefix of derived Namespace names: `<prefix><User name>`. Default `user-`.
    pub namespace_prefix: String,
    /// ClusterRoles a User may ask for. `cluster-admin` is refused even if listed.
    pub allowed_roles: BTreeSet<String>,
    /// Namespaces never touched, beyond `default`, `kube-*` and the operator's own.
    pub reserved_namespaces: BTreeSet<String>,
    /// The namespace the operator runs in (reserved too).
    pub operator_namespace: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace_prefix: "user-".to_owned(),
            allowed_roles: ["admin", "edit", "view"].map(String::from).into(),
            reserved_namespaces: BTreeSet::new(),
            operator_namespace: "homestead-system".to_owned(),
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
}

/// Errors of one reconcile. Refusals of bad input are not errors: they end in a `Ready=False`
/// condition and a Warning Event, and the reconcile succeeds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed; retried with backoff.
    #[error("{verb} {kind} {name:?} failed: {source}")]
    Kube {
        /// What was being done: get, apply, delete, patch status.
        verb: &'static str,
        /// The kind of the object.
        kind: &'static str,
        /// The object's name (`namespace/name` for namespaced objects).
        name: String,
        /// The underlying client error.
        #[source]
        source: kube::Error,
    },
    /// The User's Namespace is still being deleted (offboarding with `Delete`, or a Namespace
    /// deleted by someone else); the finalizer stays until it is gone.
    #[error("namespace {0:?} is still terminating")]
    NamespaceTerminating(String),
    /// The finalizer helper failed (adding or removing the finalizer, or apply/cleanup).
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A short, bounded label for the `reason` of `homestead_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Self::Kube { verb, .. } => match *verb {
                "get" => "get_failed",
                "apply" => "apply_failed",
                "delete" => "delete_failed",
                _ => "status_failed",
            },
            Self::NamespaceTerminating(_) => "namespace_terminating",
            Self::Finalizer(inner) => match inner.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.metric_label(),
                F::AddFinalizer(_) | F::RemoveFinalizer(_) => "finalizer_failed",
                F::UnnamedObject | F::InvalidFinalizer => "invalid_object",
            },
        }
    }
}

/// Result with the reconciler's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a reconcile needs, shared by all reconciles as `Arc<Context>`.
#[derive(Clone)]
pub struct Context {
    /// Client authenticated as the operator.
    pub client: Client,
    /// The operator's configuration.
    pub config: Config,
    /// Publishes Events on Users (in namespace `default`, as for every cluster-scoped object).
    pub recorder: Recorder,
    /// The operator's Prometheus metrics.
    pub metrics: Metrics,
    /// Cache of Namespaces labelled `app.kubernetes.io/managed-by=homestead`.
    pub namespaces: Store<Namespace>,
    /// Cache of RoleBindings labelled `app.kubernetes.io/managed-by=homestead`.
    pub role_bindings: Store<RoleBinding>,
    /// Cache of ResourceQuotas labelled `app.kubernetes.io/managed-by=homestead`.
    pub quotas: Store<ResourceQuota>,
}
