//! Pure builders of the desired state: the complete Namespace, RoleBinding, ResourceQuota,
//! LimitRange and NetworkPolicy Homestead wants for a User, as server-side apply will send them. No client, no I/O, no
//! decisions about whether to write (see [`crate::plan::drift`]).

use std::collections::BTreeMap;

use homestead_api::{
    ANNOTATION_APPLIED, ANNOTATION_OWNER, ANNOTATION_USER_UID, DeletionPolicy, LABEL_ISOLATION,
    LABEL_MANAGED_BY, LABEL_RETAINED_FROM, LABEL_TENANT_ROLE_BINDINGS, LABEL_USER,
    TenantRoleBindings, User,
};
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeSpec, Namespace, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::plan::config::PodSecurity;
use crate::plan::ownership::{Holder, managed_labels, owner_reference};

/// Name of the RoleBinding Homestead manages in each person's Namespace.
pub const ROLE_BINDING_NAME: &str = homestead_api::HOME_ROLE_BINDING;
/// Name of the ResourceQuota Homestead manages in each person's Namespace.
pub const QUOTA_NAME: &str = "homestead-quota";
/// Name of the LimitRange Homestead manages in a Namespace whose Profile has one.
pub const LIMIT_RANGE_NAME: &str = "homestead-limits";
/// Name of the NetworkPolicy Homestead manages in a Namespace whose Profile isolates it.
pub const NETWORK_POLICY_NAME: &str = "homestead-isolation";

/// Value of [`LABEL_ISOLATION`] on a Namespace whose Profile isolates it.
pub const ISOLATED: &str = "Isolated";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What a Profile adds to a person's Namespace that admission policies key on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traits {
    /// The Profile's `networkIsolation` is `Isolated`.
    pub isolated: bool,
    /// The Profile's `sharing.tenantRoleBindings`.
    pub tenant_role_bindings: TenantRoleBindings,
}

impl Traits {
    /// Isolated, RoleBindings not governed.
    pub fn isolated() -> Self {
        Self {
            isolated: true,
            ..Self::default()
        }
    }
}

/// The desired Namespace `name` for `user`: the managed labels, the Pod Security labels of
/// `pod_security` and `spec.namespace.labels`; the `homestead.dev/user-uid` annotation,
/// the `homestead.dev/owner` annotation (the person's identity, which the admission policy
/// `homestead-share-owner` compares with whoever writes a Share) and
/// `spec.namespace.annotations`; the label `homestead.dev/isolation=Isolated` when
/// `traits.isolated` (the Profile's `networkIsolation`), which the admission policy
/// `homestead-tenant-isolation` keys on; the label `homestead.dev/tenant-role-bindings` when
/// `traits.tenant_role_bindings` is not `Allow` (for `homestead-governed-homes`); and an owner
/// reference
/// to the User only under `deletionPolicy: Delete` (then garbage collection is the safety net;
/// under `Retain` there is none, so foreground deletion cannot race the finalizer;
/// docs/design.md rule 8).
pub fn desired_namespace(
    user: &User,
    name: &str,
    pod_security: PodSecurity,
    traits: Traits,
) -> Namespace {
    let extra = user.spec.namespace.clone().unwrap_or_default();
    let mut labels = extra.labels;
    labels.extend(managed_labels(user));
    if traits.isolated {
        labels.insert(LABEL_ISOLATION.to_owned(), ISOLATED.to_owned());
    }
    let governed = match traits.tenant_role_bindings {
        TenantRoleBindings::Allow => None,
        TenantRoleBindings::ServiceAccountsOnly => Some("ServiceAccountsOnly"),
        TenantRoleBindings::Forbid => Some("Forbid"),
    };
    if let Some(governed) = governed {
        labels.insert(LABEL_TENANT_ROLE_BINDINGS.to_owned(), governed.to_owned());
    }
    for (mode, level) in [
        ("enforce", pod_security.enforce),
        ("warn", pod_security.warn),
        ("audit", pod_security.audit),
    ] {
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            level.as_str().to_owned(),
        );
    }
    let mut annotations = extra.annotations;
    annotations.insert(
        ANNOTATION_USER_UID.to_owned(),
        user.uid().unwrap_or_default(),
    );
    annotations.insert(
        ANNOTATION_OWNER.to_owned(),
        user.spec.identity.username.clone(),
    );
    let owner_references =
        (user.spec.deletion_policy == DeletionPolicy::Delete).then(|| vec![owner_reference(user)]);
    let print = applied_print(&labels, &annotations, owner_references.as_deref());
    annotations.insert(ANNOTATION_APPLIED.to_owned(), print);
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

/// The fingerprint [`ANNOTATION_APPLIED`] holds: SHA-256 of the labels, annotations and owner
/// references (as JSON, maps in key order) Homestead applies to a Namespace, as 16 hex digits.
/// Stable across builds and versions, so an upgrade does not re-apply every Namespace.
pub(crate) fn applied_print(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    owners: Option<&[OwnerReference]>,
) -> String {
    let applied = serde_json::to_vec(&(labels, annotations, owners)).expect("maps of strings");
    let digest = ring::digest::digest(&ring::digest::SHA256, &applied);
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The Namespace as Homestead leaves it under `Retain`: no managed-by / user labels (so no
/// Homestead watch selects it again), no owner reference, label
/// `homestead.dev/retained-from=<user>`; the Pod Security labels, the user-uid annotation (as a
/// record) and the User's extra labels and annotations kept.
pub fn retained_namespace(
    user: &User,
    name: &str,
    pod_security: PodSecurity,
    traits: Traits,
) -> Namespace {
    let mut ns = desired_namespace(user, name, pod_security, traits);
    let labels = ns.metadata.labels.get_or_insert_default();
    labels.remove(LABEL_MANAGED_BY);
    labels.remove(LABEL_USER);
    labels.remove(LABEL_TENANT_ROLE_BINDINGS);
    labels.insert(LABEL_RETAINED_FROM.to_owned(), user.name_any());
    ns.metadata.owner_references = None;
    if let Some(annotations) = ns.metadata.annotations.as_mut() {
        annotations.remove(ANNOTATION_APPLIED);
        // Nobody's home any more: no owner may write Shares in it.
        annotations.remove(ANNOTATION_OWNER);
    }
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
            name: user.spec.role().to_owned(),
        },
        subjects: Some(subjects),
    }
}

/// The desired ResourceQuota `homestead-quota` in `namespace` (its `spec.hard` is
/// `spec.quota.hard`), or `None` without `spec.quota`.
pub fn desired_quota(user: &User, namespace: &str) -> Option<ResourceQuota> {
    let quota = user.spec.quota.as_ref()?;
    Some(quota_of(user, namespace, &quota.hard))
}

/// The ResourceQuota `homestead-quota` in `namespace` for `holder` (a User or a Workspace),
/// with `hard` (ResourceQuota `spec.hard`: resource names to quantities).
pub fn quota_of<H: Holder>(
    holder: &H,
    namespace: &str,
    hard: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> ResourceQuota {
    ResourceQuota {
        metadata: managed_meta(holder, QUOTA_NAME, namespace),
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard.clone()),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    }
}

/// The desired LimitRange `homestead-limits` in `namespace` with `spec`, as the API server
/// stores it: for `Container` items, a default limit missing where `max` has one becomes `max`,
/// a default request missing where the default limit has one becomes that limit, else `min`
/// (Kubernetes' `SetDefaults_LimitRangeItem`), so a cached copy compares equal.
pub fn desired_limit_range<H: Holder>(
    user: &H,
    namespace: &str,
    spec: &LimitRangeSpec,
) -> LimitRange {
    let mut spec = spec.clone();
    for item in spec.limits.iter_mut().filter(|i| i.type_ == "Container") {
        let default = item.default.get_or_insert_default();
        for (key, value) in item.max.iter().flatten() {
            default.entry(key.clone()).or_insert_with(|| value.clone());
        }
        let request = item.default_request.get_or_insert_default();
        for (key, value) in default.iter().chain(item.min.iter().flatten()) {
            request.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    LimitRange {
        metadata: managed_meta(user, LIMIT_RANGE_NAME, namespace),
        spec: Some(spec),
    }
}

/// The desired NetworkPolicy `homestead-isolation` in `namespace`, for a Profile with
/// `networkIsolation: Isolated`, with the spec of [`isolation_spec`].
pub fn desired_network_policy<H: Holder>(
    user: &H,
    namespace: &str,
    allowed: &[String],
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: managed_meta(user, NETWORK_POLICY_NAME, namespace),
        spec: Some(isolation_spec(allowed)),
    }
}

/// The namespace of the cluster's DNS (CoreDNS or kube-dns, by Kubernetes' convention), the
/// one place an isolated home's Pods may send DNS queries to. Tenants cannot create Pods there.
pub const DNS_NAMESPACE: &str = "kube-system";

/// The spec of an isolated home's NetworkPolicy (also what `homestead doctor` tries with real
/// traffic): it selects every Pod and admits ingress only from Pods of the same Namespace and
/// of the Namespaces named in `allowed` (by their `kubernetes.io/metadata.name` label); egress
/// only to the same peers and to port 53 (DNS, UDP and TCP) of Pods in [`DNS_NAMESPACE`], where
/// the cluster's DNS runs: never to a port 53 someone opened in another home. See
/// <https://kubernetes.io/docs/concepts/services-networking/network-policies/>.
pub fn isolation_spec(allowed: &[String]) -> NetworkPolicySpec {
    let peers: Vec<NetworkPolicyPeer> = std::iter::once(NetworkPolicyPeer {
        pod_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    })
    .chain(allowed.iter().map(|name| NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("kubernetes.io/metadata.name".to_owned(), name.clone())].into()),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }))
    .collect();
    let dns = ["UDP", "TCP"]
        .map(|protocol| NetworkPolicyPort {
            protocol: Some(protocol.to_owned()),
            port: Some(IntOrString::Int(53)),
            end_port: None,
        })
        .to_vec();
    let cluster_dns = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(
                [(
                    "kubernetes.io/metadata.name".to_owned(),
                    DNS_NAMESPACE.to_owned(),
                )]
                .into(),
            ),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    };
    NetworkPolicySpec {
        pod_selector: Some(LabelSelector::default()),
        policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
        ingress: Some(vec![NetworkPolicyIngressRule {
            from: Some(peers.clone()),
            ports: None,
        }]),
        egress: Some(vec![
            NetworkPolicyEgressRule {
                to: Some(peers),
                ports: None,
            },
            NetworkPolicyEgressRule {
                to: Some(vec![cluster_dns]),
                ports: Some(dns),
            },
        ]),
    }
}

/// Metadata of a managed object `name` in `namespace`: the managed labels, no owner reference
/// (the Namespace's owner reference or offboarding takes care of its contents).
fn managed_meta<H: Holder>(user: &H, name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(managed_labels(user)),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::User;
    use serde_json::json;

    #[test]
    fn the_applied_fingerprint_changes_with_anything_applied_and_only_then() {
        let ps = PodSecurity::default();
        let applied = |spec: serde_json::Value, ps: PodSecurity, isolated: bool| {
            let ns = desired_namespace(
                &User::test("alice").with_spec(spec),
                "user-alice",
                ps,
                Traits {
                    isolated,
                    ..Traits::default()
                },
            );
            ns.metadata.annotations.unwrap()[ANNOTATION_APPLIED].clone()
        };
        let base = applied(json!({}), ps, false);
        assert_eq!(base.len(), 16);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()), "{base}");
        assert_eq!(base, applied(json!({}), ps, false), "stable");
        // What the Namespace does not carry (role, quota) leaves it as it is.
        assert_eq!(
            base,
            applied(
                json!({ "role": "view", "quota": { "hard": { "pods": "1" } } }),
                ps,
                false
            )
        );
        let labelled = json!({ "namespace": { "labels": { "team": "a" } } });
        let annotated = json!({ "namespace": { "annotations": { "team": "a" } } });
        let restricted = PodSecurity {
            enforce: homestead_api::PodSecurityLevel::Restricted,
            ..ps
        };
        let retained = json!({ "deletionPolicy": "Retain" });
        let others = [
            applied(labelled, ps, false),
            applied(annotated, ps, false),
            applied(json!({}), restricted, false),
            applied(json!({}), ps, true),
            applied(retained, ps, false),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(&base, other, "change {i} keeps the fingerprint");
        }
    }

    #[test]
    fn owner_reference_only_under_delete() {
        let ps = PodSecurity::default();
        let delete = desired_namespace(&User::test("alice"), "user-alice", ps, Traits::default());
        let owners = delete.metadata.owner_references.clone().unwrap();
        assert_eq!(owners[0].uid, "uid-alice");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(
            owners[0].block_owner_deletion, None,
            "the finalizer blocks, not GC"
        );
        let retain = desired_namespace(
            &User::test("alice").with_spec(json!({ "deletionPolicy": "Retain" })),
            "user-alice",
            ps,
            Traits::isolated(),
        );
        assert_eq!(
            retain.labels().get(LABEL_ISOLATION).map(String::as_str),
            Some(ISOLATED),
            "an isolated namespace says so, for the tenant-isolation admission policy"
        );
        assert!(!delete.labels().contains_key(LABEL_ISOLATION));
        assert!(retain.metadata.owner_references.is_none());
        let retained =
            retained_namespace(&User::test("alice"), "user-alice", ps, Traits::default());
        let labels = retained.metadata.labels.unwrap();
        assert_eq!(
            labels.get(LABEL_RETAINED_FROM).map(String::as_str),
            Some("alice")
        );
        assert!(!labels.contains_key(LABEL_MANAGED_BY));
        assert_eq!(
            labels
                .get("pod-security.kubernetes.io/enforce")
                .map(String::as_str),
            Some("baseline"),
            "a retained namespace keeps its Pod Security"
        );
        assert!(retained.metadata.owner_references.is_none());
    }

    #[test]
    fn namespace_carries_the_pod_security_levels() {
        let ps = PodSecurity {
            enforce: crate::plan::config::PodSecurityLevel::Restricted,
            ..PodSecurity::default()
        };
        let ns = desired_namespace(&User::test("alice"), "user-alice", ps, Traits::default());
        let label = |k: &str| ns.labels().get(k).cloned();
        assert_eq!(
            label("pod-security.kubernetes.io/enforce").as_deref(),
            Some("restricted")
        );
        assert_eq!(
            label("pod-security.kubernetes.io/warn").as_deref(),
            Some("restricted")
        );
        assert_eq!(
            label("pod-security.kubernetes.io/audit").as_deref(),
            Some("restricted")
        );
    }

    #[test]
    fn namespace_carries_the_extra_metadata_and_the_uid() {
        let u = User::test("alice").with_spec(
            json!({ "namespace": { "labels": { "team": "a" }, "annotations": { "cc": "42" } } }),
        );
        let ns = desired_namespace(&u, "user-alice", PodSecurity::default(), Traits::default());
        assert_eq!(ns.labels().get("team").map(String::as_str), Some("a"));
        assert_eq!(
            ns.labels().get(LABEL_USER).map(String::as_str),
            Some("alice")
        );
        assert_eq!(ns.annotations().get("cc").map(String::as_str), Some("42"));
        assert_eq!(
            ns.annotations()
                .get(ANNOTATION_USER_UID)
                .map(String::as_str),
            Some("uid-alice")
        );
    }

    #[test]
    fn role_binding_binds_the_role_to_user_and_groups() {
        let rb = desired_role_binding(
            &User::test("alice").with_role("view").with_groups(&["team"]),
            "user-alice",
        );
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
    fn quota_only_when_asked_for() {
        assert!(desired_quota(&User::test("alice"), "user-alice").is_none());
        let quota = desired_quota(
            &User::test("alice").with_spec(json!({ "quota": { "hard": { "pods": "5" } } })),
            "user-alice",
        )
        .unwrap();
        assert_eq!(quota.spec.unwrap().hard.unwrap()["pods"].0, "5");
    }

    #[test]
    fn a_limit_range_is_built_as_the_api_server_defaults_it() {
        let spec: LimitRangeSpec = serde_json::from_value(json!({ "limits": [
            { "type": "Container", "max": { "memory": "2Gi" }, "default": { "cpu": "1" },
              "min": { "ephemeral-storage": "1Gi" } },
            { "type": "Pod", "max": { "cpu": "4" } },
        ] }))
        .unwrap();
        let limits = desired_limit_range(&User::test("alice"), "user-alice", &spec)
            .spec
            .unwrap()
            .limits;
        let values = |m: &Option<
            std::collections::BTreeMap<
                String,
                k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            >,
        >| {
            m.iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.0))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            values(&limits[0].default),
            ["cpu=1", "memory=2Gi"],
            "max fills the default limit"
        );
        assert_eq!(
            values(&limits[0].default_request),
            ["cpu=1", "ephemeral-storage=1Gi", "memory=2Gi"],
            "the default limit, else min, fills the default request"
        );
        assert_eq!(
            limits[1].default, None,
            "only Container items are defaulted"
        );
    }

    #[test]
    fn isolation_admits_the_namespace_the_listed_ones_and_the_clusters_dns() {
        let policy =
            desired_network_policy(&User::test("alice"), "user-alice", &["monitoring".into()]);
        let spec = serde_json::to_value(policy.spec.unwrap()).unwrap();
        assert_eq!(spec["podSelector"], json!({}), "every Pod is selected");
        assert_eq!(spec["ingress"][0]["from"][0], json!({ "podSelector": {} }));
        assert_eq!(
            spec["ingress"][0]["from"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "monitoring"
        );
        assert_eq!(spec["egress"][0]["to"], spec["ingress"][0]["from"]);
        assert_eq!(
            spec["egress"][1]["ports"][0],
            json!({ "protocol": "UDP", "port": 53 })
        );
        // DNS only to the cluster's DNS namespace: a port 53 opened in another home is not
        // reached (issue 61, B9).
        assert_eq!(
            spec["egress"][1]["to"],
            json!([{ "namespaceSelector": { "matchLabels": {
                "kubernetes.io/metadata.name": DNS_NAMESPACE } } }])
        );
    }
}
