//! Homestead's promises tried as an adversary would (docs/security.md), on the real
//! control plane: a person with `admin` in their namespace (their own token, or `kubectl --as`),
//! whoever holds the SCIM bearer token (over HTTPS, against a running `homestead scim`), and an
//! HR identity bound to `rbac/hr.yaml`'s `homestead-hr`, which may write Users and nothing else.
//! Each test is one attack that worked before these rules existed.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use homestead_api::User;
use homestead_testenv::{OPERATOR, SCIM};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn scim_service() -> &'static ScimService {
    static SERVICE: OnceLock<ScimService> = OnceLock::new();
    SERVICE.get_or_init(|| spawn_scim("scim-attacks", &[]))
}

/// A SCIM request with the service's bearer token, over HTTPS: status and JSON body.
fn scim(method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let service = scim_service();
    let (code, text) = https_request(
        &service.address,
        &service.ca,
        method,
        &format!("/scim/v2{path}"),
        &service.token,
        body.as_ref(),
    )
    .unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Creates a person over SCIM; returns their SCIM id.
fn scim_create(user_name: &str, extra: Value) -> String {
    let mut body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": user_name,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, created) = scim("POST", "/Users", Some(body));
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

/// The SCIM ids of the people whose `userName` is `user_name`, as the service lists them.
fn scim_lookup(user_name: &str) -> Vec<String> {
    let filter = format!("/Users?filter=userName%20eq%20%22{user_name}%22");
    let (status, list) = scim("GET", &filter, None);
    assert_eq!(status, 200, "{list}");
    list["Resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn patch_op(operations: Value) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": operations,
    })
}

/// Whether `result` is the API server's 403 (RBAC or an admission policy) naming `needle`.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, needle: &str) -> bool {
    match result {
        Err(kube::Error::Api(status)) => status.code == 403 && status.message.contains(needle),
        other => {
            eprintln!("expected 403 naming {needle:?}, got {other:?}");
            false
        }
    }
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as=PERSON`: "yes" or "no".
fn can(person: &str, verb: &str, resource: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(&["auth", "can-i", verb, resource, "-n", ns, &who], "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// As `person` (impersonated by the admin), binds ClusterRole `admin` to themselves in `ns`
/// under `name`: what a person with `admin` there can always do.
fn bind_myself(person: &str, ns: &str, name: &str) {
    let who = format!("--as={person}");
    let user = format!("--user={person}");
    let (ok, out) = kubectl(
        &[
            "create",
            "rolebinding",
            name,
            "--clusterrole=admin",
            &user,
            "-n",
            ns,
            &who,
        ],
        "",
    );
    assert!(ok, "{out}");
}

/// The names of the RoleBindings in `ns`, sorted.
async fn bindings(client: &Client, ns: &str) -> Vec<String> {
    let mut names: Vec<String> = Api::<RoleBinding>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// The notes of the Events with `reason` on User `user`.
fn event_notes(user: &str, reason: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={user},reason={reason}");
    let (_, out) = kubectl(
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ],
        "",
    );
    out.lines().map(str::to_owned).collect()
}

async fn merge(client: &Client, name: &str, patch: Value) -> Result<User, kube::Error> {
    Api::<User>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Finding 1: a SCIM token took over a person HR made (PATCH of `userName`), and could list and
/// change every User. Now the service sees only its own Users, the API server refuses the SCIM
/// identity anything else, and a rename of its own User revokes every binding first.
#[tokio::test]
async fn scim_sees_and_changes_only_its_own_users_and_a_rename_revokes_first() {
    let s = Scenario::new();
    let hr = hr().await;
    let victim = "atk-victim@example.com";
    s.create(
        &hr,
        &User::test("atk-victim").with_spec(json!({ "identity": { "username": victim } })),
    )
    .await;
    let made_by_hr = wait_reason(&hr, "atk-victim", "Provisioned").await;
    let victim_id = made_by_hr.uid().unwrap();

    // Through the service: HR's User is not there to find, read or change.
    assert!(scim_lookup(victim).is_empty());
    let (status, _) = scim("GET", &format!("/Users/{victim_id}"), None);
    assert_eq!(status, 404);
    let rename = patch_op(json!([{ "op": "replace", "path": "userName",
                                   "value": "attacker@example.com" }]));
    let (status, _) = scim("PATCH", &format!("/Users/{victim_id}"), Some(rename));
    assert_eq!(status, 404);
    let (status, _) = scim("DELETE", &format!("/Users/{victim_id}"), None);
    assert_eq!(status, 404);

    // With the SCIM identity's own credentials, at the API server: refused.
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let takeover = json!({ "spec": { "identity": { "username": "attacker@example.com" } } });
    assert!(forbidden(
        merge(&as_scim, "atk-victim", takeover).await,
        "homestead.dev/writer=scim"
    ));
    let deleted = Api::<User>::all(as_scim.clone())
        .delete("atk-victim", &DeleteParams::default())
        .await;
    assert!(forbidden(deleted, "homestead.dev/writer=scim"));
    assert_eq!(can_get_pods(victim, "user-atk-victim"), "yes");
    assert_eq!(
        can_get_pods("attacker@example.com", "user-atk-victim"),
        "no"
    );

    // A rename of the service's own User: the old identity, and every binding it made for
    // itself, lose access before the new identity gets it; an Event says so.
    let (old, new) = ("atk-ren@example.com", "atk-ren-2@example.com");
    s.track("atk-ren");
    let id = scim_create(old, json!({}));
    wait_reason(&hr, "atk-ren", "Provisioned").await;
    // The directory floor is `view`; HR gives this person `admin` (a Profile of the platform's)
    // so they can bind themselves as any admin can.
    profile(&admin().await, "atk-scim-admin", json!({ "role": "admin" })).await;
    merge(
        &hr,
        "atk-ren",
        json!({ "spec": { "profile": "atk-scim-admin" } }),
    )
    .await
    .unwrap();
    wait_reason(&hr, "atk-ren", "Provisioned").await;
    eventually("the SCIM person to have admin", 30, || async {
        (can(old, "create", "rolebindings", "user-atk-ren") == "yes").then_some(())
    })
    .await;
    bind_myself(old, "user-atk-ren", "mine");
    let rename = patch_op(json!([{ "op": "replace", "path": "userName", "value": new }]));
    let (status, body) = scim("PATCH", &format!("/Users/{id}"), Some(rename));
    assert_eq!(status, 200, "{body}");
    let renamed = wait_reason(&hr, "atk-ren", "Provisioned").await;
    assert_eq!(renamed.spec.identity.username, new);
    assert_eq!(
        bindings(&admin().await, "user-atk-ren").await,
        ["homestead-user"]
    );
    assert_eq!(can_get_pods(old, "user-atk-ren"), "no");
    assert_eq!(can_get_pods(new, "user-atk-ren"), "yes");
    let notes = event_notes("atk-ren", "IdentityChanged");
    assert!(
        notes.iter().any(|n| n.contains("mine")),
        "no IdentityChanged Event naming the removed binding: {notes:?}"
    );
}

/// Finding 2: a SCIM PUT without `active` lifted a suspension HR had set. Now SCIM's switch is
/// `spec.directory.active`, HR's is `spec.suspended`, and neither lifts the other.
#[tokio::test]
async fn scim_never_lifts_a_suspension_hr_set() {
    let s = Scenario::new();
    let hr = hr().await;
    let person = "atk-handed@example.com";
    let mut handed = User::test("atk-handed")
        .with_spec(json!({ "identity": { "username": person }, "suspended": true }));
    handed.metadata.labels = Some([("homestead.dev/writer".into(), "scim".into())].into());
    s.create(&hr, &handed).await;
    wait_reason(&hr, "atk-handed", "Suspended").await;
    let ids = scim_lookup(person);
    assert_eq!(ids.len(), 1, "a User handed to SCIM is the service's");
    let id = &ids[0];

    // A PUT without `active` (as several providers send) and a PATCH active=true: HR's
    // suspension stands.
    let put = json!({ "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                      "userName": person, "displayName": "Handed Over" });
    let (status, body) = scim("PUT", &format!("/Users/{id}"), Some(put.clone()));
    assert_eq!(status, 200, "{body}");
    let activate = patch_op(json!([{ "op": "Replace", "path": "active", "value": "True" }]));
    let (status, body) = scim("PATCH", &format!("/Users/{id}"), Some(activate.clone()));
    assert_eq!(status, 200, "{body}");
    let still = wait_reason(&hr, "atk-handed", "Suspended").await;
    assert!(still.spec.suspended);
    assert_eq!(can_get_pods(person, "user-atk-handed"), "no");
    let as_scim = env().plane.client(SCIM).await.unwrap();
    assert!(forbidden(
        merge(
            &as_scim,
            "atk-handed",
            json!({ "spec": { "suspended": false } })
        )
        .await,
        "spec.suspended"
    ));

    // The provider deactivates; HR lifts its own suspension; a PUT without `active` keeps the
    // provider's deactivation; only the provider's active=true restores access.
    let deactivate = patch_op(json!([{ "op": "Replace", "path": "active", "value": "False" }]));
    assert_eq!(
        scim("PATCH", &format!("/Users/{id}"), Some(deactivate)).0,
        200
    );
    merge(&hr, "atk-handed", json!({ "spec": { "suspended": false } }))
        .await
        .unwrap();
    let deactivated = wait_reason(&hr, "atk-handed", "Suspended").await;
    assert!(
        deactivated
            .ready_condition()
            .unwrap()
            .message
            .contains("identity provider"),
        "{:?}",
        deactivated.ready_condition()
    );
    assert_eq!(scim("PUT", &format!("/Users/{id}"), Some(put)).0, 200);
    wait_reason(&hr, "atk-handed", "Suspended").await;
    assert_eq!(can_get_pods(person, "user-atk-handed"), "no");
    // Issue 45, finding 7: a PATCH `remove` of `active` (unassigned is not active) keeps the
    // provider's deactivation too.
    let remove = patch_op(json!([{ "op": "remove", "path": "active" }]));
    assert_eq!(scim("PATCH", &format!("/Users/{id}"), Some(remove)).0, 200);
    let kept = Api::<User>::all(hr.clone())
        .get("atk-handed")
        .await
        .unwrap();
    assert_eq!(
        kept.spec.directory.map(|d| d.active),
        Some(false),
        "remove active lifted the deactivation"
    );
    wait_reason(&hr, "atk-handed", "Suspended").await;
    assert_eq!(can_get_pods(person, "user-atk-handed"), "no");
    assert_eq!(
        scim("PATCH", &format!("/Users/{id}"), Some(activate)).0,
        200
    );
    wait_reason(&hr, "atk-handed", "Provisioned").await;
    assert_eq!(can_get_pods(person, "user-atk-handed"), "yes");
}

/// Finding 3: a tenant creating RoleBindings in a loop while HR deletes their `Retain` User kept
/// admin in the retained namespace. Now a retained namespace has every RoleBinding removed for
/// as long as it exists, whoever makes one and whenever.
#[tokio::test]
async fn retain_offboarding_leaves_no_binding_a_racing_tenant_made() {
    let s = Scenario::new();
    let c = admin().await;
    let ns = "user-atk-retain";
    s.track_namespace(ns);
    s.create(
        &c,
        &User::test("atk-retain")
            .with_spec(json!({ "identity": { "username": TENANT }, "deletionPolicy": "Retain" })),
    )
    .await;
    wait_reason(&c, "atk-retain", "Provisioned").await;

    // The tenant, with their own token, binds admin to themselves as fast as they can.
    let tom = env().plane.client(TENANT).await.unwrap();
    let racing = tokio::spawn(async move {
        let api: Api<RoleBinding> = Api::namespaced(tom, "user-atk-retain");
        let (mut made, deadline) = (0, Instant::now() + Duration::from_secs(8));
        for i in 0.. {
            if Instant::now() > deadline {
                break;
            }
            let binding: RoleBinding = serde_json::from_value(json!({
                "metadata": { "name": format!("mine-{i}") },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "admin" },
                "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                               "name": TENANT }],
            }))
            .unwrap();
            if api.create(&PostParams::default(), &binding).await.is_ok() {
                made += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        made
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    Api::<User>::all(c.clone())
        .delete("atk-retain", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<User>::all(c.clone()), "atk-retain", 60).await;
    let made = racing.await.unwrap();
    println!("the tenant created {made} RoleBindings while racing the offboarding");
    assert!(made > 0, "the race never started");
    wait_no_role_bindings(&c, ns, 30).await;
    assert_eq!(can_get_pods(TENANT, ns), "no");
    let retained = Api::<Namespace>::all(c.clone()).get(ns).await.unwrap();
    assert_eq!(
        retained
            .labels()
            .get("homestead.dev/retained-from")
            .map(String::as_str),
        Some("atk-retain")
    );

    // Later, anyone's binding in the retained namespace goes too (the standing rule).
    bind_as_admin(ns, "granted-later");
    wait_no_role_bindings(&c, ns, 30).await;
}

/// As the cluster admin, binds `admin` to [`TENANT`] in `ns` under `name`.
fn bind_as_admin(ns: &str, name: &str) {
    let user = format!("--user={TENANT}");
    let (ok, out) = kubectl(
        &[
            "create",
            "rolebinding",
            name,
            "--clusterrole=admin",
            &user,
            "-n",
            ns,
        ],
        "",
    );
    assert!(ok, "{out}");
}

/// Finding 4: with role `edit` in an `Isolated` namespace, the person's own allow-all
/// NetworkPolicy undid the isolation (NetworkPolicies add up). Now the API server refuses it,
/// and Homestead's own policy cannot be widened or removed by the tenant.
#[tokio::test]
async fn a_tenant_cannot_open_an_isolated_namespace() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "atk-isolated",
        json!({ "role": "edit", "networkIsolation": "Isolated" }),
    )
    .await;
    s.create(
        &c,
        &User::test("atk-iso").with_spec(
            json!({ "identity": { "username": TENANTS[1] }, "profile": "atk-isolated" }),
        ),
    )
    .await;
    wait_reason(&c, "atk-iso", "Provisioned").await;
    let ns = "user-atk-iso";
    let tom = env().plane.client(TENANTS[1]).await.unwrap();
    let policies: Api<NetworkPolicy> = Api::namespaced(tom, ns);
    let policy = |name: &str, spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).unwrap()
    };
    let allow_all = policy(
        "let-everyone-in",
        json!({ "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                "ingress": [{}], "egress": [{}] }),
    );
    assert!(forbidden(
        policies.create(&PostParams::default(), &allow_all).await,
        "isolated"
    ));
    let from_everywhere = policy(
        "from-all-namespaces",
        json!({ "podSelector": {}, "ingress": [{ "from": [{ "namespaceSelector": {} }] }] }),
    );
    assert!(forbidden(
        policies
            .create(&PostParams::default(), &from_everywhere)
            .await,
        "isolated"
    ));
    // Egress is judged like ingress (issue 45, finding 2): no ipBlock peer reaches the world,
    // the node, the API server or another namespace's Pods, nor any other namespace.
    for (name, to) in [
        (
            "egress-to-the-world",
            json!([{ "ipBlock": { "cidr": "0.0.0.0/0" } }]),
        ),
        (
            "egress-to-the-node",
            json!([{ "ipBlock": { "cidr": "10.244.0.1/32" } }]),
        ),
        (
            "egress-to-everyone-but",
            json!([{ "ipBlock": { "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"] } }]),
        ),
        (
            "egress-to-all-namespaces",
            json!([{ "namespaceSelector": {} }]),
        ),
    ] {
        let egress = policy(
            name,
            json!({ "podSelector": {}, "policyTypes": ["Egress"], "egress": [{ "to": to }] }),
        );
        assert!(
            forbidden(
                policies.create(&PostParams::default(), &egress).await,
                "may open egress only to Pods of this namespace"
            ),
            "{name}"
        );
    }
    // What stays the tenant's to decide: narrowing traffic within their own namespace.
    let within = policy(
        "web-from-my-pods",
        json!({ "podSelector": { "matchLabels": { "app": "web" } },
                "ingress": [{ "from": [{ "podSelector": {} }] }] }),
    );
    policies
        .create(&PostParams::default(), &within)
        .await
        .unwrap();
    // Homestead's own policy: neither widened nor removed.
    let widen = json!({ "spec": { "ingress": [{}] } });
    assert!(forbidden(
        policies
            .patch(
                "homestead-isolation",
                &PatchParams::default(),
                &Patch::Merge(&widen)
            )
            .await,
        "homestead-isolation"
    ));
    assert!(forbidden(
        policies
            .delete("homestead-isolation", &DeleteParams::default())
            .await,
        "homestead-isolation"
    ));
}

/// Finding 5: `validUntil` passed while the User was refused (a role outside the allow-list),
/// and access stayed. Now expiry wins over every other state.
#[tokio::test]
async fn expiry_ends_access_while_the_user_is_refused() {
    let s = Scenario::new();
    let c = admin().await;
    let person = "atk-expiry@example.com";
    let until = k8s_openapi::jiff::Timestamp::now() + Duration::from_secs(20);
    s.create(
        &c,
        &User::test("atk-expiry").with_spec(
            json!({ "identity": { "username": person }, "validUntil": until.to_string() }),
        ),
    )
    .await;
    wait_reason(&c, "atk-expiry", "Provisioned").await;
    merge(
        &c,
        "atk-expiry",
        json!({ "spec": { "role": "not-allowed" } }),
    )
    .await
    .unwrap();
    wait_reason(&c, "atk-expiry", "RoleNotAllowed").await;
    assert_eq!(
        can_get_pods(person, "user-atk-expiry"),
        "yes",
        "a refusal alone keeps the access the User had"
    );
    eventually("access to end at validUntil", 60, || async {
        let expired = k8s_openapi::jiff::Timestamp::now() > until;
        (expired && can_get_pods(person, "user-atk-expiry") == "no").then_some(())
    })
    .await;
    wait_no_role_bindings(&c, "user-atk-expiry", 10).await;
}

/// Finding 6: a tenant's RoleBinding named `homestead-user-next` blocked a role change
/// (`CreateFailed`, admin kept), and a downgrade left the admin binding the person had made
/// for themselves. Now neither works.
#[tokio::test]
async fn a_downgrade_cannot_be_blocked_and_removes_what_granted_more() {
    let s = Scenario::new();
    let hr = hr().await;
    let person = "atk-down@example.com";
    let ns = "user-atk-down";
    s.create(
        &hr,
        &User::test("atk-down")
            .with_spec(json!({ "identity": { "username": person }, "role": "admin" })),
    )
    .await;
    wait_reason(&hr, "atk-down", "Provisioned").await;
    bind_myself(person, ns, "homestead-user-next");
    bind_myself(person, ns, "mine");
    merge(&hr, "atk-down", json!({ "spec": { "role": "view" } }))
        .await
        .unwrap();
    let downgraded = wait_reason(&hr, "atk-down", "Provisioned").await;
    assert!(
        downgraded
            .ready_condition()
            .unwrap()
            .message
            .contains("\"view\""),
        "{:?}",
        downgraded.ready_condition()
    );
    assert_eq!(bindings(&admin().await, ns).await, ["homestead-user"]);
    assert_eq!(can(person, "get", "pods", ns), "yes");
    assert_eq!(can(person, "create", "deployments.apps", ns), "no");
    assert_eq!(
        can(
            person,
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            ns
        ),
        "no"
    );
}

/// Finding 7: the RoleBinding was written before the quota, LimitRange and NetworkPolicy, so a
/// fast tenant got a pod past limits that did not exist yet. Now every guard is written first.
#[tokio::test]
async fn guards_exist_before_the_first_role_binding() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "atk-guarded",
        json!({
            "quota": { "hard": { "pods": "10" } },
            "limitRange": { "limits": [{ "type": "Container", "max": { "memory": "2Gi" } }] },
            "networkIsolation": "Isolated",
        }),
    )
    .await;
    let mark = settled_mark().await;
    s.create(
        &c,
        &User::test("atk-guard").with_spec(json!({ "profile": "atk-guarded" })),
    )
    .await;
    wait_reason(&c, "atk-guard", "Provisioned").await;
    let writes: Vec<String> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_change(e) && e["objectRef"]["namespace"] == "user-atk-guard")
        .map(|e| {
            e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let first_binding = writes
        .iter()
        .position(|r| r == "rolebindings")
        .unwrap_or_else(|| panic!("no RoleBinding written: {writes:?}"));
    for guard in ["resourcequotas", "limitranges", "networkpolicies"] {
        let at = writes.iter().position(|r| r == guard);
        assert!(
            at.is_some_and(|at| at < first_binding),
            "{guard} not written before the RoleBinding: {writes:?}"
        );
    }
}

/// Finding 8: HR or the SCIM identity could remove `homestead.dev/cleanup` from a deleted
/// User, cutting offboarding short. Now only the operator may.
#[tokio::test]
async fn only_the_operator_removes_the_cleanup_finalizer() {
    let s = Scenario::new();
    let hr = hr().await;
    s.create(&hr, &User::test("atk-fin")).await;
    wait_reason(&hr, "atk-fin", "Provisioned").await;
    let strip = json!({ "metadata": { "finalizers": null } });
    assert!(forbidden(
        merge(&hr, "atk-fin", strip.clone()).await,
        "homestead.dev/cleanup"
    ));
    s.track("atk-fin-scim");
    scim_create("atk-fin-scim@example.com", json!({}));
    wait_reason(&hr, "atk-fin-scim", "Provisioned").await;
    let as_scim = env().plane.client(SCIM).await.unwrap();
    assert!(forbidden(
        merge(&as_scim, "atk-fin-scim", strip.clone()).await,
        "homestead.dev/cleanup"
    ));

    // Deleted: still the operator's to release, and it does once offboarding is done.
    let users: Api<User> = Api::all(hr.clone());
    users
        .delete("atk-fin", &DeleteParams::default())
        .await
        .unwrap();
    match merge(&hr, "atk-fin", strip).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {} // already offboarded
        refused => assert!(forbidden(refused, "homestead.dev/cleanup")),
    }
    wait_gone(&users, "atk-fin", 60).await;
    wait_gone(&Api::<Namespace>::all(admin().await), "user-atk-fin", 60).await;
}

/// Finding 9: the smaller holes. The SCIM identity set `homestead.dev/roster-source` (which a
/// later `homestead import --prune delete` acts on) and stored a 134 KB annotation from a
/// 5,000-operation PATCH; the operator identity could create a namespace outside
/// `--allowed-namespace`, bind `system:authenticated` or make a namespace Pod Security
/// `privileged`.
#[tokio::test]
async fn scim_and_operator_bounds_hold_at_the_api_server() {
    let s = Scenario::new();
    let c = admin().await;
    s.track("atk-bounds");
    let id = scim_create("atk-bounds@example.com", json!({}));
    wait_reason(&c, "atk-bounds", "Provisioned").await;
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let roster = json!({ "metadata": { "labels": { "homestead.dev/roster-source": "hr" } } });
    assert!(forbidden(
        merge(&as_scim, "atk-bounds", roster).await,
        "never labels"
    ));
    let huge = "x".repeat(9000);
    let annotation = json!({ "metadata": { "annotations": {
        "scim.homestead.dev/attributes": huge } } });
    assert!(forbidden(
        merge(&as_scim, "atk-bounds", annotation).await,
        "8192 bytes"
    ));
    let other = json!({ "metadata": { "annotations": { "example.com/note": "x" } } });
    assert!(forbidden(
        merge(&as_scim, "atk-bounds", other).await,
        "only its annotation"
    ));

    // Through the service: too many operations, or too much to keep, is a 400 and writes nothing.
    let many: Vec<Value> = (0..101)
        .map(|i| json!({ "op": "replace", "path": "displayName", "value": format!("n{i}") }))
        .collect();
    let (status, body) = scim(
        "PATCH",
        &format!("/Users/{id}"),
        Some(patch_op(json!(many))),
    );
    assert_eq!(status, 400, "{body}");
    let big = patch_op(json!([{ "op": "replace", "path": "externalId", "value": huge }]));
    let (status, body) = scim("PATCH", &format!("/Users/{id}"), Some(big));
    assert_eq!(status, 400, "{body}");
    let kept = Api::<User>::all(c.clone()).get("atk-bounds").await.unwrap();
    assert_eq!(
        kept.spec.display_name, None,
        "a refused PATCH wrote nothing"
    );

    // The operator's identity, whatever its RBAC allows (dry runs: nothing is kept).
    let operator = env().plane.client(OPERATOR).await.unwrap();
    let ns = "user-atk-bounds";
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for (kind, name) in [
        ("Group", "system:authenticated"),
        ("Group", "system:unauthenticated"),
        ("Group", "system:serviceaccounts"),
        ("User", "system:anonymous"),
    ] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": { "name": "everyone" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "view" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name }],
        }))
        .unwrap();
        let created = Api::<RoleBinding>::namespaced(operator.clone(), ns)
            .create(&dry, &binding)
            .await;
        assert!(forbidden(created, "system:*"), "{kind} {name}");
    }
    let outside: Namespace = serde_json::from_value(json!({ "metadata": {
        "name": "payments",
        "labels": { "app.kubernetes.io/managed-by": "homestead", "homestead.dev/user": "x",
                    "pod-security.kubernetes.io/enforce": "baseline" } } }))
    .unwrap();
    let created = Api::<Namespace>::all(operator.clone())
        .create(&dry, &outside)
        .await;
    assert!(
        forbidden(created, "names match"),
        "a namespace outside --allowed-namespace"
    );
    let privileged = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "privileged" } } });
    let patched = Api::<Namespace>::all(operator)
        .patch(
            ns,
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(&privileged),
        )
        .await;
    assert!(forbidden(patched, "privileged"));
}

/// Each rule of the operator's two admission policies (`homestead-operator-bounds` for its
/// Namespace writes, `homestead-operator-namespaced` for what it writes inside them) refuses a
/// write that breaks that rule alone, and the writes Homestead makes pass: as the operator's
/// identity, whatever its RBAC allows (dry runs, so nothing is kept).
#[tokio::test]
async fn every_rule_of_the_operator_policies_holds_on_its_own() {
    let s = Scenario::new();
    let c = admin().await;
    let ours = "user-atk-rules";
    let (theirs, retained) = ("atk-rules-theirs", "atk-rules-retained");
    let homesteads = json!({ "app.kubernetes.io/managed-by": "homestead",
        "homestead.dev/user": "atk-rules", "pod-security.kubernetes.io/enforce": "baseline" });
    for (name, labels) in [
        (ours, homesteads.clone()),
        (theirs, json!({})),
        (
            retained,
            json!({ "homestead.dev/retained-from": "atk-rules" }),
        ),
    ] {
        s.track_namespace(name);
        let ns = json!({ "metadata": { "name": name, "labels": labels } });
        Api::<Namespace>::all(c.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .unwrap();
    }
    let operator = env().plane.client(OPERATOR).await.unwrap();
    let namespaces = Api::<Namespace>::all(operator.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    // A dry-run create, as the operator, of Namespace `name` labelled `labels`.
    let create = |name: &str, labels: Value| {
        let namespace: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } }))
                .unwrap();
        let (namespaces, dry) = (namespaces.clone(), dry.clone());
        async move { namespaces.create(&dry, &namespace).await }
    };
    let without = |key: &str| {
        let mut labels = homesteads.clone();
        labels.as_object_mut().unwrap().remove(key);
        labels
    };

    // homestead-operator-bounds: one broken rule at a time, then what Homestead creates.
    let reserved = create("kube-atk-rules", homesteads.clone()).await;
    assert!(forbidden(reserved, "reserved namespace"));
    let outside = create("atk-rules-new", homesteads.clone()).await;
    assert!(forbidden(outside, "names match"));
    let label_rule = "labelled app.kubernetes.io/managed-by";
    for key in ["app.kubernetes.io/managed-by", "homestead.dev/user"] {
        let unlabelled = create("user-atk-rules-new", without(key)).await;
        assert!(forbidden(unlabelled, label_rule), "{key}");
    }
    let mut someone_elses = homesteads.clone();
    someone_elses["app.kubernetes.io/managed-by"] = json!("helm");
    let foreign = create("user-atk-rules-new", someone_elses).await;
    assert!(forbidden(foreign, label_rule));
    let no_enforce = create(
        "user-atk-rules-new",
        without("pod-security.kubernetes.io/enforce"),
    );
    assert!(forbidden(no_enforce.await, "enforce Pod Security"));
    create("user-atk-rules-new", homesteads.clone())
        .await
        .expect("a Namespace as Homestead creates it");
    // Updates and deletes are judged by the labels the Namespace has before the request.
    let relabel = Patch::Merge(json!({ "metadata": { "labels": homesteads.clone() } }));
    let patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let claimed = namespaces.patch(theirs, &patch, &relabel).await;
    assert!(forbidden(
        claimed,
        "only update or delete Namespaces labelled so"
    ));
    let deleted = namespaces.delete(theirs, &dry_delete).await;
    assert!(forbidden(
        deleted,
        "only update or delete Namespaces labelled so"
    ));
    namespaces
        .patch(ours, &patch, &relabel)
        .await
        .expect("an update of Homestead's Namespace");
    namespaces
        .delete(ours, &dry_delete)
        .await
        .expect("a delete of Homestead's Namespace");

    // homestead-operator-namespaced: where, whom and which role.
    let binding = |subject: Value| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": { "name": "atk-rules" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "edit" },
            "subjects": [subject],
        }))
        .unwrap()
    };
    let person = json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                         "name": "atk-rules" });
    let bindings = |ns: &str| Api::<RoleBinding>::namespaced(operator.clone(), ns);
    for ns in [theirs, retained] {
        let outside = bindings(ns).create(&dry, &binding(person.clone())).await;
        assert!(forbidden(outside, "may only write RoleBindings"), "{ns}");
    }
    let robot = json!({ "kind": "ServiceAccount", "name": "default", "namespace": ours });
    let robot = bindings(ours).create(&dry, &binding(robot)).await;
    assert!(forbidden(robot, "people and their groups"));
    bindings(ours)
        .create(&dry, &binding(person))
        .await
        .expect("a RoleBinding as Homestead creates it");
    // (Deleting RoleBindings in a retained namespace, the standing revocation rule, is allowed:
    // retain_offboarding_leaves_no_binding_a_racing_tenant_made.)
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": { "name": "atk-rules" }, "spec": { "hard": { "pods": "1" } } }))
    .unwrap();
    let quotas = |ns: &str| Api::<ResourceQuota>::namespaced(operator.clone(), ns);
    let outside = quotas(theirs).create(&dry, &quota).await;
    assert!(forbidden(
        outside,
        "may only write RoleBindings, ResourceQuotas"
    ));
    quotas(ours)
        .create(&dry, &quota)
        .await
        .expect("a ResourceQuota in Homestead's Namespace");
}

/// Who may change which directory groups exist and who is in them: the SCIM identity (its own
/// groups only, see the scim tests) and cluster administrators. Not HR with its users-only
/// role, nor a person, even one with `admin` in their own namespace (a RoleBinding cannot
/// grant cluster-scoped objects); both may not write Profiles either.
#[tokio::test]
async fn neither_hr_nor_a_person_can_write_directory_groups_or_profiles() {
    let _hr = hr().await;
    let s = Scenario::new();
    let admin = admin().await;
    s.create(
        &admin,
        &User::test("grp-tenant").with_spec(json!({ "role": "admin" })),
    )
    .await;
    wait_reason(&admin, "grp-tenant", "Provisioned").await;
    let can_i = |who: &[&str], args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(who);
        let (_, out) = kubectl(&all, "");
        out.lines().next().unwrap_or_default().trim().to_owned()
    };
    let hr_as = [
        &format!("--as={HR}")[..],
        &format!("--as-group={HR_GROUP}")[..],
    ];
    let person = ["--as=grp-tenant@example.com"];
    assert_eq!(
        can_i(&person, &["create", "pods", "-n", "user-grp-tenant"]),
        "yes",
        "the person really is admin in their namespace"
    );
    for who in [&hr_as[..], &person[..]] {
        for verb in ["create", "patch", "update", "delete"] {
            for resource in [
                "directorygroups.homestead.dev",
                "directorygroups.homestead.dev/status",
                "profiles.homestead.dev",
            ] {
                assert_eq!(
                    can_i(who, &[verb, resource]),
                    "no",
                    "{who:?} {verb} {resource}"
                );
            }
        }
    }
    assert_eq!(
        can_i(&hr_as, &["list", "directorygroups.homestead.dev"]),
        "yes"
    );
    assert_eq!(
        can_i(&person, &["list", "directorygroups.homestead.dev"]),
        "no"
    );
}

/// A Service as JSON: `spec` in namespace `ns`, named `name`, selecting `app: web`.
fn service(ns: &str, name: &str, spec: Value) -> String {
    let mut full = json!({ "selector": { "app": "web" }, "ports": [{ "port": 8080 }] });
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": name, "namespace": ns }, "spec": full })
    .to_string()
}

/// Issue 45, finding 1: a person with `admin` gave a Service `spec.externalIPs` naming another
/// person's Pod IP, and kube-proxy sent everyone's traffic for that Pod to theirs
/// (CVE-2020-8554; the traffic itself is tried on the node in `node.rs`). Now the API server
/// refuses externalIPs and the Service types that reach beyond the cluster network in every
/// Homestead namespace, and the other kinds that could route traffic stay out of a tenant's
/// reach.
#[tokio::test]
async fn a_tenant_cannot_route_other_peoples_traffic_through_a_service() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("atk-svc").with_spec(json!({ "identity": { "username": TENANTS[2] } })),
    )
    .await;
    wait_reason(&c, "atk-svc", "Provisioned").await;
    let ns = "user-atk-svc";
    let plane = env().plane;
    refused_once_loaded(
        plane,
        TENANTS[2],
        &service(ns, "steal", json!({ "externalIPs": ["10.244.0.50"] })),
        "CVE-2020-8554",
    );
    for kind in ["NodePort", "LoadBalancer"] {
        let (ok, out) = kubectl_as(
            TENANTS[2],
            &["create", "-f", "-"],
            &service(ns, "expose", json!({ "type": kind })),
        );
        assert!(
            !ok && out.contains(&format!("a Service of type {kind} is refused")),
            "{kind}: {out}"
        );
    }
    // A plain ClusterIP Service and an ExternalName (a DNS alias; traffic to it is judged by
    // NetworkPolicy at its real destination) stay the tenant's to make.
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &["create", "-f", "-"],
        &service(ns, "web", json!({})),
    );
    assert!(ok, "{out}");
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &["create", "-f", "-"],
        &service(
            ns,
            "alias",
            json!({ "type": "ExternalName", "externalName": "example.com", "selector": null }),
        ),
    );
    assert!(ok, "{out}");
    // Nor can the tenant add externalIPs to a Service that exists.
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &[
            "-n",
            ns,
            "patch",
            "service",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"externalIPs":["10.244.0.50"]}}"#,
        ],
        "",
    );
    assert!(!ok && out.contains("CVE-2020-8554"), "{out}");
    // A load balancer's ingress IP in a Service's status: RBAC (`admin` has no
    // services/status) and, should a cluster grant it, the policy refuse it to the tenant.
    let steer_status = || {
        kubectl_as(
            TENANTS[2],
            &[
                "-n",
                ns,
                "patch",
                "service",
                "web",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.244.0.50"}]}}}"#,
            ],
            "",
        )
    };
    let (ok, out) = steer_status();
    assert!(
        !ok && out.contains("cannot patch resource \"services/status\""),
        "{out}"
    );
    // A cluster that grants it anyway (a Role of the admin's): the policy still refuses.
    let who = format!("--user={}", TENANTS[2]);
    for args in [
        vec![
            "create",
            "role",
            "lb-status",
            "--verb=patch",
            "--resource=services/status",
        ],
        vec![
            "create",
            "rolebinding",
            "lb-status",
            "--role=lb-status",
            &who,
        ],
    ] {
        let mut args = args;
        args.extend(["-n", ns]);
        let (ok, out) = kubectl(&args, "");
        assert!(ok, "{out}");
    }
    eventually(
        "the granted status patch to reach the policy",
        30,
        || async {
            let (ok, out) = steer_status();
            assert!(!ok, "the tenant set a load balancer address: {out}");
            out.contains("status.loadBalancer").then_some(())
        },
    )
    .await;
    // The other ways to steer traffic are not a tenant's at all: hand-written Endpoints and
    // EndpointSlices.
    for (verb, resource) in [
        ("create", "endpoints"),
        ("update", "endpoints"),
        ("create", "endpointslices.discovery.k8s.io"),
    ] {
        assert_eq!(
            can(TENANTS[2], verb, resource, ns),
            "no",
            "{verb} {resource}"
        );
    }
}

/// Issue 45, finding 4: the SCIM ServiceAccount (or HR by mistake) created a second User with
/// the username of a person HR had suspended, and that person had `admin` in the second
/// User's namespace. Now the younger User is refused (`DuplicateIdentity`, a Warning Event on
/// both), whatever its case, and gets the identity only once the older User is gone.
#[tokio::test]
async fn a_second_user_with_a_suspended_persons_identity_gets_no_access() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    s.create(
        &hr,
        &User::test("atk-frank").with_spec(
            json!({ "identity": { "username": "atk-frank@example.com" }, "suspended": true }),
        ),
    )
    .await;
    wait_reason(&c, "atk-frank", "Suspended").await;
    s.track("atk-frank-two");
    install_scim_identity();
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let two: User = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "metadata": { "name": "atk-frank-two", "labels": { "homestead.dev/writer": "scim" } },
        "spec": { "identity": { "username": "ATK-Frank@example.com" } },
    }))
    .unwrap();
    Api::<User>::all(as_scim)
        .create(&PostParams::default(), &two)
        .await
        .unwrap();
    wait_reason(&c, "atk-frank-two", "DuplicateIdentity").await;
    for ns in ["user-atk-frank", "user-atk-frank-two"] {
        for who in ["atk-frank@example.com", "ATK-Frank@example.com"] {
            assert_eq!(can(who, "get", "pods", ns), "no", "{who} in {ns}");
        }
    }
    assert!(
        bindings(&c, "user-atk-frank-two").await.is_empty(),
        "no RoleBinding for the duplicate"
    );
    eventually("a Warning Event on each User", 30, || async {
        let on_two = event_notes("atk-frank-two", "DuplicateIdentity");
        let on_frank = event_notes("atk-frank", "DuplicateIdentity");
        (!on_two.is_empty() && on_frank.iter().any(|n| n.contains("atk-frank-two"))).then_some(())
    })
    .await;

    // The identity is free once the older User is gone: the younger one gets it.
    Api::<User>::all(hr.clone())
        .delete("atk-frank", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(&c, "atk-frank-two", "Provisioned").await;
    eventually(
        "the person to have access through the remaining User",
        30,
        || async {
            (can("ATK-Frank@example.com", "get", "pods", "user-atk-frank-two") == "yes")
                .then_some(())
        },
    )
    .await;
}

/// The Profile `status.profile` names for User `name`, once its status describes its
/// current generation.
async fn applied_profile(c: &Client, name: &str) -> Option<String> {
    let user = Api::<User>::all(c.clone()).get(name).await.unwrap();
    let status = user.status?;
    (status.observed_generation == user.metadata.generation)
        .then_some(status.profile.map(|p| p.name))?
}

/// Issue 45, finding 3: directory groups reached people by name. (a) With the SCIM token alone:
/// a SCIM User in a group a Profile selects, deleted; the group kept the name, and a User HR
/// later made under that name got the group's Profile. (b) As the SCIM ServiceAccount, a
/// SCIM group's `spec.members` naming HR's people moved them to the group's Profile. Now the
/// service drops a deleted User from its groups, and the operator counts a membership only
/// where the group's writer is the User's.
#[tokio::test]
async fn directory_groups_reach_only_the_people_their_writer_owns() {
    let s = Scenario::new();
    let c = admin().await;
    let hr = hr().await;
    profile(
        &c,
        "atk-vendor",
        json!({ "role": "view", "directory": { "groups": ["Atk Vendors"] } }),
    )
    .await;
    s.track("atk-newhire");
    let id = scim_create("atk-newhire@example.com", json!({}));
    let (status, created) = scim(
        "POST",
        "/Groups",
        Some(json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "Atk Vendors",
            "members": [{ "value": id }],
        })),
    );
    assert_eq!(status, 201, "{created}");
    let groups: Api<homestead_api::DirectoryGroup> = Api::all(c.clone());
    let group = groups
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|g| g.spec.display_name == "Atk Vendors")
        .unwrap()
        .name_any();
    eventually("the SCIM User to get the group's Profile", 30, || async {
        (applied_profile(&c, "atk-newhire").await.as_deref() == Some("atk-vendor")).then_some(())
    })
    .await;

    // (a) The identity provider deletes the person: the group no longer names them.
    let (status, body) = scim("DELETE", &format!("/Users/{id}"), None);
    assert_eq!(status, 204, "{body}");
    let users: Api<User> = Api::all(c.clone());
    wait_gone(&users, "atk-newhire", 60).await;
    let members = groups.get(&group).await.unwrap().spec.members;
    assert!(
        !members.contains(&"atk-newhire".to_owned()),
        "the deleted User is still a member: {members:?}"
    );
    // HR's unrelated person of the same name gets no Profile from the group.
    s.create(
        &hr,
        &User::test("atk-newhire")
            .with_spec(json!({ "identity": { "username": "newhire-hr@example.com" } })),
    )
    .await;
    s.create(&hr, &User::test("atk-walter")).await;
    wait_reason(&c, "atk-newhire", "Provisioned").await;
    wait_reason(&c, "atk-walter", "Provisioned").await;

    // (b) The SCIM ServiceAccount names HR's people in its own group: admitted, and it reaches
    // nobody.
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let patched = Api::<homestead_api::DirectoryGroup>::all(as_scim)
        .patch(
            &group,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "members": ["atk-walter", "atk-newhire"] } })),
        )
        .await
        .unwrap();
    let generation = patched.metadata.generation;
    eventually("the operator to see the group's change", 30, || async {
        let seen = groups
            .get(&group)
            .await
            .unwrap()
            .status?
            .observed_generation;
        (seen == generation).then_some(())
    })
    .await;
    // A change of each person afterwards: their reconciles read the group as it is now.
    for name in ["atk-walter", "atk-newhire"] {
        merge(&hr, name, json!({ "spec": { "displayName": "touched" } }))
            .await
            .unwrap();
        let reconciled = wait_reason(&c, name, "Provisioned").await;
        assert_eq!(
            reconciled.status.unwrap().profile,
            None,
            "{name}, whom HR made, moved to the SCIM group's Profile"
        );
    }
    groups
        .delete(&group, &DeleteParams::default())
        .await
        .unwrap();
}

/// Whether the server closes `stream` (EOF or an error on read) within `secs` seconds of now,
/// reading past whatever it answers first.
fn closed_within(stream: &mut impl std::io::Read, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
    false
}

/// Issue 45, finding 5: before any token check, 50 silent TLS connections and 50 with partial
/// headers stayed open past 75 s, and 100 connections with 300 KB of unfinished headers each
/// grew the SCIM service by 31 MB. Now connections are capped, the handshake, each request's
/// headers and an idle connection are timed, and headers are bounded, all before
/// authentication. (The figures under 1,000 slow clients are in docs/security.md.)
#[tokio::test]
async fn the_scim_service_bounds_what_unauthenticated_clients_hold() {
    use std::io::Write as _;
    let service = spawn_scim(
        "scim-limits",
        &["--max-connections=6", "--header-read-timeout=2s"],
    );
    let address = service.address.as_str();
    let healthz = || https_request(address, &service.ca, "GET", "/healthz", "", None);
    assert_eq!(healthz().map(|r| r.0), Ok(200));

    // Six silent TCP connections fill the service; the seventh is closed at once.
    let silent: Vec<std::net::TcpStream> = (0..6)
        .map(|_| std::net::TcpStream::connect(address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(healthz().is_err(), "a seventh connection was served");
    // The TLS handshake times out: each silent one is closed, and the service serves again.
    for mut stream in silent {
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        assert!(
            closed_within(&mut stream, 10),
            "a silent connection stayed open"
        );
    }
    assert_eq!(healthz().map(|r| r.0), Ok(200));

    // Headers that never end: closed at the header read timeout.
    let mut partial = tls_connect(address, &service.ca).unwrap();
    write!(partial, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a").unwrap();
    partial
        .sock
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    assert!(
        closed_within(&mut partial, 10),
        "partial headers kept the connection"
    );
    // A kept-alive connection left idle after a request: closed too.
    let mut idle = tls_connect(address, &service.ca).unwrap();
    write!(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    idle.sock
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    assert!(
        closed_within(&mut idle, 10),
        "an idle connection stayed open"
    );

    // Headers over 16 KiB: refused before the handler (and the token check) sees them.
    let mut big = tls_connect(address, &service.ca).unwrap();
    let filler = "a".repeat(20 * 1024);
    let _ = write!(
        big,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {filler}\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut big, &mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "oversized headers: {answer:?}"
    );

    let (code, metrics) = https_request(address, &service.ca, "GET", "/metrics", "", None).unwrap();
    assert_eq!(code, 200);
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("homestead_scim_connections_refused_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(refused.is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(
        metrics.contains("homestead_scim_connections_open "),
        "{metrics}"
    );
}

/// Issue 45, finding 4, raced: five Users with one username created at once, before the
/// operator has seen any of them. However the watch events and reconciles interleave, exactly
/// one ends up with access (the oldest, on a tie the first by name), and every other one is
/// `DuplicateIdentity` with nothing in its namespace.
#[tokio::test]
async fn users_raced_into_one_identity_end_with_exactly_one_home() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    let names: Vec<String> = (0..5).map(|i| format!("atk-twin-{i}")).collect();
    let person = "atk-twin@example.com";
    let twins: Vec<User> = names
        .iter()
        .map(|name| User::test(name).with_spec(json!({ "identity": { "username": person } })))
        .collect();
    futures::future::join_all(twins.iter().map(|twin| s.create(&hr, twin))).await;
    let users: Api<User> = Api::all(c.clone());
    let reasons = eventually("every twin to settle", 60, || async {
        let mut reasons = Vec::new();
        for name in &names {
            let u = users.get(name).await.ok()?;
            let current = u.status.as_ref()?.observed_generation == u.metadata.generation;
            let reason = reason(&u).filter(|_| current)?;
            reasons.push(reason);
        }
        let provisioned = reasons.iter().filter(|r| *r == "Provisioned").count();
        let refused = reasons.iter().filter(|r| *r == "DuplicateIdentity").count();
        (provisioned == 1 && refused == names.len() - 1).then_some(reasons)
    })
    .await;
    let holder = &names[reasons.iter().position(|r| r == "Provisioned").unwrap()];
    for name in &names {
        let ns = format!("user-{name}");
        let expected = if name == holder { "yes" } else { "no" };
        eventually(&format!("access in {ns} to be {expected}"), 30, || async {
            (can_get_pods(person, &ns) == expected).then_some(())
        })
        .await;
        if name != holder {
            assert!(bindings(&c, &ns).await.is_empty(), "{ns} keeps a binding");
        }
    }
}
