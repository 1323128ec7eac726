//! Workspaces (docs/workspaces.md), proven on the real control plane with the operator running,
//! by what people can really do (`kubectl auth can-i --as` against the real aggregated roles),
//! each test acting as the platform, a team's member, a non-member, an admin and a person:
//! a team workspace grants each member their role and nobody else, and a member who leaves the
//! group loses it; a deleted group suspends it (access revoked, namespace kept); a person
//! creates their own workspaces within their Profile's `max`, the next is refused, and never
//! one owned by someone else; the SCIM identity creates none; a Share works in a workspace; a
//! governed workspace refuses a person's RoleBinding.

mod common;

use common::*;
use homestead_api::{DirectoryGroup, User, Workspace};
use homestead_testenv::ADMIN;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The rows of `homestead access -o json -n NAMESPACE`, run with the admin's kubeconfig.
fn access_rows(namespace: &str) -> Vec<Value> {
    let plane = env().plane;
    let path = plane.dir().join("workspaces-admin.kubeconfig");
    let kubeconfig = plane.kubeconfig(ADMIN).unwrap();
    std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
        .args(["access", "-o", "json", "-n", namespace])
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

#[tokio::test]
async fn a_team_workspace_grants_each_member_their_role_and_nobody_else() {
    let _ = env();
    let client = admin().await;
    for name in ["wt-ada", "wt-max", "wt-mia", "wt-out"] {
        person(&client, name, json!({})).await;
    }
    group(&client, "wt-team", &["wt-max", "wt-mia"]).await;
    no_workspace(&client, "wt").await;
    let spec = json!({ "owner": { "group": "wt-team" }, "admins": ["wt-ada"],
        "members": { "role": "edit" }, "reason": "the team's work" });
    let (ok, out) = kubectl(
        &["create", "-f", "-"],
        &workspace_doc("wt", spec, ADMIN, false),
    );
    assert!(ok, "the platform creates a team workspace: {out}");
    let ws = wait_workspace(&client, "wt", "Provisioned").await;
    let status = ws.status.unwrap();
    assert_eq!(status.namespace.as_deref(), Some("ws-wt"));
    assert_eq!(status.owner.as_deref(), Some("group wt-team"));
    assert_eq!(
        status.role.as_deref(),
        Some("edit"),
        "kubectl get workspaces' ROLE"
    );
    let members = status.members.unwrap();
    assert_eq!((members.count, members.active), (2, 2));
    let ns = "ws-wt";
    wait_can("wt-max@example.com", ns, "yes").await;
    // Members: edit (write workloads, no RBAC); the admin: admin (RoleBindings, Shares).
    for member in ["wt-max@example.com", "wt-mia@example.com"] {
        assert_eq!(can(member, "create", "deployments", ns), "yes", "{member}");
        assert_eq!(can(member, "create", "rolebindings", ns), "no", "{member}");
        assert_eq!(
            can(member, "create", "shares.homestead.dev", ns),
            "no",
            "{member}"
        );
    }
    assert_eq!(
        can("wt-ada@example.com", "create", "rolebindings", ns),
        "yes"
    );
    assert_eq!(
        can("wt-ada@example.com", "create", "shares.homestead.dev", ns),
        "yes"
    );
    // A person outside the group, and an identity no User holds, have nothing.
    for outsider in ["wt-out@example.com", "nobody@example.com"] {
        assert_eq!(can(outsider, "get", "pods", ns), "no", "{outsider}");
    }
    // `homestead access` names each person's source: the team, as admin or as member.
    let rows = access_rows(ns);
    let source = |who: &str| {
        rows.iter()
            .find(|r| r["subject"] == format!("User:{who}"))
            .map(|r| {
                (
                    r["source"].as_str().unwrap().to_owned(),
                    r["detail"].as_str().unwrap().to_owned(),
                )
            })
            .unwrap_or_else(|| panic!("no row for {who}: {rows:?}"))
    };
    let (kind, detail) = source("wt-ada@example.com");
    assert_eq!(kind, "team");
    assert!(detail.starts_with("team wt-team (admin)"), "{detail}");
    let (kind, detail) = source("wt-max@example.com");
    assert_eq!(kind, "team");
    assert!(
        detail.starts_with("team wt-team: the team's work"),
        "{detail}"
    );
    // Guards before access: Pod Security on the namespace, labelled the workspace's.
    let namespace: Namespace = Api::all(client.clone()).get(ns).await.unwrap();
    let labels = namespace.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("homestead.dev/workspace").map(String::as_str),
        Some("wt")
    );
    assert!(labels.contains_key("pod-security.kubernetes.io/enforce"));

    // Its namespace is fixed: not changed, not added where the default was taken.
    let (ok, out) = kubectl(
        &[
            "patch",
            "workspace",
            "wt",
            "--type=merge",
            "-p",
            r#"{"spec":{"namespace":{"name":"ws-elsewhere"}}}"#,
        ],
        "",
    );
    assert!(!ok && out.contains("immutable"), "{out}");

    // An admin removed keeps nothing they made there: a RoleBinding to themselves goes too, and
    // a Share they made ends with their being admin.
    let until = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(24))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap();
    let share = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": { "name": "ada-shares", "namespace": ns,
            "annotations": { "homestead.dev/created-by": "wt-ada@example.com" } },
        "spec": { "to": [{ "user": "wt-out" }], "role": "view", "expiresAt": until.to_string(),
            "reason": "review" } });
    let (ok, out) = kubectl(
        &["--as=wt-ada@example.com", "create", "-f", "-"],
        &share.to_string(),
    );
    assert!(ok, "{out}");
    wait_can("wt-out@example.com", ns, "yes").await;
    // HR, who may share any person's home, does not share a team's workspace.
    let _ = hr().await;
    let by_hr = share
        .to_string()
        .replace("ada-shares", "hr-shares")
        .replace("wt-ada@example.com", HR);
    let (ok, out) = kubectl_as(HR, &["create", "-f", "-"], &by_hr);
    assert!(
        !ok && out.contains("only the admins of this workspace"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &[
            "--as=wt-ada@example.com",
            "create",
            "rolebinding",
            "keep",
            "-n",
            ns,
            "--clusterrole=admin",
            "--user=wt-ada@example.com",
        ],
        "",
    );
    assert!(
        ok,
        "the admin binds people in an ungoverned workspace: {out}"
    );
    let workspaces: Api<Workspace> = Api::all(client.clone());
    workspaces
        .patch(
            "wt",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "admins": ["wt-out"] } })),
        )
        .await
        .unwrap();
    wait_can("wt-ada@example.com", ns, "no").await;
    wait_can("wt-out@example.com", ns, "yes").await;
    let shares: Api<homestead_api::Share> = Api::namespaced(client.clone(), ns);
    eventually("ada's Share to end with her being admin", 30, || {
        let shares = shares.clone();
        async move {
            let share = shares.get("ada-shares").await.ok()?;
            let ready = share
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.status == "False").then_some(())
        }
    })
    .await;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    assert!(
        bindings.get_opt("keep").await.unwrap().is_none(),
        "the old admin's binding stays"
    );

    // A member who leaves the group loses the workspace, and only they.
    let groups: Api<DirectoryGroup> = Api::all(client.clone());
    groups
        .patch(
            "wt-team",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "members": ["wt-max"] } })),
        )
        .await
        .unwrap();
    let took = wait_can("wt-mia@example.com", ns, "no").await;
    eprintln!("a member who left the group lost the workspace in {took:?}");
    assert_eq!(can_get_pods("wt-max@example.com", ns), "yes");

    // A suspended member loses it alone.
    let users: Api<User> = Api::all(client.clone());
    users
        .patch(
            "wt-max",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspended": true } })),
        )
        .await
        .unwrap();
    wait_can("wt-max@example.com", ns, "no").await;
    assert_eq!(can_get_pods("wt-out@example.com", ns), "yes");

    // A deleted group suspends the workspace: access revoked, namespace and data kept.
    groups
        .delete("wt-team", &DeleteParams::default())
        .await
        .unwrap();
    let ws = wait_workspace(&client, "wt", "Suspended").await;
    let ready = ws
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("wt-team is gone"),
        "{}",
        ready.message
    );
    wait_can("wt-out@example.com", ns, "no").await;
    wait_no_role_bindings(&client, ns, 30).await;
    let kept: Option<Namespace> = Api::all(client.clone()).get_opt(ns).await.unwrap();
    assert!(
        kept.is_some_and(|n| n.metadata.deletion_timestamp.is_none()),
        "the namespace is kept"
    );

    // Deleted (Retain, a team's default): its namespace stays, nobody's, every binding out.
    no_workspace(&client, "wt").await;
    let kept: Namespace = Api::all(client.clone()).get(ns).await.unwrap();
    let labels = kept.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("homestead.dev/retained-from")
            .map(String::as_str),
        Some("wt")
    );
    assert!(!labels.contains_key("app.kubernetes.io/managed-by"));
}

#[tokio::test]
async fn a_person_creates_their_own_workspaces_within_max_and_never_anothers() {
    let _ = env();
    let client = admin().await;
    profile(
        &client,
        "ws-self-service",
        json!({ "workspaces": { "selfService": true, "max": 1 } }),
    )
    .await;
    person(&client, "wp-pia", json!({ "profile": "ws-self-service" })).await;
    person(&client, "wp-olo", json!({})).await;
    for name in [
        "wp-pia-one",
        "wp-pia-two",
        "wp-for-olo",
        "wp-olo-own",
        "wp-team",
    ] {
        no_workspace(&client, name).await;
    }
    let pia = "wp-pia@example.com";
    let personal = |owner: &str| json!({ "owner": { "user": owner }, "reason": "a project" });
    // Anyone signed in may ask; only the operator's checks say whether it is granted.
    assert_eq!(
        can(pia, "create", "workspaces.homestead.dev", "default"),
        "yes"
    );
    assert_eq!(
        can(pia, "list", "workspaces.homestead.dev", "default"),
        "no",
        "nobody lists others' workspaces"
    );
    // In one command: `kubectl homestead workspace` names the creator and the label itself.
    let plane = env().plane;
    let path = plane.dir().join("workspaces-admin.kubeconfig");
    std::fs::write(
        &path,
        serde_json::to_string(&plane.kubeconfig(ADMIN).unwrap()).unwrap(),
    )
    .unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
        .args([
            "workspace",
            "wp-pia-one",
            "--reason",
            "a project",
            "--owner",
            "wp-pia",
            "--as",
            pia,
        ])
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        String::from_utf8_lossy(&run.stdout)
            .contains("workspace.homestead.dev/wp-pia-one created for wp-pia")
    );
    let ws = wait_workspace(&client, "wp-pia-one", "Provisioned").await;
    let ns = ws.status.unwrap().namespace.unwrap();
    wait_can(pia, &ns, "yes").await;
    assert_eq!(
        can(pia, "create", "rolebindings", &ns),
        "yes",
        "a personal workspace's owner has admin"
    );
    assert_eq!(can("wp-olo@example.com", "get", "pods", &ns), "no");
    let rows = access_rows(&ns);
    let own = rows
        .iter()
        .find(|r| r["subject"] == format!("User:{pia}"))
        .expect("a row for the owner");
    assert_eq!(
        (own["source"].as_str(), own["person"].as_str()),
        (Some("workspace"), Some("wp-pia"))
    );
    // A Share in it lasts through its owner's suspension: gone while suspended, back once not.
    let until = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(24))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap();
    let share = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": { "name": "to-olo", "namespace": ns, "annotations": { "homestead.dev/created-by": pia } },
        "spec": { "to": [{ "user": "wp-olo" }], "role": "view", "expiresAt": until.to_string(), "reason": "r" } });
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &share.to_string(),
    );
    assert!(ok, "{out}");
    wait_can("wp-olo@example.com", &ns, "yes").await;
    let users: Api<User> = Api::all(client.clone());
    let suspend = |on: bool| json!({ "spec": { "suspended": on } });
    users
        .patch(
            "wp-pia",
            &PatchParams::default(),
            &Patch::Merge(suspend(true)),
        )
        .await
        .unwrap();
    wait_can("wp-olo@example.com", &ns, "no").await;
    users
        .patch(
            "wp-pia",
            &PatchParams::default(),
            &Patch::Merge(suspend(false)),
        )
        .await
        .unwrap();
    let took = wait_can("wp-olo@example.com", &ns, "yes").await;
    eprintln!("a Share in a reopened workspace granted again in {took:?}");

    // The next one is beyond max 1: refused, and grants nothing; the older keeps its access.
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &workspace_doc("wp-pia-two", personal("wp-pia"), pia, true),
    );
    assert!(ok, "{out}");
    let refused = wait_workspace(&client, "wp-pia-two", "OverLimit").await;
    let refused_ns = refused.status.unwrap().namespace.unwrap();
    assert_eq!(can(pia, "get", "pods", &refused_ns), "no");
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&refused_ns)
            .await
            .unwrap()
            .is_none(),
        "no namespace for a refused workspace"
    );
    assert_eq!(can_get_pods(pia, &ns), "yes");

    // One owned by someone else: admission lets the person make it (it cannot map identities to
    // Users), the operator refuses it, and the owner gets nothing from it.
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &workspace_doc("wp-for-olo", personal("wp-olo"), pia, true),
    );
    assert!(ok, "{out}");
    let w = wait_workspace(&client, "wp-for-olo", "NotOwner").await;
    assert_eq!(
        can(
            "wp-olo@example.com",
            "get",
            "pods",
            &w.status.unwrap().namespace.unwrap()
        ),
        "no"
    );

    // Admission: no team workspace, no workspace without the self-service label, no creator but
    // oneself, and nothing of another person's to change or delete.
    let team = json!({ "owner": { "group": "anyone" }, "admins": ["wp-pia"], "reason": "r" });
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &workspace_doc("wp-team", team, pia, true),
    );
    assert!(
        !ok && out.contains("only their own personal workspaces"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &workspace_doc("wp-team", personal("wp-pia"), pia, false),
    );
    assert!(
        !ok && out.contains("only their own personal workspaces"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "create", "-f", "-"],
        &workspace_doc("wp-team", personal("wp-pia"), "wp-olo@example.com", true),
    );
    assert!(!ok && out.contains("names its creator"), "{out}");
    let (ok, out) = kubectl(
        &[
            "--as=wp-olo@example.com",
            "delete",
            "workspace",
            "wp-pia-one",
        ],
        "",
    );
    assert!(
        !ok && out.contains("only their own personal workspaces"),
        "{out}"
    );
    // The SCIM identity creates none, whatever it names.
    install_scim_identity();
    let scim = "system:serviceaccount:homestead-system:homestead-scim";
    let (ok, out) = kubectl(
        &[&format!("--as={scim}"), "create", "-f", "-"],
        &workspace_doc("wp-team", personal("wp-pia"), scim, true),
    );
    assert!(!ok, "the SCIM identity created a workspace: {out}");

    // Deleting it (Retain by default) revokes the owner's access and keeps the namespace.
    let (ok, out) = kubectl(
        &[&format!("--as={pia}"), "delete", "workspace", "wp-pia-one"],
        "",
    );
    assert!(ok, "{out}");
    wait_gone(&Api::<Workspace>::all(client.clone()), "wp-pia-one", 60).await;
    assert_eq!(can_get_pods(pia, &ns), "no");
    // The refused one moves up within max once the older is gone.
    wait_workspace(&client, "wp-pia-two", "Provisioned").await;
    // Its owner offboarded: the workspace goes with them (its namespace kept, as Retain says).
    let users: Api<User> = Api::all(client.clone());
    users
        .delete("wp-pia", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<Workspace>::all(client.clone()), "wp-pia-two", 60).await;
    let kept: Namespace = Api::all(client.clone()).get(&refused_ns).await.unwrap();
    assert!(
        kept.labels().contains_key("homestead.dev/retained-from"),
        "{kept:?}"
    );
}

#[tokio::test]
async fn a_share_works_in_a_workspace_and_a_governed_one_refuses_peoples_bindings() {
    let _ = env();
    let client = admin().await;
    profile(
        &client,
        "ws-governed",
        json!({ "sharing": { "tenantRoleBindings": "Forbid" } }),
    )
    .await;
    person(&client, "wg-gil", json!({})).await;
    person(&client, "wg-guest", json!({})).await;
    group(&client, "wg-team", &[]).await;
    no_workspace(&client, "wg").await;
    let spec = json!({ "owner": { "group": "wg-team" }, "admins": ["wg-gil"],
        "profile": "ws-governed", "reason": "governed" });
    let (ok, out) = kubectl(
        &["create", "-f", "-"],
        &workspace_doc("wg", spec, ADMIN, false),
    );
    assert!(ok, "{out}");
    wait_workspace(&client, "wg", "Provisioned").await;
    let ns = "ws-wg";
    let gil = "wg-gil@example.com";
    wait_can(gil, ns, "yes").await;
    // Governed: not even the admin binds a person by hand.
    let binding = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "by-hand", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "wg-guest@example.com" }] });
    let (ok, out) = kubectl(
        &[&format!("--as={gil}"), "create", "-f", "-"],
        &binding.to_string(),
    );
    assert!(!ok && out.contains("governed"), "{out}");
    // A Share by the admin grants its grantee, through the operator's binding.
    let until =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24);
    let until = until.round(k8s_openapi::jiff::Unit::Second).unwrap();
    let share = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": { "name": "review", "namespace": ns, "annotations": { "homestead.dev/created-by": gil } },
        "spec": { "to": [{ "user": "wg-guest" }], "role": "view", "expiresAt": until.to_string(), "reason": "review" } });
    let (ok, out) = kubectl(
        &[&format!("--as={gil}"), "create", "-f", "-"],
        &share.to_string(),
    );
    assert!(ok, "the workspace's admin shares it: {out}");
    let took = wait_can("wg-guest@example.com", ns, "yes").await;
    eprintln!("a Share in a workspace granted in {took:?}");
    // A grantee never re-shares.
    let again = share
        .to_string()
        .replace("\"review\"", "\"again\"")
        .replace(gil, "wg-guest@example.com");
    let (ok, out) = kubectl(&["--as=wg-guest@example.com", "create", "-f", "-"], &again);
    assert!(!ok, "a grantee re-shared: {out}");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    assert!(bindings.get_opt("by-hand").await.unwrap().is_none());
    no_workspace(&client, "wg").await;
}
