//! Pure functions from a [`User`] and the operator [`Config`] to the desired state: the
//! Namespace name and the refusal (if any), the desired Namespace, RoleBinding and
//! ResourceQuota, ownership checks, and the comparisons that decide whether a cached object
//! already matches (so steady state costs no write). No client, no I/O: unit-tested directly.

use std::collections::BTreeMap;

use homestead_api::{
    ANNOTATION_USER_UID, DeletionPolicy, LABEL_MANAGED_BY, LABEL_RETAINED_FROM, LABEL_USER,
    MANAGED_BY, User, is_dns1123_label, is_reserved_key,
};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::Config;

/// Name of the RoleBinding Homestead manages in each person's Namespace.
pub const ROLE_BINDING_NAME: &str = "homestead-user";
/// Name of the ResourceQuota Homestead manages in each person's Namespace.
pub const QUOTA_NAME: &str = "homestead-quota";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Why Homestead refuses to provision a User. Each maps to the `Ready=False` reason of the same
/// name and a Warning Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The Namespace name is reserved: `default`, `kube-*`, the operator's own namespace, or one
    /// listed with `--reserved-namespace`.
    ReservedNamespace(String),
    /// The Namespace name (given or derived) is not a DNS-1123 label.
    InvalidNamespaceName(String),
    /// `spec.role` is not in the operator's allow-list.
    RoleNotAllowed(String),
    /// A subject name starts with `system:` (normally refused at admission already).
    ForbiddenSubject(String),
    /// `spec.namespace` sets a reserved label or annotation key (normally refused at admission
    /// already; checked again in case the CRD in the cluster lacks the rule).
    ReservedKey(String),
    /// The Namespace exists and does not belong to this User.
    NamespaceConflict(String),
}

impl Refusal {
    /// The `Ready=False` condition reason and Event reason (UpperCamelCase).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ReservedNamespace(_) => "ReservedNamespace",
            Self::InvalidNamespaceName(_) => "InvalidNamespaceName",
            Self::RoleNotAllowed(_) => "RoleNotAllowed",
            Self::ForbiddenSubject(_) => "ForbiddenSubject",
            Self::ReservedKey(_) => "ReservedKey",
            Self::NamespaceConflict(_) => "NamespaceConflict",
        }
    }

    /// A human-readable message that says what is wrong and what to do.
    pub fn message(&self, config: &Config) -> String {
        match self {
            Self::ReservedNamespace(ns) => format!(
                "namespace {ns:?} is reserved (default, kube-*, the operator's namespace, or --reserved-namespace); set spec.namespace.name to another name"
            ),
            Self::InvalidNamespaceName(ns) => format!(
                "namespace name {ns:?} is not a valid DNS-1123 label (at most 63 lower-case letters, digits and '-'); set spec.namespace.name explicitly"
            ),
            Self::RoleNotAllowed(role) => {
                let allowed: Vec<&str> = config.allowed_roles.iter().map(String::as_str).collect();
                format!(
                    "role {role:?} is not in the operator's allow-list [{}]",
                    allowed.join(", ")
                )
            }
            Self::ForbiddenSubject(name) => {
                format!(
                    "subject {name:?} is refused: names starting with 'system:' belong to Kubernetes"
                )
            }
            Self::ReservedKey(key) => format!(
                "spec.namespace may not set {key:?}: homestead.dev/*, pod-security.kubernetes.io/* and app.kubernetes.io/managed-by are reserved"
            ),
            Self::NamespaceConflict(ns) => format!(
                "namespace {ns:?} already exists and does not belong to this User; Homestead never takes over a namespace it did not create for this User"
            ),
        }
    }
}

/// The Namespace name for `user`: `spec.namespace.name` if set; otherwise the name recorded in
/// `status.namespace` when `provisioned` says that Namespace is this User's (so changing the
/// operator's prefix never moves anyone's namespace); otherwise `<prefix><metadata.name>`.
pub fn namespace_name(user: &User, config: &Config, provisioned: impl Fn(&str) -> bool) -> String {
    if let Some(name) = user.spec.namespace.as_ref().and_then(|n| n.name.clone()) {
        return name;
    }
    if let Some(name) = user.status.as_ref().and_then(|s| s.namespace.as_deref())
        && provisioned(name)
    {
        return name.to_owned();
    }
    format!("{}{}", config.namespace_prefix, user.name_any())
}

/// Checks the parts of `user` that need no API call: the namespace name (valid and not
/// reserved), the role (allow-listed), the subjects (no `system:`), the extra label and
/// annotation keys (none reserved). Returns the first refusal.
pub fn validate(user: &User, namespace: &str, config: &Config) -> Result<(), Refusal> {
    if !is_dns1123_label(namespace) {
        return Err(Refusal::InvalidNamespaceName(namespace.to_owned()));
    }
    if config.is_reserved(namespace) {
        return Err(Refusal::ReservedNamespace(namespace.to_owned()));
    }
    if !config.allowed_roles.contains(&user.spec.role) || user.spec.role == "cluster-admin" {
        return Err(Refusal::RoleNotAllowed(user.spec.role.clone()));
    }
    let identity = &user.spec.identity;
    if let Some(bad) = std::iter::once(&identity.username)
        .chain(&identity.groups)
        .find(|s| s.starts_with("system:"))
    {
        return Err(Refusal::ForbiddenSubject(bad.clone()));
    }
    if let Some(extra) = &user.spec.namespace
        && let Some(key) = extra
            .labels
            .keys()
            .chain(extra.annotations.keys())
            .find(|k| is_reserved_key(k))
    {
        return Err(Refusal::ReservedKey(key.clone()));
    }
    Ok(())
}

/// Whether `meta` marks an object as belonging to `user`: label
/// `app.kubernetes.io/managed-by=homestead`, label `homestead.dev/user=<name>` and annotation
/// `homestead.dev/user-uid=<uid>`. A name match alone is never ownership.
pub fn is_owned_by(meta: &ObjectMeta, user: &User) -> bool {
    let label = |k: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(k))
            .map(String::as_str)
    };
    let uid = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_USER_UID))
        .map(String::as_str);
    label(LABEL_MANAGED_BY) == Some(MANAGED_BY)
        && label(LABEL_USER) == Some(user.name_any().as_str())
        && uid.is_some()
        && uid == user.uid().as_deref()
}

/// The labels every object Homestead manages for `user` carries.
fn managed_labels(user: &User) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_USER.to_owned(), user.name_any()),
    ])
}

/// The owner reference to `user` (controller, blocking foreground deletion of the User).
fn owner_reference(user: &User) -> OwnerReference {
    let mut owner = user
        .controller_owner_ref(&())
        .expect("a User read from the API server has a name and uid");
    owner.block_owner_deletion = Some(true);
    owner
}

/// The desired Namespace for `user`: the managed labels plus `spec.namespace.labels`, the
/// `homestead.dev/user-uid` annotation plus `spec.namespace.annotations`, and an owner reference
/// to the User only under `deletionPolicy: Delete` (then garbage collection is the safety net;
/// under `Retain` there is none, so foreground deletion cannot race the finalizer).
pub fn desired_namespace(user: &User, name: &str) -> Namespace {
    let extra = user.spec.namespace.clone().unwrap_or_default();
    let mut labels = extra.labels;
    labels.extend(managed_labels(user));
    let mut annotations = extra.annotations;
    annotations.insert(
        ANNOTATION_USER_UID.to_owned(),
        user.uid().unwrap_or_default(),
    );
    let owner_references =
        (user.spec.deletion_policy == DeletionPolicy::Delete).then(|| vec![owner_reference(user)]);
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references,
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The Namespace as Homestead leaves it under `Retain`: no managed-by / user labels (so no
/// Homestead controller selects it again), no owner reference, label
/// `homestead.dev/retained-from=<user>`, the user-uid annotation kept as a record, and the
/// User's extra labels and annotations kept.
pub fn retained_namespace(user: &User, name: &str) -> Namespace {
    let mut ns = desired_namespace(user, name);
    let labels = ns.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.remove(LABEL_MANAGED_BY);
    labels.remove(LABEL_USER);
    labels.insert(LABEL_RETAINED_FROM.to_owned(), user.name_any());
    ns.metadata.owner_references = None;
    ns
}

/// The desired RoleBinding `homestead-user` in `namespace`: `spec.role` as a ClusterRole, the
/// person's user name (kind User) and groups (kind Group) as subjects, the managed labels, and
/// an owner reference to the User, so access never outlives the User even if the finalizer is
/// removed by force.
pub fn desired_role_binding(user: &User, namespace: &str) -> RoleBinding {
    let identity = &user.spec.identity;
    let subject = |kind: &str, name: &str| Subject {
        kind: kind.to_owned(),
        name: name.to_owned(),
        api_group: Some(RBAC_GROUP.to_owned()),
        namespace: None,
    };
    let subjects = std::iter::once(subject("User", &identity.username))
        .chain(identity.groups.iter().map(|g| subject("Group", g)))
        .collect();
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(ROLE_BINDING_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(managed_labels(user)),
            owner_references: Some(vec![owner_reference(user)]),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: user.spec.role.clone(),
        },
        subjects: Some(subjects),
    }
}

/// The desired ResourceQuota `homestead-quota` in `namespace`, or `None` without `spec.quota`.
pub fn desired_quota(user: &User, namespace: &str) -> Option<ResourceQuota> {
    let quota = user.spec.quota.as_ref()?;
    Some(ResourceQuota {
        metadata: ObjectMeta {
            name: Some(QUOTA_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(managed_labels(user)),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(quota.hard.clone()),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    })
}

/// The keys of `map_field` (`f:labels` or `f:annotations`) that field manager `manager` owns
/// by server-side apply, read from `metadata.managedFields`.
fn applied_keys(meta: &ObjectMeta, manager: &str, map_field: &str) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| {
            m.fields_v1
                .as_ref()?
                .0
                .get("f:metadata")?
                .get(map_field)?
                .as_object()
        })
        .flat_map(|fields| {
            fields
                .keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_owned)
        })
        .collect()
}

/// Whether `map` in the cached object holds exactly what `desired` asks of it: every desired
/// entry present with the same value, and no key that `manager` applied earlier but no longer
/// wants (server-side apply would remove it).
fn map_matches(
    desired: Option<&BTreeMap<String, String>>,
    cached: Option<&BTreeMap<String, String>>,
    applied: &[String],
) -> bool {
    let empty = BTreeMap::new();
    let (desired, cached) = (desired.unwrap_or(&empty), cached.unwrap_or(&empty));
    desired.iter().all(|(k, v)| cached.get(k) == Some(v))
        && applied.iter().all(|k| desired.contains_key(k))
}

/// Whether the cached metadata already matches the desired labels, annotations and owner
/// references, as server-side apply by `manager` would leave them.
pub fn metadata_matches(desired: &ObjectMeta, cached: &ObjectMeta, manager: &str) -> bool {
    let owner_uids = |m: &ObjectMeta| -> Vec<String> {
        let mut uids: Vec<String> = m
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.clone())
            .collect();
        uids.sort();
        uids
    };
    map_matches(
        desired.labels.as_ref(),
        cached.labels.as_ref(),
        &applied_keys(cached, manager, "f:labels"),
    ) && map_matches(
        desired.annotations.as_ref(),
        cached.annotations.as_ref(),
        &applied_keys(cached, manager, "f:annotations"),
    ) && owner_uids(desired) == owner_uids(cached)
}

/// Whether a cached RoleBinding grants exactly what the desired one does.
pub fn role_binding_matches(desired: &RoleBinding, cached: &RoleBinding, manager: &str) -> bool {
    desired.role_ref == cached.role_ref
        && desired.subjects == cached.subjects
        && metadata_matches(&desired.metadata, &cached.metadata, manager)
}

/// Whether a cached ResourceQuota has the desired hard limits, comparing quantities by value
/// (the API server canonicalizes them: `1024Mi` is stored as `1Gi`).
pub fn quota_matches(desired: &ResourceQuota, cached: &ResourceQuota, manager: &str) -> bool {
    let hard = |q: &ResourceQuota| {
        q.spec
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default()
    };
    let (want, have) = (hard(desired), hard(cached));
    want.len() == have.len()
        && want
            .iter()
            .all(|(k, v)| have.get(k).is_some_and(|h| quantities_equal(v, h)))
        && metadata_matches(&desired.metadata, &cached.metadata, manager)
}

/// Compares two Kubernetes quantities by value (`"1Gi"` equals `"1024Mi"`, `"1"` equals
/// `"1000m"`); unparsable quantities compare as strings. Relative precision 1e-9.
pub fn quantities_equal(a: &Quantity, b: &Quantity) -> bool {
    match (quantity_value(&a.0), quantity_value(&b.0)) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a.0 == b.0,
    }
}

/// The numeric value of a quantity string with its suffix (binary, decimal or exponent), or
/// `None` if it does not parse. See <https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>.
fn quantity_value(s: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let s = s.trim();
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = s.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    s.parse::<f64>().ok()
}

/// A message naming what still blocks a terminating Namespace, from its status conditions
/// (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, deletion failures), or a
/// generic one when the namespace controller has not reported yet.
pub fn terminating_message(ns: &Namespace) -> String {
    let name = ns.name_any();
    let blockers: Vec<String> = ns
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or("")))
        .collect();
    if blockers.is_empty() {
        format!("waiting for namespace {name:?} to be deleted")
    } else {
        format!(
            "waiting for namespace {name:?} to be deleted; {}",
            blockers.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::UserStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn user(name: &str, spec: serde_json::Value) -> User {
        let mut spec = spec;
        spec["identity"] = json!({ "username": format!("{name}@example.com"), "groups": ["team"] });
        serde_json::from_value(json!({
            "apiVersion": "homestead.dev/v1alpha1",
            "kind": "User",
            "metadata": { "name": name, "uid": format!("uid-{name}") },
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn namespace_name_prefers_spec_then_provisioned_status_then_prefix() {
        let config = Config::default();
        let mut u = user("alice", json!({}));
        assert_eq!(namespace_name(&u, &config, |_| true), "user-alice");
        u.status = Some(UserStatus {
            namespace: Some("old-alice".into()),
            ..UserStatus::default()
        });
        assert_eq!(
            namespace_name(&u, &config, |n| n == "old-alice"),
            "old-alice"
        );
        assert_eq!(namespace_name(&u, &config, |_| false), "user-alice");
        let u = user("alice", json!({ "namespace": { "name": "lab" } }));
        assert_eq!(namespace_name(&u, &config, |_| true), "lab");
    }

    #[test]
    fn validate_refuses_reserved_invalid_and_unlisted() {
        let config = Config {
            reserved_namespaces: ["payroll".to_owned()].into(),
            ..Config::default()
        };
        let u = user("alice", json!({}));
        for ns in [
            "default",
            "kube-system",
            "kube-anything",
            "homestead-system",
            "payroll",
        ] {
            assert_eq!(
                validate(&u, ns, &config),
                Err(Refusal::ReservedNamespace(ns.into()))
            );
        }
        let long = format!("user-{}", "a".repeat(60));
        assert_eq!(
            validate(&u, &long, &config),
            Err(Refusal::InvalidNamespaceName(long.clone()))
        );
        assert_eq!(validate(&u, "user-alice", &config), Ok(()));
        let u = user("alice", json!({ "role": "cluster-admin" }));
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::RoleNotAllowed(_))
        ));
        let config = Config {
            allowed_roles: ["cluster-admin".to_owned()].into(),
            ..Config::default()
        };
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::RoleNotAllowed(_))
        ));
    }

    #[test]
    fn validate_refuses_reserved_keys_the_schema_should_have_stopped() {
        let config = Config::default();
        let u = user(
            "alice",
            json!({ "namespace": { "labels": { "pod-security.kubernetes.io/enforce": "privileged" } } }),
        );
        assert_eq!(
            validate(&u, "user-alice", &config),
            Err(Refusal::ReservedKey(
                "pod-security.kubernetes.io/enforce".into()
            ))
        );
        let u = user(
            "alice",
            json!({ "namespace": { "annotations": { "homestead.dev/user-uid": "x" } } }),
        );
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::ReservedKey(_))
        ));
    }

    #[test]
    fn ownership_needs_both_labels_and_the_uid() {
        let u = user("alice", json!({}));
        let ns = desired_namespace(&u, "user-alice");
        assert!(is_owned_by(&ns.metadata, &u));
        let mut by_name_only = ns.metadata.clone();
        by_name_only.annotations = None;
        assert!(!is_owned_by(&by_name_only, &u));
        let mut other_uid = ns.metadata.clone();
        other_uid
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_USER_UID.into(), "uid-older-alice".into());
        assert!(!is_owned_by(&other_uid, &u));
        assert!(!is_owned_by(&ns.metadata, &user("bob", json!({}))));
    }

    #[test]
    fn owner_reference_only_under_delete() {
        let delete = desired_namespace(&user("alice", json!({})), "user-alice");
        let owners = delete.metadata.owner_references.unwrap();
        assert_eq!(owners[0].uid, "uid-alice");
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        let retain = desired_namespace(
            &user("alice", json!({ "deletionPolicy": "Retain" })),
            "user-alice",
        );
        assert!(retain.metadata.owner_references.is_none());
        let retained = retained_namespace(&user("alice", json!({})), "user-alice");
        let labels = retained.metadata.labels.unwrap();
        assert_eq!(
            labels.get(LABEL_RETAINED_FROM).map(String::as_str),
            Some("alice")
        );
        assert!(!labels.contains_key(LABEL_MANAGED_BY));
        assert!(retained.metadata.owner_references.is_none());
    }

    #[test]
    fn role_binding_binds_the_role_to_user_and_groups() {
        let rb = desired_role_binding(&user("alice", json!({ "role": "view" })), "user-alice");
        assert_eq!(rb.role_ref.name, "view");
        let subjects: Vec<_> = rb
            .subjects
            .unwrap()
            .into_iter()
            .map(|s| (s.kind, s.name))
            .collect();
        assert_eq!(
            subjects,
            [
                ("User".into(), "alice@example.com".into()),
                ("Group".into(), "team".into())
            ]
        );
    }

    #[test]
    fn quota_only_when_asked_for_and_compared_by_value() {
        assert!(desired_quota(&user("alice", json!({})), "user-alice").is_none());
        let want = desired_quota(
            &user(
                "alice",
                json!({ "quota": { "hard": { "memory": "1024Mi", "cpu": "1000m" } } }),
            ),
            "ns",
        )
        .unwrap();
        let mut have = want.clone();
        have.spec.as_mut().unwrap().hard = Some(
            [
                ("memory".into(), Quantity("1Gi".into())),
                ("cpu".into(), Quantity("1".into())),
            ]
            .into(),
        );
        assert!(quota_matches(&want, &have, "homestead"));
        have.spec
            .as_mut()
            .unwrap()
            .hard
            .as_mut()
            .unwrap()
            .insert("cpu".into(), Quantity("2".into()));
        assert!(!quota_matches(&want, &have, "homestead"));
    }

    #[test]
    fn metadata_matches_sees_drift_and_keys_to_remove() {
        let u = user(
            "alice",
            json!({ "namespace": { "labels": { "team": "a" } } }),
        );
        let desired = desired_namespace(&u, "user-alice").metadata;
        let mut cached = desired.clone();
        assert!(metadata_matches(&desired, &cached, "homestead"));
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "b".into());
        assert!(
            !metadata_matches(&desired, &cached, "homestead"),
            "changed value is drift"
        );
        // A label someone else added is not ours to remove...
        let mut cached = desired.clone();
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        assert!(metadata_matches(&desired, &cached, "homestead"));
        // ...but one Homestead applied earlier and no longer wants must go.
        cached.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("homestead".into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(
                json!({ "f:metadata": { "f:labels": { "f:extra": {} } } }),
            )),
            ..ManagedFieldsEntry::default()
        }]);
        assert!(!metadata_matches(&desired, &cached, "homestead"));
        let mut orphaned = desired.clone();
        orphaned.owner_references = None;
        assert!(!metadata_matches(&desired, &orphaned, "homestead"));
    }

    #[test]
    fn terminating_message_names_the_blockers() {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": "user-alice" },
            "status": { "conditions": [
                { "type": "NamespaceDeletionDiscoveryFailure", "status": "False" },
                { "type": "NamespaceFinalizersRemaining", "status": "True", "message": "Some content in the namespace has finalizers remaining: example.com/block in 1 resource instances" },
            ] },
        }))
        .unwrap();
        let message = terminating_message(&ns);
        assert!(message.contains("example.com/block"), "{message}");
        assert!(!message.contains("DiscoveryFailure"), "{message}");
    }
}
