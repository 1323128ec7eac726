//! Faults survived with nothing lost: a restart over converged Users writes nothing and says
//! nothing (no reconcile writes before every cache has synced), and a User suspended while the
//! operator was down loses access within seconds of the restart; an API server restart under
//! the operator is survived the same way. Its own test binary (it restarts the shared operator
//! and the API server); its tests take turns.

mod common;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::User;
use kube::api::{Api, Patch, PatchParams};
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
    let names: Vec<String> = (0..30).map(|i| format!("flt-apf-{i:02}")).collect();
    for name in &names {
        s.create(&c, &User::test(name)).await;
    }
    for name in &names {
        wait_reason(&c, name, "Provisioned").await;
    }
    let converged = started.elapsed();
    let (ok, out) = kubectl(&["delete", "-f", "-"], SQUEEZE);
    assert!(ok, "{out}");
    let requests: Vec<serde_json::Value> = audit()[mark..]
        .iter()
        .filter(|e| e["user"]["username"] == homestead_testenv::OPERATOR)
        .cloned()
        .collect();
    let throttled = requests
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 429)
        .count();
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
