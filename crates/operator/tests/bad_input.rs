//! Bad input gets a clear answer and loses nothing (docs/design.md rule 16): every User the
//! API server would later refuse is refused by `kubectl apply` with the rule named, or reported
//! as `Ready=False` with a reason, a message and a Warning Event, with nothing created for it;
//! what only the server knows (a cluster's admission policy) is reported the same way; inputs
//! the server normalizes cost no write; a role change the server refuses keeps the old access.

mod common;

use std::time::Duration;

use common::*;
use homestead_api::User;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// A User document with `spec` (YAML flow mappings), for `kubectl apply`.
fn doc(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {api}\nkind: User\nmetadata:\n  name: {name}\nspec:\n{spec}\n",
        api = homestead_api::API_VERSION
    )
}

fn id() -> &'static str {
    "  identity: {username: bad@example.com}"
}

#[tokio::test]
async fn bad_users_are_refused_at_admission_with_the_rule_named() {
    env();
    let long = |n: usize| "a".repeat(n);
    let labels = (0..33)
        .map(|i| format!("l{i}: x"))
        .collect::<Vec<_>>()
        .join(", ");
    let quotas = (0..65)
        .map(|i| format!("count/r{i}.example.com: '1'"))
        .collect::<Vec<_>>()
        .join(", ");
    let groups = (0..17)
        .map(|i| format!("g{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let cases: Vec<(String, String, &str)> = vec![
        // From the issue.
        (
            "bad-neg".into(),
            format!("{}\n  quota: {{hard: {{pods: '-5'}}}}", id()),
            "in body should match",
        ),
        (
            "bad-lots".into(),
            format!("{}\n  quota: {{hard: {{requests.cpu: lots}}}}", id()),
            "in body should match",
        ),
        (
            "bad-res".into(),
            format!("{}\n  quota: {{hard: {{'not a resource': '1'}}}}", id()),
            "keys must be resource names",
        ),
        (
            "bad-lval".into(),
            format!(
                "{}\n  namespace: {{labels: {{team: 'has spaces and !!'}}}}",
                id()
            ),
            "labels values must be",
        ),
        (
            "bad-lkey".into(),
            format!("{}\n  namespace: {{labels: {{'a/b/c': x}}}}", id()),
            "labels keys must be qualified names",
        ),
        // Quotas.
        (
            "bad-qunk".into(),
            format!("{}\n  quota: {{hard: {{bananas: '1'}}}}", id()),
            "must be standard quota resources",
        ),
        (
            "bad-qfmt".into(),
            format!("{}\n  quota: {{hard: {{pods: '1.5.5'}}}}", id()),
            "in body should match",
        ),
        (
            "bad-qmany".into(),
            format!("{}\n  quota: {{hard: {{{quotas}}}}}", id()),
            "64",
        ),
        (
            "bad-qneg".into(),
            format!("{}\n  quota: {{hard: {{requests.memory: '-1Gi'}}}}", id()),
            "in body should match",
        ),
        // Labels and annotations.
        (
            "bad-luni".into(),
            format!("{}\n  namespace: {{labels: {{'équipe': x}}}}", id()),
            "labels keys must be qualified names",
        ),
        (
            "bad-lempty".into(),
            format!("{}\n  namespace: {{labels: {{'': x}}}}", id()),
            "labels keys must be qualified names",
        ),
        (
            "bad-llong".into(),
            format!("{}\n  namespace: {{labels: {{team: {}}}}}", id(), long(64)),
            "63",
        ),
        (
            "bad-lmany".into(),
            format!("{}\n  namespace: {{labels: {{{labels}}}}}", id()),
            "32",
        ),
        (
            "bad-lvuni".into(),
            format!("{}\n  namespace: {{labels: {{team: 'ünïcode'}}}}", id()),
            "labels values must be",
        ),
        (
            "bad-akey".into(),
            format!("{}\n  namespace: {{annotations: {{'my key': x}}}}", id()),
            "annotations keys must be qualified names",
        ),
        (
            "bad-along".into(),
            format!(
                "{}\n  namespace: {{annotations: {{note: {}}}}}",
                id(),
                long(4097)
            ),
            "4096",
        ),
        (
            "bad-kube".into(),
            format!(
                "{}\n  namespace: {{labels: {{'kubernetes.io/metadata.name': x}}}}",
                id()
            ),
            "reserved keys",
        ),
        // Strings and lists.
        (
            "bad-dname".into(),
            format!("{}\n  displayName: {}", id(), long(257)),
            "256",
        ),
        (
            "bad-email".into(),
            format!("{}\n  email: {}", id(), long(321)),
            "320",
        ),
        (
            "bad-user-empty".into(),
            "  identity: {username: ''}".into(),
            "spec.identity.username",
        ),
        (
            "bad-user-long".into(),
            format!("  identity: {{username: {}}}", long(254)),
            "253",
        ),
        (
            "bad-groups".into(),
            format!("  identity: {{username: a@example.com, groups: [{groups}]}}"),
            "16",
        ),
        (
            "bad-group-empty".into(),
            "  identity: {username: a@example.com, groups: ['']}".into(),
            "spec.identity.groups",
        ),
        (
            "bad-role-empty".into(),
            format!("{}\n  role: ''", id()),
            "spec.role",
        ),
        (
            "bad-nsname".into(),
            format!("{}\n  namespace: {{name: Upper}}", id()),
            "spec.namespace.name",
        ),
        (
            "bad-nslong".into(),
            format!("{}\n  namespace: {{name: {}}}", id(), long(64)),
            "63",
        ),
        (
            "bad-policy".into(),
            format!("{}\n  deletionPolicy: Sometimes", id()),
            "Unsupported value",
        ),
        (
            long(64),
            id().into(),
            "metadata.name must be a DNS-1123 label",
        ),
        (
            "bad-suspend".into(),
            format!("{}\n  suspended: maybe", id()),
            "spec.suspended",
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, spec, rule) in &cases {
        let (ok, out) = kubectl(&["apply", "-f", "-"], &doc(name, spec));
        assert!(
            !ok && out.contains(rule),
            "{name}: expected a refusal naming {rule:?}, got: {out}"
        );
    }
    // Boundaries that are allowed.
    let s = Scenario::new();
    let fine = format!(
        "{}\n  displayName: {}\n  namespace: {{labels: {{team: {}}}, annotations: {{note: {}}}}}\n  quota: {{hard: {{pods: 20, requests.cpu: 0.1m, requests.nvidia.com/gpu: '1', hugepages-2Mi: 1Gi}}}}",
        id(),
        long(256),
        long(63),
        long(4096)
    );
    s.track("bad-boundaries");
    let (ok, out) = kubectl(&["apply", "-f", "-"], &doc("bad-boundaries", &fine));
    assert!(ok, "{out}");
    wait_reason(&admin().await, "bad-boundaries", "Provisioned").await;
}

/// Waits for a Warning Event with `reason` about `user`; returns its note.
async fn warning(c: &Client, user: &str, reason: &str) -> String {
    eventually(&format!("a Warning {reason} on {user}"), 30, || async {
        user_events(c, user)
            .await
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == reason)
            .map(|(_, _, note)| note)
    })
    .await
}

#[tokio::test]
async fn what_only_the_operator_knows_is_ready_false_with_nothing_created() {
    let s = Scenario::new();
    let c = admin().await;
    let long = format!("bad-{}", "x".repeat(56));
    for (name, spec, reason) in [
        (
            "bad-mesh",
            json!({ "namespace": { "labels": { "istio-injection": "enabled" } } }),
            "ReservedKey",
        ),
        (
            "bad-linkerd",
            json!({ "namespace": { "annotations": { "linkerd.io/inject": "enabled" } } }),
            "ReservedKey",
        ),
        (
            "bad-payroll",
            json!({ "namespace": { "name": "payroll-db" } }),
            "NamespaceNotAllowed",
        ),
        (
            "bad-monitoring",
            json!({ "role": "monitoring" }),
            "RoleNotAllowed",
        ),
        (
            "bad-reserved",
            json!({ "namespace": { "name": RESERVED_BY_FLAG } }),
            "ReservedNamespace",
        ),
        (long.as_str(), json!({}), "InvalidNamespaceName"),
    ] {
        s.create(&c, &User::test(name).with_spec(spec)).await;
        let u = wait_reason(&c, name, reason).await;
        let ready = u.ready_condition().unwrap();
        assert_eq!(ready.status, "False", "{name}");
        assert!(!ready.message.is_empty(), "{name}");
        warning(&c, name, reason).await;
        let ns = u.status.as_ref().unwrap().namespace.clone().unwrap();
        if ns != RESERVED_BY_FLAG {
            assert!(
                Api::<Namespace>::all(c.clone())
                    .get_opt(&ns)
                    .await
                    .unwrap()
                    .is_none(),
                "{ns} was created for {name}"
            );
        }
    }
}

/// Installs a ValidatingAdmissionPolicy of "the cluster" (not Homestead's) that denies
/// `resource` objects matching `deny` in namespaces named `namespace`.
fn cluster_policy(name: &str, resource: &str, group: &str, namespace: &str, deny: &str) {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{ "apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": [resource] }] },
            "matchConditions": [{ "name": "only-this-test", "expression": format!("request.namespace == '{namespace}'") }],
            "validations": [{ "expression": format!("!({deny})"), "message": format!("{name}: the cluster's policy refuses this") }],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": name },
        "spec": { "policyName": name, "validationActions": ["Deny"] },
    });
    for object in [policy, binding] {
        let (ok, out) = kubectl(&["apply", "-f", "-"], &object.to_string());
        assert!(ok, "{out}");
    }
}

fn remove_cluster_policy(name: &str) {
    kubectl(
        &[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
            "--ignore-not-found",
        ],
        "",
    );
}

#[tokio::test]
async fn a_write_the_cluster_refuses_is_reported_and_retried() {
    let s = Scenario::new();
    let c = admin().await;
    cluster_policy(
        "bad-quota-cap",
        "resourcequotas",
        "",
        "user-bad-capped",
        "has(object.spec.hard) && 'pods' in object.spec.hard && int(string(object.spec.hard['pods'])) > 50",
    );
    // The policy needs a moment to be loaded by the API server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.create(
        &c,
        &User::test("bad-capped").with_spec(json!({ "quota": { "hard": { "pods": "100" } } })),
    )
    .await;
    let u = eventually("the refused quota to be reported", 60, || async {
        let u = Api::<User>::all(c.clone()).get("bad-capped").await.ok()?;
        let ready = u.ready_condition()?;
        (ready.status == "False" && ["Forbidden", "ApplyFailed"].contains(&ready.reason.as_str()))
            .then_some(u)
    })
    .await;
    let ready = u.ready_condition().unwrap();
    assert!(
        ready.message.contains("the cluster's policy refuses this"),
        "{}",
        ready.message
    );
    assert!(ready.message.contains("ResourceQuota"), "{}", ready.message);
    warning(&c, "bad-capped", &ready.reason).await;
    // Fixing the input converges without any restart.
    Api::<User>::all(c.clone())
        .patch(
            "bad-capped",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "quota": { "hard": { "pods": "10" } } } })),
        )
        .await
        .unwrap();
    wait_reason(&c, "bad-capped", "Provisioned").await;
    remove_cluster_policy("bad-quota-cap");
}

#[tokio::test]
async fn a_role_change_the_cluster_refuses_keeps_the_old_access() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("bad-rolestay").with_spec(json!({ "role": "edit" })),
    )
    .await;
    wait_reason(&c, "bad-rolestay", "Provisioned").await;
    cluster_policy(
        "bad-no-view",
        "rolebindings",
        "rbac.authorization.k8s.io",
        "user-bad-rolestay",
        "object.roleRef.name == 'view'",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rbs: Api<RoleBinding> = Api::namespaced(c.clone(), "user-bad-rolestay");
    let before = rbs.get("homestead-user").await.unwrap();
    Api::<User>::all(c.clone())
        .patch(
            "bad-rolestay",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "role": "view" } })),
        )
        .await
        .unwrap();
    eventually("the refused role change to be reported", 60, || async {
        let u = Api::<User>::all(c.clone()).get("bad-rolestay").await.ok()?;
        let ready = u.ready_condition()?;
        (ready.status == "False" && ready.message.contains("the cluster's policy refuses this"))
            .then_some(())
    })
    .await;
    let after = rbs.get("homestead-user").await.unwrap();
    assert_eq!(
        after.uid(),
        before.uid(),
        "the old RoleBinding was replaced"
    );
    assert_eq!(after.role_ref.name, "edit", "the person lost their access");
    remove_cluster_policy("bad-no-view");
    wait_reason(&c, "bad-rolestay", "Provisioned").await;
    assert_eq!(
        rbs.get("homestead-user").await.unwrap().role_ref.name,
        "view"
    );
}

#[tokio::test]
async fn a_refusal_never_keeps_a_suspended_persons_access() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("bad-suspref")).await;
    wait_reason(&c, "bad-suspref", "Provisioned").await;
    // Suspended and, in the same edit, a role the operator does not allow.
    Api::<User>::all(c.clone())
        .patch(
            "bad-suspref",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspended": true, "role": "monitoring" } })),
        )
        .await
        .unwrap();
    wait_reason(&c, "bad-suspref", "RoleNotAllowed").await;
    wait_no_role_bindings(&c, "user-bad-suspref", 30).await;
}

#[tokio::test]
async fn inputs_the_server_normalizes_cost_no_write() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({ "quota": { "hard": { "requests.cpu": "0.1m", "requests.memory": "1024Mi", "pods": 20 } } });
    s.create(&c, &User::test("bad-normal").with_spec(spec))
        .await;
    wait_reason(&c, "bad-normal", "Provisioned").await;
    // Another writer adds an owner reference to the namespace and a condition to the status.
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let roles: Api<ClusterRole> = Api::all(c.clone());
    let other = roles
        .create(
            &Default::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "bad-normal-owner" } })).unwrap(),
        )
        .await
        .unwrap();
    let reference = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "bad-normal-owner", "uid": other.uid() });
    let mut ns = namespaces.get("user-bad-normal").await.unwrap();
    let mut owners = serde_json::to_value(ns.owner_references()).unwrap();
    owners.as_array_mut().unwrap().push(reference);
    ns.metadata.owner_references = serde_json::from_value(owners).unwrap();
    namespaces
        .patch("user-bad-normal", &PatchParams::apply("someone-else").force(), &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "user-bad-normal", "ownerReferences": ns.metadata.owner_references },
        })))
        .await
        .unwrap();
    Api::<User>::all(c.clone())
        .patch_status("bad-normal", &PatchParams::apply("someone-else").force(), &Patch::Apply(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "User",
            "status": { "conditions": [{ "type": "Audited", "status": "True", "reason": "ByOthers", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }] },
        })))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mark = settled_mark().await;
    // Touch the Namespace: a watch event, hence a reconcile.
    let before = reconciles(&env().metrics_address);
    namespaces
        .patch(
            "user-bad-normal",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "touch": "1" } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        reconciles(&env().metrics_address) > before,
        "the annotation triggers a reconcile"
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "bad-normal", "user-bad-normal"))
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "normalized or foreign input caused writes: {writes:#?}"
    );
    roles
        .delete("bad-normal-owner", &DeleteParams::default())
        .await
        .unwrap();
}
