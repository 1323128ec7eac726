//! The `homestead.dev/v1alpha1` API: the cluster-scoped [`User`], [`Profile`] and
//! [`DirectoryGroup`] custom resources (spec, status and conditions), the constants every part
//! of Homestead shares (group, finalizer, labels, annotations, field manager), and name
//! validation.
//!
//! Admission-time validation lives in the schema generated from these types (patterns, lengths,
//! enums) and in CEL rules (`x-kubernetes-validations`), so `kubectl apply` refuses a bad User
//! with a message that names the broken rule before the controller ever sees it. See
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules>.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[cfg(feature = "fixtures")]
pub mod fixtures;
mod group;
mod profile;
pub mod reasons;
mod share;
mod total;
mod workspace;
pub use group::{DirectoryGroup, DirectoryGroupSpec, DirectoryGroupStatus, MAX_GROUP_MEMBERS};
pub use profile::{
    AppliedProfile, DirectorySelection, NamespaceMetadata, NetworkIsolation, PodSecurityLevel,
    PodSecurityLevels, Profile, ProfileSpec, ProfileStatus, SharingLimits, TenantRoleBindings,
    UserOverride, WorkspaceLimits,
};
pub use reasons::{
    Change, ConditionType, ExpiringReason, Failure, MAX_EVENT_NOTE_BYTES, ProfileReason, Reason,
    RefusalKind, ShareReason, Verb, VerbNames,
};
pub use share::{
    Grantee, GranteeStatus, MAX_GRANTEES, MAX_REASON_LEN, Share, ShareSpec, ShareStatus,
};
pub use total::{HomeSlice, TOTAL_FIELD_MANAGER, TotalQuotaStatus};
pub use workspace::{
    MAX_ADMINS, MAX_WORKSPACE_REASON_LEN, MemberCount, Members, Workspace, WorkspaceNamespace,
    WorkspaceOwner, WorkspaceSpec, WorkspaceStatus,
};

/// The API group of [`User`].
pub const GROUP: &str = "homestead.dev";
/// The API version of [`User`].
pub const VERSION: &str = "v1alpha1";
/// The name of the `users.homestead.dev` CustomResourceDefinition.
pub const CRD_NAME: &str = "users.homestead.dev";
/// The ClusterRole a User gets when neither it nor its Profile names one.
pub const DEFAULT_ROLE: &str = "admin";
/// The finalizer Homestead puts on every User before it creates anything for it.
pub const FINALIZER: &str = "homestead.dev/cleanup";
/// The server-side apply field manager of every write Homestead makes.
pub const FIELD_MANAGER: &str = "homestead";

/// Label naming the manager of an object (the Kubernetes recommended label).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`] on every object Homestead manages.
pub const MANAGED_BY: &str = "homestead";
/// Label naming the User (its `metadata.name`) a managed object belongs to.
pub const LABEL_USER: &str = "homestead.dev/user";
/// Annotation holding the `metadata.uid` of the owning User; with the two labels above it is
/// what makes a Namespace the User's (a name match alone never is).
pub const ANNOTATION_USER_UID: &str = "homestead.dev/user-uid";
/// Label naming the Workspace (its `metadata.name`) a managed object belongs to, in place of
/// [`LABEL_USER`] (docs/design.md, rule 25).
pub const LABEL_WORKSPACE: &str = "homestead.dev/workspace";
/// Annotation holding the `metadata.uid` of the owning Workspace; with
/// `app.kubernetes.io/managed-by` and [`LABEL_WORKSPACE`] it is what makes a Namespace the
/// Workspace's.
pub const ANNOTATION_WORKSPACE_UID: &str = "homestead.dev/workspace-uid";
/// Label `true` on a Workspace a person created for themselves (self-service): the admission
/// policy `homestead-workspace-creator` demands it of everyone but the platform and keeps it;
/// such a workspace counts against its owner's Profile's `spec.workspaces.max`.
pub const LABEL_SELF_SERVICE: &str = "homestead.dev/self-service";
/// The RoleBinding of a workspace's admins (a personal workspace's owner, a team's `admins`).
pub const WORKSPACE_ADMINS_BINDING: &str = "homestead-workspace-admins";
/// The RoleBinding of a team workspace's members (`spec.members.role`).
pub const WORKSPACE_MEMBERS_BINDING: &str = "homestead-workspace-members";
/// Annotation on a person's Namespace: a fingerprint (SHA-256, 16 hex digits) of every label,
/// annotation and owner reference Homestead applied there. A cached Namespace that carries the
/// fingerprint of what Homestead wants now has nothing Homestead must add or take away, so a
/// change to a User or Profile that leaves the Namespace as it is costs no write.
pub const ANNOTATION_APPLIED: &str = "homestead.dev/applied";
/// Label put on a Namespace kept under `deletionPolicy: Retain`, naming the User it came from.
/// It stays for as long as the Namespace exists, so the standing revocation rule still finds
/// it: every RoleBinding that appears there is removed.
pub const LABEL_RETAINED_FROM: &str = "homestead.dev/retained-from";
/// Label on a person's Namespace whose Profile asks for `networkIsolation: Isolated`; the
/// admission policy `homestead-tenant-isolation` keys on it to keep tenants' own NetworkPolicies
/// from opening the Namespace to other people. Set by Homestead alone (tenants cannot write
/// Namespace labels).
pub const LABEL_ISOLATION: &str = "homestead.dev/isolation";
/// Annotation on a person's Namespace holding their identity (`spec.identity.username`), set
/// by Homestead alone (tenants cannot write Namespaces): the admission policy
/// `homestead-share-owner` lets only that identity (or HR and the platform) write the Shares
/// in it, so a grantee never re-shares.
pub const ANNOTATION_OWNER: &str = "homestead.dev/owner";
/// Label on an existing Namespace by which the platform (whoever may update Namespaces; never a
/// tenant, HR or the SCIM service) hands it to the User it names: that User's reconcile adopts
/// it (the ownership labels and annotation, nothing in it deleted) and removes this label. The
/// admission policy `homestead-operator-bounds` lets the operator update an unlabelled
/// Namespace only so, and only for that User (docs/adoption.md).
pub const LABEL_ADOPT_FOR: &str = "homestead.dev/adopt-for";
/// Label on a person's Namespace whose Profile governs its RoleBindings
/// (`sharing.tenantRoleBindings` `ServiceAccountsOnly` or `Forbid`); the admission policy
/// `homestead-governed-homes` keys on it. Set by Homestead alone.
pub const LABEL_TENANT_ROLE_BINDINGS: &str = "homestead.dev/tenant-role-bindings";
/// Label on the RoleBinding of a Share, naming the Share (`metadata.name`, in the same
/// namespace).
pub const LABEL_SHARE: &str = "homestead.dev/share";
/// Annotation on a Share naming who created it (`request.userInfo.username`), checked by the
/// admission policy `homestead-share-owner` on create and immutable after: the record
/// `homestead access` shows beside the Share's reason.
pub const ANNOTATION_CREATED_BY: &str = "homestead.dev/created-by";
/// The name of the ResourceQuota holding a home's slice of its owner's total
/// (`Profile.spec.totalQuota`; docs/quota.md), beside `homestead-quota`.
pub const TOTAL_QUOTA_NAME: &str = "homestead-total";
/// Label on a slice (`homestead-total`) naming the kind of its owner: `user` or `group`.
pub const LABEL_TOTAL: &str = "homestead.dev/total";
/// Label on a slice (`homestead-total`) naming its owner (`metadata.name` of the User or the
/// DirectoryGroup); with [`LABEL_TOTAL`], the selector of all of an owner's slices.
pub const LABEL_TOTAL_OWNER: &str = "homestead.dev/total-owner";
/// Annotation on a slice (`homestead-total`): the total it was cut from, as
/// `resource=quantity` pairs joined by `,` in name order; a slice whose annotation is not the
/// owner's total now is split again.
pub const ANNOTATION_TOTAL: &str = "homestead.dev/total";
/// Label on a Workspace Homestead made for a leaver's home, and on its namespace, naming the
/// User who left it (`metadata.name`): the record of a handover (docs/handover.md).
pub const LABEL_HANDED_OVER_FROM: &str = "homestead.dev/handed-over-from";
/// The reason of the Warning Event on a leaving User whose homes could not be handed over
/// (no successor, or one missing, suspended, expired or offboarding): they are retained.
pub const HANDOVER_FALLBACK: &str = "HandoverFallback";
/// The name of the RoleBinding that gives a home's owner their access (in a person's own home).
pub const HOME_ROLE_BINDING: &str = "homestead-user";
/// The prefix of the name of a Share's RoleBinding: `homestead-share-<Share name>`.
pub const SHARE_BINDING_PREFIX: &str = "homestead-share-";
/// Label on a User naming the writer that owns it, when that writer is not HR: `scim` for the
/// Users the SCIM service created or was handed. The admission policy `homestead-scim-bounds`
/// lets the SCIM identity see and change only Users labelled so, and never change the label.
pub const LABEL_WRITER: &str = "homestead.dev/writer";
/// Value of [`LABEL_WRITER`] on the Users the SCIM service owns.
pub const WRITER_SCIM: &str = "scim";
/// The Profile of a person the directory manages (`homestead.dev/writer=scim`) whom no
/// directory group gives a Profile and who names none, when the operator has no
/// `--default-profile`: built in (role `view`, `Isolated`, Pod Security `restricted`), unless
/// the platform creates a Profile of this name, which then replaces it.
pub const DIRECTORY_FLOOR_PROFILE: &str = "directory-floor";

/// The condition type always present in [`UserStatus::conditions`] ([`ConditionType::Ready`]).
pub const CONDITION_READY: &str = "Ready";
/// The condition type present while a User's `validUntil` is near (`True`) or set (`False`)
/// ([`ConditionType::Expiring`]).
pub const CONDITION_EXPIRING: &str = "Expiring";
/// `apiVersion` of every Homestead kind: `homestead.dev/v1alpha1`.
pub const API_VERSION: &str = "homestead.dev/v1alpha1";

/// Key prefixes (with their subdomains) a User may never set as Namespace labels or
/// annotations: Homestead's own, and those of Kubernetes and its components (Pod Security,
/// `kubernetes.io/metadata.name`, `scheduler.alpha.kubernetes.io/node-selector`, ...), which other
/// components act on. See
/// <https://kubernetes.io/docs/reference/labels-annotations-taints/>.
pub const RESERVED_KEY_DOMAINS: [&str; 3] = ["homestead.dev/", "kubernetes.io/", "k8s.io/"];

/// The maximum length of a DNS-1123 label (a Namespace name), in characters.
pub const DNS1123_LABEL_MAX_LEN: usize = 63;

/// Whether `name` is a DNS-1123 label: at most 63 characters of lower-case alphanumerics and
/// `-`, starting and ending with an alphanumeric. This is the rule for Namespace names
/// (<https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names>).
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= DNS1123_LABEL_MAX_LEN
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

/// Whether `key` is a Kubernetes qualified name, the rule for label keys, annotation keys and
/// resource names: an optional prefix (a DNS subdomain of at most 253 characters) and `/`, then
/// a name of 1 to 63 characters of ASCII letters, digits, `-`, `_` and `.`, starting and ending
/// with a letter or digit. Mirrors the CEL rule on `spec.namespace` and `spec.quota`.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix
        .is_none_or(|p| p.len() <= 253 && !p.is_empty() && p.split('.').all(is_dns1123_label));
    prefix_ok && !name.is_empty() && name.len() <= 63 && is_label_value(name)
}

/// Whether `value` is a valid label value: empty, or at most 63 ASCII letters, digits, `-`, `_`
/// and `.`, starting and ending with a letter or digit.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    bytes.is_empty()
        || (bytes.len() <= 63
            && bytes
                .iter()
                .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
            && bytes.first().is_some_and(alnum)
            && bytes.last().is_some_and(alnum))
}

/// Whether a label or annotation key is reserved: its prefix is one of
/// [`RESERVED_KEY_DOMAINS`] or a subdomain of one (`app.kubernetes.io/name`,
/// `pod-security.kubernetes.io/enforce`, `homestead.dev/user`).
pub fn is_reserved_key(key: &str) -> bool {
    RESERVED_KEY_DOMAINS.iter().any(|d| key_matches(key, d))
}

/// Whether `key` is matched by `pattern`: a pattern ending in `/` is a key prefix and matches
/// keys with that prefix or a subdomain of it (`istio.io/` matches `istio.io/rev` and
/// `sidecar.istio.io/inject`); any other pattern matches that exact key (`istio-injection`).
pub fn key_matches(key: &str, pattern: &str) -> bool {
    match (pattern.strip_suffix('/'), key.split_once('/')) {
        (Some(domain), Some((prefix, _))) => {
            prefix == domain
                || prefix
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.ends_with('.'))
        }
        (Some(_), None) => false,
        (None, _) => key == pattern,
    }
}

/// Message of the CEL rules that keep `spec.namespace.name` from being added, changed or removed
/// after creation (two rules: on `spec.namespace` and on `spec`, since a CEL transition rule only
/// runs where both the old and the new value exist). Adding it later would move the person to a
/// new Namespace and strand the old one.
const IMMUTABLE_NAMESPACE: &str =
    "spec.namespace.name is immutable: set it when creating the User, or never";

/// CEL rule shared by label, annotation and quota maps: every key is a Kubernetes qualified
/// name (an optional DNS-subdomain prefix of at most 253 characters and `/`, then a name of at
/// most 63 characters of letters, digits, `-`, `_` and `.`, starting and ending with a letter or
/// digit), as the API server requires of label keys, annotation keys and resource names.
/// See <https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set>.
const QUALIFIED_KEYS: &str = "self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || size(k.substring(0, k.indexOf('/'))) <= 253))";

/// CEL rule for label values: empty, or at most 63 letters, digits, `-`, `_` and `.`, starting
/// and ending with a letter or digit.
const LABEL_VALUES: &str =
    "self.all(k, self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))";

/// The longest annotation value a User may ask for, in characters (32 annotations of this size
/// stay well below the API server's 256 KiB limit for all of an object's annotations).
pub const ANNOTATION_VALUE_MAX_LEN: usize = 4096;

/// Quota resource names without a `/` that the API server knows (its standard quota resources;
/// `hugepages-*` and `requests.hugepages-*` too). Names with a `/` (`count/deployments.apps`,
/// `requests.nvidia.com/gpu`) need only be qualified names.
pub const STANDARD_QUOTA_RESOURCES: [&str; 19] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

/// Whether `name` may be a key of a ResourceQuota's `spec.hard`, as the API server checks it:
/// a qualified name, and without a `/` one of [`STANDARD_QUOTA_RESOURCES`] or a huge-pages name.
pub fn is_quota_resource_name(name: &str) -> bool {
    is_qualified_name(name)
        && (name.contains('/')
            || STANDARD_QUOTA_RESOURCES.contains(&name)
            || name.starts_with("hugepages-")
            || name.starts_with("requests.hugepages-"))
}

/// CEL rule for quota keys, [`is_quota_resource_name`] without the qualified-name part.
const QUOTA_KEYS: &str = "self.all(k, k.contains('/') || k.startsWith('hugepages-') || k.startsWith('requests.hugepages-') || k in ['cpu', 'memory', 'ephemeral-storage', 'requests.cpu', 'requests.memory', 'requests.storage', 'requests.ephemeral-storage', 'limits.cpu', 'limits.memory', 'limits.ephemeral-storage', 'pods', 'resourcequotas', 'services', 'replicationcontrollers', 'secrets', 'persistentvolumeclaims', 'configmaps', 'services.nodeports', 'services.loadbalancers'])";

/// The OpenAPI pattern of a quota value given as a string: a non-negative quantity, the grammar
/// of Kubernetes' `Quantity` without its sign (a number given as a number must be at least 0).
/// A pattern, not a CEL `isQuantity` rule: Kubernetes 1.30 estimates any CEL rule over an
/// int-or-string value as unbounded and refuses the CRD (docs/development.md, "Supported
/// versions").
const QUOTA_VALUE_PATTERN: &str = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// CEL rule on `metadata.name` of every kind here: a DNS-1123 label (it names a Namespace or is
/// named by a User).
const NAME_IS_LABEL: &str = "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";
/// Message of [`NAME_IS_LABEL`].
const NAME_IS_LABEL_MESSAGE: &str = "metadata.name must be a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit";
/// CEL rule on every `role` field.
const NOT_CLUSTER_ADMIN: &str = "self != 'cluster-admin'";
/// Message of [`NOT_CLUSTER_ADMIN`].
const NOT_CLUSTER_ADMIN_MESSAGE: &str =
    "spec.role may not be cluster-admin: Homestead never grants cluster-wide administration";
/// Messages of the rules on Namespace labels and annotations, shared by User and Profile.
const LABELS_RESERVED_MESSAGE: &str = "spec.namespace.labels may not use reserved keys: homestead.dev/, kubernetes.io/ and k8s.io/ prefixes and their subdomains";
const LABELS_QUALIFIED_MESSAGE: &str = "spec.namespace.labels keys must be qualified names: an optional DNS subdomain prefix (at most 253 characters) and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
const LABELS_VALUES_MESSAGE: &str = "spec.namespace.labels values must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
const ANNOTATIONS_RESERVED_MESSAGE: &str = "spec.namespace.annotations may not use reserved keys: homestead.dev/, kubernetes.io/ and k8s.io/ prefixes and their subdomains";
const ANNOTATIONS_QUALIFIED_MESSAGE: &str = "spec.namespace.annotations keys must be qualified names: an optional DNS subdomain prefix (at most 253 characters) and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

/// CEL rule shared by the label and annotation maps: no key under a [`RESERVED_KEY_DOMAINS`]
/// prefix or its subdomains.
const NO_RESERVED_KEYS: &str =
    "self.all(k, !k.matches('^([^/]*[.])?(homestead[.]dev|kubernetes[.]io|k8s[.]io)/'))";

/// A person who gets a home on the cluster: their own Namespace, with a RoleBinding granting
/// them an allow-listed ClusterRole there. Created by HR/IT, one per person; deleting it
/// offboards the person according to `deletionPolicy`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "homestead.dev",
    version = "v1alpha1",
    kind = "User",
    plural = "users",
    singular = "user",
    shortname = "hsuser",
    category = "homestead",
    status = "UserStatus",
    derive = "PartialEq",
    doc = "A person who gets a home on the cluster: a Namespace of their own and the RBAC to work in it. Homestead provisions, repairs and offboards it.",
    printcolumn(name = "Namespace", type_ = "string", description = "The person's Namespace", json_path = ".status.namespace"),
    printcolumn(name = "Profile", type_ = "string", description = "The Profile the User's Namespace reflects: spec.profile, else the one its directory groups select, else the operator's default", json_path = ".status.profile.name"),
    printcolumn(name = "Group", type_ = "string", description = "The directory group that chose the Profile (empty: spec.profile or the default)", json_path = ".status.profile.group"),
    printcolumn(name = "Role", type_ = "string", description = "The ClusterRole the person's RoleBinding grants: spec.role, or the one their Profile chose (what would be restored while access is revoked)", json_path = ".status.role"),
    printcolumn(name = "Ready", type_ = "string", description = "Whether the Namespace and access are as declared", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", description = "Why Ready is what it is", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_IS_LABEL).message(NAME_IS_LABEL_MESSAGE),
)]
#[x_kube(
    // `namespace` is a CEL reserved word: Kubernetes 1.30 (the oldest supported) only knows
    // the field as `__namespace__`, which later versions still accept.
    validation = Rule::new("(has(oldSelf.__namespace__) && has(oldSelf.__namespace__.name)) == (has(self.__namespace__) && has(self.__namespace__.name))").message(IMMUTABLE_NAMESPACE).reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// The person's name, for humans (for example "Alice Liddell"), at most 256 characters. Not
    /// used by Homestead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub display_name: Option<String>,

    /// The person's given name (SCIM `name.givenName`), for humans, at most 256 characters. Not
    /// used by Homestead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub given_name: Option<String>,

    /// The person's family name (SCIM `name.familyName`), for humans, at most 256 characters.
    /// Not used by Homestead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub family_name: Option<String>,

    /// The person's e-mail address, for humans, at most 320 characters. Not used by Homestead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 320))]
    pub email: Option<String>,

    /// Who the cluster's authenticator says this person is: the subjects of the RoleBinding.
    pub identity: Identity,

    /// The Profile (a platform-owned template: role, quota, LimitRange, Pod Security, network
    /// isolation) this person gets. Optional: without it, the operator's `--default-profile`
    /// if set, else only what this spec says. Where the User's own fields differ from the
    /// Profile's, the Profile's `userOverrides` decides whether the User's win or the User is
    /// refused (`OverrideNotAllowed`). A Profile's name: at most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub profile: Option<String>,

    /// The ClusterRole bound in the person's Namespace. Optional: by default the Profile's role,
    /// else `admin`. It must be in the operator's allow-list (by default admin, edit, view);
    /// `cluster-admin` is always refused. Changing it replaces the RoleBinding, since a
    /// RoleBinding's roleRef is immutable. At most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(NOT_CLUSTER_ADMIN).message(NOT_CLUSTER_ADMIN_MESSAGE).reason(Reason::FieldValueForbidden))]
    pub role: Option<String>,

    /// The person's Namespace. Optional: by default it is named `<prefix><metadata.name>` with
    /// the operator's prefix (`user-` unless configured otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<NamespaceSpec>,

    /// An optional ResourceQuota for the Namespace; its `hard` limits become the quota's
    /// `spec.hard`. Without it the Namespace has no quota from Homestead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaSpec>,

    /// True revokes the person's access (every RoleBinding in the Namespace is removed) while
    /// keeping the Namespace and everything in it. False (the default) grants access again,
    /// unless the identity provider deactivated the person (`directory.active: false`). Set by
    /// HR or the platform: the SCIM service never changes it.
    #[serde(default)]
    pub suspended: bool,

    /// What the identity provider says of this person over SCIM; written by the SCIM service
    /// alone (an admission policy keeps it so). Optional: Users HR manages have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectorySpec>,

    /// What offboarding (deleting this User) does with the Namespace: `Delete` (the default)
    /// deletes it and everything in it; `Retain` keeps it with access revoked and labels it
    /// `homestead.dev/retained-from=<name>`.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Who gets this person's homes under `deletionPolicy: Handover`: a User, by
    /// `metadata.name` (at most 63 characters). Without it, the directory's manager, for a User
    /// the directory writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub successor: Option<String>,

    /// When the person's access ends (RFC 3339, for example `2027-03-31T18:00:00Z`), for
    /// contractors and interns who leave on a known date. From `--expiry-warning` before it the
    /// User has the condition `Expiring`; at that moment Homestead does what `onExpiry` says.
    /// Optional: without it, access does not end by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Time>,

    /// What happens at `validUntil`: `Suspend` (the default) revokes access and keeps the
    /// Namespace, as `suspended: true` does; `Delete` deletes this User, which offboards the
    /// person per `deletionPolicy`.
    #[serde(default)]
    pub on_expiry: OnExpiry,
}

/// What the identity provider says of a person (SCIM, RFC 7643 §4.1.1), kept apart from what HR
/// sets so that each writer can only undo its own decisions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectorySpec {
    /// SCIM `active`. False: the identity provider deactivated the person, and their access is
    /// revoked as with `suspended: true`; true (the default) lifts only this deactivation, never
    /// a suspension HR set.
    #[serde(default = "active")]
    pub active: bool,

    /// The person's manager in the identity provider (SCIM's enterprise extension
    /// `manager.value`), as the User it names (`metadata.name`, at most 63 characters); set
    /// only by the SCIM service,
    /// and counted only for Users it owns: who gets their homes under `deletionPolicy: Handover`
    /// when `spec.successor` names nobody (docs/handover.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub manager: Option<String>,
}

fn active() -> bool {
    true
}

impl Default for DirectorySpec {
    fn default() -> Self {
        Self {
            active: true,
            manager: None,
        }
    }
}

/// Who suspended a person's access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suspension {
    /// `spec.suspended: true` (HR, the platform, or a roster import).
    Spec,
    /// `spec.directory.active: false` (the identity provider, over SCIM).
    Directory,
}

/// What happens when a User's `validUntil` passes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnExpiry {
    /// Revoke access, keep the Namespace and its data (as `suspended: true`).
    #[default]
    Suspend,
    /// Delete the User: offboarding per its `deletionPolicy`.
    Delete,
}

/// The identity the cluster's authenticator gives the person; RBAC subjects are built from it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The user name the authenticator reports (for example the OIDC `email` claim), bound as
    /// an RBAC subject of kind User. May not start with `system:`. At most 253 characters.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("!self.startsWith('system:')").message("spec.identity.username may not start with 'system:': those names belong to Kubernetes components").reason(Reason::FieldValueForbidden))]
    pub username: String,

    /// Extra groups bound as RBAC subjects of kind Group. None may start with `system:`. At
    /// most 16, each at most 253 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = Rule::new("self.all(g, !g.startsWith('system:'))").message("spec.identity.groups may not contain a group starting with 'system:'").reason(Reason::FieldValueForbidden))]
    pub groups: Vec<String>,
}

/// Where the person's Namespace is and what extra metadata it carries.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(oldSelf.name) == has(self.name) && (!has(self.name) || self.name == oldSelf.name)").message(IMMUTABLE_NAMESPACE).reason(Reason::FieldValueForbidden))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSpec {
    /// The Namespace name, a DNS-1123 label (at most 63 characters). Default: `<prefix><metadata.name>`. Immutable: set
    /// it when creating the User or never. An existing Namespace that Homestead did not create for this User is never taken over,
    /// unless the platform labels it `homestead.dev/adopt-for=<this User>` (adoption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: Option<String>,

    /// Extra labels for the Namespace. Keys with the prefix `homestead.dev/`, `kubernetes.io/` or
    /// `k8s.io/`, or a subdomain of one (`app.kubernetes.io/`, `pod-security.kubernetes.io/`), are
    /// reserved; the platform may reserve more with the operator's `--reserved-key` flag. At
    /// most 32; values at most 63 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    #[x_kube(
        validation = Rule::new(NO_RESERVED_KEYS).message(LABELS_RESERVED_MESSAGE).reason(Reason::FieldValueForbidden),
        validation = Rule::new(QUALIFIED_KEYS).message(LABELS_QUALIFIED_MESSAGE).reason(Reason::FieldValueInvalid),
        validation = Rule::new(LABEL_VALUES).message(LABELS_VALUES_MESSAGE).reason(Reason::FieldValueInvalid),
    )]
    pub labels: BTreeMap<String, String>,

    /// Extra annotations for the Namespace, with the same reserved keys as `labels`. At most 32;
    /// keys are qualified names, values at most 4096 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    #[x_kube(
        validation = Rule::new(NO_RESERVED_KEYS).message(ANNOTATIONS_RESERVED_MESSAGE).reason(Reason::FieldValueForbidden),
        validation = Rule::new(QUALIFIED_KEYS).message(ANNOTATIONS_QUALIFIED_MESSAGE).reason(Reason::FieldValueInvalid),
    )]
    pub annotations: BTreeMap<String, String>,
}

/// A ResourceQuota for the person's Namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSpec {
    /// Hard limits per resource name, as in a ResourceQuota's `spec.hard`, for example
    /// `{requests.cpu: "4", requests.memory: 8Gi, pods: "20"}`. At most 64; names are qualified
    /// names (`pods`, `requests.cpu`, `count/deployments.apps`, `requests.nvidia.com/gpu`),
    /// values non-negative quantities.
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 64, "minimum": 0, "pattern": QUOTA_VALUE_PATTERN, "description": "A non-negative quantity, for example 4, 500m or 8Gi, at most 64 characters (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/)."}))]
    #[x_kube(
        validation = Rule::new(QUALIFIED_KEYS).message("spec.quota.hard keys must be resource names (qualified names such as pods, requests.cpu or count/deployments.apps)").reason(Reason::FieldValueInvalid),
        validation = Rule::new(QUOTA_KEYS).message("spec.quota.hard keys without a '/' must be standard quota resources: cpu, memory, ephemeral-storage, pods, services, secrets, configmaps, persistentvolumeclaims, replicationcontrollers, resourcequotas, services.nodeports, services.loadbalancers, requests.* or limits.* of cpu, memory, ephemeral-storage (and requests.storage), or hugepages-*").reason(Reason::FieldValueInvalid),
    )]
    pub hard: BTreeMap<String, Quantity>,
}

/// What offboarding does with the person's Namespace.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the Namespace and everything in it, then release the User.
    #[default]
    Delete,
    /// Keep the Namespace and its contents, revoke access, and release the User.
    Retain,
    /// Users only (issue "A successor when a person leaves"): revoke access at once, as under
    /// `Retain`, and hand each of the person's homes to `spec.successor` (else the directory's
    /// manager) as a personal workspace of theirs; `Retain` when there is none to take them.
    Handover,
}

/// The observed state of a User, following the Kubernetes API conventions for status
/// (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#typical-status-properties>).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserStatus {
    /// The Namespace Homestead provisioned (or refuses to provision) for this User.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The Profile, and its generation, that the person's Namespace was last reconciled with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<AppliedProfile>,

    /// The ClusterRole the person's RoleBinding grants in their home: `spec.role`, or the one
    /// their Profile chose. Kept while access is revoked (suspended, expired), so it says what
    /// would be restored; the homes API shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,

    /// The person's total quota across their homes and how they use it (docs/quota.md), while
    /// their Profile has a `totalQuota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalQuotaStatus>,

    /// The latest observations of the User's state; `Ready` is always present once Homestead
    /// has seen the User. A condition's `lastTransitionTime` changes only when its status does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl UserSpec {
    /// The ClusterRole this spec asks for: `role`, else [`DEFAULT_ROLE`]. (For a User with a
    /// Profile, the reconciler resolves the role first.)
    pub fn role(&self) -> &str {
        self.role.as_deref().unwrap_or(DEFAULT_ROLE)
    }

    /// Whether, and by whom, the person's access is suspended: `spec.suspended` first, then the
    /// identity provider's `directory.active: false`; `None` while neither holds.
    pub fn suspension(&self) -> Option<Suspension> {
        if self.suspended {
            Some(Suspension::Spec)
        } else if self.directory.as_ref().is_some_and(|d| !d.active) {
            Some(Suspension::Directory)
        } else {
            None
        }
    }
}

impl User {
    /// The `Ready` condition, if the status has one.
    pub fn ready_condition(&self) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY)
    }
}

/// The `users.homestead.dev` CustomResourceDefinition, as installed: [`User::crd`] with every
/// schema description reflowed (the line breaks of Rust doc comments joined, paragraphs kept),
/// so `kubectl explain user.spec` wraps the text itself.
///
/// # Panics
/// Never in practice: the CRD is plain data that always round-trips through JSON.
pub fn crd() -> CustomResourceDefinition {
    reflowed(User::crd())
}

/// Every CustomResourceDefinition of the API, as installed: `users.homestead.dev` ([`crd`]),
/// `profiles.homestead.dev` and `directorygroups.homestead.dev`, descriptions reflowed alike.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        crd(),
        reflowed(Profile::crd()),
        reflowed(DirectoryGroup::crd()),
        reflowed(Share::crd()),
        reflowed(Workspace::crd()),
    ]
}

fn reflowed(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(crd).expect("a CRD serializes");
    reflow_descriptions(&mut value);
    serde_json::from_value(value).expect("a reflowed CRD deserializes")
}

/// Joins single line breaks in every `description` string below `value`; blank lines stay.
fn reflow_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    serde_json::Value::String(text) if key == "description" => {
                        *text = text
                            .split("\n\n")
                            .map(|paragraph| {
                                paragraph.split_whitespace().collect::<Vec<_>>().join(" ")
                            })
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    _ => reflow_descriptions(child),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(reflow_descriptions),
        _ => {}
    }
}

/// [`crds`] as YAML documents, exactly what `crdgen` writes to `manifests/crd.yaml`.
///
/// # Panics
/// Never in practice: a CRD is plain data that always serializes.
pub fn crd_yaml() -> String {
    let bodies: Vec<String> = crds()
        .iter()
        .map(|crd| serde_saphyr::to_string(crd).expect("a CRD always serializes to YAML"))
        .collect();
    format!(
        "# Generated by `cargo run -p homestead-api --bin crdgen` (just generate) from crates/api.\n# Do not edit by hand: a test fails when this file differs from what the types generate.\n{}",
        bodies.join("---\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        for ok in ["a", "user-alice", "0abc", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "Alice", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn reserved_keys() {
        for reserved in [
            "homestead.dev/user",
            "pod-security.kubernetes.io/enforce",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/name",
            "kubernetes.io/metadata.name",
            "scheduler.alpha.kubernetes.io/node-selector",
            "k8s.io/x",
            "node.k8s.io/y",
        ] {
            assert!(is_reserved_key(reserved), "{reserved}");
        }
        for free in [
            "team",
            "example.com/cc",
            "notkubernetes.io/x",
            "kubernetes.io",
            "a.b/c",
        ] {
            assert!(!is_reserved_key(free), "{free}");
        }
        assert!(key_matches("sidecar.istio.io/inject", "istio.io/"));
        assert!(key_matches("istio-injection", "istio-injection"));
        assert!(!key_matches("istio-injection-x", "istio-injection"));
        assert!(!key_matches("myistio.io/x", "istio.io/"));
    }

    #[test]
    fn qualified_names_and_label_values() {
        for ok in [
            "team",
            "app.example.com/tier",
            "requests.cpu",
            "count/deployments.apps",
            "requests.nvidia.com/gpu",
            "A_b-c.d",
        ] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "",
            "a/b/c",
            "not a resource",
            "-a",
            "a-",
            "/a",
            "Example.com/a",
            &"a".repeat(64),
            "é",
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        for ok in [
            "pods",
            "requests.cpu",
            "count/deployments.apps",
            "hugepages-2Mi",
            "requests.nvidia.com/gpu",
        ] {
            assert!(is_quota_resource_name(ok), "{ok}");
        }
        for bad in ["bananas", "not a resource", "requests.gpu", "a/b/c"] {
            assert!(!is_quota_resource_name(bad), "{bad}");
        }
        for ok in ["", "a", "v1.2_3-x", &"a".repeat(63)] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["has spaces and !!", "-a", "a.", &"a".repeat(64), "ü"] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn crd_descriptions_are_reflowed() {
        let yaml = crd_yaml();
        assert!(yaml.contains(
            "A person who gets a home on the cluster: their own Namespace, with a RoleBinding granting them"
        ));
    }

    #[test]
    fn defaults_leave_role_to_the_profile_and_fill_policy() {
        let spec: UserSpec = serde_json::from_value(
            serde_json::json!({ "identity": { "username": "a@example.com" } }),
        )
        .unwrap();
        assert_eq!(spec.role, None);
        assert_eq!(spec.role(), "admin");
        assert_eq!(spec.deletion_policy, DeletionPolicy::Delete);
        assert!(!spec.suspended);
        assert_eq!(spec.suspension(), None);
    }

    #[test]
    fn each_writer_has_its_own_suspension_switch() {
        let spec = |json: serde_json::Value| -> UserSpec {
            let mut json = json;
            json["identity"] = serde_json::json!({ "username": "a@example.com" });
            serde_json::from_value(json).unwrap()
        };
        let by_directory = spec(serde_json::json!({ "directory": { "active": false } }));
        assert_eq!(by_directory.suspension(), Some(Suspension::Directory));
        let by_hr = spec(serde_json::json!({ "suspended": true, "directory": { "active": true } }));
        assert_eq!(by_hr.suspension(), Some(Suspension::Spec));
        let both = spec(serde_json::json!({ "suspended": true, "directory": { "active": false } }));
        assert_eq!(
            both.suspension(),
            Some(Suspension::Spec),
            "HR's is named first"
        );
        let directory_default = spec(serde_json::json!({ "directory": {} }));
        assert_eq!(
            directory_default.suspension(),
            None,
            "active defaults to true"
        );
    }
}
