//! `just bench-scale` (`tools/bench/scale.sh`, docs/performance.md "At scale"): one side of a
//! round, on its own fresh control plane, selected by `HOMESTEAD_BENCH_QUICK`:
//!
//! - `scale-floor`: the bounded floor of each phase below, made by a client with exactly the
//!   writes Homestead makes (`floor.rs`, `benches/shares/phases.rs`, `workspaces.rs`).
//! - `scale-homestead`: the operator (release build, default flags) through every phase, then a
//!   restart, then the homes API under load.
//!
//! Both sides first make the directory: [`PROFILES`] Profiles choosing by [`GROUPS`]
//! DirectoryGroups, every bench User a member of one, no User naming a Profile (so each gets the
//! one its group chooses). Then, timed: USERS Users until all are `Ready=True`; USERS Shares
//! (User `i` shares their home with User `i+1`); USERS/10 team workspaces of 10 members; on
//! Homestead's side a group of 1,000 members named by 100 Shares and owning a Workspace, one
//! member replaced. With `HOMESTEAD_BENCH_HEAPTRACK=FILE` (an operator built without jemalloc,
//! docs/performance.md "Memory") the operator is killed with SIGKILL there, so that what
//! heaptrack calls leaked is what it held (`FILE.homestead-bench.zst`), and again once steady
//! after the restart (`FILE.homestead-bench-restart.zst`), and the side ends. Each figure is
//! printed on a line `scale: <key> <value>` for the script to compare with the targets;
//! everything else the phases print is context.

use super::*;
use crate::share_phases::{self, People};
use homestead_api::DirectoryGroup;
use homestead_testenv::Identity;

/// Directory groups choosing Profiles (a Profile names at most 32, so [`PROFILES`] name 25 each).
const GROUPS: usize = 200;
/// Profiles choosing by them: Profile `scale-k` names the groups `g` with `g % PROFILES == k`,
/// at priority `k`.
const PROFILES: usize = 8;
/// Once nothing has been reconciled for this long after a restart, the restart is through.
const QUIET: Duration = Duration::from_secs(10);

/// Whether this process is a side of `just bench-scale`: its Users name no Profile.
pub(crate) fn on() -> bool {
    std::env::var("HOMESTEAD_BENCH_QUICK").is_ok_and(|m| m.starts_with("scale-"))
}

/// The directory group of User `i` (`dept-007`).
fn group_of(i: usize) -> String {
    format!("dept-{:03}", i % GROUPS)
}

/// What the status of User `i` says of its Profile: the one its group chooses.
pub(crate) fn applied_profile(i: usize) -> Option<AppliedProfile> {
    Some(AppliedProfile {
        name: format!("scale-{}", i % GROUPS % PROFILES),
        observed_generation: Some(1),
        group: Some(group_of(i)),
    })
}

/// Makes the directory over `count` Users of `run`: [`PROFILES`] Profiles and [`GROUPS`]
/// groups, User `i` a member of [`group_of`]`(i)`.
async fn directory(admin: &Client, run: &str, count: usize) {
    for k in 0..PROFILES {
        let groups: Vec<String> = (k..GROUPS).step_by(PROFILES).map(group_of).collect();
        let profile: Profile = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
            "metadata": { "name": format!("scale-{k}") },
            "spec": { "directory": { "groups": groups, "priority": k } },
        }))
        .expect("a valid Profile");
        Api::<Profile>::all(admin.clone())
            .create(&PostParams::default(), &profile)
            .await
            .expect("the Profile created");
    }
    each(GROUPS, |g| {
        let groups: Api<DirectoryGroup> = Api::all(admin.clone());
        let members: Vec<String> = (g..count)
            .step_by(GROUPS)
            .map(|i| format!("{run}-{i:05}"))
            .collect();
        let group: DirectoryGroup = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
            "metadata": { "name": group_of(g) },
            "spec": { "displayName": group_of(g), "members": members },
        }))
        .expect("a valid DirectoryGroup");
        async move {
            groups
                .create(&PostParams::default(), &group)
                .await
                .map(drop)
        }
    })
    .await;
}

/// Prints one figure for `tools/bench/scale.sh`.
fn figure(key: &str, value: f64) {
    println!("scale: {key} {value:.3}");
}

/// One side of a round of `count` Users (see the module docs).
pub(crate) async fn run(count: usize, homestead: bool) {
    let run = if homestead { "homestead" } else { "floor" };
    let people = People { prefix: run };
    // The people of the load phase need tokens: the first to ask makes the control plane.
    ControlPlane::shared(|o| {
        let o = homestead_api::crds()
            .into_iter()
            .fold(o, |o, crd| o.crd(crd));
        (0..share_phases::PEOPLE).fold(o, |o, i| o.identity(Identity::new(people.identity(i))))
    });
    let plane = install();
    let admin = plane.client(ADMIN).await.unwrap();
    let operator = plane.client(OPERATOR).await.unwrap();
    let teams = count / MEMBERS;
    println!(
        "scale, {run}: {count} Users, {count} Shares, {teams} team workspaces, {GROUPS} groups choosing {PROFILES} Profiles\n"
    );
    directory(&admin, run, count).await;
    wait_until_the_garbage_collector_knows_users(&admin).await;
    if homestead {
        homestead_side(plane, &admin, people, count).await;
    } else {
        let users = floor_provision(&admin, &operator, count, Floor::BOUNDED).await;
        println!("floor: {count} Users provisioned in {}", secs(users));
        figure("users", users.as_secs_f64());
        let shares = share_phases::floor(people, (&admin, &operator), run, count).await;
        println!("floor: {count} Shares Ready in {}", secs(shares));
        figure("shares", shares.as_secs_f64());
        let workspaces = floor_workspaces(&admin, &operator, teams, count).await;
        figure("workspaces", workspaces.as_secs_f64());
    }
}

/// Homestead's side of a round (see the module docs).
async fn homestead_side(plane: &ControlPlane, admin: &Client, people: People, count: usize) {
    let (operator, provisioning) = homestead_provisioning(plane, admin, count).await;
    figure("users", provisioning.up.as_secs_f64());
    let shares = share_phases::homestead(people, admin, count).await;
    println!("homestead: {count} Shares Ready in {}", secs(shares));
    figure("shares", shares.as_secs_f64());
    let workspaces = homestead_workspaces(admin, &operator, count / MEMBERS, count).await;
    figure("workspaces", workspaces.as_secs_f64());
    let change = share_phases::group_change(people, plane, admin, count, true).await;
    let writes = change.binding_writes();
    println!(
        "group: one member of {} replaced, named by {} bindings: all updated in {}; operator writes: {} ({})",
        change.members,
        change.bindings,
        secs(change.took),
        change.writes.len(),
        share_phases::tally(&change.writes)
    );
    figure("group-seconds", change.took.as_secs_f64());
    figure(
        "group-binding-writes-per-binding",
        writes as f64 / change.bindings as f64,
    );
    let peak = memory_mib(operator.pid(), "VmHWM");
    println!("homestead: operator peak RSS {peak:.1} MiB");
    figure("operator-peak-mib", peak);
    let profiling = std::env::var_os("HOMESTEAD_BENCH_HEAPTRACK").is_some();
    if profiling {
        // A heap profile (docs/performance.md, "Memory"): killed at once, so what heaptrack
        // calls leaked is what the operator held at the end of the mix.
        kill(&operator).await;
    }
    let operator = restart(plane, operator).await;
    if profiling {
        // And again once the restarted operator is steady: what its caches hold.
        kill(&operator).await;
        return;
    }
    drop(operator);
    let load = share_phases::homes_load(people, plane, share_phases::PEOPLE.min(count)).await;
    figure("homes-p99-ratio", load.p99_ratio);
    figure("homes-api-peak-mib", load.peak);
}

/// Waits until `operator` has reconciled nothing for [`QUIET`]; returns how many reconciles it
/// has made.
async fn quiet(operator: &Operator) -> u64 {
    let mut last = reconciles(&operator.address);
    loop {
        tokio::time::sleep(QUIET).await;
        let now = reconciles(&operator.address);
        if now == last {
            return last;
        }
        last = now;
    }
}

/// Kills `operator` with SIGKILL (so that heaptrack's "leaked" is what it held) and waits for
/// heaptrack to write its profile.
async fn kill(operator: &Operator) {
    let pid = operator.pid().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {pid}");
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// Stops `operator`, starts it again, and waits until it has reconciled nothing for [`QUIET`];
/// prints the time to its first reconcile, what it wrote in between (every write, the
/// RoleBindings created or deleted, the status writes), its RSS 10 s later (and of it the
/// pages of files mapped, the binary's and libraries', and its own; and its heap by jemalloc's
/// account, from its `/metrics`) and its peak.
/// Returns the restarted operator.
async fn restart(plane: &ControlPlane, operator: Operator) -> Operator {
    // Whatever the last phase set off is through before the restart.
    quiet(&operator).await;
    drop(operator);
    let from = Timestamp::now();
    let started = Instant::now();
    let (operator, synced) = Operator::start("homestead-bench-restart").await;
    while reconciles(&operator.address) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = started.elapsed();
    let last = quiet(&operator).await;
    let through = started.elapsed();
    let writes = share_phases::operator_writes(plane, from, Timestamp::now());
    let bindings = writes
        .iter()
        .filter(|w| matches!(w.as_str(), "create rolebindings" | "delete rolebindings"))
        .count();
    let statuses = writes.iter().filter(|w| w.ends_with("/status")).count();
    println!(
        "homestead: restarted: caches synced in {}, first reconcile after {}, {last} reconciles, quiet after {}; operator writes: {} ({})",
        secs(synced),
        secs(first),
        secs(through.saturating_sub(QUIET)),
        writes.len(),
        share_phases::tally(&writes)
    );
    figure("restart-first-reconcile-seconds", first.as_secs_f64());
    figure("restart-writes", writes.len() as f64);
    figure("restart-rolebindings-changed", bindings as f64);
    figure("restart-status-writes", statuses as f64);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (steady, peak) = (
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM"),
    );
    let (file, anon) = (
        memory_mib(operator.pid(), "RssFile"),
        memory_mib(operator.pid(), "RssAnon"),
    );
    println!(
        "homestead: RSS after the restart, steady: {steady:.1} MiB (peak {peak:.1} MiB): {file:.1} MiB of the binary's and libraries' pages, {anon:.1} MiB its own"
    );
    figure("restart-steady-mib", steady);
    figure("restart-peak-mib", peak);
    // Its own pages by jemalloc's account (docs/performance.md, "Where the operator's own
    // pages go"), from one scrape; absent from an operator built without jemalloc (heaptrack).
    if let Some((_, body)) = common::http_get(&operator.address, "/metrics") {
        let heap = |state: &str| {
            let prefix = format!("homestead_allocator_bytes{{state=\"{state}\"}} ");
            body.lines()
                .find_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
                .map(|bytes| bytes / f64::from(1u32 << 20))
        };
        if let (Some(allocated), Some(active), Some(metadata), Some(resident)) = (
            heap("allocated"),
            heap("active"),
            heap("metadata"),
            heap("resident"),
        ) {
            println!(
                "homestead: its heap by jemalloc's account: {allocated:.1} MiB allocated, {active:.1} MiB active, {metadata:.1} MiB metadata, {resident:.1} MiB resident (at most)"
            );
            figure("restart-allocated-mib", allocated);
            figure("restart-allocator-active-mib", active);
            figure("restart-allocator-resident-mib", resident);
        }
    }
    operator
}
