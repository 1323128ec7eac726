//! Handover (docs/handover.md) on the real control plane with the operator running, judged by
//! what people can really do (`kubectl auth can-i --as` against the real aggregated roles): a
//! leaver deleted with `deletionPolicy: Handover` loses access at once; their own home and their
//! personal workspace become the successor's workspaces with the data in them; a Share the
//! leaver made ends (`HandedOver`); a team workspace they alone administered names the
//! successor; and without a successor fit to take them, the homes are retained with a Warning.

mod common;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::{User, Workspace};
use homestead_testenv::ADMIN;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_leavers_homes_go_to_the_successor_and_their_access_ends_at_once() {
    let _ = env();
    let client = admin().await;
    for name in ["user-ho-lee", "ws-ho-lee-own"] {
        no_workspace(&client, name).await;
    }
    person(&client, "ho-sam", json!({})).await;
    person(&client, "ho-gus", json!({})).await;
    person(
        &client,
        "ho-lee",
        json!({ "deletionPolicy": "Handover", "successor": "ho-sam" }),
    )
    .await;
    // Data in the leaver's home, a personal workspace, and a team they alone administer.
    let home = "user-ho-lee";
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), home);
    let data: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "work" }, "data": { "k": "v" } }))
            .unwrap();
    maps.create(&PostParams::default(), &data).await.unwrap();
    no_workspace(&client, "ho-lee-own").await;
    let spec = json!({ "owner": { "user": "ho-lee" }, "reason": "lee's project" });
    let (ok, out) = kubectl(
        &["create", "-f", "-"],
        &workspace_doc("ho-lee-own", spec, ADMIN, false),
    );
    assert!(ok, "{out}");
    group(&client, "ho-team", &["ho-gus"]).await;
    no_workspace(&client, "ho-team").await;
    let spec = json!({ "owner": { "group": "ho-team" }, "admins": ["ho-lee"], "reason": "team" });
    let (ok, out) = kubectl(
        &["create", "-f", "-"],
        &workspace_doc("ho-team", spec, ADMIN, false),
    );
    assert!(ok, "{out}");
    wait_workspace(&client, "ho-lee-own", "Provisioned").await;
    wait_workspace(&client, "ho-team", "Provisioned").await;
    // A Share the leaver made of their home.
    let until = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(24))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap();
    let share = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": { "name": "to-gus", "namespace": home,
            "annotations": { "homestead.dev/created-by": "ho-lee@example.com" } },
        "spec": { "to": [{ "user": "ho-gus" }], "role": "view", "expiresAt": until.to_string(),
            "reason": "review" } });
    let (ok, out) = kubectl(
        &["--as=ho-lee@example.com", "create", "-f", "-"],
        &share.to_string(),
    );
    assert!(ok, "{out}");
    wait_can("ho-gus@example.com", home, "yes").await;
    assert_eq!(
        can("ho-lee@example.com", "create", "rolebindings", home),
        "yes"
    );
    assert_eq!(can("ho-sam@example.com", "get", "pods", home), "no");

    // The leaver goes.
    let users: Api<User> = Api::all(client.clone());
    users
        .delete("ho-lee", &DeleteParams::default())
        .await
        .unwrap();
    let started = Instant::now();
    wait_can("ho-lee@example.com", home, "no").await;
    let revoked = started.elapsed();
    // At once: in the first reconcile of the deletion, before any handover (the order is
    // asserted below, from the audit log). The bound is generous for a busy CI machine (this
    // one: under 2 s); a grace period would exceed it.
    assert!(
        revoked < Duration::from_secs(10),
        "the leaver kept access for {revoked:?}"
    );
    assert_eq!(
        can("ho-lee@example.com", "get", "pods", "ws-ho-lee-own"),
        "no"
    );

    // Their home is the successor's workspace, with its data; so is their personal workspace.
    let taken = wait_workspace(&client, home, "Provisioned").await;
    // The operator removed every binding in the leaver's home before it created any Workspace of
    // the handover: access does not wait for the handover.
    // (kube-apiserver logs a request once it has answered: wait for both lines.)
    let (revoked_at, handed_at) = eventually(
        "the revocation and the handover in the audit log",
        10,
        || {
            let events = audit();
            let deleted = events.iter().position(|e| {
                e["verb"] == "delete"
                    && e["objectRef"]["resource"] == "users"
                    && e["objectRef"]["name"] == "ho-lee"
            });
            let found = deleted.and_then(|deleted| {
                let after = &events[deleted..];
                let revoked_at = after.iter().position(|e| {
                    is_operator_change(e)
                        && e["verb"] == "deletecollection"
                        && e["objectRef"]["resource"] == "rolebindings"
                        && e["objectRef"]["namespace"] == home
                })?;
                let handed_at = after.iter().position(|e| {
                    is_operator_change(e)
                        && e["verb"] == "create"
                        && e["objectRef"]["resource"] == "workspaces"
                })?;
                Some((revoked_at, handed_at))
            });
            std::future::ready(found)
        },
    )
    .await;
    assert!(
        revoked_at < handed_at,
        "a Workspace was created (request {handed_at} after the deletion) before the bindings in \
         {home} went (request {revoked_at})"
    );
    assert_eq!(taken.spec.owner.user.as_deref(), Some("ho-sam"));
    assert_eq!(
        taken.metadata.labels.unwrap_or_default()["homestead.dev/handed-over-from"],
        "ho-lee"
    );
    wait_can("ho-sam@example.com", home, "yes").await;
    assert_eq!(
        can("ho-sam@example.com", "create", "rolebindings", home),
        "yes"
    );
    assert_eq!(maps.get("work").await.unwrap().data.unwrap()["k"], "v");
    let own = wait_workspace(&client, "ws-ho-lee-own", "Provisioned").await;
    assert_eq!(own.spec.owner.user.as_deref(), Some("ho-sam"));
    wait_can("ho-sam@example.com", "ws-ho-lee-own", "yes").await;
    wait_gone(&users, "ho-lee", 30).await;
    // The old personal workspace went without its namespace, which is the new one's.
    let workspaces: Api<Workspace> = Api::all(client.clone());
    wait_gone(&workspaces, "ho-lee-own", 30).await;
    let ns = Api::<Namespace>::all(client.clone())
        .get("ws-ho-lee-own")
        .await
        .unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap_or_default()["homestead.dev/workspace"],
        "ws-ho-lee-own"
    );

    // The leaver's Share ended with the handover; the team names the successor.
    wait_share(&client, home, "to-gus", "HandedOver").await;
    wait_can("ho-gus@example.com", home, "no").await;
    let team = workspaces.get("ho-team").await.unwrap();
    assert_eq!(team.spec.admins, ["ho-sam"]);
    let events = user_events(&client, "ho-sam").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, note)| reason == "HomeReceived" && note.contains(home)),
        "{events:?}"
    );
    let labels = Api::<Namespace>::all(client.clone())
        .get(home)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels["homestead.dev/handed-over-from"], "ho-lee",
        "the record stays"
    );
    println!("the leaver's access ended {revoked:?} after the delete");

    // The successor leaves in turn: the home they received goes on to theirs, under a name the
    // API server generates (the namespace's own is the Workspace they held it by).
    let (ok, out) = kubectl(
        &[
            "patch",
            "user",
            "ho-sam",
            "--type=merge",
            "-p",
            r#"{"spec":{"deletionPolicy":"Handover","successor":"ho-gus"}}"#,
        ],
        "",
    );
    assert!(ok, "{out}");
    users
        .delete("ho-sam", &DeleteParams::default())
        .await
        .unwrap();
    let second = eventually("the Workspace the second handover makes", 30, || async {
        let made = workspaces
            .list(&ListParams::default().labels("homestead.dev/handed-over-from=ho-sam"))
            .await
            .unwrap();
        made.items
            .into_iter()
            .map(|w| w.name_any())
            .find(|name| name.starts_with(&format!("{home}-")))
    })
    .await;
    let again = wait_workspace(&client, &second, "Provisioned").await;
    assert_eq!(again.spec.owner.user.as_deref(), Some("ho-gus"));
    wait_can("ho-gus@example.com", home, "yes").await;
    assert_eq!(
        can("ho-gus@example.com", "create", "rolebindings", home),
        "yes"
    );
    wait_can("ho-sam@example.com", home, "no").await;
    assert_eq!(maps.get("work").await.unwrap().data.unwrap()["k"], "v");
    wait_gone(&workspaces, home, 30).await;
}

#[tokio::test]
async fn without_a_successor_fit_to_take_them_the_homes_are_retained() {
    let _ = env();
    let client = admin().await;
    person(&client, "ho-zed", json!({})).await;
    let (ok, out) = kubectl(
        &[
            "patch",
            "user",
            "ho-zed",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspended":true}}"#,
        ],
        "",
    );
    assert!(ok, "{out}");
    wait_reason(&client, "ho-zed", "Suspended").await;
    person(
        &client,
        "ho-ann",
        json!({ "deletionPolicy": "Handover", "successor": "ho-zed" }),
    )
    .await;
    let users: Api<User> = Api::all(client.clone());
    users
        .delete("ho-ann", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&users, "ho-ann", 30).await;
    let ns = Api::<Namespace>::all(client.clone())
        .get("user-ho-ann")
        .await
        .unwrap();
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(labels["homestead.dev/retained-from"], "ho-ann");
    assert!(!labels.contains_key("homestead.dev/workspace"));
    let events = user_events(&client, "ho-ann").await;
    assert!(
        events.iter().any(|(kind, reason, note)| kind == "Warning"
            && reason == "HandoverFallback"
            && note.contains("suspended")),
        "{events:?}"
    );
    assert_eq!(
        can("ho-zed@example.com", "get", "pods", "user-ho-ann"),
        "no"
    );
}
