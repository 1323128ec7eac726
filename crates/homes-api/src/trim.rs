//! What the homes API keeps of each object it caches: only what answering "where may I work"
//! reads (docs/homes.md), so its memory grows as little as it can per person (docs/performance.md,
//! "The homes API"). Each trim runs on every watch event before the reflector stores it, after
//! the trims the operator shares ([`homestead_model::trim`]): no `managedFields`, no
//! annotations, no resourceVersion.
//!
//! What is read, and so kept: of a User, its name, creation, writer label, `spec.identity`,
//! `spec.role`, `spec.validUntil`, and of its status the namespace, role, Profile's name, total
//! quota and the `Ready` condition's status and reason; of a Share, its name, namespace,
//! creation, generation, `spec.to`, `spec.role`, `spec.expiresAt` and the `Ready` condition; of a
//! Workspace, its name, creation, generation, `spec.owner`, `spec.admins`, `spec.members` and
//! its status's namespace and `Ready` condition; of a DirectoryGroup, its name, writer label,
//! members and status.

use homestead_api::{CONDITION_READY, DirectoryGroup, Share, User, Workspace};
use homestead_model::trim::{trim, trim_user};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Keeps of `conditions` only `Ready`, without its message.
fn ready_only(conditions: &mut Vec<Condition>) {
    conditions.retain(|c| c.type_ == CONDITION_READY);
    for condition in conditions {
        condition.message = String::new();
    }
}

/// Trims a User to what the homes API reads (module docs).
pub fn user(user: &mut User) {
    trim_user(user);
    let spec = &mut user.spec;
    spec.profile = None;
    spec.namespace = None;
    spec.quota = None;
    spec.directory = None;
    spec.successor = None;
    if let Some(status) = user.status.as_mut() {
        ready_only(&mut status.conditions);
    }
}

/// Trims a Share to what the homes API reads (module docs).
pub fn share(share: &mut Share) {
    trim(&mut share.metadata);
    share.metadata.annotations = None;
    share.metadata.labels = None;
    share.spec.reason = String::new();
    if let Some(status) = share.status.as_mut() {
        ready_only(&mut status.conditions);
        status.grantees = Vec::new();
        status.to = None;
    }
}

/// Trims a Workspace to what the homes API reads (module docs).
pub fn workspace(workspace: &mut Workspace) {
    trim(&mut workspace.metadata);
    workspace.metadata.annotations = None;
    workspace.spec.reason = String::new();
    if let Some(status) = workspace.status.as_mut() {
        ready_only(&mut status.conditions);
    }
}

/// Trims a DirectoryGroup to what the homes API reads (module docs).
pub fn group(group: &mut DirectoryGroup) {
    trim(&mut group.metadata);
    group.metadata.annotations = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_model::homes::homes_of;
    use serde_json::json;

    fn now() -> k8s_openapi::jiff::Timestamp {
        "2026-12-01T00:00:00Z".parse().unwrap()
    }

    fn ready(reason: &str) -> serde_json::Value {
        json!([
            { "type": "Ready", "status": "True", "reason": reason, "observedGeneration": 1,
              "message": "a long message nobody here reads", "lastTransitionTime": "2026-11-30T00:00:00Z" },
            { "type": "Expiring", "status": "False", "reason": "NotExpiring",
              "message": "", "lastTransitionTime": "2026-11-30T00:00:00Z" },
        ])
    }

    /// A person with every field set, a group of theirs, a Share to the group, and a team
    /// workspace of the group.
    fn objects() -> (User, DirectoryGroup, Share, Workspace) {
        let user: User = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "User",
            "metadata": { "name": "bob", "creationTimestamp": "2026-11-01T00:00:00Z",
                "labels": { "homestead.dev/writer": "scim", "team": "x" },
                "annotations": { "note": "dropped" } },
            "spec": { "identity": { "username": "bob@example.com" }, "displayName": "Bob",
                "givenName": "Bob", "familyName": "B", "email": "bob@example.com",
                "profile": "engineer", "role": "edit", "quota": { "hard": { "pods": "3" } },
                "validUntil": "2027-01-01T00:00:00Z" },
            "status": { "namespace": "user-bob", "role": "edit", "observedGeneration": 1,
                "profile": { "name": "engineer", "generation": 2 },
                "conditions": ready("Provisioned") },
        }))
        .unwrap();
        let group: DirectoryGroup = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
            "metadata": { "name": "analysts", "labels": { "homestead.dev/writer": "scim" },
                "annotations": { "x": "y" } },
            "spec": { "displayName": "Analysts", "members": ["bob"] },
        }))
        .unwrap();
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "name": "q4", "namespace": "user-ann", "generation": 1,
                "creationTimestamp": "2026-11-20T00:00:00Z",
                "annotations": { "homestead.dev/created-by": "ann@example.com" } },
            "spec": { "to": [{ "group": "analysts" }], "role": "view",
                "expiresAt": "2026-12-20T00:00:00Z", "reason": "the quarter's numbers" },
            "status": { "observedGeneration": 1, "conditions": ready("Active"),
                "to": "group analysts", "grantees": [{ "group": "analysts", "members": 1 }] },
        }))
        .unwrap();
        let workspace: Workspace = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
            "metadata": { "name": "data", "generation": 1,
                "creationTimestamp": "2026-11-10T00:00:00Z",
                "annotations": { "homestead.dev/created-by": "platform" } },
            "spec": { "owner": { "group": "analysts" }, "admins": ["ann"],
                "members": { "role": "edit" }, "reason": "the data team" },
            "status": { "namespace": "ws-data", "observedGeneration": 1,
                "conditions": ready("Provisioned") },
        }))
        .unwrap();
        (user, group, share, workspace)
    }

    #[test]
    fn the_trimmed_objects_give_the_same_homes_and_keep_nothing_unread() {
        let (u, g, s, w) = objects();
        let before = homes_of(&u, &[&g], &[&s], &[&w], now());
        let (mut u2, mut g2, mut s2, mut w2) = (u.clone(), g.clone(), s.clone(), w.clone());
        user(&mut u2);
        group(&mut g2);
        share(&mut s2);
        workspace(&mut w2);
        assert!(
            g2.counts_member(&u2),
            "the writer labels and the members stay"
        );
        let mut made_by_hr = u2.clone();
        made_by_hr.metadata.labels = None;
        assert!(
            !g2.counts_member(&made_by_hr),
            "a SCIM group counts only SCIM's Users"
        );
        let after = homes_of(&u2, &[&g2], &[&s2], &[&w2], now());
        assert_eq!(before, after);
        assert_eq!(before.len(), 3, "own home, the share, the team: {before:?}");
        assert_eq!(u2.spec.email, None);
        assert_eq!(u2.status.as_ref().unwrap().conditions.len(), 1);
        assert_eq!(u2.status.as_ref().unwrap().conditions[0].message, "");
        assert_eq!(s2.spec.reason, "");
        assert!(s2.status.as_ref().unwrap().grantees.is_empty());
        assert!(s2.metadata.annotations.is_none() && w2.metadata.annotations.is_none());
        assert!(size(&u2) < size(&u) && size(&s2) < size(&s) && size(&w2) < size(&w));
    }

    /// The size of an object as JSON, bytes: a proxy for what its cached form holds.
    fn size(object: &impl serde::Serialize) -> usize {
        serde_json::to_vec(object).unwrap().len()
    }
}
