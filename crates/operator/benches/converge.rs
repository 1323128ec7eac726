//! `just bench`: how fast the operator provisions a bulk HR import, what it costs the API
//! server, and what it holds in memory, on the real local control plane.
//!
//! Creates `HOMESTEAD_BENCH_USERS` Users (default 500) at once, then reports: seconds until all
//! are `Ready=True` and Users per second; the operator's write requests (from the audit log) per
//! User; writes during 10 s of steady state afterwards (leases excluded; expected 0); and the
//! operator's peak resident memory (VmHWM) in MiB. Figures, not assertions: compare runs.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{admin, audit, env, is_operator_write, operator_pid};
use futures::{StreamExt, TryStreamExt};
use homestead_api::User;
use kube::api::{Api, ListParams, PostParams};

/// The operator's writes so far, Lease renewals excluded.
fn operator_writes() -> usize {
    audit()
        .iter()
        .filter(|e| is_operator_write(e) && e["objectRef"]["resource"] != "leases")
        .count()
}

/// Peak resident set (VmHWM) of the operator serving `metrics_address`, in KiB.
fn peak_rss_kib(metrics_address: &str) -> Option<u64> {
    let pid = operator_pid(metrics_address)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::var("HOMESTEAD_BENCH_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    // The shared test environment: control plane, CRD, rbac/ and the (release) operator binary.
    let address = env().metrics_address.clone();
    let users: Api<User> = Api::all(admin().await);

    let started = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let users = users.clone();
            async move {
                let user: User = serde_json::from_value(serde_json::json!({
                    "apiVersion": "homestead.dev/v1alpha1", "kind": "User",
                    "metadata": { "name": format!("bench-{i:05}") },
                    "spec": { "identity": { "username": format!("bench-{i}@example.com") }, "role": "edit",
                              "quota": { "hard": { "pods": "10" } } },
                }))
                .unwrap();
                users.create(&PostParams::default(), &user).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let created = started.elapsed();
    loop {
        let ready = users
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|u| u.ready_condition().is_some_and(|c| c.status == "True"))
            .count();
        if ready == count {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {ready}/{count} Ready after 600 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = started.elapsed();
    let writes = operator_writes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady = operator_writes() - writes;
    let rss = peak_rss_kib(&address)
        .map_or_else(|| "?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0));

    println!("users:                         {count}");
    println!(
        "created in:                    {:.2} s",
        created.as_secs_f64()
    );
    println!(
        "all Ready=True after:          {:.2} s ({:.1} users/s)",
        converged.as_secs_f64(),
        count as f64 / converged.as_secs_f64()
    );
    println!(
        "operator writes to converge:   {writes} ({:.2} per user)",
        writes as f64 / count as f64
    );
    println!("operator writes in 10 s after: {steady} (Lease renewals excluded)");
    println!("operator peak RSS:             {rss} MiB");
}
