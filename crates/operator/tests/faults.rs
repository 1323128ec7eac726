//! Faults survived with nothing lost: a restart over converged Users writes nothing and says
//! nothing (no reconcile writes before every cache has synced), and a User suspended while the
//! operator was down loses access within seconds of the restart; an API server restart under
//! the operator is survived the same way. Its own test binary (it restarts the shared operator
//! and the API server); its tests take turns.

mod common;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::{DirectoryGroup, Profile, Share, User};
use homestead_testenv::ADMIN;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The tests of this binary disturb the whole cluster, so they run one at a time.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Creates `names` as plain Users with a quota and waits until all are provisioned.
async fn converged(s: &Scenario, c: &kube::Client, names: &[String]) {
    for name in names {
        let spec = json!({ "quota": { "hard": { "pods": "5", "requests.cpu": "0.1m" } } });
        s.create(c, &User::test(name).with_spec(spec)).await;
    }
    for name in names {
        wait_reason(c, name, "Provisioned").await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// The operator's writes since audit position `mark` that concern any of `names`.
fn writes_for(mark: usize, names: &[String]) -> Vec<serde_json::Value> {
    audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e))
        .filter(|e| names.iter().any(|n| concerns(e, n, &format!("user-{n}"))))
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_operator_survives_an_api_server_restart() {
    let _turn = one_at_a_time().await;
    let s = Scenario::new();
    let c = admin().await;
    let names: Vec<String> = (0..10).map(|i| format!("flt-api-{i:02}")).collect();
    converged(&s, &c, &names).await;
    let mark = audit().len();
    let restarted = Instant::now();
    env().plane.restart_apiserver().await.unwrap();
    let back = restarted.elapsed();
    // A new User after the restart: the operator reconnected and watches again.
    let c = admin().await;
    s.create(&c, &User::test("flt-api-new")).await;
    wait_reason(&c, "flt-api-new", "Provisioned").await;
    let converged_again = restarted.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = writes_for(mark, &names);
    assert!(
        writes.is_empty(),
        "the API server restart caused writes: {writes:#?}"
    );
    println!(
        "API server restart: ready again after {:.1} s; a new User provisioned {:.1} s after the restart began; 0 writes for {} converged Users",
        back.as_secs_f64(),
        converged_again.as_secs_f64(),
        names.len()
    );
}

#[tokio::test]
async fn a_restart_over_converged_users_writes_nothing_and_catches_up_at_once() {
    let _turn = one_at_a_time().await;
    let s = Scenario::new();
    let c = admin().await;
    let names: Vec<String> = (0..20).map(|i| format!("flt-{i:02}")).collect();
    converged(&s, &c, &names).await;

    // Stop the operator, and while it is down suspend one person.
    env().operator.lock().unwrap().stop();
    let suspended = &names[0];
    Api::<User>::all(c.clone())
        .patch(
            suspended,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspended": true } })),
        )
        .await
        .unwrap();
    let mark = audit().len();
    let started = Instant::now();
    // The same metrics address as before (now free), so the other tests here find it.
    let address = env().metrics_address.clone();
    *env().operator.lock().unwrap() =
        spawn_operator("homestead-restarted", "homestead-restarted", &address);

    wait_no_role_bindings(&c, &format!("user-{suspended}"), 60).await;
    let revoked_after = started.elapsed();
    wait_reason(&c, suspended, "Suspended").await;
    eventually("the restarted operator to be ready", 60, || async {
        (http_get(&address, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let converged = &names[1..];
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e))
        .filter(|e| {
            converged
                .iter()
                .any(|n| concerns(e, n, &format!("user-{n}")))
        })
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "the restart wrote for converged Users: {writes:#?}"
    );
    println!(
        "restart: access revoked {:.1} s after start; 0 writes and 0 Events for {} converged Users",
        revoked_after.as_secs_f64(),
        converged.len()
    );
}

/// How many large DirectoryGroups the restart below lists, and how many member names each has:
/// enough that the groups' first list ends well after the Users' (about 3 MiB of JSON).
const LARGE_GROUPS: usize = 20;
const LARGE_GROUP_MEMBERS: usize = 8_000;

/// Creates `object` as the admin, replacing one left by an earlier run.
async fn replace<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap();
    if api.get_opt(&name).await.unwrap().is_some() {
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_gone(api, &name, 60).await;
    }
    api.create(&PostParams::default(), object).await.unwrap();
}

/// Rule 29 (docs/design.md): a restart judges nobody before every cache has listed. A person
/// whose Profile (role `view`, a quota) comes from a directory group, and a Share to that group,
/// are converged; the operator restarts while the groups are large enough that their first list
/// comes last. Nothing is written for either of them: no RoleBinding deleted or created, no
/// status changed, no Event; and the person's access is what it was throughout.
#[tokio::test]
async fn a_restart_with_large_directory_groups_changes_nobodys_access() {
    let _turn = one_at_a_time().await;
    let s = Scenario::new();
    let c = admin().await;
    let profiles: Api<Profile> = Api::all(c.clone());
    let team = Profile::test("flt-team")
        .with_spec(json!({ "role": "view", "quota": { "hard": { "pods": "7" } } }))
        .for_directory_groups(&["flt-team-0"], 0);
    replace(&profiles, &team).await;
    let groups: Api<DirectoryGroup> = Api::all(c.clone());
    let (person, owner) = ("flt-dir-person", "flt-dir-owner");
    for g in 0..LARGE_GROUPS {
        let mut members: Vec<String> = (0..LARGE_GROUP_MEMBERS)
            .map(|i| format!("flt-m{g}-{i:05}"))
            .collect();
        if g == 0 {
            members.push(person.to_owned());
        }
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let name = format!("flt-team-{g}");
        let mut group = DirectoryGroup::test(&name, &name).with_members(&members);
        group.metadata.generation = None;
        group.status = None;
        replace(&groups, &group).await;
    }
    s.create(&c, &User::test(person)).await;
    s.create(&c, &User::test(owner)).await;
    let provisioned = wait_reason(&c, person, "Provisioned").await;
    assert_eq!(
        provisioned.status.as_ref().and_then(|s| s.role.as_deref()),
        Some("view"),
        "the group's Profile chose the role"
    );
    wait_reason(&c, owner, "Provisioned").await;
    let home = format!("user-{owner}");
    let until =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let share: Share = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": { "name": "flt-team", "namespace": home,
                      "annotations": { "homestead.dev/created-by": ADMIN } },
        "spec": { "to": [{ "group": "flt-team-0" }], "role": "edit",
                  "expiresAt": until.round(k8s_openapi::jiff::Unit::Second).unwrap().to_string(),
                  "reason": "restart with large groups" },
    }))
    .unwrap();
    replace(&Api::<Share>::namespaced(c.clone(), &home), &share).await;
    let person_identity = format!("{person}@example.com");
    eventually("the Share to reach the group's member", 60, || async {
        (can_get_pods(&person_identity, &home) == "yes").then_some(())
    })
    .await;
    assert_eq!(
        kubectl_can(
            &person_identity,
            "create",
            "pods",
            &format!("user-{person}")
        ),
        "no",
        "view, from the group's Profile"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;

    let names = [person.to_owned(), owner.to_owned()];
    for round in 0..2 {
        env().operator.lock().unwrap().stop();
        let mark = audit().len();
        let address = env().metrics_address.clone();
        *env().operator.lock().unwrap() =
            spawn_operator("homestead-restarted", "homestead-restarted", &address);
        eventually("the restarted operator to be ready", 120, || async {
            (http_get(&address, "/readyz")?.0 == 200).then_some(())
        })
        .await;
        // Access as it was, sampled while the restarted operator settles.
        for _ in 0..10 {
            assert_eq!(
                kubectl_can(
                    &person_identity,
                    "create",
                    "pods",
                    &format!("user-{person}")
                ),
                "no",
                "round {round}: the person was judged without their group's Profile"
            );
            assert_eq!(
                can_get_pods(&person_identity, &home),
                "yes",
                "round {round}: the Share to the group was revoked on restart"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let writes = writes_for(mark, &names);
        assert!(
            writes.is_empty(),
            "round {round}: the restart wrote for people whose groups had not listed yet: {writes:#?}"
        );
    }
    for g in 0..LARGE_GROUPS {
        let _ = groups
            .delete(&format!("flt-team-{g}"), &DeleteParams::default())
            .await;
    }
    let _ = profiles.delete("flt-team", &DeleteParams::default()).await;
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as PERSON`: "yes" or "no".
fn kubectl_can(person: &str, verb: &str, resource: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(&["auth", "can-i", verb, resource, "-n", ns, &who], "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// An API Priority and Fairness squeeze: the operator's ServiceAccount gets a priority level
/// with one seat and a one-request queue, so a burst of Users meets HTTP 429.
const SQUEEZE: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: flt-squeeze}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 1}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: flt-squeeze}
spec:
  priorityLevelConfiguration: {name: flt-squeeze}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {name: homestead, namespace: homestead-system}
    resourceRules:
    - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}
"#;

#[tokio::test]
async fn an_api_priority_and_fairness_squeeze_is_waited_out_without_a_hot_loop() {
    let _turn = one_at_a_time().await;
    let s = Scenario::new();
    let c = admin().await;
    let (ok, out) = kubectl(&["apply", "-f", "-"], SQUEEZE);
    assert!(ok, "{out}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mark = audit().len();
    let started = Instant::now();
    // Bursts of 30 Users until one meets a 429 (on a loaded machine the operator's requests
    // can come slowly enough that one burst never overlaps in the one seat), at most three.
    let mut names: Vec<String> = Vec::new();
    let (mut requests, mut throttled) = (Vec::new(), 0);
    for burst in 0..3 {
        let batch: Vec<String> = (0..30).map(|i| format!("flt-apf-{burst}-{i:02}")).collect();
        for name in &batch {
            s.create(&c, &User::test(name)).await;
        }
        for name in &batch {
            wait_reason(&c, name, "Provisioned").await;
        }
        names.extend(batch);
        requests = audit()[mark..]
            .iter()
            .filter(|e| e["user"]["username"] == homestead_testenv::OPERATOR)
            .cloned()
            .collect::<Vec<serde_json::Value>>();
        throttled = requests
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 429)
            .count();
        if throttled > 0 {
            break;
        }
    }
    let converged = started.elapsed();
    let (ok, out) = kubectl(&["delete", "-f", "-"], SQUEEZE);
    assert!(ok, "{out}");
    println!(
        "APF squeeze: {} Users Ready after {:.1} s; operator requests {} ({:.1} per User), {} answered 429",
        names.len(),
        converged.as_secs_f64(),
        requests.len(),
        requests.len() as f64 / names.len() as f64,
        throttled
    );
    assert!(
        throttled > 0,
        "the squeeze throttled nothing; the test tested nothing"
    );
    assert!(
        requests.len() < 40 * names.len(),
        "{} requests for {} Users: a hot loop",
        requests.len(),
        names.len()
    );
}

/// The value of the unlabelled metric `name` at the operator's `/metrics`.
fn metric(name: &str) -> Option<f64> {
    let (_, body) = http_get(&env().metrics_address, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_writing_by_itself() {
    let _turn = one_at_a_time().await;
    let s = Scenario::new();
    let c = admin().await;
    let names: Vec<String> = (0..3).map(|i| format!("flt-cut-{i}")).collect();
    converged(&s, &c, &names).await;
    assert_eq!(
        metric("homestead_leader"),
        Some(1.0),
        "the operator leads to begin with"
    );

    let cut = Instant::now();
    env().plane.stop_apiserver();
    eventually("the cut-off leader to stop writing", 30, || async {
        (metric("homestead_leader") == Some(0.0)).then_some(())
    })
    .await;
    let fenced_after = cut.elapsed();
    env().plane.start_apiserver_again().await.unwrap();
    eventually("the leader to confirm its Lease again", 60, || async {
        (metric("homestead_leader") == Some(1.0)).then_some(())
    })
    .await;
    let c = admin().await;
    s.create(&c, &User::test("flt-cut-new")).await;
    wait_reason(&c, "flt-cut-new", "Provisioned").await;
    println!(
        "API server gone: the leader stopped writing {:.1} s later (by itself; the Lease lasts 15 s); after the outage ({:.1} s) it leads and provisions again",
        fenced_after.as_secs_f64(),
        cut.elapsed().as_secs_f64()
    );
}
