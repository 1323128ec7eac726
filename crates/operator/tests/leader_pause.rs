//! A leader paused (SIGSTOP) past its Lease: the standby takes over; when the old leader
//! resumes it writes nothing (audit log, told apart by its user agent) and exits, since its
//! writes are fenced by its own confirmation of the Lease. Its own test binary: it pauses the
//! shared operator.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use homestead_api::User;
use homestead_testenv::free_port;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test]
async fn a_paused_leader_writes_nothing_when_it_resumes_and_exits() {
    let s = Scenario::new();
    let c = admin().await;
    let standby_address = format!("127.0.0.1:{}", free_port().unwrap());
    let standby = spawn_standby(&standby_address).await;
    s.create(&c, &User::test("lp-before")).await;
    wait_reason(&c, "lp-before", "Provisioned").await;

    let leader = operator_pid(&env().metrics_address).expect("the leader's process");
    signal(leader, "-STOP");
    let paused = Instant::now();
    eventually("the standby to take over", 60, || async {
        standby
            .log_tail(400)
            .contains("became leader")
            .then_some(())
    })
    .await;
    let took_over = paused.elapsed();
    s.create(&c, &User::test("lp-during")).await;
    wait_reason(&c, "lp-during", "Provisioned").await;
    // Work the old leader will see when it wakes up.
    Api::<User>::all(c.clone())
        .patch(
            "lp-before",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "quota": { "hard": { "pods": "3" } } } })),
        )
        .await
        .unwrap();
    wait_reason(&c, "lp-before", "Provisioned").await;

    let mark = audit().len();
    signal(leader, "-CONT");
    let status = eventually("the resumed leader to exit", 60, || async {
        env().operator.lock().unwrap().exit_status()
    })
    .await;
    assert!(
        !status.success(),
        "a leader that lost its Lease exits with an error: {status:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e))
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.contains("(homestead-test)"))
        })
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 400)
        })
        .cloned()
        .collect();
    assert!(writes.is_empty(), "the resumed leader wrote: {writes:#?}");
    println!(
        "paused leader: standby took over {:.1} s after the pause; the resumed leader made 0 writes and exited ({status})",
        took_over.as_secs_f64()
    );
    drop(standby);
}
