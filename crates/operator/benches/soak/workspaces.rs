//! Workspaces in the soak (docs/soak.md): tenants create and delete workspaces of their own
//! (some for another person, which must grant nothing), the platform creates, changes and deletes
//! team workspaces owned by the SCIM group, whose members churn and which the identity provider
//! sometimes deletes; and what the oracle expects of them, from the cluster alone: who may be
//! bound in each workspace's namespace, and with which role.

use std::collections::BTreeMap;

use homestead_api::{DirectoryGroup, User, Workspace};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::common::TENANTS;
use crate::workload::{Actors, GROUP_NAME, Op, Outcome};

/// The soak's Profile whose people may create workspaces of their own, and how many.
pub const SELF_SERVICE_PROFILE: &str = crate::workload::HR_PROFILES[0];
/// Its `spec.workspaces.max`.
pub const SELF_SERVICE_MAX: usize = 1;
/// How many personal workspace names each tenant draws from, and team workspace names.
pub const PERSONAL_NAMES: u32 = 3;
pub const TEAM_NAMES: u32 = 2;

/// The name of tenant `tenant`'s personal workspace `index`.
pub fn personal_name(tenant: usize, index: u32) -> String {
    format!("soak-ws-{tenant}-{index}")
}

/// The name of team workspace `index`.
pub fn team_name(index: u32) -> String {
    format!("soak-team-{index}")
}

impl Actors {
    /// `TenantWorkspace` and `PlatformWorkspace`: creates the workspace, or when it exists
    /// deletes it (a tenant's; or the platform's when `delete`) or changes its admins.
    pub async fn workspace_op(&self, op: &Op) -> Outcome {
        match op {
            Op::TenantWorkspace {
                tenant,
                index,
                owner,
            } => {
                let name = personal_name(*tenant, *index);
                let doc = json!({
                    "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
                    "metadata": { "name": name,
                        "labels": { "homestead.dev/self-service": "true" },
                        "annotations": { "homestead.dev/created-by": TENANTS[*tenant] } },
                    "spec": { "owner": { "user": owner }, "reason": "soak" },
                });
                create_or_delete(&self.tenants[*tenant], &name, doc, true).await
            }
            Op::PlatformWorkspace {
                index,
                admins,
                delete,
            } => {
                let Some(group) = self.group_name().await else {
                    return Outcome::refused("no directory group");
                };
                let name = team_name(*index);
                let doc = json!({
                    "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
                    "metadata": { "name": name,
                        "annotations": { "homestead.dev/created-by": homestead_testenv::ADMIN } },
                    "spec": { "owner": { "group": group }, "admins": admins, "reason": "soak team" },
                });
                if *delete {
                    return create_or_delete(&self.admin, &name, doc, true).await;
                }
                let api = Api::<Workspace>::all(self.admin.clone());
                match api.get_opt(&name).await {
                    Ok(Some(w)) if w.spec.owner.group.as_deref() == Some(group.as_str()) => {
                        let patch = json!({ "spec": { "admins": admins } });
                        Outcome::from(
                            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                                .await,
                        )
                    }
                    // Another group's (the group was made again): it goes, and comes back.
                    Ok(Some(_)) => create_or_delete(&self.admin, &name, doc, true).await,
                    _ => create_or_delete(&self.admin, &name, doc, false).await,
                }
            }
            _ => unreachable!("not a workspace operation"),
        }
    }

    /// The DirectoryGroup the SCIM service made of the soak's group, if it exists now.
    async fn group_name(&self) -> Option<String> {
        Api::<DirectoryGroup>::all(self.admin.clone())
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|g| g.spec.display_name == GROUP_NAME && g.metadata.deletion_timestamp.is_none())
            .map(|g| g.name_any())
    }
}

/// Creates the Workspace `doc` as `client`; when it exists and `delete`, deletes it instead.
async fn create_or_delete(
    client: &Client,
    name: &str,
    doc: serde_json::Value,
    delete: bool,
) -> Outcome {
    let api = Api::<Workspace>::all(client.clone());
    let workspace: Workspace = serde_json::from_value(doc).expect("a valid Workspace");
    match api.create(&PostParams::default(), &workspace).await {
        Err(kube::Error::Api(e)) if e.code == 409 && delete => {
            Outcome::from(api.delete(name, &DeleteParams::default()).await)
        }
        result => Outcome::from(result),
    }
}

/// Who may be bound in `workspace`'s namespace now, by identity, with their role, judged from
/// the cluster alone (`users`, `groups`, every Workspace, `holders`: which User holds each
/// lower-cased identity) at `now`: nobody when it is refused (a person's own that its creator
/// does not own, whose owner's Profile does not allow it, or beyond the Profile's `max`, by
/// age) or its owner group is gone; else its owner (`admin`), or the group's members that count
/// (`members.role`) and its admins (`admin`), each live and holding their identity.
pub fn expected(
    workspace: &Workspace,
    (users, groups, workspaces): (&[User], &[DirectoryGroup], &[Workspace]),
    holders: &BTreeMap<String, String>,
    now: Timestamp,
) -> BTreeMap<String, String> {
    let by_name = |name: &str| users.iter().find(|u| u.name_any() == name);
    let live = |user: &User| {
        user.metadata.deletion_timestamp.is_none()
            && user.spec.suspension().is_none()
            && user.spec.valid_until.as_ref().is_none_or(|t| t.0 > now)
            && holders.get(&user.spec.identity.username.to_ascii_lowercase())
                == Some(&user.name_any())
    };
    let mut out = BTreeMap::new();
    if let Some(owner) = &workspace.spec.owner.user {
        let Some(user) = by_name(owner) else {
            return out;
        };
        if self_service(workspace) && refused(workspace, user, workspaces) {
            return out;
        }
        if live(user) {
            out.insert(user.spec.identity.username.clone(), "admin".to_owned());
        }
        return out;
    }
    let Some(group) = workspace
        .spec
        .owner
        .group
        .as_deref()
        .and_then(|g| groups.iter().find(|x| x.name_any() == g))
    else {
        return out;
    };
    let role = workspace
        .spec
        .members
        .as_ref()
        .map_or("edit", |m| m.role.as_str());
    for member in &group.spec.members {
        if let Some(user) = by_name(member).filter(|u| live(u) && group.counts_member(u)) {
            out.insert(user.spec.identity.username.clone(), role.to_owned());
        }
    }
    for admin in &workspace.spec.admins {
        if let Some(user) = by_name(admin).filter(|u| live(u)) {
            out.insert(user.spec.identity.username.clone(), "admin".to_owned());
        }
    }
    out
}

fn self_service(workspace: &Workspace) -> bool {
    workspace
        .labels()
        .get("homestead.dev/self-service")
        .map(String::as_str)
        == Some("true")
}

/// Whether the self-service `workspace` of `owner` grants nothing: made by someone else, not
/// allowed by the owner's Profile, or beyond its `max` (counting the owner's older ones).
fn refused(workspace: &Workspace, owner: &User, workspaces: &[Workspace]) -> bool {
    let creator = workspace
        .annotations()
        .get("homestead.dev/created-by")
        .cloned()
        .unwrap_or_default();
    let profile = owner
        .status
        .as_ref()
        .and_then(|s| s.profile.as_ref())
        .map(|p| p.name.as_str());
    let age = |w: &Workspace| {
        (
            w.metadata.creation_timestamp.clone().map(|t| t.0),
            w.name_any(),
        )
    };
    let made_by_owner = |w: &Workspace| {
        w.annotations().get("homestead.dev/created-by") == Some(&owner.spec.identity.username)
    };
    let older = workspaces
        .iter()
        .filter(|w| self_service(w) && w.spec.owner.user == workspace.spec.owner.user)
        .filter(|w| made_by_owner(w) && age(w) < age(workspace))
        .count();
    creator != owner.spec.identity.username
        || profile != Some(SELF_SERVICE_PROFILE)
        || older >= SELF_SERVICE_MAX
}
