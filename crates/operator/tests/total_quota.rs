//! A total quota across all of an owner's homes (docs/quota.md), on the real control plane with
//! the operator and the API server's own quota admission: 50 Pods created at once across the 10
//! homes of one person (their own home and nine personal workspaces) with a total of 30 never
//! use more than 30, read from each slice's `status.used` at every moment sampled; then the
//! room follows use: with the other homes emptied, one home grows to nearly the whole total.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use homestead_testenv::ADMIN;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// The owner, and the total their Profile gives them (pods).
const OWNER: &str = "tq-ann";
const TOTAL: i64 = 30;

/// The owner's ten homes: their own, and nine personal workspaces.
fn homes() -> Vec<String> {
    std::iter::once(format!("user-{OWNER}"))
        .chain((0..9).map(|i| format!("ws-{OWNER}-{i}")))
        .collect()
}

/// A Pod that is counted by quota and never runs (no node matches it).
fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "nodeSelector": { "homestead.dev/no-such-node": "true" },
            "containers": [{ "name": "c", "image": "busybox" }],
        },
    }))
    .unwrap()
}

/// The owner's slices as the API server has them: (sum of `spec.hard.pods`, sum of
/// `status.used.pods`, how many slices).
async fn slices(client: &Client) -> (i64, i64, usize) {
    let api: Api<ResourceQuota> = Api::all(client.clone());
    let selector = format!("homestead.dev/total=user,homestead.dev/total-owner={OWNER}");
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let pods = |m: Option<&std::collections::BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get("pods"))
            .map_or(0, |q| q.0.parse::<i64>().unwrap())
    };
    let hard = list
        .items
        .iter()
        .map(|q| pods(q.spec.as_ref().and_then(|s| s.hard.as_ref())))
        .sum();
    let used = list
        .items
        .iter()
        .map(|q| pods(q.status.as_ref().and_then(|s| s.used.as_ref())))
        .sum();
    (hard, used, list.items.len())
}

/// Pods in `namespace` now.
async fn pods_in(client: &Client, namespace: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default()).await.unwrap().items.len()
}

/// Waits until the owner's `status.total` shows the total, `want` Pods used across the homes,
/// and each of the ten homes' slices (adding up to at most the total), with `first` holding
/// all `want` Pods in a slice that admits them.
async fn owner_status_shows(client: &Client, first: &str, want: usize) {
    let users: Api<homestead_api::User> = Api::all(client.clone());
    let pods = |m: &serde_json::Value| m["pods"].as_str().map(|q| q.parse::<i64>().unwrap());
    let mut last = serde_json::Value::Null;
    for _ in 0..100 {
        let user = users.get(OWNER).await.unwrap();
        let total = serde_json::to_value(user.status.and_then(|s| s.total)).unwrap();
        let homes = total["homes"].as_array().cloned().unwrap_or_default();
        let sum: i64 = homes.iter().filter_map(|h| pods(&h["hard"])).sum();
        let mine = homes.iter().find(|h| h["namespace"] == first);
        if pods(&total["hard"]) == Some(TOTAL)
            && pods(&total["used"]) == Some(want as i64)
            && homes.len() == 10
            && mine.is_some_and(|h| pods(&h["used"]) == Some(want as i64))
        {
            assert!(sum <= TOTAL, "the status lists slices adding up to {sum}");
            let slice = mine.and_then(|h| pods(&h["hard"])).unwrap_or(0);
            assert!(slice >= want as i64, "{first}'s slice is {slice}");
            return;
        }
        last = total;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{OWNER}'s status.total never showed {want} of {TOTAL} Pods used: {last:#}");
}

/// Whether an error is quota admission's refusal.
fn exceeded_quota(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 403 && s.message.contains("exceeded quota"))
}

#[tokio::test]
async fn fifty_pods_at_once_across_ten_homes_never_use_more_than_the_total() {
    let _ = env();
    let client = admin().await;
    profile(
        &client,
        "tq-total",
        json!({ "totalQuota": { "hard": { "pods": TOTAL.to_string() } } }),
    )
    .await;
    person(&client, OWNER, json!({ "profile": "tq-total" })).await;
    for i in 0..9 {
        let name = format!("{OWNER}-{i}");
        no_workspace(&client, &name).await;
        let spec = json!({ "owner": { "user": OWNER }, "reason": "one of ten homes" });
        let (ok, out) = kubectl(
            &["create", "-f", "-"],
            &workspace_doc(&name, spec, ADMIN, false),
        );
        assert!(ok, "the platform creates a personal workspace: {out}");
    }
    for i in 0..9 {
        wait_workspace(&client, &format!("{OWNER}-{i}"), "Provisioned").await;
    }
    // Every home has its slice before anyone works there, and they add up to the total.
    let (hard, used, count) = slices(&client).await;
    assert_eq!(count, 10, "one slice per home");
    assert!(hard <= TOTAL, "the slices add up to {hard} > {TOTAL}");
    assert_eq!(used, 0);

    // Sample the slices while 50 Pods are created at once, 5 in each home.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (client, stop) = (client.clone(), stop.clone());
        async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                samples.push(slices(&client).await);
            }
            samples
        }
    });
    let creates = homes().into_iter().flat_map(|ns| {
        let client = client.clone();
        (0..5).map(move |i| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            async move {
                api.create(&PostParams::default(), &pod(&format!("p{i}")))
                    .await
            }
        })
    });
    let results = futures::future::join_all(creates).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    let created = results.iter().filter(|r| r.is_ok()).count();
    let refused = results
        .iter()
        .filter(|r| r.as_ref().err().is_some_and(exceeded_quota))
        .count();
    assert_eq!(
        created + refused,
        50,
        "every create either made a Pod or was refused by quota: {results:?}"
    );
    assert!(
        samples.len() > 10,
        "the sampler read the slices {} times",
        samples.len()
    );
    for (hard, used, _) in &samples {
        assert!(*hard <= TOTAL, "the slices added up to {hard} > {TOTAL}");
        assert!(*used <= TOTAL, "the homes used {used} > {TOTAL}");
    }
    let mut existing = 0;
    for ns in homes() {
        existing += pods_in(&client, &ns).await;
    }
    assert_eq!(existing, created);
    assert!(
        existing <= TOTAL as usize,
        "{existing} Pods exist across the homes"
    );
    println!(
        "50 creates at once: {created} made, {refused} refused; {} samples, max used {}",
        samples.len(),
        samples.iter().map(|s| s.1).max().unwrap_or(0)
    );

    // Room follows use: empty every home but the first, then fill the first one Pod at a time,
    // trying a refused create again after 250 ms.
    let first = homes()[0].clone();
    for ns in &homes()[1..] {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        api.delete_collection(&params, &ListParams::default())
            .await
            .unwrap();
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), &first);
    let (started, mut refusals, want) = (Instant::now(), 0, TOTAL as usize - 5);
    let mut next = pods_in(&client, &first).await;
    while next < want {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{first} holds {next} Pods after 120 s; slices: {:?}",
            slices(&client).await
        );
        match api
            .create(&PostParams::default(), &pod(&format!("q{next}")))
            .await
        {
            Ok(_) => next += 1,
            Err(e) if exceeded_quota(&e) => {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("creating a Pod in {first}: {e}"),
        }
    }
    let (hard, used, _) = slices(&client).await;
    assert!(hard <= TOTAL && used <= TOTAL, "{hard} / {used}");
    println!(
        "one home grew to {want} of {TOTAL} Pods in {:?}, {refusals} creates refused on the way",
        started.elapsed()
    );
    owner_status_shows(&client, &first, want).await;
    for ns in homes() {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let _ = api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
}
