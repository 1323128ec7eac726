//! What a person can really do, checked with their own token and with `kubectl auth can-i`
//! against the real aggregated `admin`/`edit`/`view` roles (docs/design.md rules 12 to 15):
//! access to their namespace and nowhere else, revocation that leaves no way back in, creation
//! that never takes over a namespace, Pod Security, and the admission policy that bounds the
//! operator itself.

mod common;

use std::time::Duration;

use common::*;
use homestead_api::User;
use homestead_testenv::{ADMIN, OPERATOR};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// `kubectl auth can-i ARGS --as=...` as the admin (who may impersonate): the first line of
/// the answer, "yes" or "no".
fn can_i(impersonate: &[&str], args: &[&str]) -> String {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    all.extend_from_slice(impersonate);
    let (_, out) = kubectl(&all, "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// The identities that could reach into `ns` after the person bound `admin` to each of them:
/// the person, a group they belong to, and a ServiceAccount of the namespace.
fn ways_in(ns: &str, person: &str) -> [Vec<String>; 3] {
    [
        vec![format!("--as={person}")],
        vec![
            "--as=someone-else@example.com".to_owned(),
            format!("--as-group={TENANT_GROUP}"),
        ],
        vec![format!("--as=system:serviceaccount:{ns}:robot")],
    ]
}

/// As the person (their own token), binds `admin` to themselves, to their group and to a
/// ServiceAccount `robot` they create in `ns`, and checks each really grants access.
async fn open_every_way_in(ns: &str, person: &str) {
    let tom = env().plane.client(person).await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(tom.clone(), ns);
    sas.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: meta("robot"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(tom, ns);
    for (name, kind, subject) in [
        ("mine", "User", person.to_owned()),
        ("my-team", "Group", TENANT_GROUP.to_owned()),
        ("my-robot", "ServiceAccount", "robot".to_owned()),
    ] {
        let binding = RoleBinding {
            metadata: meta(name),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: "admin".into(),
            },
            subjects: Some(vec![Subject {
                kind: kind.into(),
                name: subject,
                namespace: (kind == "ServiceAccount").then(|| ns.to_owned()),
                api_group: (kind != "ServiceAccount").then(|| "rbac.authorization.k8s.io".into()),
            }]),
        };
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    for who in ways_in(ns, person) {
        let who: Vec<&str> = who.iter().map(String::as_str).collect();
        assert_eq!(
            can_i(&who, &["get", "configmaps", "-n", ns]),
            "yes",
            "{who:?} has no access to begin with"
        );
    }
}

/// Checks that nobody of [`ways_in`] has any permission left in `ns`: `can-i --list` shows no
/// namespaced resource, and specific checks say no.
fn assert_no_access(ns: &str, person: &str) {
    for who in ways_in(ns, person) {
        let who: Vec<&str> = who.iter().map(String::as_str).collect();
        let mut args = vec!["auth", "can-i", "--list", "-n", ns];
        args.extend_from_slice(&who);
        let (ok, list) = kubectl(&args, "");
        assert!(ok, "{list}");
        for resource in [
            "configmaps",
            "pods",
            "deployments",
            "rolebindings",
            "secrets",
            "serviceaccounts",
            "*.*",
        ] {
            assert!(
                !list
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(resource)),
                "{who:?} still has {resource} in {ns}:\n{list}"
            );
        }
        for check in [
            ["get", "configmaps"],
            ["create", "rolebindings"],
            ["create", "pods"],
        ] {
            let mut args = check.to_vec();
            args.extend(["-n", ns]);
            assert_eq!(
                can_i(&who, &args),
                "no",
                "{who:?} may still {check:?} in {ns}"
            );
        }
    }
}

async fn set_suspended(c: &Client, name: &str, suspended: bool) {
    Api::<User>::all(c.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspended": suspended } })),
        )
        .await
        .unwrap();
}

fn tom_user(name: &str, person: &str, spec: serde_json::Value) -> User {
    let mut spec = spec;
    spec["identity"] = json!({ "username": person });
    User::test(name).with_spec(spec)
}

#[tokio::test]
async fn a_person_works_in_their_namespace_and_nowhere_else() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &tom_user("acc-home", TENANT, json!({}))).await;
    s.create(&c, &User::test("acc-neighbour")).await;
    wait_reason(&c, "acc-home", "Provisioned").await;
    wait_reason(&c, "acc-neighbour", "Provisioned").await;

    let me = [format!("--as={TENANT}")];
    let me: Vec<&str> = me.iter().map(String::as_str).collect();
    assert_eq!(
        can_i(&me, &["create", "deployments.apps", "-n", "user-acc-home"]),
        "yes"
    );
    for denied in [
        ["get", "configmaps"],
        ["list", "pods"],
        ["create", "deployments.apps"],
    ] {
        let mut args = denied.to_vec();
        args.extend(["-n", "user-acc-neighbour"]);
        assert_eq!(
            can_i(&me, &args),
            "no",
            "{denied:?} in the neighbour's namespace"
        );
    }

    // Real requests with the person's own token.
    let tom = env().plane.client(TENANT).await.unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx" }] },
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(tom.clone(), "user-acc-home")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the person can create a Deployment in their namespace");
    let theirs: Api<ConfigMap> = Api::namespaced(tom, "user-acc-neighbour");
    match theirs.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("reading another person's namespace: {other:?}"),
    }
}

#[tokio::test]
async fn suspension_leaves_no_way_back_in_and_unsuspending_restores_homesteads_binding() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &tom_user("acc-susp", TENANTS[1], json!({})))
        .await;
    wait_reason(&c, "acc-susp", "Provisioned").await;
    open_every_way_in("user-acc-susp", TENANTS[1]).await;

    set_suspended(&c, "acc-susp", true).await;
    wait_reason(&c, "acc-susp", "Suspended").await;
    wait_no_role_bindings(&c, "user-acc-susp", 30).await;
    assert_no_access("user-acc-susp", TENANTS[1]);
    let revoked = event_notes(&c, "acc-susp", "Suspended").await;
    assert!(
        revoked
            .iter()
            .any(|n| ["homestead-user", "mine", "my-team", "my-robot"]
                .iter()
                .all(|b| n.contains(b))),
        "the Event names every removed RoleBinding: {revoked:?}"
    );

    // A binding made while suspended (by an admin, say) is removed too.
    let sneaky = RoleBinding {
        metadata: meta("sneaky"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "edit".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: TENANTS[1].into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }]),
    };
    let rbs: Api<RoleBinding> = Api::namespaced(c.clone(), "user-acc-susp");
    rbs.create(&PostParams::default(), &sneaky).await.unwrap();
    wait_gone(&rbs, "sneaky", 30).await;

    set_suspended(&c, "acc-susp", false).await;
    wait_reason(&c, "acc-susp", "Provisioned").await;
    let me = [format!("--as={}", TENANTS[1])];
    let me: Vec<&str> = me.iter().map(String::as_str).collect();
    eventually("the person's access to come back", 30, || async {
        (can_i(&me, &["get", "configmaps", "-n", "user-acc-susp"]) == "yes").then_some(())
    })
    .await;
    let names: Vec<String> = rbs
        .list(&Default::default())
        .await
        .unwrap()
        .iter()
        .map(|rb| rb.name_any())
        .collect();
    assert_eq!(
        names,
        ["homestead-user"],
        "only Homestead's own binding comes back"
    );
}

#[tokio::test]
async fn retain_offboarding_leaves_no_way_back_in() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &tom_user(
            "acc-keep",
            TENANTS[2],
            json!({ "deletionPolicy": "Retain" }),
        ),
    )
    .await;
    wait_reason(&c, "acc-keep", "Provisioned").await;
    open_every_way_in("user-acc-keep", TENANTS[2]).await;
    Api::<User>::all(c.clone())
        .delete("acc-keep", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<User>::all(c.clone()), "acc-keep", 30).await;
    assert_no_access("user-acc-keep", TENANTS[2]);
    s.track_namespace("user-acc-keep");
}

#[tokio::test]
async fn delete_offboarding_revokes_before_the_namespace_is_gone() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &tom_user("acc-del", TENANTS[3], json!({})))
        .await;
    wait_reason(&c, "acc-del", "Provisioned").await;
    open_every_way_in("user-acc-del", TENANTS[3]).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "user-acc-del");
    let blocker = ConfigMap {
        metadata: ObjectMeta {
            finalizers: Some(vec!["e2e.homestead.dev/block".into()]),
            ..meta("blocker")
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &blocker).await.unwrap();
    Api::<User>::all(c.clone())
        .delete("acc-del", &DeleteParams::default())
        .await
        .unwrap();
    wait_terminating(&c, "acc-del").await;
    assert_no_access("user-acc-del", TENANTS[3]);
    cms.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .unwrap();
    wait_gone(&Api::<Namespace>::all(c.clone()), "user-acc-del", 60).await;
}

async fn wait_terminating(c: &Client, name: &str) {
    let users: Api<User> = Api::all(c.clone());
    eventually(&format!("{name} to be Terminating"), 60, || async {
        let u = users.get_opt(name).await.ok()??;
        (reason(&u).as_deref() == Some("Terminating")).then_some(())
    })
    .await;
}

/// The notes of the Events with `reason` about `user`.
async fn event_notes(c: &Client, user: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), "default");
    eventually(&format!("a {reason} Event on {user}"), 30, || async {
        let notes: Vec<String> = events
            .list(&Default::default())
            .await
            .ok()?
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(user))
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect();
        (!notes.is_empty()).then_some(notes)
    })
    .await
}

#[tokio::test]
async fn ten_users_asking_for_one_namespace_end_with_one_owner() {
    let s = Scenario::new();
    let c = admin().await;
    let names: Vec<String> = (0..10).map(|i| format!("acc-race-{i}")).collect();
    let users: Vec<User> = names
        .iter()
        .map(|n| User::test(n).with_spec(json!({ "namespace": { "name": "user-acc-race" } })))
        .collect();
    futures::future::join_all(users.iter().map(|u| s.create(&c, u))).await;
    let api: Api<User> = Api::all(c.clone());
    let reasons = eventually("all ten to be decided", 60, || async {
        let mut reasons = Vec::new();
        for n in &names {
            let u = api.get(n).await.ok()?;
            let current = u.status.as_ref()?.observed_generation == u.metadata.generation;
            let r = reason(&u).filter(|_| current)?;
            (r == "Provisioned" || r == "NamespaceConflict").then_some(())?;
            reasons.push((n.clone(), r));
        }
        Some(reasons)
    })
    .await;
    let owners: Vec<&String> = reasons
        .iter()
        .filter(|(_, r)| r == "Provisioned")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(owners.len(), 1, "{reasons:?}");
    let owner = owners[0];
    let ns = Api::<Namespace>::all(c.clone())
        .get("user-acc-race")
        .await
        .unwrap();
    assert_eq!(ns.labels().get("homestead.dev/user"), Some(owner));

    // No RoleBinding write by the operator there ever named anyone but the owner.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes: Vec<serde_json::Value> = audit()
        .into_iter()
        .filter(|e| {
            is_operator_write(e)
                && e["objectRef"]["resource"] == "rolebindings"
                && e["objectRef"]["namespace"] == "user-acc-race"
        })
        .filter(|e| e["verb"] != "delete")
        .collect();
    assert!(!writes.is_empty(), "the owner got its RoleBinding");
    for write in &writes {
        let body = write["requestObject"].to_string();
        assert!(
            body.contains(&format!("{owner}@example.com")),
            "a write without its body or subject: {write}"
        );
        for other in names.iter().filter(|n| *n != owner) {
            assert!(
                !body.contains(&format!("\"{other}@example.com\"")),
                "{other} was granted access: {write}"
            );
        }
    }
}

#[tokio::test]
async fn a_namespace_made_by_someone_else_first_is_never_touched() {
    let s = Scenario::new();
    let c = admin().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    // Race the operator: create the namespace the User asks for as soon as the User exists.
    // Retried with fresh names in the rare case the operator creates it first (legitimately).
    for attempt in 0..5 {
        let (name, ns_name) = (
            format!("acc-sniped-{attempt}"),
            format!("user-acc-sniped-{attempt}"),
        );
        s.create(&c, &User::test(&name)).await;
        let sniped = Namespace {
            metadata: ObjectMeta {
                labels: Some([("owner".to_owned(), "someone-else".to_owned())].into()),
                ..meta(&ns_name)
            },
            ..Default::default()
        };
        let Ok(before) = namespaces.create(&PostParams::default(), &sniped).await else {
            continue;
        };
        s.track_namespace(&ns_name);
        let mark = settled_mark().await;
        wait_reason(&c, &name, "NamespaceConflict").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = namespaces.get(&ns_name).await.unwrap();
        assert_eq!(
            serde_json::to_value(&before).unwrap(),
            serde_json::to_value(&after).unwrap()
        );
        let touched: Vec<_> = audit()[mark..]
            .iter()
            .filter(|e| {
                is_operator_change(e)
                    && (e["objectRef"]["name"] == ns_name.as_str()
                        || e["objectRef"]["namespace"] == ns_name.as_str())
            })
            .cloned()
            .collect();
        assert!(
            touched.is_empty(),
            "the operator wrote to {ns_name}: {touched:#?}"
        );
        Api::<User>::all(c.clone())
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        wait_gone(&Api::<User>::all(c.clone()), &name, 30).await;
        assert!(
            namespaces
                .get(&ns_name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none(),
            "offboarding deleted {ns_name}"
        );
        return;
    }
    panic!("the operator won every race; the scenario never happened");
}

#[tokio::test]
async fn pod_security_refuses_a_privileged_pod() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &tom_user("acc-psa", TENANTS[4], json!({})))
        .await;
    wait_reason(&c, "acc-psa", "Provisioned").await;
    let pod = |privileged: bool| {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" },
            "spec": { "containers": [{ "name": "c", "image": "busybox", "securityContext": { "privileged": privileged } }] },
        })
        .to_string()
    };
    let args = [
        "create",
        "--dry-run=server",
        "-n",
        "user-acc-psa",
        "-f",
        "-",
    ];
    let (ok, out) = kubectl_as(TENANTS[4], &args, &pod(true));
    assert!(
        !ok && out.contains("violates PodSecurity \"baseline:latest\""),
        "{out}"
    );
    let (ok, out) = kubectl_as(TENANTS[4], &args, &pod(false));
    assert!(ok, "an ordinary pod is allowed: {out}");
}

#[tokio::test]
async fn the_admission_policy_bounds_the_operator_where_rbac_would_not() {
    env();
    let operator = [format!("--as={OPERATOR}")];
    let operator: Vec<&str> = operator.iter().map(String::as_str).collect();
    // RBAC alone allows both...
    assert_eq!(
        can_i(&operator, &["create", "rolebindings", "-n", "kube-system"]),
        "yes"
    );
    assert_eq!(can_i(&operator, &["patch", "namespaces/default"]), "yes");
    // (Least privilege: its owner references block no deletion, so it holds no right on
    // `users/finalizers`, docs/design.md rule 8.)
    assert_eq!(
        can_i(
            &operator,
            &["update", "users.homestead.dev", "--subresource=finalizers"]
        ),
        "no"
    );
    // ...the policy denies them.
    let client = env().plane.client(OPERATOR).await.unwrap();
    let binding = RoleBinding {
        metadata: meta("homestead-escape"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: TENANT.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }]),
    };
    let denied = Api::<RoleBinding>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &binding)
        .await
        .expect_err("a RoleBinding in kube-system");
    assert!(
        denied.to_string().contains("homestead-operator-namespaced"),
        "{denied}"
    );
    let label = Patch::Merge(json!({ "metadata": { "labels": { "homestead.dev/user": "x" } } }));
    let denied = Api::<Namespace>::all(client.clone())
        .patch("default", &PatchParams::default(), &label)
        .await
        .expect_err("labelling default");
    assert!(
        denied.to_string().contains("homestead-operator-bounds"),
        "{denied}"
    );
    let default = Api::<Namespace>::all(admin().await)
        .get("default")
        .await
        .unwrap();
    assert!(!default.labels().contains_key("homestead.dev/user"));

    // Revocation's deletecollection: RBAC allows it anywhere; the policy judges each deletion,
    // so in a namespace that is not Homestead's nothing goes.
    assert_eq!(
        can_i(
            &operator,
            &["deletecollection", "rolebindings", "-n", "acc-foreign-dc"]
        ),
        "yes"
    );
    let cluster_admin = admin().await;
    Api::<Namespace>::all(cluster_admin.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta("acc-foreign-dc"),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let theirs = Api::<RoleBinding>::namespaced(cluster_admin.clone(), "acc-foreign-dc");
    theirs
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let denied = Api::<RoleBinding>::namespaced(client.clone(), "acc-foreign-dc")
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect_err("a deletecollection in someone else's namespace");
    assert!(
        denied.to_string().contains("homestead-operator-namespaced"),
        "{denied}"
    );
    assert!(
        theirs.get_opt("homestead-escape").await.unwrap().is_some(),
        "their RoleBinding is still there"
    );
    Api::<Namespace>::all(cluster_admin)
        .delete("acc-foreign-dc", &DeleteParams::default())
        .await
        .unwrap();
    let _ = ADMIN;

    // The names it may create are the policy's `namespacePattern` (the tests set
    // ALLOWED_NAMESPACE_PATTERN): a Namespace with Homestead's labels is admitted under a name
    // the pattern allows and refused under any other, whatever RBAC says.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let homesteads = |name: &str| -> Namespace {
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": {
            "app.kubernetes.io/managed-by": "homestead", "homestead.dev/user": "acc-pattern",
            "pod-security.kubernetes.io/enforce": "baseline" } } }))
        .unwrap()
    };
    let namespaces = Api::<Namespace>::all(client);
    for allowed in ["user-acc-pattern", "e2e-acc-pattern"] {
        namespaces
            .create(&dry_run, &homesteads(allowed))
            .await
            .unwrap_or_else(|e| panic!("{allowed} matches the pattern: {e}"));
    }
    for outside in ["acc-pattern", "research-acc-pattern", "xuser-acc-pattern"] {
        let denied = namespaces
            .create(&dry_run, &homesteads(outside))
            .await
            .expect_err(outside)
            .to_string();
        assert!(
            denied.contains("homestead-operator-bounds")
                && denied.contains(
                    "may only create namespaces whose names match ^(user-.*|e2e-.*|ws-.*)$"
                ),
            "{outside}: {denied}"
        );
    }
}

#[tokio::test]
async fn unsafe_keys_are_refused_at_admission_with_the_rule() {
    env();
    let doc = |name: &str, namespace: &str| {
        format!(
            "apiVersion: {api}\nkind: User\nmetadata:\n  name: {name}\nspec:\n  identity: {{username: a@example.com}}\n  namespace: {namespace}\n",
            api = homestead_api::API_VERSION
        )
    };
    for (key_kind, key) in [
        ("labels", "kubernetes.io/metadata.name"),
        ("labels", "node.k8s.io/pool"),
        ("annotations", "scheduler.alpha.kubernetes.io/node-selector"),
        ("labels", "app.kubernetes.io/managed-by"),
    ] {
        let yaml = doc("acc-badkey", &format!("{{{key_kind}: {{'{key}': x}}}}"));
        let (ok, out) = kubectl(&["apply", "-f", "-"], &yaml);
        assert!(
            !ok && out.contains("may not use reserved keys"),
            "{key}: {out}"
        );
    }
    // What only the operator's flags know (--reserved-key, --allowed-namespace) ends in
    // Ready=False with nothing created: bad_input.rs, what_only_the_operator_knows_*.
}
