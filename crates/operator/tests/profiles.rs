//! Profiles on the real control plane: what a Profile gives its Users (role, quota, LimitRange,
//! Pod Security, network isolation, labels), which User fields may override it, how a change
//! rolls out to exactly its Users (audit log), drift repair of what it adds, and a deleted
//! Profile that changes no namespace.

mod common;

use std::collections::BTreeMap;

use common::*;
use homestead_api::{Profile, User};
use homestead_reconciler::plan::desired::{desired_limit_range, desired_network_policy};
use homestead_testenv::OPERATOR;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Merges `spec` into the Profile `name`'s spec.
async fn patch_profile(client: &Client, name: &str, spec: Value) -> Profile {
    Api::<Profile>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap()
}

/// The `hard` limits of Homestead's quota in `ns`, as strings.
async fn quota_hard(client: &Client, ns: &str) -> Option<BTreeMap<String, String>> {
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), ns)
        .get_opt("homestead-quota")
        .await
        .ok()??;
    Some(
        quota
            .spec?
            .hard?
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
    )
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as=PERSON`: "yes" or "no".
fn can_i(person: &str, verb: &str, resource: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(&["auth", "can-i", verb, resource, "-n", ns, &who], "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

#[tokio::test]
async fn a_profile_gives_its_users_role_quota_limits_pod_security_and_isolation() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "pf-engineer",
        json!({
            "role": "edit",
            "quota": { "hard": { "pods": "20" } },
            "limitRange": { "limits": [{ "type": "Container",
                "default": { "cpu": "500m", "memory": "512Mi" },
                "defaultRequest": { "cpu": "100m" } }] },
            "podSecurity": { "enforce": "restricted" },
            "networkIsolation": "Isolated",
            "allowIngressFrom": ["monitoring"],
            "namespace": { "labels": { "tier": "engineering" } },
            "userOverrides": ["quota"],
        }),
    )
    .await;
    s.create(
        &c,
        &User::test("pf-alice").with_spec(json!({ "profile": "pf-engineer" })),
    )
    .await;
    let alice = wait_reason(&c, "pf-alice", "Provisioned").await;
    let ns = "user-pf-alice";
    let applied = alice.status.unwrap().profile.unwrap();
    assert_eq!(applied.name, "pf-engineer");
    assert_eq!(applied.observed_generation, Some(1));

    // The role: what the person can really do is `edit`, not `admin`.
    let person = "pf-alice@example.com";
    assert_eq!(can_i(person, "create", "deployments.apps", ns), "yes");
    assert_eq!(
        can_i(
            person,
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            ns
        ),
        "no",
        "edit cannot grant access; admin could"
    );
    let binding = Api::<RoleBinding>::namespaced(c.clone(), ns)
        .get("homestead-user")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "edit");

    assert_eq!(
        quota_hard(&c, ns).await,
        Some([("pods".to_owned(), "20".to_owned())].into())
    );
    let limits = Api::<LimitRange>::namespaced(c.clone(), ns)
        .get("homestead-limits")
        .await
        .unwrap();
    let item = &limits.spec.unwrap().limits[0];
    assert_eq!(item.default.as_ref().unwrap()["cpu"].0, "500m");
    assert_eq!(item.default_request.as_ref().unwrap()["cpu"].0, "100m");
    let namespace = Api::<Namespace>::all(c.clone()).get(ns).await.unwrap();
    let labels = namespace.labels();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    assert_eq!(
        labels["pod-security.kubernetes.io/warn"], "restricted",
        "a level the Profile leaves out is the operator's flag"
    );
    assert_eq!(labels["tier"], "engineering");
    let policy = Api::<NetworkPolicy>::namespaced(c.clone(), ns)
        .get("homestead-isolation")
        .await
        .unwrap();
    let spec = serde_json::to_value(policy.spec.unwrap()).unwrap();
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        spec["ingress"][0]["from"],
        json!([
            { "podSelector": {} },
            { "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "monitoring" } } },
        ])
    );
    assert_eq!(
        spec["egress"][1]["ports"],
        json!([{ "protocol": "UDP", "port": 53 }, { "protocol": "TCP", "port": 53 }])
    );

    // Steady state: a reconcile (triggered by a label someone adds to the Namespace) finds
    // everything as the API server stores it (defaulted LimitRange, NetworkPolicy, quota) and
    // writes nothing.
    let (mark, before) = (settled_mark().await, reconciles(&env().metrics_address));
    Api::<Namespace>::all(c.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        reconciles(&env().metrics_address) > before,
        "the label triggers a reconcile"
    );
    let writes: Vec<Value> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "pf-alice", ns))
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "a converged User was written: {writes:#?}"
    );

    // The Profile allows a User's own quota, not a User's own role.
    s.create(
        &c,
        &User::test("pf-bob")
            .with_spec(json!({ "profile": "pf-engineer", "quota": { "hard": { "pods": "5" } } })),
    )
    .await;
    wait_reason(&c, "pf-bob", "Provisioned").await;
    assert_eq!(
        quota_hard(&c, "user-pf-bob").await,
        Some([("pods".to_owned(), "5".to_owned())].into())
    );
    s.create(
        &c,
        &User::test("pf-carol").with_spec(json!({ "profile": "pf-engineer", "role": "admin" })),
    )
    .await;
    let carol = wait_reason(&c, "pf-carol", "OverrideNotAllowed").await;
    let message = &carol.ready_condition().unwrap().message;
    assert!(
        message.contains("\"role\"") && message.contains("pf-engineer"),
        "{message}"
    );
    assert!(
        Api::<Namespace>::all(c.clone())
            .get_opt("user-pf-carol")
            .await
            .unwrap()
            .is_none(),
        "a refused override creates nothing"
    );
}

#[tokio::test]
async fn a_profile_change_reaches_exactly_its_users_and_its_status_counts_them() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "pf-team",
        json!({ "quota": { "hard": { "pods": "10" } } }),
    )
    .await;
    for name in ["pf-t1", "pf-t2"] {
        s.create(
            &c,
            &User::test(name).with_spec(json!({ "profile": "pf-team" })),
        )
        .await;
    }
    s.create(
        &c,
        &User::test("pf-solo").with_spec(json!({ "quota": { "hard": { "pods": "10" } } })),
    )
    .await;
    for name in ["pf-t1", "pf-t2", "pf-solo"] {
        wait_reason(&c, name, "Provisioned").await;
    }
    let mark = settled_mark().await;

    let changed = patch_profile(
        &c,
        "pf-team",
        json!({ "quota": { "hard": { "pods": "30" } } }),
    )
    .await;
    let generation = changed.metadata.generation;
    let profiles: Api<Profile> = Api::all(c.clone());
    let status = eventually(
        "the Profile's status to count 2 Users up to date",
        60,
        || {
            let profiles = profiles.clone();
            async move {
                let status = profiles.get("pf-team").await.ok()?.status?;
                (status.observed_generation == generation && status.users_up_to_date == 2)
                    .then_some(status)
            }
        },
    )
    .await;
    assert_eq!(status.users, 2);
    assert_eq!(status.conditions[0].reason, "RolledOut");
    for ns in ["user-pf-t1", "user-pf-t2"] {
        assert_eq!(
            quota_hard(&c, ns).await,
            Some([("pods".to_owned(), "30".to_owned())].into()),
            "{ns}"
        );
    }
    let solo: Vec<Value> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "pf-solo", "user-pf-solo"))
        .cloned()
        .collect();
    assert!(
        solo.is_empty(),
        "a User of no Profile was written: {solo:#?}"
    );
    // Other tests of this binary run at the same time: count the writes to this test's Users.
    let mut team: Vec<String> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_change(e) && e["objectRef"]["resource"] == "resourcequotas")
        .filter_map(|e| e["objectRef"]["namespace"].as_str().map(str::to_owned))
        .filter(|ns| ns.starts_with("user-pf-t"))
        .collect();
    team.sort();
    assert_eq!(
        team,
        ["user-pf-t1", "user-pf-t2"],
        "one quota write per User of the Profile"
    );
}

#[tokio::test]
async fn what_a_profile_adds_is_repaired_and_removed_when_it_stops_asking() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "pf-isolated",
        json!({
            "limitRange": { "limits": [{ "type": "Container", "default": { "cpu": "1" } }] },
            "networkIsolation": "Isolated",
        }),
    )
    .await;
    s.create(
        &c,
        &User::test("pf-dave").with_spec(json!({ "profile": "pf-isolated" })),
    )
    .await;
    wait_reason(&c, "pf-dave", "Provisioned").await;
    let ns = "user-pf-dave";
    let limits: Api<LimitRange> = Api::namespaced(c.clone(), ns);
    let policies: Api<NetworkPolicy> = Api::namespaced(c.clone(), ns);

    limits
        .delete("homestead-limits", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the LimitRange to come back", 60, || async {
        limits.get_opt("homestead-limits").await.ok()?
    })
    .await;
    // The isolation cannot drift at all: the API server refuses anyone but the operator,
    // the cluster admin included, a change to it (docs/security.md).
    let refused = policies
        .delete("homestead-isolation", &DeleteParams::default())
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );
    assert!(
        policies
            .get_opt("homestead-isolation")
            .await
            .unwrap()
            .is_some()
    );

    patch_profile(&c, "pf-isolated", json!({ "networkIsolation": "None" })).await;
    wait_gone(&policies, "homestead-isolation", 60).await;
    assert!(
        limits.get_opt("homestead-limits").await.unwrap().is_some(),
        "the LimitRange stays while the Profile asks for it"
    );
    patch_profile(&c, "pf-isolated", json!({ "limitRange": null })).await;
    wait_gone(&limits, "homestead-limits", 60).await;
}

#[tokio::test]
async fn deleting_a_profile_in_use_changes_no_namespace() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({
        "role": "view",
        "limitRange": { "limits": [{ "type": "Container", "default": { "cpu": "1" } }] },
        "networkIsolation": "Isolated",
    });
    profile(&c, "pf-gone", spec.clone()).await;
    s.create(
        &c,
        &User::test("pf-erin").with_spec(json!({ "profile": "pf-gone" })),
    )
    .await;
    wait_reason(&c, "pf-erin", "Provisioned").await;
    let ns = "user-pf-erin";
    let mark = settled_mark().await;

    let profiles: Api<Profile> = Api::all(c.clone());
    profiles
        .delete("pf-gone", &DeleteParams::default())
        .await
        .unwrap();
    let erin = wait_reason(&c, "pf-erin", "ProfileNotFound").await;
    assert!(
        erin.ready_condition().unwrap().message.contains("pf-gone"),
        "the message names the Profile"
    );
    let writes: Vec<Value> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && e["objectRef"]["namespace"] == ns)
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "a deleted Profile changed the namespace: {writes:#?}"
    );
    assert_eq!(
        can_i("pf-erin@example.com", "get", "pods", ns),
        "yes",
        "access stays as it was"
    );
    for (kind, present) in [
        (
            "LimitRange",
            Api::<LimitRange>::namespaced(c.clone(), ns)
                .get_opt("homestead-limits")
                .await
                .unwrap()
                .is_some(),
        ),
        (
            "NetworkPolicy",
            Api::<NetworkPolicy>::namespaced(c.clone(), ns)
                .get_opt("homestead-isolation")
                .await
                .unwrap()
                .is_some(),
        ),
    ] {
        assert!(present, "the {kind} stays");
    }

    // Back again: the User is Provisioned with it.
    profile(&c, "pf-gone", spec).await;
    wait_reason(&c, "pf-erin", "Provisioned").await;
    let users: Api<User> = Api::all(c.clone());
    assert_eq!(
        users
            .get("pf-erin")
            .await
            .unwrap()
            .status
            .unwrap()
            .profile
            .unwrap()
            .name,
        "pf-gone"
    );
}

#[tokio::test]
async fn the_admission_policy_keeps_limit_ranges_and_network_policies_in_homesteads_namespaces() {
    env();
    let operator = env().plane.client(OPERATOR).await.unwrap();
    let who = format!("--as={OPERATOR}");
    for resource in ["limitranges", "networkpolicies.networking.k8s.io"] {
        let (_, out) = kubectl(
            &[
                "auth",
                "can-i",
                "create",
                resource,
                "-n",
                "kube-system",
                &who,
            ],
            "",
        );
        assert_eq!(out.trim(), "yes", "RBAC alone allows {resource}");
    }
    let owner = User::test("pf-nobody");
    let limits = desired_limit_range(
        &owner,
        "kube-system",
        &serde_json::from_value(json!({ "limits": [{ "type": "Container" }] })).unwrap(),
    );
    let policy = desired_network_policy(&owner, "kube-system", &[]);
    // Dry runs (admission runs, nothing is stored), retried while the API server loads the
    // policy that `install` has just created.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let denied = eventually("the policy to deny both", 30, || {
        let (operator, dry_run) = (operator.clone(), dry_run.clone());
        let (limits, policy) = (limits.clone(), policy.clone());
        async move {
            let limit = Api::<LimitRange>::namespaced(operator.clone(), "kube-system")
                .create(&dry_run, &limits)
                .await
                .err()?;
            let network = Api::<NetworkPolicy>::namespaced(operator, "kube-system")
                .create(&dry_run, &policy)
                .await
                .err()?;
            Some([limit.to_string(), network.to_string()])
        }
    })
    .await;
    for message in denied {
        assert!(
            message.contains("homestead-operator-namespaced"),
            "{message}"
        );
    }
}
