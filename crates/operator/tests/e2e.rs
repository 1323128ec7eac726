//! The rules of docs/design.md, each proven on the real local control plane with the operator
//! binary running as `system:serviceaccount:homestead-system:homestead` under `rbac/`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::{
    ANNOTATION_USER_UID, FINALIZER, LABEL_MANAGED_BY, LABEL_RETAINED_FROM, LABEL_USER, User,
};
use homestead_testenv::OPERATOR;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const RB: &str = "homestead-user";

fn namespaces(c: &Client) -> Api<Namespace> {
    Api::all(c.clone())
}
fn users(c: &Client) -> Api<User> {
    Api::all(c.clone())
}
fn bindings(c: &Client, ns: &str) -> Api<RoleBinding> {
    Api::namespaced(c.clone(), ns)
}

async fn patch_spec(c: &Client, name: &str, spec: serde_json::Value) {
    users(c)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// Events on a User: type, reason and note.
async fn user_events(c: &Client, user: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(user))
        .map(|e| {
            let note = e.note.unwrap_or_default();
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                note,
            )
        })
        .collect()
}

/// Events on a User, by type and reason.
async fn event_reasons(c: &Client, user: &str) -> Vec<(String, String)> {
    user_events(c, user)
        .await
        .into_iter()
        .map(|(type_, reason, _)| (type_, reason))
        .collect()
}

/// Waits until an Event of `type_` and `reason` is recorded about `user` (Events are published
/// right after the status write, so they may trail it slightly).
async fn wait_event(c: &Client, user: &str, type_: &str, reason: &str) {
    let want = (type_.to_owned(), reason.to_owned());
    eventually(&format!("a {type_} Event {reason} on {user}"), 30, || {
        let want = want.clone();
        async move { event_reasons(c, user).await.contains(&want).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn user_gets_namespace_rolebinding_quota_and_ready() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({
        "identity": { "username": "prov@example.com", "groups": ["team-a"] },
        "role": "edit",
        "namespace": { "labels": { "team": "a" }, "annotations": { "example.com/cc": "42" } },
        "quota": { "hard": { "pods": "5", "requests.memory": "1Gi" } },
    });
    let created = s.create(&c, &User::test("e2e-prov").with_spec(spec)).await;
    let u = wait_reason(&c, "e2e-prov", "Provisioned").await;
    let ready = u.ready_condition().unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.observed_generation, created.metadata.generation);
    assert_eq!(
        u.status.as_ref().unwrap().namespace.as_deref(),
        Some("user-e2e-prov")
    );
    assert!(u.finalizers().contains(&FINALIZER.to_owned()));

    let ns = namespaces(&c).get("user-e2e-prov").await.unwrap();
    assert_eq!(
        ns.labels().get(LABEL_MANAGED_BY).map(String::as_str),
        Some("homestead")
    );
    assert_eq!(
        ns.labels().get(LABEL_USER).map(String::as_str),
        Some("e2e-prov")
    );
    assert_eq!(ns.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        ns.annotations().get("example.com/cc").map(String::as_str),
        Some("42")
    );
    assert_eq!(
        ns.annotations().get(ANNOTATION_USER_UID),
        created.metadata.uid.as_ref()
    );
    // Semantic 8: under Delete (the default) the Namespace is owned by the User.
    let owners = ns.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(Some(&owners[0].uid), created.metadata.uid.as_ref());

    let rb = bindings(&c, "user-e2e-prov").get(RB).await.unwrap();
    assert_eq!(rb.role_ref.kind, "ClusterRole");
    assert_eq!(rb.role_ref.name, "edit");
    let subjects: Vec<(String, String)> = rb
        .subjects
        .unwrap()
        .into_iter()
        .map(|s| (s.kind, s.name))
        .collect();
    assert_eq!(
        subjects,
        [
            ("User".to_owned(), "prov@example.com".to_owned()),
            ("Group".to_owned(), "team-a".to_owned())
        ]
    );
    let quota: Api<ResourceQuota> = Api::namespaced(c.clone(), "user-e2e-prov");
    let hard = quota
        .get("homestead-quota")
        .await
        .unwrap()
        .spec
        .unwrap()
        .hard
        .unwrap();
    assert_eq!(hard["pods"].0, "5");

    // Semantic 11: the transition to Ready has an Event, one for the whole provisioning, that
    // says what was done.
    wait_event(&c, "e2e-prov", "Normal", "Provisioned").await;
    let events = user_events(&c, "e2e-prov").await;
    assert_eq!(events.len(), 1, "one Event per provisioning: {events:?}");
    let note = &events[0].2;
    for done in [
        "created namespace \"user-e2e-prov\"",
        "bound ClusterRole",
        "applied ResourceQuota",
    ] {
        assert!(note.contains(done), "{done:?} missing from {note:?}");
    }

    // Semantic 7: the finalizer was on the User before anything was created for it.
    let events = audit();
    let position = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        events.iter().position(|e| is_operator_write(e) && pred(e))
    };
    let finalizer = position(&|e| {
        e["objectRef"]["resource"] == "users"
            && e["objectRef"]["name"] == "e2e-prov"
            && e["objectRef"]["subresource"].is_null()
    })
    .expect("the operator patched the User (finalizer)");
    let namespace = position(&|e| {
        e["objectRef"]["resource"] == "namespaces" && e["objectRef"]["name"] == "user-e2e-prov"
    })
    .expect("the operator wrote the Namespace");
    assert!(
        finalizer < namespace,
        "finalizer at {finalizer}, namespace at {namespace}"
    );
}

#[tokio::test]
async fn converged_user_costs_no_write_even_when_reconciled_again() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-steady").with_spec(json!({ "quota": { "hard": { "requests.memory": "1024Mi", "requests.cpu": "1000m" } } }))).await;
    let before = wait_reason(&c, "e2e-steady", "Provisioned").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mark, reconciled) = (settled_mark().await, reconciles(&env().metrics_address));
    // Touch the Namespace without changing what Homestead set: a watch event, hence a
    // reconcile.
    Api::<Namespace>::all(c.clone())
        .patch(
            "user-e2e-steady",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "e2e/touch": "1" } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        reconciles(&env().metrics_address) > reconciled,
        "the annotation triggers a reconcile"
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "e2e-steady", "user-e2e-steady"))
        .cloned()
        .collect();
    assert!(writes.is_empty(), "steady state wrote: {writes:#?}");
    // Semantic 9: status unchanged, lastTransitionTime included.
    let after = users(&c).get("e2e-steady").await.unwrap();
    assert_eq!(before.status, after.status);
}

#[tokio::test]
async fn a_status_someone_else_cleared_is_written_again() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-cleared")).await;
    wait_reason(&c, "e2e-cleared", "Provisioned").await;
    // Changes to the status alone are Homestead's own and trigger no reconcile, except one
    // that leaves the User without its Ready condition.
    let cleared = users(&c)
        .patch_status(
            "e2e-cleared",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": null })),
        )
        .await
        .unwrap();
    assert!(cleared.ready_condition().is_none(), "{:?}", cleared.status);
    wait_reason(&c, "e2e-cleared", "Provisioned").await;
}

#[tokio::test]
async fn drift_is_repaired() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-drift").with_spec(json!({ "role": "view" })),
    )
    .await;
    wait_reason(&c, "e2e-drift", "Provisioned").await;
    let rbs = bindings(&c, "user-e2e-drift");
    let original = rbs.get(RB).await.unwrap();
    rbs.delete(RB, &DeleteParams::default()).await.unwrap();
    eventually("the deleted RoleBinding to come back", 30, || async {
        let rb = rbs.get_opt(RB).await.ok()??;
        (rb.uid() != original.uid() && rb.role_ref.name == "view").then_some(())
    })
    .await;
    // Someone edits the subjects: Homestead takes them back.
    let mut edited = rbs.get(RB).await.unwrap();
    edited.subjects.as_mut().unwrap()[0].name = "mallory@example.com".into();
    edited.metadata.managed_fields = None;
    rbs.replace(RB, &PostParams::default(), &edited)
        .await
        .unwrap();
    eventually("the RoleBinding subjects to be repaired", 30, || async {
        let rb = rbs.get_opt(RB).await.ok()??;
        (rb.subjects?[0].name == "e2e-drift@example.com").then_some(())
    })
    .await;
}

#[tokio::test]
async fn namespace_labels_homestead_no_longer_wants_are_removed() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({ "namespace": { "labels": { "team": "a", "cost-center": "42" } } });
    s.create(&c, &User::test("e2e-relabel").with_spec(spec))
        .await;
    wait_reason(&c, "e2e-relabel", "Provisioned").await;
    // Created with one request; the labels set then must still be removable by apply.
    patch_spec(
        &c,
        "e2e-relabel",
        json!({ "namespace": { "labels": { "team": "a", "cost-center": null } } }),
    )
    .await;
    eventually("the dropped label to be removed", 30, || async {
        let ns = namespaces(&c).get("user-e2e-relabel").await.ok()?;
        let labels = ns.labels();
        (labels.get("team").map(String::as_str) == Some("a") && !labels.contains_key("cost-center"))
            .then_some(())
    })
    .await;
    wait_event(&c, "e2e-relabel", "Normal", "NamespaceUpdated").await;
}

#[tokio::test]
async fn role_change_recreates_the_rolebinding() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-role").with_spec(json!({ "role": "edit" })),
    )
    .await;
    wait_reason(&c, "e2e-role", "Provisioned").await;
    let rbs = bindings(&c, "user-e2e-role");
    let before = rbs.get(RB).await.unwrap();
    patch_spec(&c, "e2e-role", json!({ "role": "view" })).await;
    wait_reason(&c, "e2e-role", "Provisioned").await;
    let after = rbs.get(RB).await.unwrap();
    assert_eq!(after.role_ref.name, "view");
    assert_ne!(
        after.uid(),
        before.uid(),
        "roleRef is immutable: the RoleBinding must be new"
    );
    wait_event(&c, "e2e-role", "Normal", "RoleChanged").await;
}

#[tokio::test]
async fn foreign_namespace_is_never_touched() {
    let s = Scenario::new();
    let c = admin().await;
    let foreign = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("e2e-foreign".into()),
            labels: Some([("team".to_owned(), "legacy".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    s.track_namespace("e2e-foreign");
    let before = namespaces(&c)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let mark = settled_mark().await;
    s.create(
        &c,
        &User::test("e2e-conflict").with_spec(json!({ "namespace": { "name": "e2e-foreign" } })),
    )
    .await;
    let u = wait_reason(&c, "e2e-conflict", "NamespaceConflict").await;
    assert_eq!(u.ready_condition().unwrap().status, "False");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = namespaces(&c).get("e2e-foreign").await.unwrap();
    assert_eq!(
        serde_json::to_value(&before).unwrap(),
        serde_json::to_value(&after).unwrap()
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| {
            is_operator_change(e)
                && (e["objectRef"]["name"] == "e2e-foreign"
                    || e["objectRef"]["namespace"] == "e2e-foreign")
        })
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "wrote to a foreign namespace: {writes:#?}"
    );
    wait_event(&c, "e2e-conflict", "Warning", "NamespaceConflict").await;
}

#[tokio::test]
async fn first_owner_keeps_a_contested_namespace() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-first").with_spec(json!({ "namespace": { "name": "e2e-contested" } })),
    )
    .await;
    wait_reason(&c, "e2e-first", "Provisioned").await;
    s.create(
        &c,
        &User::test("e2e-second").with_spec(json!({ "namespace": { "name": "e2e-contested" } })),
    )
    .await;
    wait_reason(&c, "e2e-second", "NamespaceConflict").await;
    let ns = namespaces(&c).get("e2e-contested").await.unwrap();
    assert_eq!(
        ns.labels().get(LABEL_USER).map(String::as_str),
        Some("e2e-first")
    );
    let rb = bindings(&c, "e2e-contested").get(RB).await.unwrap();
    assert_eq!(rb.subjects.unwrap()[0].name, "e2e-first@example.com");
}

#[tokio::test]
async fn reserved_and_invalid_namespaces_are_refused() {
    let s = Scenario::new();
    let c = admin().await;
    for (name, ns) in [
        ("e2e-res-kube", "kube-e2e"),
        ("e2e-res-default", "default"),
        ("e2e-res-operator", "homestead-system"),
        ("e2e-res-flag", RESERVED_BY_FLAG),
    ] {
        s.create(
            &c,
            &User::test(name).with_spec(json!({ "namespace": { "name": ns } })),
        )
        .await;
    }
    // A 60-character name is a valid User name, but `user-` + it exceeds 63 characters.
    let long = format!("e2e-{}", "x".repeat(56));
    s.create(&c, &User::test(&long)).await;
    for name in [
        "e2e-res-kube",
        "e2e-res-default",
        "e2e-res-operator",
        "e2e-res-flag",
    ] {
        wait_reason(&c, name, "ReservedNamespace").await;
        wait_event(&c, name, "Warning", "ReservedNamespace").await;
    }
    wait_reason(&c, &long, "InvalidNamespaceName").await;
    assert!(namespaces(&c).get_opt("kube-e2e").await.unwrap().is_none());
}

#[tokio::test]
async fn role_outside_the_allow_list_is_refused() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-norole").with_spec(json!({ "role": "system:aggregate-to-view" })),
    )
    .await;
    let u = wait_reason(&c, "e2e-norole", "RoleNotAllowed").await;
    assert!(
        u.ready_condition()
            .unwrap()
            .message
            .contains("admin, edit, view")
    );
    assert!(
        bindings(&c, "user-e2e-norole")
            .get_opt(RB)
            .await
            .map(|r| r.is_none())
            .unwrap_or(true)
    );
}

#[tokio::test]
async fn suspension_revokes_access_and_keeps_data() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-susp")).await;
    wait_reason(&c, "e2e-susp", "Provisioned").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "user-e2e-susp");
    let data = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("work".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &data).await.unwrap();

    patch_spec(&c, "e2e-susp", json!({ "suspended": true })).await;
    let u = wait_reason(&c, "e2e-susp", "Suspended").await;
    assert!(
        u.ready_condition()
            .unwrap()
            .message
            .contains("access revoked")
    );
    assert!(
        bindings(&c, "user-e2e-susp")
            .get_opt(RB)
            .await
            .unwrap()
            .is_none()
    );
    assert!(cms.get_opt("work").await.unwrap().is_some());
    // One Event for the transition to Suspended, naming what was revoked.
    wait_event(&c, "e2e-susp", "Normal", "Suspended").await;
    let revoked = user_events(&c, "e2e-susp").await;
    assert!(
        revoked
            .iter()
            .any(|(_, reason, note)| reason == "Suspended"
                && note.contains("removed every RoleBinding")),
        "{revoked:?}"
    );

    patch_spec(&c, "e2e-susp", json!({ "suspended": false })).await;
    wait_reason(&c, "e2e-susp", "Provisioned").await;
    assert!(
        bindings(&c, "user-e2e-susp")
            .get_opt(RB)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn delete_policy_waits_for_the_namespace_and_says_what_blocks_it() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-del")).await;
    wait_reason(&c, "e2e-del", "Provisioned").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "user-e2e-del");
    let blocker = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("blocker".into()),
            finalizers: Some(vec!["e2e.homestead.dev/block".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &blocker).await.unwrap();

    users(&c)
        .delete("e2e-del", &DeleteParams::default())
        .await
        .unwrap();
    let blocked = eventually(
        "the User to report what blocks its namespace",
        60,
        || async {
            let u = users(&c).get_opt("e2e-del").await.ok()??;
            let ready = u.ready_condition()?;
            (ready.reason == "Terminating" && ready.message.contains("e2e.homestead.dev/block"))
                .then_some(u)
        },
    )
    .await;
    assert_eq!(blocked.ready_condition().unwrap().status, "False");
    assert!(
        namespaces(&c)
            .get("user-e2e-del")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    cms.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .unwrap();
    wait_gone(&namespaces(&c), "user-e2e-del", 60).await;
    wait_gone(&users(&c), "e2e-del", 30).await;
}

#[tokio::test]
async fn retain_policy_keeps_the_namespace_without_access() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-keep").with_spec(json!({ "deletionPolicy": "Retain" })),
    )
    .await;
    wait_reason(&c, "e2e-keep", "Provisioned").await;
    let ns = namespaces(&c).get("user-e2e-keep").await.unwrap();
    assert!(
        ns.owner_references().is_empty(),
        "semantic 8: no owner reference under Retain"
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "user-e2e-keep");
    let data = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("thesis".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &data).await.unwrap();

    users(&c)
        .delete("e2e-keep", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&users(&c), "e2e-keep", 30).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ns = namespaces(&c).get("user-e2e-keep").await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_none());
    assert_eq!(
        ns.labels().get(LABEL_RETAINED_FROM).map(String::as_str),
        Some("e2e-keep")
    );
    assert!(ns.labels().get(LABEL_MANAGED_BY).is_none());
    assert!(ns.owner_references().is_empty());
    assert!(
        bindings(&c, "user-e2e-keep")
            .get_opt(RB)
            .await
            .unwrap()
            .is_none()
    );
    assert!(cms.get_opt("thesis").await.unwrap().is_some());

    // homestead_retained_namespaces counts it: the gauge (counted every 2 s by the tests'
    // operator) comes to agree with a live count of the namespaces labelled retained-from, this
    // one and one retained earlier among them (more than one, as the API server gives no
    // remaining-item count for a list with a label selector). Other tests may retain
    // namespaces meanwhile, hence the loop.
    let earlier: Namespace = serde_json::from_value(json!({
        "metadata": {
            "name": "e2e-keep-earlier",
            "labels": { LABEL_RETAINED_FROM: "e2e-keep-earlier" },
        },
    }))
    .unwrap();
    s.track_namespace("e2e-keep-earlier");
    namespaces(&c)
        .create(&PostParams::default(), &earlier)
        .await
        .unwrap();
    let gauge = |body: &str| -> Option<usize> {
        body.lines()
            .find_map(|l| l.strip_prefix("homestead_retained_namespaces "))?
            .parse()
            .ok()
    };
    let retained = ListParams::default().labels(LABEL_RETAINED_FROM);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live = namespaces(&c).list_metadata(&retained).await.unwrap().items;
        for ours in ["user-e2e-keep", "e2e-keep-earlier"] {
            assert!(
                live.iter().any(|ns| ns.name_any() == ours),
                "{ours} not listed"
            );
        }
        let (_, body) = http_get(&env().metrics_address, "/metrics").unwrap();
        if gauge(&body) == Some(live.len()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "homestead_retained_namespaces is {:?}, {} namespaces are retained",
            gauge(&body),
            live.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn switching_to_retain_drops_the_owner_reference() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-switch")).await;
    wait_reason(&c, "e2e-switch", "Provisioned").await;
    assert_eq!(
        namespaces(&c)
            .get("user-e2e-switch")
            .await
            .unwrap()
            .owner_references()
            .len(),
        1
    );
    patch_spec(&c, "e2e-switch", json!({ "deletionPolicy": "Retain" })).await;
    eventually("the owner reference to be removed", 30, || async {
        let ns = namespaces(&c).get("user-e2e-switch").await.ok()?;
        ns.owner_references().is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_users_are_refused_at_admission() {
    let s = Scenario::new();
    let doc = |name: &str, spec: &str| {
        format!(
            "apiVersion: homestead.dev/v1alpha1\nkind: User\nmetadata:\n  name: {name}\nspec:\n{spec}"
        )
    };
    let cases = [
        (
            doc("Bad_Name", "  identity: {username: a@example.com}\n"),
            "metadata.name must be a DNS-1123 label",
        ),
        (
            doc(
                "e2e-adm-ca",
                "  identity: {username: a@example.com}\n  role: cluster-admin\n",
            ),
            "may not be cluster-admin",
        ),
        (
            doc("e2e-adm-sys", "  identity: {username: 'system:admin'}\n"),
            "may not start with 'system:'",
        ),
        (
            doc(
                "e2e-adm-grp",
                "  identity: {username: a@example.com, groups: ['system:masters']}\n",
            ),
            "may not contain a group starting with 'system:'",
        ),
        (
            doc(
                "e2e-adm-lbl",
                "  identity: {username: a@example.com}\n  namespace: {labels: {homestead.dev/user: bob}}\n",
            ),
            "may not use reserved keys",
        ),
        (
            doc(
                "e2e-adm-psa",
                "  identity: {username: a@example.com}\n  namespace: {annotations: {pod-security.kubernetes.io/enforce: privileged}}\n",
            ),
            "may not use reserved keys",
        ),
    ];
    for (yaml, message) in cases {
        let (ok, out) = kubectl(&["apply", "-f", "-"], &yaml);
        assert!(
            !ok && out.contains(message),
            "expected refusal {message:?} for\n{yaml}\ngot: {out}"
        );
    }
    s.track("e2e-adm-rename");
    s.track("e2e-adm-late");
    let first = doc(
        "e2e-adm-rename",
        "  identity: {username: a@example.com}\n  namespace: {name: e2e-rename-a}\n",
    );
    let (ok, out) = kubectl(&["apply", "-f", "-"], &first);
    assert!(ok, "{out}");
    for spec in [
        "  identity: {username: a@example.com}\n  namespace: {name: e2e-rename-b}\n",
        "  identity: {username: a@example.com}\n  namespace: {labels: {a: b}}\n",
        "  identity: {username: a@example.com}\n",
    ] {
        let (ok, out) = kubectl(&["apply", "-f", "-"], &doc("e2e-adm-rename", spec));
        assert!(
            !ok && out.contains("spec.namespace.name is immutable"),
            "{spec}: {out}"
        );
    }
    // Nor may a name be added to a User created without one: that would strand its namespace.
    let unnamed = doc("e2e-adm-late", "  identity: {username: a@example.com}\n");
    let (ok, out) = kubectl(&["apply", "-f", "-"], &unnamed);
    assert!(ok, "{out}");
    let named = doc(
        "e2e-adm-late",
        "  identity: {username: a@example.com}\n  namespace: {name: e2e-late}\n",
    );
    let (ok, out) = kubectl(&["apply", "-f", "-"], &named);
    assert!(
        !ok && out.contains("spec.namespace.name is immutable"),
        "{out}"
    );
}

#[tokio::test]
async fn operator_identity_has_least_privilege() {
    let _s = Scenario::new();
    let can_i = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let operator = format!("--as={OPERATOR}");
        all.push(&operator);
        let (_, out) = kubectl(&all, "");
        // The answer is the first line; kubectl may add warnings after it.
        out.lines().next().unwrap_or_default().trim().to_owned()
    };
    for denied in [
        &["get", "secrets", "--all-namespaces"][..],
        &["list", "secrets", "-n", "user-alice"],
        &["bind", "clusterroles/cluster-admin"],
        &["escalate", "clusterroles"],
        &["create", "clusterrolebindings"],
        &["impersonate", "users"],
        &["impersonate", "serviceaccounts"],
        &["create", "pods", "-n", "default"],
        &["delete", "customresourcedefinitions"],
    ] {
        assert_eq!(can_i(denied), "no", "the operator may {denied:?}");
    }
    for role in ["admin", "edit", "view"] {
        assert_eq!(
            can_i(&["bind", &format!("clusterroles/{role}")]),
            "yes",
            "cannot bind {role}"
        );
    }
    assert_eq!(can_i(&["patch", "namespaces"]), "yes");
}

#[tokio::test]
async fn metrics_and_probes_are_served() {
    let s = Scenario::new();
    let env = env();
    let c = admin().await;
    s.create(&c, &User::test("e2e-metrics")).await;
    wait_reason(&c, "e2e-metrics", "Provisioned").await;
    let (code, body) = http_get(&env.metrics_address, "/metrics").unwrap();
    assert_eq!(code, 200);
    for metric in [
        "homestead_reconciliations_total{result=\"success\"}",
        "homestead_reconcile_duration_seconds_bucket",
        "homestead_users{ready=\"True\",reason=\"Provisioned\"}",
        "homestead_user_time_to_ready_seconds_count",
        "homestead_offboarding_duration_seconds_bucket",
        "homestead_reconcile_errors_total{reason=\"apply_failed\"} 0",
        "homestead_build_info{version=\"0.1.0\"} 1",
        "homestead_retained_namespaces",
        "homestead_events_pending",
        "homestead_events_failed_total 0",
        "process_resident_memory_bytes",
    ] {
        assert!(
            body.contains(metric),
            "{metric} missing from /metrics:\n{body}"
        );
    }
    // The first Ready=True of e2e-metrics was timed.
    let ready_count: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("homestead_user_time_to_ready_seconds_count "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ready_count >= 1.0, "{body}");

    // promtool (Prometheus's own checker, from Debian's package) finds nothing to lint.
    let promtool = repo_tool("tools/promtool/install.sh");
    let (ok, out) = run_with_stdin(
        std::process::Command::new(promtool).args(["check", "metrics"]),
        &body,
    );
    assert!(ok, "promtool check metrics: {out}");

    // Every metric the dashboard and the alerts query is one the operator exports (or
    // Prometheus's own `up`); the SCIM service's (`homestead_scim_*`) are checked in scim.rs.
    let dashboard =
        std::fs::read_to_string(repo_root().join("charts/homestead/files/dashboard.json")).unwrap();
    let alerts =
        std::fs::read_to_string(repo_root().join("charts/homestead/files/alerts.yaml")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(queries.len() >= 15, "{} dashboard queries", queries.len());
    queries.extend(
        alerts
            .lines()
            .filter_map(|l| l.trim().strip_prefix("expr:"))
            .map(str::to_owned),
    );
    let mut queried = std::collections::BTreeSet::new();
    for query in &queries {
        for word in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if (word.starts_with("homestead_") && !word.starts_with("homestead_scim_"))
                || word.starts_with("process_")
            {
                queried.insert(word.to_owned());
            }
        }
    }
    assert!(queried.len() >= 10, "{queried:?}");
    for metric in &queried {
        let exported = body
            .lines()
            .any(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")));
        assert!(
            exported,
            "the dashboard or an alert queries {metric}, which /metrics does not have"
        );
    }
    assert_eq!(http_get(&env.metrics_address, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(&env.metrics_address, "/readyz").unwrap().0, 200);
}

#[tokio::test]
async fn labels_without_the_users_uid_are_not_ownership() {
    let s = Scenario::new();
    let c = admin().await;
    // Homestead's labels for this User, but the uid of some other (say, an earlier) User.
    let forged = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("user-e2e-forged".into()),
            labels: Some(
                [
                    (LABEL_MANAGED_BY.to_owned(), "homestead".to_owned()),
                    (LABEL_USER.to_owned(), "e2e-forged".to_owned()),
                ]
                .into(),
            ),
            annotations: Some(
                [(
                    ANNOTATION_USER_UID.to_owned(),
                    "not-this-users-uid".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    s.track_namespace("user-e2e-forged");
    let before = namespaces(&c)
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    s.create(&c, &User::test("e2e-forged")).await;
    wait_reason(&c, "e2e-forged", "NamespaceConflict").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = namespaces(&c).get("user-e2e-forged").await.unwrap();
    assert_eq!(
        serde_json::to_value(&before).unwrap(),
        serde_json::to_value(&after).unwrap()
    );
    assert!(
        bindings(&c, "user-e2e-forged")
            .get_opt(RB)
            .await
            .unwrap()
            .is_none()
    );
}

/// Rule 16 for a User made again under the name of one just deleted (found by the soak, seed
/// 46): the operator remembered the status it had written for the first one by name, took the
/// second one's identical status for that unconfirmed write, and left it without `Ready` until
/// a retry seconds later. Its first reconcile writes the second User's status: after the
/// second create, the operator's first status write for it comes before any second attempt at
/// its namespace.
#[tokio::test]
async fn a_user_made_again_under_a_deleted_ones_name_gets_its_own_status_at_once() {
    let s = Scenario::new();
    let c = admin().await;
    let taken = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("e2e-taken".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    s.track_namespace("e2e-taken");
    namespaces(&c)
        .create(&PostParams::default(), &taken)
        .await
        .unwrap();
    // A namespace someone else has: the User is refused with the same status both times.
    let spec = json!({ "namespace": { "name": "e2e-taken" } });
    s.create(&c, &User::test("e2e-again").with_spec(spec.clone()))
        .await;
    let first = wait_reason(&c, "e2e-again", "NamespaceConflict").await;
    users(&c)
        .delete("e2e-again", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&users(&c), "e2e-again", 30).await;
    let mark = audit().len();
    let second = s.create(&c, &User::test("e2e-again").with_spec(spec)).await;
    assert_ne!(first.uid(), second.uid(), "another User of the same name");
    wait_reason(&c, "e2e-again", "NamespaceConflict").await;
    let uid = second.uid().unwrap();
    let writes: Vec<String> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e))
        .filter_map(|e| {
            let r = &e["objectRef"];
            let about_it = (r["resource"] == "users" && r["name"] == "e2e-again")
                || (r["resource"] == "namespaces" && r["name"] == "e2e-taken");
            about_it.then(|| {
                format!(
                    "{} {}{}",
                    e["verb"].as_str().unwrap_or_default(),
                    r["resource"].as_str().unwrap_or_default(),
                    r["subresource"]
                        .as_str()
                        .map(|s| format!("/{s}"))
                        .unwrap_or_default()
                )
            })
        })
        .collect();
    let first_status = writes
        .iter()
        .position(|w| w == "patch users/status")
        .unwrap_or_else(|| panic!("no status write for User {uid}: {writes:?}"));
    let attempts = writes[..first_status]
        .iter()
        .filter(|w| *w == "create namespaces")
        .count();
    assert_eq!(
        attempts, 1,
        "the first reconcile of the second User wrote its status: {writes:?}"
    );
}
