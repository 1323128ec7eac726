//! The namespaced [`Share`]: a home's owner lets colleagues in, for a reason and until a date.
//! It lives in the namespace it shares; only the operator turns it into access (one RoleBinding
//! per Share), and only while it is within the limits in force (a Profile's `spec.sharing`, or
//! the operator's flags for people without a Profile).
//!
//! Grantees are Homestead Users and DirectoryGroups by name, never raw identities: every
//! grantee is a person Homestead knows, and loses the access when they are suspended, expire or
//! leave.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{NAME_IS_LABEL, NAME_IS_LABEL_MESSAGE, NOT_CLUSTER_ADMIN, NOT_CLUSTER_ADMIN_MESSAGE};

/// The most grantees one Share names.
pub const MAX_GRANTEES: usize = 20;

/// The longest `spec.reason`, in characters.
pub const MAX_REASON_LEN: usize = 256;

/// A grantee names exactly one of `user` and `group`.
const ONE_GRANTEE: &str = "has(self.user) != has(self.group)";
/// Message of [`ONE_GRANTEE`].
const ONE_GRANTEE_MESSAGE: &str =
    "a grantee names exactly one of user (a Homestead User) and group (a DirectoryGroup)";

/// A Share never grants `admin`: it writes RoleBindings (docs/sharing.md, "What a Share gave ends
/// with it").
const NOT_ADMIN: &str = "self != 'admin'";
/// Message of [`NOT_ADMIN`].
const NOT_ADMIN_MESSAGE: &str = "a Share grants at most edit: admin would let a grantee create RoleBindings, and what they bound would outlive the Share";

/// A name of a User or DirectoryGroup (a DNS-1123 label, as their names are).
const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A share of a home: `role` in this namespace for the grantees `to`, until `expiresAt`, for
/// `reason`.
// Every printer column repeats `type_`; clippy takes the columns for one attribute list.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "homestead.dev",
    version = "v1alpha1",
    kind = "Share",
    plural = "shares",
    singular = "share",
    shortname = "hsshare",
    category = "homestead",
    namespaced,
    status = "ShareStatus",
    derive = "PartialEq",
    doc = "A home shared with colleagues and directory groups: an allow-listed role in this namespace, for a reason and until a date. Only Homestead turns it into access, within the limits the platform sets.",
    printcolumn(
        name = "To",
        type_ = "string",
        description = "The grantees",
        json_path = ".status.to"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        description = "The ClusterRole shared",
        json_path = ".spec.role"
    ),
    printcolumn(
        name = "Expires",
        type_ = "string",
        description = "When the access ends (RFC 3339; a date column would show a future time as <invalid>)",
        json_path = ".spec.expiresAt"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether the grantees have the access",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        description = "Why Ready is what it is",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Creator",
        type_ = "string",
        description = "Who created the Share (the annotation homestead.dev/created-by, checked at admission)",
        json_path = ".metadata.annotations.homestead\\.dev/created-by",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    // The name is the value of its RoleBinding's label homestead.dev/share: at most 63
    // characters, or the Share could never be turned into access.
    validation = Rule::new(NAME_IS_LABEL).message(NAME_IS_LABEL_MESSAGE)
)]
#[serde(rename_all = "camelCase")]
pub struct ShareSpec {
    /// Who gets the access: 1 to 20 grantees, each a Homestead User or a DirectoryGroup by
    /// name. A group's members are kept current as its membership changes.
    #[schemars(length(min = 1, max = 20))]
    pub to: Vec<Grantee>,

    /// The ClusterRole granted in this namespace: one the operator allows, at most the sharing
    /// limit's `maxRole`; never `cluster-admin` nor `admin` (a grantee who could create
    /// RoleBindings would keep what they bound after the Share ends). At most 253 characters.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(
        validation = Rule::new(NOT_CLUSTER_ADMIN).message(NOT_CLUSTER_ADMIN_MESSAGE).reason(Reason::FieldValueForbidden),
        validation = Rule::new(NOT_ADMIN).message(NOT_ADMIN_MESSAGE).reason(Reason::FieldValueForbidden)
    )]
    pub role: String,

    /// When the access ends (RFC 3339). Required; at most the sharing limit's `maxDuration`
    /// after the Share was created or last renewed (an update of `expiresAt`).
    pub expires_at: Time,

    /// Why the home is shared, for the record ("review of the Q4 model"). Required, at most
    /// 256 characters.
    #[schemars(length(min = 1, max = 256))]
    pub reason: String,
}

/// One grantee of a [`Share`]: exactly one of a User and a DirectoryGroup, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new(ONE_GRANTEE).message(ONE_GRANTEE_MESSAGE).reason(Reason::FieldValueInvalid))]
#[serde(rename_all = "camelCase")]
pub struct Grantee {
    /// A Homestead User, by `metadata.name` (at most 63 characters): the person its
    /// `spec.identity` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub user: Option<String>,

    /// A DirectoryGroup, by `metadata.name` (at most 63 characters): every User among its
    /// members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub group: Option<String>,
}

/// What Homestead made of a [`Share`], written by the operator only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareStatus {
    /// `Ready`: whether the grantees have the access; reasons `Active`, `Expired`, `Refused`
    /// (with the limit it exceeds), `Suspended` (the home is suspended, expired, retained or
    /// offboarding), `HandedOver` (the home has another owner than the one it was made under).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Each grantee as resolved: a User's identity and whether it has the access, a group's
    /// member count and how many of them have it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grantees: Vec<GranteeStatus>,

    /// The grantees in one line, for `kubectl get shares` ("bob, group analysts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,

    /// When the access ends (`spec.expiresAt` as it was accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,

    /// When the spec now in force was made, as the operator first saw it: the Share's creation,
    /// or the last update of its spec (a renewal). `spec.expiresAt` may be at most the sharing
    /// limit's `maxDuration` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<Time>,

    /// The uid of the home's owner (a User) this Share was made under, recorded when the
    /// operator first resolved it: if the home changes hands (adoption, handover), the Share
    /// ends (`HandedOver`) instead of letting its grantees into the new owner's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_uid: Option<String>,
}

/// A grantee of a [`Share`] as the operator resolved it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GranteeStatus {
    /// The User, for a User grantee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its `spec.identity.username`, bound as the RoleBinding's subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The DirectoryGroup, for a group grantee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A group's members (Users), a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<i64>,
    /// Whether a User grantee has the access (not suspended, expired or offboarded), or how
    /// many of a group's members do, a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i64>,
    /// A User grantee's `metadata.uid`, recorded when the operator first resolved it: a later
    /// User of the same name gets nothing from this Share (`Refused`, rule `GranteeReplaced`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_share_is_namespaced_and_its_grantees_name_exactly_one_kind() {
        let crd = serde_json::to_value(Share::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        for field in ["to", "role", "expiresAt", "reason"] {
            assert!(
                required.contains(&field),
                "{field} is required: {required:?}"
            );
        }
        let to = &schema["properties"]["to"];
        assert_eq!(to["maxItems"], MAX_GRANTEES);
        assert_eq!(to["minItems"], 1);
        let rules = to["items"]["x-kubernetes-validations"].to_string();
        assert!(rules.contains(ONE_GRANTEE), "{rules}");
        assert_eq!(schema["properties"]["reason"]["maxLength"], MAX_REASON_LEN);
    }

    #[test]
    fn a_share_reads_as_the_design_writes_it() {
        let share: Share = serde_json::from_value(serde_json::json!({
            "apiVersion": crate::API_VERSION, "kind": "Share",
            "metadata": { "name": "review-with-bob", "namespace": "user-alice" },
            "spec": {
                "to": [{ "user": "bob" }, { "group": "analysts" }],
                "role": "view",
                "expiresAt": "2026-12-03T00:00:00Z",
                "reason": "review of the Q4 model",
            },
        }))
        .unwrap();
        assert_eq!(share.spec.to[1].group.as_deref(), Some("analysts"));
        assert_eq!(share.spec.expires_at.0.to_string(), "2026-12-03T00:00:00Z");
    }
}
