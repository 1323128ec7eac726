//! The cluster-scoped [`DirectoryGroup`]: a group of people as the identity provider's
//! directory knows it ("data-science", "contractors"), with its members by User name. The SCIM
//! service writes them from SCIM `/Groups`; a group by itself grants nothing. A [`Profile`]
//! (owned by the platform team) names the groups whose members it is for in
//! `spec.directory.groups`, and the operator gives each User without `spec.profile` the
//! Profile of highest `priority` among those its groups select (see
//! [`DirectorySelection`](crate::DirectorySelection)).
//!
//! [`Profile`]: crate::Profile

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{LABEL_WRITER, NAME_IS_LABEL, NAME_IS_LABEL_MESSAGE, User};

/// The most members one DirectoryGroup holds: with User names of up to 63 characters that is
/// at most about 700 KiB, well inside etcd's 1.5 MiB object limit.
pub const MAX_GROUP_MEMBERS: usize = 10_000;

/// A directory group and its members. Which Profile its members get is the platform team's
/// choice, made in the Profiles (`spec.directory.groups`), never here.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "homestead.dev",
    version = "v1alpha1",
    kind = "DirectoryGroup",
    plural = "directorygroups",
    singular = "directorygroup",
    shortname = "dirgroup",
    category = "homestead",
    status = "DirectoryGroupStatus",
    derive = "PartialEq",
    doc = "A group of people from the identity provider's directory, with its members by User name. It grants nothing by itself: Profiles name the groups whose members they are for (spec.directory.groups).",
    printcolumn(name = "Display Name", type_ = "string", description = "The group's name in the directory", json_path = ".spec.displayName"),
    printcolumn(name = "Members", type_ = "integer", description = "How many Users are members", json_path = ".status.members"),
    printcolumn(name = "Profile", type_ = "string", description = "The Profile this group selects for its members (empty: none)", json_path = ".status.profile"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_IS_LABEL).message(NAME_IS_LABEL_MESSAGE),
)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryGroupSpec {
    /// The group's name in the directory (SCIM `displayName`), which Profiles name in
    /// `spec.directory.groups`. Compared exactly (case matters). At most 256 characters.
    #[schemars(length(min = 1, max = 256))]
    pub display_name: String,

    /// The identity provider's own identifier of the group (SCIM `externalId`), if it sent one;
    /// at most 256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub external_id: Option<String>,

    /// The members: names of Users (`metadata.name`). A name with no User is kept and grants
    /// nothing until such a User exists. At most 10,000, each a name of at most 63 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 10000),
        inner(length(min = 1, max = 63), regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub members: Vec<String>,
}

impl DirectoryGroup {
    /// Whether `user` is a member that counts (docs/security.md, "Membership by identity"):
    /// named in `spec.members`, and, when the group carries the label `homestead.dev/writer`
    /// (its writer, the SCIM service), written by the same writer. A group the SCIM identity
    /// writes so reaches only Users that identity owns, never one HR made, whatever names its
    /// members list holds; a group without the label (the platform's own) counts every name.
    pub fn counts_member(&self, user: &User) -> bool {
        let name = user.metadata.name.as_deref().unwrap_or_default();
        self.spec.has_member(name) && self.admits(user)
    }

    /// The writer's half of [`DirectoryGroup::counts_member`]: true when the group has no label
    /// `homestead.dev/writer`, or `user` has the same.
    fn admits(&self, user: &User) -> bool {
        fn writer(labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<&String> {
            labels?.get(LABEL_WRITER)
        }
        writer(self.metadata.labels.as_ref())
            .is_none_or(|w| writer(user.metadata.labels.as_ref()) == Some(w))
    }
}

impl DirectoryGroupSpec {
    /// Whether the User named `user` is a member (a linear scan of `members`).
    pub fn has_member(&self, user: &str) -> bool {
        self.members.iter().any(|m| m == user)
    }
}

/// The observed state of a DirectoryGroup, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryGroupStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many members the group has (the length of `spec.members`).
    #[serde(default)]
    pub members: i64,
    /// The Profile of highest priority that names this group in `spec.directory.groups`, if
    /// any: the Profile its members get unless they name one themselves or another of their
    /// groups selects a Profile of higher priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The team's total quota across its workspaces and how they use it (docs/quota.md), while
    /// the group's Profile has a `totalQuota`. Written under its own field manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<crate::TotalQuotaStatus>,
}
