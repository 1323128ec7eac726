//! A ResourceQuota's `status.used` moves with every pod that comes or goes (the real
//! resourcequota controller runs): that costs Homestead no reconcile and no write. Its own test
//! binary, so the operator's reconcile counter sees nothing but this test.

mod common;

use homestead_api::User;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test]
async fn quota_status_changes_cost_no_reconcile_and_no_write() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("qs-busy").with_spec(json!({ "quota": { "hard": { "pods": "10" } } })),
    )
    .await;
    wait_reason(&c, "qs-busy", "Provisioned").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (before, mark) = (reconciles(&env().metrics_address), settled_mark().await);

    let pods: Api<Pod> = Api::namespaced(c.clone(), "user-qs-busy");
    for i in 0..5 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("p{i}") },
            "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let quotas: Api<ResourceQuota> = Api::namespaced(c.clone(), "user-qs-busy");
    eventually("the quota controller to count the pods", 60, || async {
        let q = quotas.get("homestead-quota").await.ok()?;
        let used = q.status?.used?.get("pods")?.0.clone();
        (used == "5").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    assert_eq!(
        reconciles(&env().metrics_address),
        before,
        "quota status changes triggered reconciles"
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "qs-busy", "user-qs-busy"))
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "quota status changes caused writes: {writes:#?}"
    );
}
