//! Adoption (docs/adoption.md): an existing namespace becomes a User's only once the platform
//! labels it `homestead.dev/adopt-for=<User>`; a name match, or a label for someone else, is a
//! `NamespaceConflict` with no write to it; adopting deletes nothing and names the RoleBindings
//! it found.

use super::*;
use homestead_api::LABEL_ADOPT_FOR;
use homestead_testenv::ADMIN;
use k8s_openapi::api::apps::v1::Deployment;

#[tokio::test]
async fn a_hand_made_namespace_is_adopted_only_once_the_platform_hands_it_over() {
    let s = Scenario::new();
    let c = admin().await;
    let (ns, user) = ("e2e-legacy", "e2e-adoptee");
    s.track_namespace(ns);
    let legacy: Namespace = serde_json::from_value(json!({
        "metadata": { "name": ns, "labels": { "team": "ml" } } }))
    .unwrap();
    namespaces(&c)
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    // What people made there before Homestead: a workload, its settings, and access for dave.
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings" }, "data": { "model": "v7" } }))
    .unwrap();
    Api::<ConfigMap>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &settings)
        .await
        .unwrap();
    let web: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 0,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "web:1" }] }
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let dave: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "legacy-dev" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": "dave@example.com" }]
    }))
    .unwrap();
    bindings(&c, ns)
        .create(&PostParams::default(), &dave)
        .await
        .unwrap();

    // Asked for by name alone: refused, with how to hand it over, and nothing written to it.
    let mark = settled_mark().await;
    s.create(
        &c,
        &User::test(user).with_spec(json!({ "namespace": { "name": ns } })),
    )
    .await;
    let refused = wait_reason(&c, user, "NamespaceConflict").await;
    let message = refused.ready_condition().unwrap().message.clone();
    assert!(message.contains(LABEL_ADOPT_FOR), "{message}");
    // Handed to someone else: still refused, and the platform's label is left alone.
    let hand_to =
        |to: &str| Patch::Merge(json!({ "metadata": { "labels": { LABEL_ADOPT_FOR: to } } }));
    namespaces(&c)
        .patch(ns, &PatchParams::default(), &hand_to("e2e-someone-else"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        reason(&users(&c).get(user).await.unwrap()).as_deref(),
        Some("NamespaceConflict")
    );
    let untouched = namespaces(&c).get(ns).await.unwrap();
    assert_eq!(untouched.labels().get(LABEL_MANAGED_BY), None);
    assert_eq!(
        untouched.labels().get(LABEL_ADOPT_FOR).map(String::as_str),
        Some("e2e-someone-else")
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| {
            is_operator_change(e)
                && (e["objectRef"]["name"] == ns || e["objectRef"]["namespace"] == ns)
        })
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "wrote to a namespace not handed over: {writes:#?}"
    );
    assert_eq!(can_get_pods("e2e-adoptee@example.com", ns), "no");

    // Handed to this User: adopted, with nothing in it deleted and its RoleBinding named.
    namespaces(&c)
        .patch(ns, &PatchParams::default(), &hand_to(user))
        .await
        .unwrap();
    let adopted = wait_reason(&c, user, "Provisioned").await;
    let home = namespaces(&c).get(ns).await.unwrap();
    let labels = home.labels();
    assert_eq!(
        labels.get(LABEL_MANAGED_BY).map(String::as_str),
        Some("homestead")
    );
    assert_eq!(labels.get(LABEL_USER).map(String::as_str), Some(user));
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("ml"),
        "their labels stay"
    );
    assert_eq!(
        labels.get(LABEL_ADOPT_FOR),
        None,
        "the handing-over is used up"
    );
    assert_eq!(
        home.annotations().get(ANNOTATION_USER_UID),
        adopted.metadata.uid.as_ref()
    );
    Api::<ConfigMap>::namespaced(c.clone(), ns)
        .get("settings")
        .await
        .expect("the ConfigMap made before adoption stays");
    Api::<Deployment>::namespaced(c.clone(), ns)
        .get("web")
        .await
        .expect("the workload made before adoption stays");
    bindings(&c, ns)
        .get("legacy-dev")
        .await
        .expect("kept: --revoke-adopted-role-bindings is off");
    bindings(&c, ns).get(RB).await.expect("the owner's binding");
    // The transition's one Event sums up the changes, the adoption first.
    wait_event(&c, user, "Normal", "Provisioned").await;
    let (_, _, note) = user_events(&c, user)
        .await
        .into_iter()
        .find(|(_, reason, _)| reason == "Provisioned")
        .unwrap();
    assert!(note.contains("adopted namespace"), "{note}");
    assert!(
        note.contains("kept its RoleBindings made before adoption, unmanaged: legacy-dev"),
        "{note}"
    );
    assert_eq!(can_get_pods("e2e-adoptee@example.com", ns), "yes");
    assert_eq!(
        can_get_pods("dave@example.com", ns),
        "yes",
        "kept, unmanaged"
    );
}

/// Runs `homestead adopt ARGS CSV` as the admin (the platform); returns (success, stdout).
fn adopt(csv: &str, args: &[&str]) -> (bool, String) {
    let plane = env().plane;
    let dir = plane.dir();
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &dir.join("platform.kubeconfig"))
        .unwrap();
    let file = dir.join("adopt.csv");
    std::fs::write(&file, csv).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
        .arg("adopt")
        .args(args)
        .arg(&file)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), String::from_utf8(out.stdout).unwrap())
}

/// `homestead adopt --dry-run` reports a CSV's namespaces and writes nothing; without it, it
/// labels the ones that can be adopted (the refused one stays as it was), and the User asking
/// for that namespace is then provisioned in it.
#[tokio::test]
async fn homestead_adopt_reports_then_hands_over_many_at_once() {
    let s = Scenario::new();
    let c = admin().await;
    let (ready, taken) = ("e2e-bulk-ready", "e2e-bulk-taken");
    for ns in [ready, taken] {
        s.track_namespace(ns);
        let namespace: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
        namespaces(&c)
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    // `taken` is already somebody's home in all but uid: never adopted.
    let claimed = json!({ "metadata": { "labels": {
        LABEL_MANAGED_BY: "homestead", LABEL_USER: "e2e-bulk-other" } } });
    namespaces(&c)
        .patch(taken, &PatchParams::default(), &Patch::Merge(claimed))
        .await
        .unwrap();
    s.create(
        &c,
        &User::test("e2e-bulk").with_spec(json!({ "namespace": { "name": ready } })),
    )
    .await;
    wait_reason(&c, "e2e-bulk", "NamespaceConflict").await;
    let csv =
        format!("namespace,user\n{ready},e2e-bulk\n{taken},e2e-bulk\ne2e-bulk-missing,e2e-bulk\n");

    let (ok, out) = adopt(&csv, &["--dry-run", "-o", "csv"]);
    assert!(!ok, "a refused row exits 1: {out}");
    let mut reader = csv::Reader::from_reader(out.as_bytes());
    let rows: Vec<std::collections::HashMap<String, String>> =
        reader.deserialize().map(Result::unwrap).collect();
    let state = |ns: &str| {
        let row = rows.iter().find(|r| r["namespace"] == ns).unwrap();
        (row["state"].clone(), row["detail"].clone())
    };
    assert_eq!(state(ready).0, "ready", "{out}");
    assert_eq!(state(taken).0, "refused");
    assert!(state(taken).1.contains("for User e2e-bulk-other"), "{out}");
    assert_eq!(
        state("e2e-bulk-missing"),
        ("refused".into(), "no such namespace".into())
    );
    let dry = namespaces(&c).get(ready).await.unwrap();
    assert_eq!(
        dry.labels().get(LABEL_ADOPT_FOR),
        None,
        "a dry run writes nothing"
    );

    let (ok, out) = adopt(&csv, &[]);
    assert!(!ok, "{out}");
    assert!(out.starts_with("NAMESPACE"), "{out}");
    let handed = out.lines().find(|l| l.starts_with(ready)).unwrap();
    assert!(handed.contains("handed"), "{out}");
    wait_reason(&c, "e2e-bulk", "Provisioned").await;
    let home = namespaces(&c).get(ready).await.unwrap();
    assert_eq!(
        home.labels().get(LABEL_USER).map(String::as_str),
        Some("e2e-bulk")
    );
    let other = namespaces(&c).get(taken).await.unwrap();
    assert_eq!(
        other.labels().get(LABEL_ADOPT_FOR),
        None,
        "the refused row is not labelled"
    );
}

/// An adoption cut short after its first write (the operator stopped, or its next request
/// failed): the namespace is already the User's but still labelled `homestead.dev/adopt-for`.
/// The next reconcile finishes it: the RoleBindings found are named, the label goes, nothing is
/// deleted.
#[tokio::test]
async fn an_adoption_cut_short_is_finished_by_the_next_reconcile() {
    let s = Scenario::new();
    let c = admin().await;
    let (ns, user) = ("e2e-halfway", "e2e-halfway");
    s.track_namespace(ns);
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    namespaces(&c)
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let before: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "before" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": "erin@example.com" }]
    }))
    .unwrap();
    bindings(&c, ns)
        .create(&PostParams::default(), &before)
        .await
        .unwrap();
    s.create(
        &c,
        &User::test(user).with_spec(json!({ "namespace": { "name": ns } })),
    )
    .await;
    let refused = wait_reason(&c, user, "NamespaceConflict").await;
    // What the first write of an adoption leaves: Homestead's labels and the User's uid, and
    // the platform's label still there.
    let halfway = json!({ "metadata": {
        "labels": { LABEL_MANAGED_BY: "homestead", LABEL_USER: user, LABEL_ADOPT_FOR: user,
                    "pod-security.kubernetes.io/enforce": "baseline" },
        "annotations": { ANNOTATION_USER_UID: refused.metadata.uid.clone().unwrap() } } });
    namespaces(&c)
        .patch(ns, &PatchParams::default(), &Patch::Merge(halfway))
        .await
        .unwrap();
    wait_reason(&c, user, "Provisioned").await;
    eventually("the adopt-for label removed", 30, || {
        let c = c.clone();
        async move {
            let home = namespaces(&c).get(ns).await.unwrap();
            home.labels().get(LABEL_ADOPT_FOR).is_none().then_some(())
        }
    })
    .await;
    bindings(&c, ns).get("before").await.expect("kept");
    let notes: Vec<String> = user_events(&c, user)
        .await
        .into_iter()
        .map(|(_, _, note)| note)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("kept its RoleBindings made before adoption, unmanaged: before")),
        "{notes:#?}"
    );
}
