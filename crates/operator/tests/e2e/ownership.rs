//! Ownership and refusals (docs/design.md rules 2, 3, 4, 5, 13 and 15): a namespace is a User's only
//! when proven, someone else's namespace is never touched, reserved names and roles outside the
//! allow-list are refused, and the operator holds least privilege.

use super::*;

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

#[tokio::test]
async fn bad_users_are_refused_at_admission() {
    let s = Scenario::new();
    let doc = |name: &str, spec: &str| {
        format!(
            "apiVersion: {api}\nkind: User\nmetadata:\n  name: {name}\nspec:\n{spec}",
            api = homestead_api::API_VERSION
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
