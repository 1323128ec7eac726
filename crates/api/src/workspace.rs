//! The cluster-scoped [`Workspace`]: a home that is not a person's own, owned by one User (a
//! person's extra home) or one DirectoryGroup (a team's home). Its access comes from its owner:
//! a personal workspace gives its owner `admin`; a team workspace gives the group's members that
//! count `spec.members.role` and the Users in `spec.admins` `admin`. Everything else that holds
//! for a home holds for it (docs/design.md, rule 25).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    DeletionPolicy, NAME_IS_LABEL, NAME_IS_LABEL_MESSAGE, NOT_CLUSTER_ADMIN,
    NOT_CLUSTER_ADMIN_MESSAGE,
};

/// The longest `spec.reason`, in characters.
pub const MAX_WORKSPACE_REASON_LEN: usize = 256;

/// The most admins a team workspace names.
pub const MAX_ADMINS: usize = 20;

/// The owner names exactly one of `user` and `group`.
const ONE_OWNER: &str = "has(self.user) != has(self.group)";
/// Message of [`ONE_OWNER`].
const ONE_OWNER_MESSAGE: &str =
    "the owner is exactly one of user (a Homestead User) and group (a DirectoryGroup)";

/// The owner changes only by a handover (docs/design.md, rule 28), never by an edit.
const OWNER_FIXED: &str = "self == oldSelf";
/// Message of [`OWNER_FIXED`].
const OWNER_FIXED_MESSAGE: &str =
    "spec.owner is immutable: a workspace changes hands only by its owner's handover";

/// The namespace is chosen once.
const NAMESPACE_FIXED: &str = "self == oldSelf";
/// [`NAMESPACE_FIXED`] where it cannot look: `spec.namespace.name` is neither added nor removed.
const NAMESPACE_KEPT: &str = "(has(oldSelf.__namespace__) && has(oldSelf.__namespace__.name)) == (has(self.__namespace__) && has(self.__namespace__.name))";
/// Message of [`NAMESPACE_FIXED`].
const NAMESPACE_FIXED_MESSAGE: &str =
    "spec.namespace is immutable: create another Workspace for another namespace";

/// A team workspace names at least one admin; a personal one names none (its owner is its
/// admin), and no members role.
const TEAM_FIELDS: &str = "has(self.spec.owner.group) ? (has(self.spec.admins) && size(self.spec.admins) >= 1) : (!has(self.spec.admins) || size(self.spec.admins) == 0) && !has(self.spec.members)";
/// Message of [`TEAM_FIELDS`].
const TEAM_FIELDS_MESSAGE: &str = "a team workspace (owner.group) names at least one admin; a personal workspace (owner.user) names no admins and no members role: its owner has admin";

/// A name of a User or DirectoryGroup (a DNS-1123 label, as their names are).
const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A home that is not a person's own: a person's extra home (`owner.user`) or a team's
/// (`owner.group`), with a reason, a Profile and a namespace.
// Every printer column repeats `type_`; clippy takes the columns for one attribute list.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "homestead.dev",
    version = "v1alpha1",
    kind = "Workspace",
    plural = "workspaces",
    singular = "workspace",
    shortname = "hsws",
    category = "homestead",
    status = "WorkspaceStatus",
    derive = "PartialEq",
    doc = "A home that is not a person's own: a person's extra home or a team's, owned by one User or one DirectoryGroup. Homestead gives its owner's people access there, with the guards of its Profile.",
    printcolumn(
        name = "Owner",
        type_ = "string",
        description = "The owner: a User or a DirectoryGroup",
        json_path = ".status.owner"
    ),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        description = "The workspace's namespace",
        json_path = ".status.namespace"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        description = "The role of a team's members, or admin for a personal workspace's owner",
        json_path = ".status.role"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether the owner's people have their access",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        description = "Why Ready is what it is",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    // The name is the value of its objects' label homestead.dev/workspace.
    validation = Rule::new(NAME_IS_LABEL).message(NAME_IS_LABEL_MESSAGE),
    validation = Rule::new(TEAM_FIELDS).message(TEAM_FIELDS_MESSAGE)
)]
#[x_kube(
    // A rule on an optional field is skipped when the field comes or goes: this one on the
    // spec catches that (`namespace` is a CEL reserved word, `__namespace__` to Kubernetes 1.30).
    validation = Rule::new(NAMESPACE_KEPT).message(NAMESPACE_FIXED_MESSAGE).reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// Who the workspace belongs to: exactly one of a User and a DirectoryGroup. Immutable.
    #[x_kube(validation = Rule::new(OWNER_FIXED).message(OWNER_FIXED_MESSAGE).reason(Reason::FieldValueForbidden))]
    pub owner: WorkspaceOwner,

    /// Team workspaces: the role of the group's members that count. Default `edit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Members>,

    /// Team workspaces: Users (by name, each at most 63 characters) with `admin`, who may
    /// share the workspace; 1 to 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 20),
        inner(length(min = 1, max = 63), regex(pattern = NAME_PATTERN)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub admins: Vec<String>,

    /// The Profile whose quota, LimitRange, Pod Security, isolation and sharing limits the
    /// workspace gets; else the owner's (a person's, or the one a team's group selects). A
    /// person may name only a Profile their own Profile lists in `workspaces.profiles`. At most
    /// 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub profile: Option<String>,

    /// The namespace: `name`, else the operator's workspace prefix and the Workspace's name.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(NAMESPACE_FIXED).message(NAMESPACE_FIXED_MESSAGE).reason(Reason::FieldValueForbidden))]
    pub namespace: Option<WorkspaceNamespace>,

    /// Why the workspace exists, for the record ("ML platform team"). Required, at most 256
    /// characters.
    #[schemars(length(min = 1, max = 256))]
    pub reason: String,

    /// What deleting the Workspace does with its namespace: `Retain` (default: access revoked,
    /// the namespace and its data kept) or `Delete` (`Handover` is a User's only).
    #[serde(default = "retain")]
    #[x_kube(validation = Rule::new("self != 'Handover'").message("a Workspace is Retain or Delete; Handover is a User's deletionPolicy").reason(Reason::FieldValueForbidden))]
    pub deletion_policy: DeletionPolicy,
}

/// The default of a workspace's `deletionPolicy`: a team's work outlives its Workspace object.
fn retain() -> DeletionPolicy {
    DeletionPolicy::Retain
}

/// The owner of a [`Workspace`]: exactly one of a User and a DirectoryGroup, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new(ONE_OWNER).message(ONE_OWNER_MESSAGE).reason(Reason::FieldValueInvalid))]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceOwner {
    /// A person: a Homestead User, by `metadata.name` (at most 63 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub user: Option<String>,

    /// A team: a DirectoryGroup, by `metadata.name` (at most 63 characters); its members that
    /// count have access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub group: Option<String>,
}

/// The access of a team's members.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Members {
    /// The ClusterRole of the group's members that count: one the operator allows; never
    /// `cluster-admin`. Default `edit`. At most 253 characters.
    #[serde(default = "edit")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(NOT_CLUSTER_ADMIN).message(NOT_CLUSTER_ADMIN_MESSAGE).reason(Reason::FieldValueForbidden))]
    pub role: String,
}

/// The default role of a team's members.
fn edit() -> String {
    "edit".to_owned()
}

/// Where a [`Workspace`] lives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceNamespace {
    /// The namespace's name (a DNS-1123 label, at most 63 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub name: Option<String>,
}

/// What Homestead made of a [`Workspace`], written by the operator only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    /// `Ready`: whether the owner's people have their access; reasons as a User's home
    /// (`Provisioned`, the refusals), and `Suspended` when its owner is suspended, expired or
    /// (a group) gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The namespace Homestead provisioned (or refuses to provision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The owner in one line, for `kubectl get workspaces` (`user alice`, `group ml-team`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,

    /// The role its people have: a team's members' (`members.role`, default `edit`), or
    /// `admin` for a personal workspace's owner; for `kubectl get workspaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,

    /// A team's members: how many the group names, and how many have access now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<MemberCount>,

    /// The owner as first provisioned: a personal workspace's User's `metadata.uid` (a User of
    /// the same name made later is another person, who gets nothing here: the workspace follows
    /// the owner it was made for, deleted once that User is gone), or a team's DirectoryGroup's
    /// (a group made again under its name is another group: the workspace stays suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_uid: Option<String>,

    /// Each admin as first granted, by User name: its `metadata.uid`. A User of that name made
    /// later is another person, who gets nothing here until the platform names them again
    /// (removes and adds them to `spec.admins`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub admin_uids: std::collections::BTreeMap<String, String>,
}

/// How many of a team's members there are, and how many have access.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberCount {
    /// Members the group names (a count).
    pub count: i64,
    /// Of those, the ones with access now (live Users that count, a count).
    pub active: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_workspace_reads_as_the_design_writes_it() {
        let workspace: Workspace = serde_json::from_value(serde_json::json!({
            "apiVersion": crate::API_VERSION, "kind": "Workspace",
            "metadata": { "name": "ml-platform" },
            "spec": {
                "owner": { "group": "ml-team" },
                "members": { "role": "edit" },
                "admins": ["alice", "bob"],
                "profile": "team-standard",
                "namespace": { "name": "ws-ml-platform" },
                "reason": "ML platform team",
            },
        }))
        .unwrap();
        assert_eq!(workspace.spec.owner.group.as_deref(), Some("ml-team"));
        assert_eq!(workspace.spec.deletion_policy, DeletionPolicy::Retain);
        assert_eq!(workspace.spec.admins, ["alice", "bob"]);
    }

    #[test]
    fn a_workspace_is_cluster_scoped_and_checks_its_owner_at_admission() {
        let crd = serde_json::to_value(Workspace::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let rules = schema["x-kubernetes-validations"].to_string();
        assert!(rules.contains("has(self.spec.owner.group)"), "{rules}");
        let owner = &schema["properties"]["spec"]["properties"]["owner"];
        assert!(owner.to_string().contains(ONE_OWNER), "{owner}");
        assert!(owner.to_string().contains(OWNER_FIXED), "{owner}");
    }
}
