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
//! proxied to the homes API) and for their own Namespace (`GET /api/v1/namespaces/<own>`, which
//! kube-apiserver answers from its own cache), [`ASKS`] times each: p50 and p99 of each, side by
//! side, and the homes API's resident set.
//!
//! Figures, not assertions; `tools/bench/share-rounds.sh` runs rounds and prints each ratio.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{IN_FLIGHT, Operator, each, install, memory_mib};
use futures::{StreamExt, TryStreamExt};
use homestead_api::{
    ANNOTATION_CREATED_BY, CONDITION_READY, DirectoryGroup, FIELD_MANAGER, GranteeStatus, Share,
    ShareReason, ShareStatus, User,
};
use homestead_reconciler::plan::share::{ShareRef, desired_binding};
use homestead_testenv::{ADMIN, ControlPlane, Identity, OPERATOR};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Label telling the sides' Shares apart (`floor-a`, `homestead`, `floor-b`, `group`).
const SIDE: &str = "bench-side";
/// Members of the group named by [`GROUP_SHARES`] Shares.
const GROUP_MEMBERS: usize = 1000;
/// Shares naming the group.
const GROUP_SHARES: usize = 100;

/// People asking the homes API at once, in the load phase.
const PEOPLE: usize = 50;
/// Requests of each kind each of them makes.
const ASKS: usize = 40;

/// User `i`: `s-00042`, identity `s-42@example.com`.
fn user_name(i: usize) -> String {
    format!("s-{i:05}")
}

/// User `i` as HR creates it.
fn bench_user(i: usize) -> User {
    let fixture = User::test(&user_name(i)).with_username(&format!("s-{i}@example.com"));
    User::new(&user_name(i), fixture.spec)
}

/// The Share of `side` in User `owner`'s home, to the Users `to` (or the group), for a week.
fn bench_share(side: &str, owner: usize, to: Value) -> Share {
    let until = (Timestamp::now() + SignedDuration::from_hours(24 * 7))
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap();
    serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": {
            "name": format!("{side}-{owner:05}"),
            "namespace": format!("user-{}", user_name(owner)),
            "labels": { SIDE: side },
            "annotations": { ANNOTATION_CREATED_BY: ADMIN },
        },
        "spec": { "to": to, "role": "view", "expiresAt": until.to_string(),
                  "reason": "benchmark: working together" },
    }))
    .unwrap()
}

/// Starts a watch of the Shares of `side` and returns once it has listed; the task ends when
/// `count` of them are `Ready=True` (or, with `count` 0, none is left).
async fn watch_shares(client: &Client, side: &str, count: usize) -> tokio::task::JoinHandle<()> {
    let config = watcher::Config::default().labels(&format!("{SIDE}={side}"));
    let mut events = watcher(Api::<Share>::all(client.clone()), config).boxed();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let (mut present, mut ready) = (HashSet::new(), HashSet::new());
        let mut listed = Some(listed_tx);
        let mut done = false;
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    let key = (s.namespace(), s.name_any());
                    present.insert(key.clone());
                    if is_ready(&s) {
                        ready.insert(key);
                    } else {
                        ready.remove(&key);
                    }
                }
                watcher::Event::Delete(s) => {
                    let key = (s.namespace(), s.name_any());
                    present.remove(&key);
                    ready.remove(&key);
                }
                watcher::Event::InitDone => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                    done = true;
                }
                watcher::Event::Init => {}
            }
            let complete = if count == 0 {
                present.is_empty()
            } else {
                ready.len() == count
            };
            if done && complete {
                return;
            }
        }
    });
    let _ = listed_rx.await;
    task
}

fn is_ready(share: &Share) -> bool {
    share
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY))
        .is_some_and(|c| c.status == "True")
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

/// The floor: `count` Shares of `side` made with exactly the requests they need (see the module
/// docs); returns the time until a watch saw all `Ready=True`.
async fn floor(admin: &Client, operator: &Client, side: &str, count: usize) -> Duration {
    let watch = watch_shares(admin, side, count).await;
    let started = Instant::now();
    each(count, |i| {
        let (admin, operator) = (admin.clone(), operator.clone());
        async move {
            let share = bench_share(side, i, json!([{ "user": user_name((i + 1) % count) }]));
            let ns = share.namespace().unwrap();
            let created = Api::<Share>::namespaced(admin, &ns)
                .create(&PostParams::default(), &share)
                .await?;
            let grantee = format!("s-{}@example.com", (i + 1) % count);
            let binding = desired_binding(ShareRef::of(&created), (homestead_api::LABEL_USER, &user_name(i)), std::slice::from_ref(&grantee));
            Api::<RoleBinding>::namespaced(operator.clone(), &ns)
                .create(&PostParams::default(), &binding)
                .await?;
            let status = floor_status(&created, &grantee, (i + 1) % count);
            let patch = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share", "status": status });
            Api::<Share>::namespaced(operator, &ns)
                .patch_status(
                    &created.name_any(),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await?;
            Ok(())
        }
    })
    .await;
    watch.await.unwrap();
    started.elapsed()
}

/// A uid of the length the API server gives (36 characters): the floor writes the uids
/// Homestead records in a Share's status (its owner's and its User grantee's) without looking
/// them up, so its status writes are as large as Homestead's.
const FLOOR_UID: &str = "00000000-0000-4000-8000-000000000000";

/// The status Homestead writes for an active Share to one User.
fn floor_status(share: &Share, username: &str, grantee: usize) -> ShareStatus {
    let now = Time(Timestamp::now());
    ShareStatus {
        conditions: vec![Condition {
            type_: CONDITION_READY.to_owned(),
            status: "True".to_owned(),
            reason: ShareReason::Active.as_str().to_owned(),
            message: format!(
                "{} has role \"view\" here until {}",
                user_name(grantee),
                share.spec.expires_at.0
            ),
            observed_generation: share.metadata.generation,
            last_transition_time: now.clone(),
        }],
        observed_generation: share.metadata.generation,
        grantees: vec![GranteeStatus {
            user: Some(user_name(grantee)),
            username: Some(username.to_owned()),
            active: Some(1),
            uid: Some(FLOOR_UID.to_owned()),
            ..GranteeStatus::default()
        }],
        to: Some(user_name(grantee)),
        expires_at: Some(share.spec.expires_at.clone()),
        renewed_at: share.metadata.creation_timestamp.clone(),
        owner_uid: Some(FLOOR_UID.to_owned()),
    }
}

/// Deletes the Shares of `side` and waits until they are gone.
async fn delete_side(admin: &Client, side: &str) {
    let watch = watch_shares(admin, side, 0).await;
    let shares = Api::<Share>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("{SIDE}={side}")))
        .await
        .unwrap();
    let items = shares.items;
    each(items.len(), |i| {
        let (admin, share) = (admin.clone(), items[i].clone());
        async move {
            Api::<Share>::namespaced(admin, &share.namespace().unwrap())
                .delete(&share.name_any(), &DeleteParams::background())
                .await?;
            Ok(())
        }
    })
    .await;
    watch.await.unwrap();
}

/// Creates the Shares of `side` in the homes of Users `0..count`, Share `i` to `to(i)`, as the
/// admin.
async fn create_shares(admin: &Client, side: &str, count: usize, to: impl Fn(usize) -> Value) {
    each(count, |i| {
        let (admin, share) = (admin.clone(), bench_share(side, i, to(i)));
        async move {
            Api::<Share>::namespaced(admin, &share.namespace().unwrap())
                .create(&PostParams::default(), &share)
                .await?;
            Ok(())
        }
    })
    .await;
}

/// Homestead's Shares: created like the floor's, timed until all are `Ready=True`.
async fn homestead(admin: &Client, count: usize) -> Duration {
    let watch = watch_shares(admin, "homestead", count).await;
    let started = Instant::now();
    create_shares(
        admin,
        "homestead",
        count,
        |i| json!([{ "user": user_name((i + 1) % count) }]),
    )
    .await;
    watch.await.unwrap();
    started.elapsed()
}

/// The operator's writes (verb and resource) received from `from` on, from the audit log.
fn operator_writes(plane: &ControlPlane, from: Timestamp, to: Timestamp) -> Vec<String> {
    use std::io::BufRead;
    let file = std::fs::File::open(plane.dir().join("audit.log")).unwrap();
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|line| line.contains(OPERATOR))
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == OPERATOR)
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| e["objectRef"]["resource"] != "leases")
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|t| t >= from && t <= to)
        })
        .map(|e| {
            let sub = e["objectRef"]["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            format!(
                "{} {}{sub}",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["resource"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Counts of each distinct item of `writes`, as `verb resource: n` lines.
fn tally(writes: &[String]) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for w in writes {
        *counts.entry(w.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The group phase: [`GROUP_MEMBERS`] members named by [`GROUP_SHARES`] Shares; one member
/// replaced; the time until all their RoleBindings bind the new member, and the operator's
/// writes meanwhile.
async fn group_change(plane: &ControlPlane, admin: &Client, count: usize) {
    let members = GROUP_MEMBERS.min(count.saturating_sub(1));
    let shares = GROUP_SHARES.min(count);
    let groups: Api<DirectoryGroup> = Api::all(admin.clone());
    let names: Vec<String> = (0..members).map(user_name).collect();
    let group = DirectoryGroup::test("bench-team", "Bench team")
        .with_members(&names.iter().map(String::as_str).collect::<Vec<_>>());
    let group = DirectoryGroup::new("bench-team", group.spec);
    groups.create(&PostParams::default(), &group).await.unwrap();
    let watch = watch_shares(admin, "group", shares).await;
    create_shares(
        admin,
        "group",
        shares,
        |_| json!([{ "group": "bench-team" }]),
    )
    .await;
    watch.await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Replace the last member with the next User.
    let newcomer = format!("s-{members}@example.com");
    let mut changed = names.clone();
    changed.pop();
    changed.push(user_name(members));
    // A watch of Share bindings, listed before the change, sees each binding bind the newcomer.
    let config = watcher::Config::default().labels("homestead.dev/share");
    let mut events = watcher(Api::<RoleBinding>::all(admin.clone()), config).boxed();
    while let Some(event) = events.try_next().await.unwrap() {
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    let from = Timestamp::now();
    let started = Instant::now();
    groups
        .patch(
            "bench-team",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "members": changed } })),
        )
        .await
        .unwrap();
    let mut updated = HashSet::new();
    while updated.len() < shares {
        let event = tokio::time::timeout(Duration::from_secs(120), events.try_next())
            .await
            .expect("every group binding updated within 120 s")
            .unwrap()
            .expect("the watch goes on");
        if let watcher::Event::Apply(b) = event
            && b.name_any().starts_with("homestead-share-group-")
            && b.subjects.iter().flatten().any(|s| s.name == newcomer)
        {
            updated.insert(b.name_any());
        }
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = operator_writes(plane, from, Timestamp::now());
    println!(
        "group: one member of {members} replaced, named by {shares} Shares: every binding updated in {:.2} s; operator writes: {} ({})",
        took.as_secs_f64(),
        writes.len(),
        tally(&writes)
    );
}

/// One round of `HOMESTEAD_BENCH_USERS` (default 1000) Users and as many Shares.
/// The `p`-th percentile (0-100) of `sorted`, by the nearest rank.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// The time of one GET of `path` through kube-apiserver as `client`'s person; panics unless it
/// succeeds.
async fn timed_get(client: &Client, path: &str) -> Duration {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let started = Instant::now();
    let body = client.request_text(request).await.unwrap();
    let took = started.elapsed();
    assert!(body.contains("\"kind\""), "{path}: {body}");
    took
}

/// The load phase (see the module docs): the homes API run and registered, then `people` people
/// at once asking for their homes and their own Namespace, alternately, [`ASKS`] times each.
async fn homes_load(plane: &ControlPlane, people: usize) {
    let state = plane.dir().join("homes-bench");
    std::fs::create_dir_all(&state).unwrap();
    let _ = std::fs::remove_file(state.join("bin"));
    std::os::unix::fs::symlink(plane.bin_dir(), state.join("bin")).unwrap();
    plane
        .write_kubeconfig(ADMIN, &state.join("admin.kubeconfig"))
        .unwrap();
    plane
        .write_kubeconfig(
            homestead_testenv::HOMES_API,
            &state.join("homes-api.kubeconfig"),
        )
        .unwrap();
    let port = homestead_testenv::free_port().unwrap().to_string();
    let metrics = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let script = common::repo_root().join("tools/homes-api/up-local.sh");
    let up = std::process::Command::new(script)
        .arg(&state)
        .arg(env!("CARGO_BIN_EXE_homestead"))
        .args([&port, &metrics])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "up-local.sh: {}{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
    let pid: u32 = std::fs::read_to_string(state.join("homes-api.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!(
        "homes API: registered, every User, Share and DirectoryGroup cached: RSS {:.1} MiB",
        memory_mib(pid, "VmRSS")
    );
    let mut clients = Vec::new();
    for i in 0..people {
        clients.push((
            i,
            plane.client(&format!("s-{i}@example.com")).await.unwrap(),
        ));
    }
    let homes = "/apis/homes.homestead.dev/v1alpha1/homes";
    // One of each first, so every connection is open before the clock runs.
    for (i, client) in &clients {
        timed_get(client, homes).await;
        timed_get(
            client,
            &format!("/api/v1/namespaces/user-{}", user_name(*i)),
        )
        .await;
    }
    let started = Instant::now();
    let asked = futures::future::join_all(clients.into_iter().map(|(i, client)| async move {
        let own = format!("/api/v1/namespaces/user-{}", user_name(i));
        let (mut theirs, mut namespace) = (Vec::new(), Vec::new());
        for _ in 0..ASKS {
            theirs.push(timed_get(&client, homes).await);
            namespace.push(timed_get(&client, &own).await);
        }
        (theirs, namespace)
    }))
    .await;
    let elapsed = started.elapsed();
    let (mut theirs, mut namespace): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (a, b) in asked {
        theirs.extend(a);
        namespace.extend(b);
    }
    theirs.sort();
    namespace.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "homes: {people} people at once, {} requests in {:.1} s; kubectl get homes p50 {:.1} ms p99 {:.1} ms; \
         get namespace <own> p50 {:.1} ms p99 {:.1} ms; p99 ratio {:.2}x",
        theirs.len() + namespace.len(),
        elapsed.as_secs_f64(),
        ms(percentile(&theirs, 50)),
        ms(percentile(&theirs, 99)),
        ms(percentile(&namespace, 50)),
        ms(percentile(&namespace, 99)),
        ms(percentile(&theirs, 99)) / ms(percentile(&namespace, 99))
    );
    println!(
        "homes API: RSS {:.1} MiB, peak {:.1} MiB",
        memory_mib(pid, "VmRSS"),
        memory_mib(pid, "VmHWM")
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

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
        (0..PEOPLE).fold(o, |o, i| {
            o.identity(Identity::new(format!("s-{i}@example.com")))
        })
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
        homestead(&admin, count).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        group_change(plane, &admin, count).await;
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
        let floor_a = floor(&admin, &operator_client, "floor-a", count).await;
        println!(
            "floor A: {count} Shares Ready in {:.2} s",
            floor_a.as_secs_f64()
        );
        delete_side(&admin, "floor-a").await;
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
    let ours = homestead(&admin, count).await;
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
    group_change(plane, &admin, count).await;
    println!(
        "homestead: operator RSS {:.1} MiB, peak {:.1} MiB since start",
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM")
    );
    if load {
        homes_load(plane, count.min(PEOPLE)).await;
    }
    drop(operator);
    if quick {
        return;
    }
    let floor_b = floor(&admin, &operator_client, "floor-b", count).await;
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
