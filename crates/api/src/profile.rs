//! The cluster-scoped [`Profile`]: what a kind of person gets (role, quota, LimitRange, Pod
//! Security, network isolation, Namespace metadata), set once by the platform team and named
//! by each User in `spec.profile`. Precedence: a User's own field (where the Profile's
//! `userOverrides` allows it) over the Profile over the operator's flags.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LimitRangeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ANNOTATIONS_QUALIFIED_MESSAGE, ANNOTATIONS_RESERVED_MESSAGE, LABEL_VALUES,
    LABELS_QUALIFIED_MESSAGE, LABELS_RESERVED_MESSAGE, LABELS_VALUES_MESSAGE, NAME_IS_LABEL,
    NAME_IS_LABEL_MESSAGE, NO_RESERVED_KEYS, NOT_CLUSTER_ADMIN, NOT_CLUSTER_ADMIN_MESSAGE,
    QUALIFIED_KEYS, QuotaSpec,
};

/// A Pod Security Standards level, as the `pod-security.kubernetes.io/*` Namespace labels take
/// it (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations (no privileged containers, host namespaces, ...).
    Baseline,
    /// Hardened best practice (non-root, no capabilities, seccomp, ...).
    Restricted,
}

impl PodSecurityLevel {
    /// The label value: `privileged`, `baseline` or `restricted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl std::str::FromStr for PodSecurityLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "privileged" => Ok(Self::Privileged),
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            other => Err(format!(
                "{other:?} is not a Pod Security level (privileged, baseline, restricted)"
            )),
        }
    }
}

/// The Pod Security admission levels of a Profile's Namespaces; a level left out is the
/// operator's (its `--pod-security-*` flags).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.enforce) || self.enforce != 'privileged'").message("podSecurity.enforce must be baseline or restricted: the admission policy homestead-operator-bounds refuses the operator a Namespace that enforces privileged (warn and audit may be any level)").reason(Reason::FieldValueForbidden))]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityLevels {
    /// `pod-security.kubernetes.io/enforce`: Pods that violate this level are refused;
    /// `baseline` or `restricted` (never `privileged`: the admission policy
    /// `homestead-operator-bounds` refuses the operator such a Namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<PodSecurityLevel>,
    /// `pod-security.kubernetes.io/warn`: violations of this level warn the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn: Option<PodSecurityLevel>,
    /// `pod-security.kubernetes.io/audit`: violations of this level are recorded in the audit
    /// log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<PodSecurityLevel>,
}

/// Whether a Profile's Namespaces are isolated on the network.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NetworkIsolation {
    /// No NetworkPolicy from Homestead: the cluster's defaults apply.
    #[default]
    None,
    /// NetworkPolicies that admit ingress only from the same Namespace and from the Profile's
    /// `allowIngressFrom` Namespaces, and allow egress to those, plus DNS anywhere.
    Isolated,
}

/// A User field a Profile may let its Users set for themselves.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UserOverride {
    /// `spec.role` replaces the Profile's role (the allow-list still applies).
    Role,
    /// `spec.quota` replaces the Profile's quota.
    Quota,
    /// `spec.namespace.labels` and `spec.namespace.annotations` may change the values of keys
    /// the Profile sets (keys the Profile does not set are always the User's to add).
    NamespaceMetadata,
}

/// Extra labels and annotations for every Namespace of a Profile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceMetadata {
    /// Extra labels, with the same reserved keys as a User's `spec.namespace.labels`
    /// (`homestead.dev/`, `kubernetes.io/`, `k8s.io/` and their subdomains). At most 32;
    /// values at most 63 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    #[x_kube(
        validation = Rule::new(NO_RESERVED_KEYS).message(LABELS_RESERVED_MESSAGE).reason(Reason::FieldValueForbidden),
        validation = Rule::new(QUALIFIED_KEYS).message(LABELS_QUALIFIED_MESSAGE).reason(Reason::FieldValueInvalid),
        validation = Rule::new(LABEL_VALUES).message(LABELS_VALUES_MESSAGE).reason(Reason::FieldValueInvalid),
    )]
    pub labels: BTreeMap<String, String>,

    /// Extra annotations, with the same reserved keys as `labels`. At most 32; values at most
    /// 4096 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    #[x_kube(
        validation = Rule::new(NO_RESERVED_KEYS).message(ANNOTATIONS_RESERVED_MESSAGE).reason(Reason::FieldValueForbidden),
        validation = Rule::new(QUALIFIED_KEYS).message(ANNOTATIONS_QUALIFIED_MESSAGE).reason(Reason::FieldValueInvalid),
    )]
    pub annotations: BTreeMap<String, String>,
}

/// What a kind of person gets, for every User that names this Profile in `spec.profile`, every
/// User without one whose directory groups select it (`spec.directory`), and, when the
/// operator runs with `--default-profile`, every other User that names none. Editing it
/// rolls the change out to exactly those Users; deleting it changes no Namespace (its Users
/// report `Ready=False`, reason `ProfileNotFound`, until it is back).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "homestead.dev",
    version = "v1alpha1",
    kind = "Profile",
    plural = "profiles",
    singular = "profile",
    shortname = "hsprofile",
    category = "homestead",
    status = "ProfileStatus",
    derive = "PartialEq",
    doc = "What a kind of person gets: role, quota, LimitRange, Pod Security, network isolation and Namespace metadata. Users name it in spec.profile; the platform team owns it.",
    printcolumn(name = "Role", type_ = "string", description = "The default ClusterRole of its Users", json_path = ".spec.role"),
    printcolumn(name = "Isolation", type_ = "string", description = "Network isolation of its Users' Namespaces", json_path = ".spec.networkIsolation"),
    printcolumn(name = "Users", type_ = "integer", description = "Users that use this Profile", json_path = ".status.users"),
    printcolumn(name = "Up-to-date", type_ = "integer", description = "Users whose Namespace reflects this generation of the Profile", json_path = ".status.usersUpToDate"),
    printcolumn(name = "Ready", type_ = "string", description = "Whether every User of the Profile reflects its current generation", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", description = "Why Ready is what it is", json_path = ".status.conditions[?(@.type==\"Ready\")].reason", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_IS_LABEL).message(NAME_IS_LABEL_MESSAGE),
)]
#[serde(rename_all = "camelCase")]
pub struct ProfileSpec {
    /// The ClusterRole bound in each Namespace unless the User sets `spec.role` (and
    /// `userOverrides` allows it). Still subject to the operator's allow-list; `cluster-admin`
    /// is always refused. Without it, a User's own role or `admin`. At most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(NOT_CLUSTER_ADMIN).message(NOT_CLUSTER_ADMIN_MESSAGE).reason(Reason::FieldValueForbidden))]
    pub role: Option<String>,

    /// The ResourceQuota of each Namespace (its `hard` limits become the quota's `spec.hard`)
    /// unless the User sets `spec.quota` (and `userOverrides` allows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaSpec>,

    /// The most all homes of one owner use together (ResourceQuota `hard` keys): a person's own
    /// home and personal workspaces, or a team's workspaces (issue "A quota across all of an
    /// owner's homes"). Split into each home's ResourceQuota so the slices never add up to more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_quota: Option<QuotaSpec>,

    /// A LimitRange for each Namespace (`homestead-limits`), typically default requests and
    /// limits for containers, as in a LimitRange's `spec`
    /// (<https://kubernetes.io/docs/concepts/policy/limit-range/>). Users cannot override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_range: Option<LimitRangeSpec>,

    /// The Pod Security levels of each Namespace; a level left out is the operator's. Users
    /// cannot override them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityLevels>,

    /// `Isolated` puts NetworkPolicies in each Namespace that admit ingress only from the same
    /// Namespace and from `allowIngressFrom`, and allow egress only to those and to DNS (port
    /// 53 of Pods in `kube-system`). `None` (the default) adds none and removes any Homestead added. Users cannot
    /// override it.
    #[serde(default)]
    pub network_isolation: NetworkIsolation,

    /// Namespaces (by name) whose Pods may reach an isolated Namespace, and which its Pods may
    /// reach, for example an ingress controller's or a monitoring Namespace. At most 32, each a
    /// name of at most 63 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 63),
            regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub allow_ingress_from: Vec<String>,

    /// Extra labels and annotations for each Namespace. A User's own
    /// `spec.namespace.labels`/`annotations` add keys; changing a key the Profile sets takes
    /// `namespaceMetadata` in `userOverrides`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<NamespaceMetadata>,

    /// The User fields that may override this Profile: `role`, `quota`, `namespaceMetadata`.
    /// A User that sets another field differently from the Profile is refused
    /// (`Ready=False`, reason `OverrideNotAllowed`). Pod Security, the LimitRange and network
    /// isolation are never overridable. At most 3 (each field once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3), extend("x-kubernetes-list-type" = "set"))]
    pub user_overrides: Vec<UserOverride>,

    /// The directory groups (DirectoryGroups, by `spec.displayName`) whose members get this
    /// Profile when they name none in `spec.profile`. Without it, the directory can never give
    /// anyone this Profile: only HR (`spec.profile`) or the operator's `--default-profile` can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectorySelection>,

    /// What this Profile's people may share of their homes (Shares), and who besides Homestead
    /// may bind people there. Without it, the operator's flags decide (sharing enabled, at most
    /// `edit`, at most 90 days, groups allowed, tenant RoleBindings allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<SharingLimits>,

    /// Whether this Profile's people may create workspaces of their own (a personal
    /// `Workspace`), how many, and with which Profiles. Without it: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<WorkspaceLimits>,
}

/// What a Profile's people may create of personal workspaces. Beyond `max`, the youngest are
/// refused (`Ready=False`), never the older.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceLimits {
    /// Whether these people may create their own workspaces at all. Default `false`.
    #[serde(default)]
    pub self_service: bool,

    /// The most personal workspaces one person may hold (a count, 0 to 100). Default 0.
    #[serde(default)]
    #[schemars(range(max = 100))]
    pub max: u32,

    /// The Profiles a person may name in a workspace's `spec.profile` (by name, each at most
    /// 253 characters; at most 20); without one, the workspace gets the person's own Profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 20),
        inner(length(min = 1, max = 253)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub profiles: Vec<String>,
}

/// The limits of sharing a home (Shares) for the people of one Profile. A Share above them is
/// refused (`Ready=False`, reason `Refused`, with the rule); a limit lowered later revokes what
/// now exceeds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharingLimits {
    /// Whether these people may share their homes at all. Default `true`.
    #[serde(default = "yes")]
    pub enabled: bool,

    /// The highest ClusterRole a Share may grant (by name, among the operator's allow-list, in
    /// its order `view` < `edit` < `admin`). Default: the operator's `--share-max-role`. At
    /// most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub max_role: Option<String>,

    /// The longest a Share may last from its creation or last renewal, as a whole number of
    /// seconds, minutes, hours or days (`3600s`, `12h`, `90d`). Default: the operator's
    /// `--share-max-duration` (90 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^[1-9][0-9]{0,5}(s|m|h|d)$"))]
    pub max_duration: Option<String>,

    /// Whether DirectoryGroups may be grantees (a share to a group trusts whoever writes that
    /// group's members). Default `true`.
    #[serde(default = "yes")]
    pub groups: bool,

    /// Who besides Homestead may bind people in these homes: `Allow` (anyone the namespace's
    /// RBAC lets), `ServiceAccountsOnly` (only bindings whose subjects are all ServiceAccounts
    /// of that namespace), `Forbid` (none). Default `Allow`.
    #[serde(default)]
    pub tenant_role_bindings: TenantRoleBindings,
}

impl Default for SharingLimits {
    fn default() -> Self {
        Self {
            enabled: true,
            max_role: None,
            max_duration: None,
            groups: true,
            tenant_role_bindings: TenantRoleBindings::Allow,
        }
    }
}

/// The serde default `true`.
fn yes() -> bool {
    true
}

/// Who besides Homestead may bind people in a Profile's homes ([`SharingLimits`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TenantRoleBindings {
    /// Anyone the namespace's RBAC lets (the default).
    #[default]
    Allow,
    /// Only RoleBindings whose subjects are all ServiceAccounts of that namespace.
    ServiceAccountsOnly,
    /// None: every person's access there has a source Homestead names.
    Forbid,
}

/// Which directory groups select a Profile, and how it ranks against other Profiles a person's
/// groups select.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectorySelection {
    /// Group names as the directory has them (a DirectoryGroup's `spec.displayName`, compared
    /// exactly). At least 1, at most 32, each at most 256 characters.
    #[schemars(
        length(min = 1, max = 32),
        inner(length(min = 1, max = 256)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub groups: Vec<String>,

    /// When a person's groups select several Profiles, the one with the highest priority wins;
    /// on a tie, the Profile whose name sorts first. From -1000 to 1000; default 0.
    #[serde(default)]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: i32,
}

impl ProfileSpec {
    /// Whether the Profile lets its Users set `field` themselves.
    pub fn allows(&self, field: UserOverride) -> bool {
        self.user_overrides.contains(&field)
    }
}

/// The observed state of a Profile, following the Kubernetes API conventions for status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    /// The `metadata.generation` of the Profile this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// How many Users use this Profile (by `spec.profile` or the operator's default).
    #[serde(default)]
    pub users: i64,

    /// How many of them have been reconciled with this generation of the Profile
    /// (`status.profile.observedGeneration` of the User equals `observedGeneration`).
    #[serde(default)]
    pub users_up_to_date: i64,

    /// `Ready`: `True` (reason `RolledOut`) once every User is up to date, else `False` (reason
    /// `RollingOut`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Which Profile a User's Namespace was last reconciled with, in the User's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedProfile {
    /// The Profile's name.
    pub name: String,
    /// The Profile's `metadata.generation` that the User's objects reflect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The DirectoryGroup (`metadata.name`) whose membership chose this Profile; absent when
    /// the User names it in `spec.profile` or it is the operator's `--default-profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}
