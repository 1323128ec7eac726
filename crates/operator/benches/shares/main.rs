//! `just bench-shares [USERS] [ROUNDS]`: Homestead's Shares against the bounded floor of the same
//! writes, on one real local control plane per round (release build; docs/performance.md,
//! "Shares"). One round, as one process:
//!
//! 1. USERS Users provisioned by Homestead (their homes), then the operator stopped.
//! 2. **Floor A**: with no operator running, a client that makes exactly the requests a Share
//!    cannot do without: create the Share (as the admin, the owner's part), create its
//!    RoleBinding and write its status (as the operator's ServiceAccount, so RBAC, the admission
//!    policies and API Priority and Fairness cost it what they cost Homestead), with Homestead's
//!    objects (`plan::share::desired_binding`, the same status), `IN_FLIGHT` at a time: User
//!    `i` shares its home with User `i+1`. Timed until a Share watch has seen every Share
//!    `Ready=True`. Its Shares are then deleted (their bindings go with them).
//! 3. **Homestead**: the operator started again; the same Shares created by the admin, timed the
//!    same way; the operator's resident set at its peak (`VmHWM`, from the start) and its writes
//!    per Share; then 30 s of steady state (its writes counted); then a DirectoryGroup of 1,000
//!    members named by 100 Shares: a change of one member, timed until every one of the 100
//!    RoleBindings binds the new member, and the operator's writes in that window.
//! 4. **Floor B**, the operator stopped again: as Floor A. Homestead is compared with the mean
//!    of A and B (the control plane slows as it grows; A-B-A cancels a drift that grows evenly).
//!
//! With `HOMESTEAD_BENCH_HOMES=1` (`just bench-homes`), after the group change and with the
//! operator still running: **the homes API under load** (docs/homes.md, "Load"). It runs as its
//! own identity and is registered with kube-apiserver as `just up` does it
//! (`tools/homes-api/up-local.sh`); then [`PEOPLE`] people at once, each with their own token,
//! ask kube-apiserver alternately for their homes (`GET /apis/homes.homestead.dev/v1alpha1/homes`,
//! proxied to the homes API; each of them is in `bench-team`, so about 100 homes) and for their
//! own Namespace (`GET /api/v1/namespaces/<own>`, which kube-apiserver reads from etcd: a GET
//! without a `resourceVersion` is a quorum read), [`ASKS`] times each: p50 and p99 of each, side
//! by side, and the homes API's resident set.
//!
//! Figures, not assertions; `tools/bench/share-rounds.sh` runs rounds and prints each ratio.

#[path = "../../tests/common/mod.rs"]
mod common;
mod phases;

use std::time::Duration;

use common::{IN_FLIGHT, Operator, each, install, memory_mib};
use homestead_api::User;
use homestead_testenv::{ADMIN, ControlPlane, Identity, OPERATOR};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use phases::{PEOPLE, People, floor, group_change, homes_load, operator_writes, tally};

/// The bench's Users: `s-00042`, identity `s-42@example.com`.
const S: People = People { prefix: "s" };

/// User `i` as HR creates it.
fn bench_user(i: usize) -> User {
    let fixture = User::test(&S.name(i)).with_username(&S.identity(i));
    User::new(&S.name(i), fixture.spec)
}

/// Provisions `count` Users with Homestead running and waits until all are `Ready=True`.
async fn homes(admin: &Client, count: usize) {
    let users: Api<User> = Api::all(admin.clone());
    each(count, |i| {
        let users = users.clone();
        async move {
            users.create(&PostParams::default(), &bench_user(i)).await?;
            Ok(())
        }
    })
    .await;
    loop {
        let list = users.list(&ListParams::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|u| u.ready_condition().is_some_and(|c| c.status == "True"))
            .count();
        if ready >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Prints what [`group_change`] measured.
fn print_group(change: &phases::GroupChange) {
    println!(
        "group: one member of {} replaced, named by {} bindings: every binding updated in {:.2} s; operator writes: {} ({})",
        change.members,
        change.bindings,
        change.took.as_secs_f64(),
        change.writes.len(),
        tally(&change.writes)
    );
}

/// One round of `HOMESTEAD_BENCH_USERS` (default 1000) Users and as many Shares.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let count: usize = std::env::var("HOMESTEAD_BENCH_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let load = std::env::var_os("HOMESTEAD_BENCH_HOMES").is_some();
    // The first to ask makes the shared control plane: with the CRDs, and tokens for the people
    // of the load phase.
    ControlPlane::shared(|o| {
        let o = homestead_api::crds()
            .into_iter()
            .fold(o, |o, crd| o.crd(crd));
        (0..PEOPLE).fold(o, |o, i| o.identity(Identity::new(S.identity(i))))
    });
    let plane = install();
    let admin = plane.client(ADMIN).await.unwrap();
    let operator_client = plane.client(OPERATOR).await.unwrap();
    println!("{count} Users, {count} Shares, {IN_FLIGHT} in flight, one local control plane\n");
    // A heap profile (docs/performance.md, "Memory"): no floors, the operator under heaptrack
    // from its restart, killed after the Shares and the group change, so that what heaptrack
    // calls leaked is what it held then (and its peak, the peak of both).
    let profile = std::env::var_os("HOMESTEAD_BENCH_HEAPTRACK").is_some();
    let operator = Operator::start("bench-shares").await.0;
    homes(&admin, count).await;
    drop(operator);
    // HOMESTEAD_BENCH_QUICK=1: Homestead alone, no floors (memory, writes, the group change).
    let quick = std::env::var_os("HOMESTEAD_BENCH_QUICK").is_some();
    if profile {
        let operator = Operator::start("bench-shares").await.0;
        phases::homestead(S, &admin, count).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        print_group(&group_change(S, plane, &admin, count, false).await);
        let pid = operator.pid();
        println!("profile: RSS {:.1} MiB", memory_mib(pid, "VmRSS"));
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        return;
    }
    let floor_a = if quick {
        Duration::ZERO
    } else {
        let floor_a = floor(S, (&admin, &operator_client), "floor-a", count).await;
        println!(
            "floor A: {count} Shares Ready in {:.2} s",
            floor_a.as_secs_f64()
        );
        phases::delete_side(&admin, "floor-a").await;
        floor_a
    };
    let operator = Operator::start("bench-shares").await.0;
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "homestead: restarted with {count} Users and no Share: RSS {:.1} MiB ({:.1} MiB of it the binary and libraries), peak {:.1} MiB",
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "RssFile"),
        memory_mib(operator.pid(), "VmHWM")
    );
    let from = Timestamp::now();
    let ours = phases::homestead(S, &admin, count).await;
    let to = Timestamp::now();
    println!(
        "homestead: {count} Shares Ready in {:.2} s; operator RSS {:.1} MiB, peak {:.1} MiB since start",
        ours.as_secs_f64(),
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM")
    );
    let writes = operator_writes(plane, from, to);
    println!(
        "homestead: operator writes per Share {:.2} ({})",
        writes.len() as f64 / count as f64,
        tally(&writes)
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "homestead: 10 s later: RSS {:.1} MiB",
        memory_mib(operator.pid(), "VmRSS")
    );
    let quiet = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let steady = operator_writes(plane, quiet, Timestamp::now());
    println!(
        "homestead: writes in 30 s of steady state: {} ({})",
        steady.len(),
        tally(&steady)
    );
    print_group(&group_change(S, plane, &admin, count, false).await);
    println!(
        "homestead: operator RSS {:.1} MiB, peak {:.1} MiB since start",
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM")
    );
    if load {
        homes_load(S, plane, count.min(PEOPLE)).await;
    }
    drop(operator);
    if quick {
        return;
    }
    let floor_b = floor(S, (&admin, &operator_client), "floor-b", count).await;
    println!(
        "floor B: {count} Shares Ready in {:.2} s",
        floor_b.as_secs_f64()
    );
    let mean = (floor_a + floor_b).as_secs_f64() / 2.0;
    println!(
        "\nshares: homestead {:.2} s, floor A {:.2} s, floor B {:.2} s: {:.2}x the floors' mean",
        ours.as_secs_f64(),
        floor_a.as_secs_f64(),
        floor_b.as_secs_f64(),
        ours.as_secs_f64() / mean
    );
}
