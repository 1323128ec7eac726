//! `just chaos [USERS] [OFFBOARD]`: the operator SIGKILLed at random moments while it provisions
//! a bulk import of USERS (default 1,000) and while it offboards OFFBOARD of them (default 300,
//! `deletionPolicy: Delete`), restarted each time as a Deployment would. Then checks that
//! nothing was lost or leaked (every User Ready or gone, exactly one Namespace, RoleBinding and
//! ResourceQuota per remaining User, none for the offboarded), and counts the operator's writes
//! after one more restart over the converged Users (expected: 0). Figures and checks, printed;
//! it exits non-zero if a check fails. Minutes long, so not part of `just test`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{admin, audit, env, is_operator_write, operator_pid, spawn_operator};
use futures::{StreamExt, TryStreamExt};
use homestead_api::User;
use homestead_testenv::free_port;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};

/// Once the running operator leads and has synced its caches, SIGKILLs it after a random
/// 0.5-4 s, then starts a new one (which waits for the killed one's Lease to expire, as a new
/// Pod would). Returns the new metrics address.
async fn kill_and_restart(address: &str, round: usize) -> String {
    while !env()
        .operator
        .lock()
        .unwrap()
        .log_tail(usize::MAX)
        .contains("caches synced")
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let wait = 500 + u64::from(nanos) % 3500;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    if let Some(pid) = operator_pid(address) {
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        println!(
            "  SIGKILL operator {pid} {:.1} s after it began reconciling",
            wait as f64 / 1000.0
        );
    }
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    let pod = format!("homestead-chaos-{round}");
    *env().operator.lock().unwrap() =
        spawn_operator("homestead", Box::leak(pod.into_boxed_str()), &address);
    address
}

async fn count<K>(api: Api<K>, selector: &str) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .len()
}

/// (Users, Ready Users, managed Namespaces, Homestead RoleBindings, quotas) with prefix `chaos-`.
type Census = (usize, usize, usize, usize, usize);

/// The [`Census`] now.
async fn census(c: &Client) -> Census {
    let users: Vec<User> = Api::<User>::all(c.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let ours: Vec<&User> = users
        .iter()
        .filter(|u| u.name_any().starts_with("chaos-"))
        .collect();
    let ready = ours
        .iter()
        .filter(|u| u.ready_condition().is_some_and(|r| r.status == "True"))
        .count();
    let managed = "app.kubernetes.io/managed-by=homestead";
    let namespaces = Api::<Namespace>::all(c.clone())
        .list(&ListParams::default().labels(managed))
        .await
        .unwrap();
    let live = namespaces
        .items
        .iter()
        .filter(|n| {
            n.name_any().starts_with("user-chaos-") && n.metadata.deletion_timestamp.is_none()
        })
        .count();
    let bindings: Vec<RoleBinding> = Api::<RoleBinding>::all(c.clone())
        .list(&ListParams::default().labels(managed))
        .await
        .unwrap()
        .items;
    let bindings = bindings
        .iter()
        .filter(|b| b.namespace().is_some_and(|n| n.starts_with("user-chaos-")))
        .count();
    let quotas = count(Api::<ResourceQuota>::all(c.clone()), managed).await;
    (ours.len(), ready, live, bindings, quotas)
}

async fn wait_for(c: &Client, what: &str, done: impl Fn(Census) -> bool) -> Duration {
    let started = Instant::now();
    loop {
        let now = census(c).await;
        if done(now) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "{what}: stuck at {now:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() {
    let number = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (total, offboard) = (
        number("HOMESTEAD_CHAOS_USERS", 1000),
        number("HOMESTEAD_CHAOS_OFFBOARD", 300),
    );
    let address = env().metrics_address.clone();
    let c = admin().await;
    let (before, address) = import(&c, total, address).await;
    let (after, _) = offboarding(&c, (total, offboard), address).await;
    let left = total - offboard;
    let writes = restart(left).await;
    let ok = before == (total, total, total, total, total) && after.4 == left && writes == 0;
    println!(
        "{}",
        if ok {
            "chaos: nothing lost, nothing leaked"
        } else {
            "chaos: CHECK FAILED"
        }
    );
    std::process::exit(i32::from(!ok));
}

/// Creates `total` Users (16 at a time) while the operator at `address` is killed and started
/// again three times; waits until every one converged. Returns the census then and the
/// operator's address.
async fn import(c: &Client, total: usize, mut address: String) -> (Census, String) {
    let users: Api<User> = Api::all(c.clone());
    println!("import of {total} Users, operator killed 3 times:");
    let started = Instant::now();
    let create = futures::stream::iter(0..total)
        .map(|i| {
            let users = users.clone();
            async move {
                let user = User::test(&format!("chaos-{i:05}"))
                    .with_username(&format!("chaos-{i}@example.com"))
                    .with_spec(serde_json::json!({ "quota": { "hard": { "pods": "10" } } }));
                users.create(&PostParams::default(), &user).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>();
    let kills = async {
        for round in 0..3 {
            address = kill_and_restart(&address, round).await;
        }
    };
    let (created, ()) = tokio::join!(create, kills);
    created.unwrap();
    let took = wait_for(c, "import", |(u, r, n, b, q)| {
        u == total && r == total && n == total && b == total && q == total
    })
    .await;
    let census = census(c).await;
    println!(
        "  converged {:.1} s after the import began ({:.1} s after the last restart); census {census:?}",
        started.elapsed().as_secs_f64(),
        took.as_secs_f64()
    );
    (census, address)
}

/// Deletes the first `offboard` of the `total` Users while the operator at `address` is killed
/// and started again twice; waits until the rest are all that is left. Returns the census then
/// and the operator's address.
async fn offboarding(
    c: &Client,
    (total, offboard): (usize, usize),
    mut address: String,
) -> (Census, String) {
    let users: Api<User> = Api::all(c.clone());
    println!("offboarding {offboard} Users, operator killed 2 times:");
    let started = Instant::now();
    for i in 0..offboard {
        users
            .delete(&format!("chaos-{i:05}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for round in 3..5 {
        address = kill_and_restart(&address, round).await;
    }
    let left = total - offboard;
    let took = wait_for(c, "offboarding", |(u, r, n, b, _)| {
        u == left && r == left && n == left && b == left
    })
    .await;
    let census = census(c).await;
    println!(
        "  converged {:.1} s after offboarding began ({:.1} s after the last restart); census {census:?}",
        started.elapsed().as_secs_f64(),
        took.as_secs_f64()
    );
    (census, address)
}

/// Restarts the operator over the `left` converged Users; returns how many writes it made in the
/// 10 s after it was ready (Leases excluded).
async fn restart(left: usize) -> usize {
    println!("restart over {left} converged Users:");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mark = audit().len();
    env().operator.lock().unwrap().stop();
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    *env().operator.lock().unwrap() =
        spawn_operator("homestead", "homestead-chaos-final", &address);
    let ready = Instant::now();
    while common::http_get(&address, "/readyz").map(|(code, _)| code) != Some(200) {
        assert!(
            ready.elapsed() < Duration::from_secs(120),
            "the restarted operator never got ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && e["objectRef"]["resource"] != "leases")
        .count();
    println!(
        "  ready {:.1} s after start; operator writes in the 10 s after (Leases excluded): {writes}",
        ready.elapsed().as_secs_f64()
    );
    writes
}
