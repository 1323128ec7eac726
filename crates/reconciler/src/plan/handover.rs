//! Handover (docs/handover.md), pure: who takes a leaving person's homes, whether they may, and
//! the Workspace each home becomes. The flow is `flows::handover`.

use homestead_api::{
    ANNOTATION_CREATED_BY, DeletionPolicy, LABEL_HANDED_OVER_FROM, LABEL_WRITER, User, WRITER_SCIM,
    Workspace,
};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use crate::plan::share::inactive;

/// The User named to take `user`'s homes: `spec.successor`; else, for a User the SCIM service
/// owns (label `homestead.dev/writer=scim`), the directory's manager (`spec.directory.manager`).
/// The SCIM identity's choice never counts for a User another writer owns.
pub fn successor_name(user: &User) -> Option<&str> {
    if let Some(successor) = user.spec.successor.as_deref() {
        return Some(successor);
    }
    let scim_owned = user.labels().get(LABEL_WRITER).map(String::as_str) == Some(WRITER_SCIM);
    user.spec
        .directory
        .as_ref()
        .and_then(|d| d.manager.as_deref())
        .filter(|_| scim_owned)
}

/// Why `user`'s homes cannot go to the User named `name` (`candidate`, as cached), at `now`:
/// none named, the leaver themselves, missing, offboarding, suspended or expired, or not the
/// holder of their identity (`holds_identity` false: a duplicate). `None` when they can.
pub fn refusal(
    user: &User,
    name: Option<&str>,
    candidate: Option<&User>,
    holds_identity: bool,
    now: Timestamp,
) -> Option<String> {
    let Some(name) = name else {
        return Some("no successor is named (spec.successor, or the directory's manager)".into());
    };
    if name == user.name_any() {
        return Some(format!("the successor {name:?} is the leaver"));
    }
    let Some(candidate) = candidate else {
        return Some(format!("the successor {name:?} does not exist"));
    };
    if let Some(why) = inactive(candidate, now) {
        return Some(format!("the successor {name:?} is {why}"));
    }
    // The directory's choice counts only among the people the directory provisioned: the
    // identity that writes `directory.manager` must not route a home to anyone else.
    let scim_owned =
        |u: &User| u.labels().get(LABEL_WRITER).map(String::as_str) == Some(WRITER_SCIM);
    if user.spec.successor.is_none() && !scim_owned(candidate) {
        return Some(format!(
            "the directory's manager {name:?} is not a person the directory provisioned: only HR names such a successor (spec.successor)"
        ));
    }
    if !holds_identity {
        return Some(format!(
            "the successor {name:?} does not hold its identity (an older User has it)"
        ));
    }
    None
}

/// Whether `user` is being handed over: deleted with `deletionPolicy: Handover`.
pub fn handing_over(user: &User) -> bool {
    user.metadata.deletion_timestamp.is_some()
        && user.spec.deletion_policy == DeletionPolicy::Handover
}

/// The Workspace the leaver `leaver`'s home `namespace` becomes: named as the namespace, a
/// personal workspace of `successor` in that same namespace, with the home's Profile
/// (`profile`), `Retain` on deletion, labelled with the leaver (the record) and naming
/// `creator` (the operator) as its creator.
pub fn workspace_for(
    leaver: &str,
    successor: &str,
    namespace: &str,
    profile: Option<&str>,
    creator: &str,
) -> Workspace {
    let mut spec = json!({
        "owner": { "user": successor },
        "namespace": { "name": namespace },
        "reason": format!("handed over from {leaver}, who left"),
        "deletionPolicy": "Retain",
    });
    if let Some(profile) = profile {
        spec["profile"] = json!(profile);
    }
    serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION,
        "kind": "Workspace",
        "metadata": {
            "name": namespace,
            "labels": { LABEL_HANDED_OVER_FROM: leaver },
            "annotations": { ANNOTATION_CREATED_BY: creator },
        },
        "spec": spec,
    }))
    .expect("a handover Workspace is a valid Workspace")
}

/// Whether `workspace` was made by a handover of `leaver`'s homes.
pub fn is_handover_of(workspace: &Workspace, leaver: &str) -> bool {
    workspace
        .labels()
        .get(LABEL_HANDED_OVER_FROM)
        .map(String::as_str)
        == Some(leaver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directorys_manager_counts_only_for_users_the_scim_service_owns() {
        let spec = json!({ "directory": { "manager": "mona" } });
        let by_hr = User::test("lee").with_spec(spec.clone());
        assert_eq!(successor_name(&by_hr), None);
        let mut by_scim = User::test("lee").with_spec(spec);
        by_scim
            .labels_mut()
            .insert(LABEL_WRITER.into(), WRITER_SCIM.into());
        assert_eq!(successor_name(&by_scim), Some("mona"));
        let named = User::test("lee").with_spec(json!({ "successor": "sam" }));
        assert_eq!(successor_name(&named), Some("sam"));
    }

    #[test]
    fn a_successor_who_cannot_take_the_homes_says_why() {
        let now = Timestamp::now();
        let lee = User::test("lee").with_spec(json!({ "successor": "sam" }));
        let sam = User::test("sam");
        assert!(refusal(&lee, Some("sam"), Some(&sam), true, now).is_none());
        assert!(
            refusal(&lee, None, None, true, now)
                .unwrap()
                .contains("no successor")
        );
        assert!(
            refusal(&lee, Some("lee"), Some(&lee), true, now)
                .unwrap()
                .contains("leaver")
        );
        assert!(
            refusal(&lee, Some("zed"), None, true, now)
                .unwrap()
                .contains("does not exist")
        );
        // Named by the directory alone: only a person the directory provisioned.
        let by_directory = User::test("lee")
            .with_spec(json!({ "directory": { "manager": "sam" } }))
            .with_label(LABEL_WRITER, WRITER_SCIM);
        assert!(
            refusal(&by_directory, Some("sam"), Some(&sam), true, now)
                .unwrap()
                .contains("only HR")
        );
        let scim_sam = User::test("sam").with_label(LABEL_WRITER, WRITER_SCIM);
        assert!(refusal(&by_directory, Some("sam"), Some(&scim_sam), true, now).is_none());
        let suspended = User::test("sam").with_spec(json!({ "suspended": true }));
        assert!(refusal(&lee, Some("sam"), Some(&suspended), true, now).is_some());
        assert!(
            refusal(&lee, Some("sam"), Some(&sam), false, now)
                .unwrap()
                .contains("identity")
        );
    }

    #[test]
    fn a_home_becomes_a_personal_workspace_of_the_successor_in_the_same_namespace() {
        let w = workspace_for("lee", "sam", "user-lee", Some("engineer"), "system:op");
        assert_eq!(w.name_any(), "user-lee");
        assert_eq!(w.spec.owner.user.as_deref(), Some("sam"));
        assert_eq!(w.spec.profile.as_deref(), Some("engineer"));
        assert_eq!(
            w.spec.namespace.as_ref().and_then(|n| n.name.as_deref()),
            Some("user-lee")
        );
        assert!(is_handover_of(&w, "lee"));
        assert_eq!(w.spec.deletion_policy, DeletionPolicy::Retain);
    }
}
