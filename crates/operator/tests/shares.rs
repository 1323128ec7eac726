//! Shares (docs/sharing.md), proven on the real control plane with the operator running, by what
//! people can really do (`kubectl auth can-i --as` against the real aggregated roles): the API
//! server refuses malformed Shares with the rule named; admin writes a namespace's Shares and
//! edit and view read them; the operator grants a Share's role to its grantees' identities, keeps
//! a group's current, and takes it away on expiry, from a grantee who loses access, while the home
//! is suspended, and when a limit says so; governed homes refuse RoleBindings to people. The
//! attacks (a tenant with edit, a grantee, an owner past the limits, a tenant editing the share's
//! binding, the SCIM identity) are tests here too.

mod common;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::{DirectoryGroup, Share, User};
use homestead_testenv::ADMIN;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// A Share document in namespace `default` with `spec` (YAML flow mappings), created by the
/// admin.
fn share(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    homestead.dev/created-by: {ADMIN}\nspec:\n{spec}\n",
        api = homestead_api::API_VERSION
    )
}

#[test]
fn bad_shares_are_refused_at_admission_with_the_rule_named() {
    let _ = env();
    let good = "  to: [{user: bob}, {group: analysts}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: review";
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &share("fine", good),
    );
    assert!(ok, "a well-formed Share is accepted: {out}");
    let cases = [
        (
            "no grantee",
            "  to: []\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "should have at least 1 items",
        ),
        (
            "both",
            "  to: [{user: bob, group: analysts}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "exactly one of user",
        ),
        (
            "neither",
            "  to: [{}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "exactly one of user",
        ),
        (
            "raw identity",
            "  to: [{user: \"bob@example.com\"}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "should match",
        ),
        (
            "cluster-admin",
            "  to: [{user: bob}]\n  role: cluster-admin\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "cluster-admin",
        ),
        (
            "no expiry",
            "  to: [{user: bob}]\n  role: view\n  reason: r",
            "expiresAt: Required value",
        ),
        (
            "no reason",
            "  to: [{user: bob}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"",
            "reason: Required value",
        ),
    ];
    for (what, spec, rule) in cases {
        let (ok, out) = kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            &share("bad", spec),
        );
        assert!(!ok, "{what}: accepted: {out}");
        assert!(
            out.contains(rule),
            "{what}: refused without naming {rule:?}: {out}"
        );
    }
    let many: Vec<String> = (0..21).map(|i| format!("{{user: u{i}}}")).collect();
    let spec = format!(
        "  to: [{}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
        many.join(", ")
    );
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &share("bad", &spec),
    );
    assert!(
        !ok && out.contains("must have at most 20 items"),
        "21 grantees: {out}"
    );
}

/// Who may share, by what people can really do (`kubectl auth can-i --as` against the real
/// aggregated roles): `admin` in a namespace writes its Shares, `edit` and `view` read them.
#[tokio::test]
async fn admin_writes_shares_and_edit_and_view_read_them() {
    let _ = env();
    let ns = "shares-rbac";
    let (ok, out) = kubectl(&["create", "namespace", ns], "");
    assert!(ok || out.contains("AlreadyExists"), "{out}");
    for (person, role) in [
        ("ann@example.com", "admin"),
        ("ed@example.com", "edit"),
        ("vic@example.com", "view"),
    ] {
        let name = format!("share-rbac-{role}");
        let (ok, out) = kubectl(
            &[
                "create",
                "rolebinding",
                &name,
                "-n",
                ns,
                &format!("--clusterrole={role}"),
                &format!("--user={person}"),
            ],
            "",
        );
        assert!(ok || out.contains("AlreadyExists"), "{out}");
    }
    let can = |person: &str, verb: &str| {
        let who = format!("--as={person}");
        let (_, out) = kubectl(
            &[
                "auth",
                "can-i",
                verb,
                "shares.homestead.dev",
                "-n",
                ns,
                &who,
            ],
            "",
        );
        out.lines().next().unwrap_or_default().trim().to_owned()
    };
    // The aggregation controller may take a moment to fold the new rules in.
    let started = std::time::Instant::now();
    while can("ann@example.com", "create") != "yes" {
        assert!(
            started.elapsed().as_secs() < 30,
            "admin never got create on shares"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    for verb in [
        "create", "update", "patch", "delete", "get", "list", "watch",
    ] {
        assert_eq!(can("ann@example.com", verb), "yes", "admin {verb}");
    }
    for person in ["ed@example.com", "vic@example.com"] {
        for verb in ["get", "list", "watch"] {
            assert_eq!(can(person, verb), "yes", "{person} {verb}");
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert_eq!(can(person, verb), "no", "{person} may not {verb} shares");
        }
    }
    assert_eq!(can("nobody@example.com", "get"), "no");
}

/// Creates the User `name` (identity `<name>@example.com`) with `spec` merged in, replacing one
/// left by an earlier run, and waits until it is `Ready` (`Provisioned`, or `want`).
async fn person(client: &Client, name: &str, spec: serde_json::Value, want: &str) -> User {
    let api: Api<User> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_some() {
        let _ = api.delete(name, &DeleteParams::default()).await;
        wait_gone(&api, name, 60).await;
    }
    let user = User::test(name).with_spec(spec);
    let mut user = serde_json::to_value(&user).unwrap();
    user["metadata"] = json!({ "name": name });
    user.as_object_mut().unwrap().remove("status");
    let user: User = serde_json::from_value(user).unwrap();
    api.create(&PostParams::default(), &user).await.unwrap();
    wait_reason(client, name, want).await
}

/// A Share document: `name` in `namespace`, to `to` (a YAML flow sequence), `role`, expiring
/// `expires` from now, created by `creator` (the annotation the admission policy checks).
fn share_doc(
    namespace: &str,
    name: &str,
    to: &str,
    role: &str,
    expires: Duration,
    creator: &str,
) -> String {
    let until = k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::try_from(expires).unwrap();
    let until = until.round(k8s_openapi::jiff::Unit::Second).unwrap();
    format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    homestead.dev/created-by: \"{creator}\"\nspec:\n  to: {to}\n  role: {role}\n  expiresAt: \"{until}\"\n  reason: \"working together\"\n",
        api = homestead_api::API_VERSION
    )
}

/// `kubectl create -f -` of `doc`, as `who` (impersonated by the admin).
fn create_as(who: &str, doc: &str) -> (bool, String) {
    kubectl(&[&format!("--as={who}"), "create", "-f", "-"], doc)
}

fn ready_message(share: &Share) -> String {
    let status = share.status.as_ref().unwrap();
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message
        .clone()
}

#[tokio::test]
async fn a_share_grants_its_role_to_its_grantee_until_it_expires() {
    let client = admin().await;
    person(&client, "sh-alice", json!({}), "Provisioned").await;
    person(&client, "sh-bob", json!({}), "Provisioned").await;
    let ns = "user-sh-alice";
    assert_eq!(can_get_pods("sh-bob@example.com", ns), "no");
    let doc = share_doc(
        ns,
        "review",
        "[{user: sh-bob}]",
        "view",
        // Long enough for a busy CI machine to grant it and count it as Active first.
        Duration::from_secs(20),
        "sh-alice@example.com",
    );
    let (ok, out) = create_as("sh-alice@example.com", &doc);
    assert!(ok, "the owner shares her home: {out}");
    let took = wait_can("sh-bob@example.com", ns, "yes").await;
    eprintln!("granted in {took:?}");
    assert_eq!(
        can("sh-bob@example.com", "create", "pods", ns),
        "no",
        "view only"
    );
    let share = wait_share(&client, ns, "review", "Active").await;
    let status = share.status.unwrap();
    assert_eq!(
        status.grantees[0].username.as_deref(),
        Some("sh-bob@example.com")
    );
    assert_eq!(status.to.as_deref(), Some("sh-bob"));
    // The metrics count it.
    let metric = |name: &str| {
        let (_, body) = http_get(&env().metrics_address, "/metrics").unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert!(metric("homestead_shares{reason=\"Active\"}") >= 1.0);
    assert!(metric("homestead_share_changes_total{change=\"Granted\"}") >= 1.0);
    assert!(metric("homestead_shares_expiring") >= 1.0);
    // Expiry: a reconcile is due at expiresAt.
    wait_can("sh-bob@example.com", ns, "no").await;
    let share = wait_share(&client, ns, "review", "Expired").await;
    assert!(ready_message(&share).contains("expired"));
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    assert!(
        bindings
            .get_opt("homestead-share-review")
            .await
            .unwrap()
            .is_none()
    );
    // The owner keeps her own access throughout.
    assert_eq!(can_get_pods("sh-alice@example.com", ns), "yes");
}

#[tokio::test]
async fn a_group_grantee_follows_its_membership() {
    let client = admin().await;
    person(&client, "sg-owner", json!({}), "Provisioned").await;
    person(&client, "sg-carol", json!({}), "Provisioned").await;
    person(&client, "sg-dave", json!({}), "Provisioned").await;
    let groups: Api<DirectoryGroup> = Api::all(client.clone());
    let _ = groups.delete("sg-analysts", &DeleteParams::default()).await;
    wait_gone(&groups, "sg-analysts", 30).await;
    let group = DirectoryGroup::test("sg-analysts", "Analysts").with_members(&["sg-carol"]);
    let mut group = serde_json::to_value(&group).unwrap();
    group["metadata"] = json!({ "name": "sg-analysts" });
    group.as_object_mut().unwrap().remove("status");
    groups
        .create(
            &PostParams::default(),
            &serde_json::from_value(group).unwrap(),
        )
        .await
        .unwrap();
    let ns = "user-sg-owner";
    let doc = share_doc(
        ns,
        "team",
        "[{group: sg-analysts}]",
        "edit",
        Duration::from_secs(3600),
        "sg-owner@example.com",
    );
    let (ok, out) = create_as("sg-owner@example.com", &doc);
    assert!(ok, "{out}");
    wait_can("sg-carol@example.com", ns, "yes").await;
    assert_eq!(can_get_pods("sg-dave@example.com", ns), "no");
    let members = |m: &[&str]| json!({ "spec": { "members": m } });
    groups
        .patch(
            "sg-analysts",
            &PatchParams::default(),
            &Patch::Merge(members(&["sg-carol", "sg-dave"])),
        )
        .await
        .unwrap();
    wait_can("sg-dave@example.com", ns, "yes").await;
    groups
        .patch(
            "sg-analysts",
            &PatchParams::default(),
            &Patch::Merge(members(&["sg-dave"])),
        )
        .await
        .unwrap();
    wait_can("sg-carol@example.com", ns, "no").await;
    assert_eq!(can_get_pods("sg-dave@example.com", ns), "yes");
    let share = wait_share(&client, ns, "team", "Active").await;
    let group = &share.status.unwrap().grantees[0];
    assert_eq!((group.members, group.active), (Some(1), Some(1)));
}

#[tokio::test]
async fn a_grantee_who_loses_access_loses_the_share_alone() {
    let client = admin().await;
    person(&client, "sl-owner", json!({}), "Provisioned").await;
    person(&client, "sl-bob", json!({}), "Provisioned").await;
    person(&client, "sl-carol", json!({}), "Provisioned").await;
    person(&client, "sl-dan", json!({}), "Provisioned").await;
    let ns = "user-sl-owner";
    let doc = share_doc(
        ns,
        "crew",
        "[{user: sl-bob}, {user: sl-carol}, {user: sl-dan}]",
        "view",
        Duration::from_secs(3600),
        "sl-owner@example.com",
    );
    let (ok, out) = create_as("sl-owner@example.com", &doc);
    assert!(ok, "{out}");
    for who in ["sl-bob", "sl-carol", "sl-dan"] {
        wait_can(&format!("{who}@example.com"), ns, "yes").await;
    }
    let users: Api<User> = Api::all(client.clone());
    let spec = |v: serde_json::Value| Patch::Merge(json!({ "spec": v }));
    users
        .patch(
            "sl-bob",
            &PatchParams::default(),
            &spec(json!({ "suspended": true })),
        )
        .await
        .unwrap();
    wait_can("sl-bob@example.com", ns, "no").await;
    assert_eq!(
        can_get_pods("sl-carol@example.com", ns),
        "yes",
        "carol keeps it"
    );
    let past = (k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::from_secs(60))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap()
    .to_string();
    users
        .patch(
            "sl-carol",
            &PatchParams::default(),
            &spec(json!({ "validUntil": past })),
        )
        .await
        .unwrap();
    wait_can("sl-carol@example.com", ns, "no").await;
    users
        .delete("sl-dan", &DeleteParams::default())
        .await
        .unwrap();
    wait_can("sl-dan@example.com", ns, "no").await;
    let share = wait_share(&client, ns, "crew", "Suspended").await;
    assert!(
        ready_message(&share).contains("no grantee"),
        "{}",
        ready_message(&share)
    );
    // Unsuspended, bob has it again.
    users
        .patch(
            "sl-bob",
            &PatchParams::default(),
            &spec(json!({ "suspended": false })),
        )
        .await
        .unwrap();
    wait_can("sl-bob@example.com", ns, "yes").await;
}

#[tokio::test]
async fn a_suspended_home_shares_nothing_until_it_is_restored() {
    let client = admin().await;
    person(&client, "ss-owner", json!({}), "Provisioned").await;
    person(&client, "ss-bob", json!({}), "Provisioned").await;
    let ns = "user-ss-owner";
    let doc = share_doc(
        ns,
        "pair",
        "[{user: ss-bob}]",
        "edit",
        Duration::from_secs(3600),
        "ss-owner@example.com",
    );
    let (ok, out) = create_as("ss-owner@example.com", &doc);
    assert!(ok, "{out}");
    wait_can("ss-bob@example.com", ns, "yes").await;
    let users: Api<User> = Api::all(client.clone());
    let suspend = |on: bool| Patch::Merge(json!({ "spec": { "suspended": on } }));
    users
        .patch("ss-owner", &PatchParams::default(), &suspend(true))
        .await
        .unwrap();
    wait_can("ss-bob@example.com", ns, "no").await;
    let share = wait_share(&client, ns, "pair", "Suspended").await;
    assert!(
        ready_message(&share).contains("suspended"),
        "{}",
        ready_message(&share)
    );
    users
        .patch("ss-owner", &PatchParams::default(), &suspend(false))
        .await
        .unwrap();
    wait_can("ss-bob@example.com", ns, "yes").await;
    wait_share(&client, ns, "pair", "Active").await;
}

#[tokio::test]
async fn limits_refuse_and_a_lowered_limit_revokes() {
    let client = admin().await;
    profile(
        &client,
        "sharing-view-only",
        json!({ "sharing": { "maxRole": "view", "maxDuration": "1d" } }),
    )
    .await;
    person(
        &client,
        "sm-owner",
        json!({ "profile": "sharing-view-only" }),
        "Provisioned",
    )
    .await;
    person(&client, "sm-bob", json!({}), "Provisioned").await;
    let ns = "user-sm-owner";
    let owner = "sm-owner@example.com";
    let too_high = share_doc(
        ns,
        "too-high",
        "[{user: sm-bob}]",
        "edit",
        Duration::from_secs(3600),
        owner,
    );
    let too_long = share_doc(
        ns,
        "too-long",
        "[{user: sm-bob}]",
        "view",
        Duration::from_secs(3 * 86_400),
        owner,
    );
    let fine = share_doc(
        ns,
        "fine",
        "[{user: sm-bob}]",
        "view",
        Duration::from_secs(3600),
        owner,
    );
    for doc in [&too_high, &too_long, &fine] {
        let (ok, out) = create_as(owner, doc);
        assert!(ok, "{out}");
    }
    let high = wait_share(&client, ns, "too-high", "Refused").await;
    assert!(
        ready_message(&high).contains("RoleAboveLimit"),
        "{}",
        ready_message(&high)
    );
    let long = wait_share(&client, ns, "too-long", "Refused").await;
    assert!(
        ready_message(&long).contains("TooLong"),
        "{}",
        ready_message(&long)
    );
    wait_share(&client, ns, "fine", "Active").await;
    wait_can("sm-bob@example.com", ns, "yes").await;
    assert_eq!(
        can("sm-bob@example.com", "create", "pods", ns),
        "no",
        "nothing above view"
    );
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    assert!(
        bindings
            .get_opt("homestead-share-too-high")
            .await
            .unwrap()
            .is_none()
    );
    // A Warning Event names the rule.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    eventually("a Warning Event Refused on too-high", 30, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("Refused")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("too-high")
                })
                .then_some(())
        }
    })
    .await;
    // The platform turns sharing off: what was granted goes.
    profile(
        &client,
        "sharing-view-only",
        json!({ "sharing": { "enabled": false } }),
    )
    .await;
    wait_can("sm-bob@example.com", ns, "no").await;
    let fine = wait_share(&client, ns, "fine", "Refused").await;
    assert!(
        ready_message(&fine).contains("SharingDisabled"),
        "{}",
        ready_message(&fine)
    );
}

#[tokio::test]
async fn a_governed_home_refuses_a_binding_to_a_person_and_admits_its_own_service_account() {
    let client = admin().await;
    profile(
        &client,
        "governed",
        json!({ "sharing": { "tenantRoleBindings": "ServiceAccountsOnly" } }),
    )
    .await;
    person(
        &client,
        "sv-owner",
        json!({ "profile": "governed" }),
        "Provisioned",
    )
    .await;
    let ns = "user-sv-owner";
    let who = "--as=sv-owner@example.com";
    let binding = |name: &str, subject: &str| {
        kubectl(
            &[
                who,
                "create",
                "rolebinding",
                name,
                "-n",
                ns,
                "--clusterrole=view",
                subject,
            ],
            "",
        )
    };
    // The policy loads asynchronously.
    let started = Instant::now();
    loop {
        let (ok, out) = binding("to-a-person", "--user=mallory@example.com");
        if !ok && out.contains("governed") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "a binding to a person was admitted: {out}"
        );
        let _ = kubectl(
            &[
                "delete",
                "rolebinding",
                "to-a-person",
                "-n",
                ns,
                "--ignore-not-found",
            ],
            "",
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(can_get_pods("mallory@example.com", ns), "no");
    let (ok, out) = binding("to-my-robot", &format!("--serviceaccount={ns}:robot"));
    assert!(
        ok,
        "a binding to the home's own ServiceAccount is admitted: {out}"
    );
    let (ok, out) = binding("to-their-robot", "--serviceaccount=default:robot");
    assert!(
        !ok && out.contains("governed"),
        "another namespace's ServiceAccount: {out}"
    );
    // The owner still shares through a Share.
    person(&client, "sv-bob", json!({}), "Provisioned").await;
    let doc = share_doc(
        ns,
        "gov",
        "[{user: sv-bob}]",
        "view",
        Duration::from_secs(3600),
        "sv-owner@example.com",
    );
    let (ok, out) = create_as("sv-owner@example.com", &doc);
    assert!(ok, "{out}");
    wait_can("sv-bob@example.com", ns, "yes").await;
}

/// The attacks on sharing, each as the person who would try it.
#[tokio::test]
async fn nobody_but_the_owner_shares_and_never_past_the_rules() {
    let client = admin().await;
    profile(
        &client,
        "sharing-admin",
        json!({ "sharing": { "maxRole": "admin" } }),
    )
    .await;
    person(
        &client,
        "sa-owner",
        json!({ "profile": "sharing-admin" }),
        "Provisioned",
    )
    .await;
    person(&client, "sa-bob", json!({}), "Provisioned").await;
    person(&client, "sa-eve", json!({}), "Provisioned").await;
    let ns = "user-sa-owner";
    let owner = "sa-owner@example.com";
    // A Share never grants admin, whatever the Profile's maxRole (the schema refuses it).
    let doc = share_doc(
        ns,
        "co-admin",
        "[{user: sa-bob}]",
        "admin",
        Duration::from_secs(3600),
        owner,
    );
    let (ok, out) = create_as(owner, &doc);
    assert!(!ok && out.contains("at most edit"), "{out}");
    // The owner shares edit with bob, and binds him admin by hand (the owner may bind people in
    // her home).
    let doc = share_doc(
        ns,
        "co-admin",
        "[{user: sa-bob}]",
        "edit",
        Duration::from_secs(3600),
        owner,
    );
    let (ok, out) = create_as(owner, &doc);
    assert!(ok, "{out}");
    wait_can("sa-bob@example.com", ns, "yes").await;
    let (ok, out) = kubectl(
        &[
            &format!("--as={owner}"),
            "create",
            "rolebinding",
            "bob-admin",
            "--clusterrole=admin",
            "--user=sa-bob@example.com",
            "-n",
            ns,
        ],
        "",
    );
    assert!(ok, "{out}");
    // A person with admin who is not the owner cannot share (RBAC allows it; the admission
    // policy does not).
    let reshare = share_doc(
        ns,
        "to-eve",
        "[{user: sa-eve}]",
        "view",
        Duration::from_secs(3600),
        "sa-bob@example.com",
    );
    assert_eq!(
        can("sa-bob@example.com", "create", "shares.homestead.dev", ns),
        "yes"
    );
    let started = Instant::now();
    loop {
        let (ok, out) = create_as("sa-bob@example.com", &reshare);
        if !ok && out.contains("only the owner of this home") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "a grantee re-shared: {out}"
        );
        let _ = kubectl(
            &["delete", "share", "to-eve", "-n", ns, "--ignore-not-found"],
            "",
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Nor change or delete the owner's Share.
    let (ok, out) = kubectl(
        &[
            "--as=sa-bob@example.com",
            "delete",
            "share",
            "co-admin",
            "-n",
            ns,
        ],
        "",
    );
    assert!(!ok && out.contains("only the owner"), "{out}");
    // A tenant with edit cannot share at all (RBAC).
    person(&client, "sa-ed", json!({ "role": "edit" }), "Provisioned").await;
    assert_eq!(
        can(
            "sa-ed@example.com",
            "create",
            "shares.homestead.dev",
            "user-sa-ed"
        ),
        "no"
    );
    // The owner cannot share into another home (she has nothing there).
    assert_eq!(
        can(owner, "create", "shares.homestead.dev", "user-sa-bob"),
        "no"
    );
    // Nor name a creator other than herself.
    let forged = share_doc(
        ns,
        "forged",
        "[{user: sa-eve}]",
        "view",
        Duration::from_secs(3600),
        "hr@example.com",
    );
    let (ok, out) = create_as(owner, &forged);
    assert!(!ok && out.contains("homestead.dev/created-by"), "{out}");
    // Grantees are Homestead Users by name: a raw identity or system:* is refused at admission.
    for raw in [
        "[{user: \"eve@example.com\"}]",
        "[{user: \"system:masters\"}]",
        "[{group: \"system:authenticated\"}]",
    ] {
        let doc = share_doc(ns, "raw", raw, "view", Duration::from_secs(3600), owner);
        let (ok, out) = create_as(owner, &doc);
        assert!(!ok && out.contains("should match"), "{raw}: {out}");
    }
    // The SCIM identity, HR's token stolen or not, has no Share rights at all.
    install_scim_identity();
    for verb in ["create", "update", "patch", "delete"] {
        assert_eq!(
            can(homestead_testenv::SCIM, verb, "shares.homestead.dev", ns),
            "no",
            "SCIM {verb}"
        );
    }
    // From here bob's access is the Share's alone.
    let (ok, out) = kubectl(&["delete", "rolebinding", "bob-admin", "-n", ns], "");
    assert!(ok, "{out}");
    // A tenant's edit of the Share's RoleBinding is undone; its deletion repaired.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    let (ok, out) = kubectl(
        &[
            &format!("--as={owner}"),
            "patch",
            "rolebinding",
            "homestead-share-co-admin",
            "-n",
            ns,
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/subjects/-","value":{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"mallory@example.com"}}]"#,
        ],
        "",
    );
    assert!(
        ok,
        "the owner (admin) may edit RoleBindings in her home: {out}"
    );
    wait_can("mallory@example.com", ns, "no").await;
    let subjects: Vec<String> = bindings
        .get("homestead-share-co-admin")
        .await
        .unwrap()
        .subjects
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(subjects, ["sa-bob@example.com"]);
    let (ok, out) = kubectl(
        &[
            &format!("--as={owner}"),
            "delete",
            "rolebinding",
            "homestead-share-co-admin",
            "-n",
            ns,
        ],
        "",
    );
    assert!(ok, "{out}");
    wait_can("sa-bob@example.com", ns, "yes").await;
}

/// `homestead access`, run as an auditor holding only `homestead-auditor` (impersonated through
/// the kubeconfig), names the source of every access to a home: the owner's own home, a Share
/// with its reason and creator, a group, and a hand-made binding as `unmanaged`.
#[tokio::test]
async fn homestead_access_names_every_source_with_the_auditor_role_alone() {
    let client = admin().await;
    person(&client, "sx-owner", json!({}), "Provisioned").await;
    person(&client, "sx-bob", json!({}), "Provisioned").await;
    let ns = "user-sx-owner";
    let owner = "sx-owner@example.com";
    let doc = share_doc(
        ns,
        "audit-me",
        "[{user: sx-bob}]",
        "view",
        Duration::from_secs(3600),
        owner,
    );
    let (ok, out) = create_as(owner, &doc);
    assert!(ok, "{out}");
    wait_can("sx-bob@example.com", ns, "yes").await;
    let (ok, out) = kubectl(
        &[
            &format!("--as={owner}"),
            "create",
            "rolebinding",
            "by-hand",
            "-n",
            ns,
            "--clusterrole=view",
            "--user=friend@example.com",
        ],
        "",
    );
    assert!(ok || out.contains("AlreadyExists"), "{out}");
    let auditor = "auditor@example.com";
    let (ok, out) = kubectl(
        &[
            "create",
            "clusterrolebinding",
            "sx-auditor",
            "--clusterrole=homestead-auditor",
            &format!("--user={auditor}"),
        ],
        "",
    );
    assert!(ok || out.contains("AlreadyExists"), "{out}");
    assert_eq!(
        can(auditor, "create", "shares.homestead.dev", ns),
        "no",
        "the auditor only reads"
    );
    assert_eq!(can(auditor, "get", "secrets", ns), "no");
    let plane = env().plane;
    let mut kubeconfig = plane.kubeconfig(ADMIN).unwrap();
    for named in &mut kubeconfig.auth_infos {
        if let Some(info) = named.auth_info.as_mut() {
            info.impersonate = Some(auditor.to_owned());
        }
    }
    let path = plane.dir().join("auditor.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
        .args(["access", "-o", "json", "-n", ns])
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&run.stdout).unwrap();
    let source = |subject: &str| {
        rows.iter()
            .find(|r| r["subject"] == format!("User:{subject}"))
            .map(|r| {
                (
                    r["source"].as_str().unwrap().to_owned(),
                    r["detail"].as_str().unwrap().to_owned(),
                )
            })
            .unwrap_or_else(|| panic!("no row for {subject}: {rows:?}"))
    };
    assert_eq!(source(owner).0, "home");
    let (kind, detail) = source("sx-bob@example.com");
    assert_eq!(kind, "share");
    assert!(
        detail.contains("audit-me: working together (by sx-owner@example.com)"),
        "{detail}"
    );
    assert_eq!(source("friend@example.com").0, "unmanaged");
    let csv = std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
        .args(["access", "-o", "csv", "--user", "sx-bob"])
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    let text = String::from_utf8(csv.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        3,
        "a header, bob's own home and the share: {text}"
    );
}

/// HR shares a person's home on their behalf (`homestead-hr` holds `share-any-home`), with its
/// own name as the creator, and the grantee gets the access; a tenant with `admin` in their own
/// home has no `share-any-home` there or anywhere.
#[tokio::test]
async fn hr_shares_a_home_on_its_owners_behalf() {
    let client = admin().await;
    let _ = hr().await;
    person(&client, "sr-owner", json!({}), "Provisioned").await;
    person(&client, "sr-bob", json!({}), "Provisioned").await;
    let ns = "user-sr-owner";
    let (_, out) = kubectl_as(
        HR,
        &[
            "auth",
            "can-i",
            "share-any-home",
            "shares.homestead.dev",
            "-n",
            ns,
        ],
        "",
    );
    assert_eq!(
        out.lines().next().unwrap_or_default().trim(),
        "yes",
        "HR (own token)"
    );
    let owner = "sr-owner@example.com";
    assert_eq!(
        can(owner, "share-any-home", "shares.homestead.dev", ns),
        "no"
    );
    let doc = share_doc(
        ns,
        "by-hr",
        "[{user: sr-bob}]",
        "view",
        Duration::from_secs(3600),
        HR,
    );
    let (ok, out) = kubectl_as(HR, &["create", "-f", "-"], &doc);
    assert!(ok, "HR shares a home: {out}");
    wait_can("sr-bob@example.com", ns, "yes").await;
}
