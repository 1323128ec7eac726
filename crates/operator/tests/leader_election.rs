//! High availability: a second replica stands by (ready, not reconciling) while the first holds
//! the Lease; when the first gets SIGTERM it shuts down gracefully (exit 0) and releases the
//! Lease, and the standby takes over. Its own test binary: it stops the shared operator.

mod common;

use homestead_api::User;
use std::time::Instant;

use common::*;
use homestead_testenv::free_port;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

#[tokio::test]
async fn standby_takes_over_when_the_leader_stops() {
    let s = Scenario::new();
    let env = env();
    let c = admin().await;
    let standby_address = format!("127.0.0.1:{}", free_port().unwrap());
    let standby = spawn_standby(&standby_address).await;

    s.create(&c, &User::test("ha-one")).await;
    wait_reason(&c, "ha-one", "Provisioned").await;
    assert!(
        reconciles(&env.metrics_address) > 0,
        "the leader reconciled nothing"
    );
    assert_eq!(
        reconciles(&standby_address),
        0,
        "the standby reconciled while not leading"
    );

    let stopped = Instant::now();
    let status = {
        let mut leader = env.operator.lock().unwrap();
        leader.stop();
        leader.exit_status()
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the leader did not shut down cleanly: {status:?}"
    );

    // The leader released the Lease on shutdown: it names no holder until the standby takes
    // it (kube-lease-manager's standby looks again when the old Lease would have expired, so
    // the take-over itself waits up to the Lease's 15 s either way; printed, not asserted).
    let lease = Api::<Lease>::namespaced(c.clone(), "homestead-system")
        .get("homestead-leader")
        .await
        .unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref() != Some("homestead-test"),
        "the stopped leader still holds the Lease: {holder:?}"
    );
    s.create(&c, &User::test("ha-two")).await;
    wait_reason(&c, "ha-two", "Provisioned").await;
    assert!(
        reconciles(&standby_address) > 0,
        "the standby never took over"
    );
    println!(
        "take-over: a new User Provisioned {:?} after the leader stopped",
        stopped.elapsed()
    );
    assert!(standby.log_tail(200).contains("became leader"));
}
