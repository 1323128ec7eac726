//! `just bench [USERS]`: Homestead against the floor of what any operator must ask of the API
//! server, side by side on one real local control plane (release build).
//!
//! 1. **Floor**: with no operator running, a client that makes exactly the requests a User
//!    cannot do without (create the User, add the finalizer, create the Namespace, create the
//!    RoleBinding, write the status), `IN_FLIGHT` Users at a time; then offboards them as
//!    cheaply as possible (delete the User and its Namespace, remove the finalizer once the
//!    Namespace is gone). Users are created and deleted as the admin (HR's part); every other
//!    request is made as the operator's ServiceAccount, so it costs the API server what the
//!    same request from Homestead costs (RBAC, the admission policy, API priority and
//!    fairness; the admin's requests skip all three).
//! 2. **Homestead**: the release operator (default flags) on as many fresh Users, created
//!    `IN_FLIGHT` at a time, until all are `Ready=True`; 30 s of steady state; a restart (time
//!    until every cache is synced); a forced re-list (the API server restarted); a Profile
//!    change (a quota for every User), then taken back, so that Homestead's namespaces hold
//!    what the floor's hold; and offboarding of all of them (`deletionPolicy: Delete`).
//! 3. **Floor again**, with the operator stopped: the same provisioning (not the offboarding,
//!    which at 10,000 Users would add 16 to 19 minutes). Then the **bare floor**: the same five
//!    requests as the cluster admin with the least objects (a Namespace with a name, a
//!    RoleBinding with a roleRef and a subject), what an operator without Homestead's safety
//!    layers (admission policy, ownership and Pod Security labels) would cost. Every phase can leave the control
//!    plane slower (etcd and the API server grow with what they have seen), so a floor
//!    measured only before Homestead would charge Homestead for coming second. Homestead's
//!    provisioning is compared with the mean of the floor before and after it (an A-B-A
//!    design, which cancels a drift that grows evenly with each phase); both floors are
//!    printed.
//!
//! Waiting is done with watches. Request counts come from the audit log: every request about
//! a benchmark User (the User, its Namespace and anything in it, Events about it), by verb and
//! resource, per User. Memory is the operator's resident set from `/proc`; CPU is each process's
//! user and system time from `/proc/<pid>/stat` (etcd, kube-apiserver, kube-controller-manager,
//! the operator, the benchmark's own client), per User while provisioning; the watch events
//! kube-apiserver sent (Users, Namespaces, RoleBindings) come from its own counters. Figures, not
//! assertions: the output is meant to be compared between runs and with docs/performance.md.
//!
//! Options, as environment variables (docs/performance.md has them too):
//! `HOMESTEAD_BENCH_QUICK` (`1`, `offboard`, `floor`, `bare`, `homestead` or `used`: parts of the
//! run only),
//! `HOMESTEAD_BENCH_FLOOR_EVENT=1` (the floor publishes Homestead's one Event per User too),
//! `HOMESTEAD_BENCH_FLOOR_WATCH=1` (the floor holds the operator's watches too),
//! `HOMESTEAD_BENCH_FLOOR_WITHOUT=identity,objects,policies` (with `HOMESTEAD_BENCH_QUICK=floor`:
//! the bounded floor less those safety layers, to measure what each costs),
//! `HOMESTEAD_BENCH_PPROF=DIR` (kube-apiserver CPU profiles of the provisioning phases) and
//! `HOMESTEAD_BENCH_SETTLE=SECONDS` (the operator's RSS again that long after the import, say
//! past a resync) and `HOMESTEAD_BENCH_WORKSPACES=N` (N team workspaces of 10 members each once
//! the Users are Ready, beside the floor making the same writes: `workspaces.rs`).

#[path = "../../tests/common/mod.rs"]
mod common;
mod floor;
mod homestead;
mod measure;
mod report;
mod scale;
#[path = "../shares/phases.rs"]
mod share_phases;
mod workspaces;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::{IN_FLIGHT, Operator, each, install, memory_mib, reconciles};
use futures::{StreamExt, TryStreamExt};
use homestead_api::{
    AppliedProfile, FIELD_MANAGER, FINALIZER, LABEL_MANAGED_BY, MANAGED_BY, Profile, User,
};
use homestead_api::{Change, Reason};
use homestead_reconciler::plan::config::PodSecurity;
use homestead_reconciler::plan::desired::{Traits, desired_namespace, desired_role_binding};
use homestead_reconciler::plan::status::{Outcome, desired_status, events_for};
use homestead_testenv::{ADMIN, ControlPlane, OPERATOR};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use floor::*;
use homestead::*;
use measure::*;
use report::*;
use workspaces::*;

/// Label telling the two runs' Users apart (`floor` or `homestead`).
const RUN_LABEL: &str = "bench-run";
/// Steady state observed after convergence, in seconds.
const STEADY_SECONDS: u64 = 30;

/// The Profile every benchmark User names: empty at first (so provisioning makes exactly the
/// floor's objects), then given a quota to time a Profile change.
const PROFILE: &str = "bench";

/// A run's Users: `<run>-00042`, labelled `bench-run=<run>`, role `edit`, Profile [`PROFILE`],
/// deletionPolicy Delete, no quota (the floor makes no quota either).
/// In `just bench-scale` ([`scale::on`]) they name no Profile: their directory group chooses it.
fn bench_user(run: &str, i: usize) -> User {
    let user = User::test(&format!("{run}-{i:05}"))
        .with_username(&format!("{run}-{i}@example.com"))
        .with_label(RUN_LABEL, run)
        .with_role("edit")
        .with_spec(json!({ "deletionPolicy": "Delete" }));
    if scale::on() {
        user
    } else {
        user.with_profile(PROFILE)
    }
}

/// The status `status.profile` of a User provisioned with generation `generation` of
/// [`PROFILE`].
fn bench_profile(generation: i64) -> Option<AppliedProfile> {
    Some(AppliedProfile {
        name: PROFILE.to_owned(),
        observed_generation: Some(generation),
        group: None,
    })
}

/// Waits until kube-controller-manager's garbage collector knows Users, as it has long known
/// them on any cluster where HR imports people: it learns of a new CRD only at its next
/// discovery (every 30 s), then streams every User that exists to its metadata informer, so on a
/// fresh control plane that would land inside whichever run comes first, the bigger and the
/// likelier to be cut short (and started over) the more Users exist by then. The probe: a
/// ConfigMap owned by a User that is then deleted; the collector deletes the ConfigMap once it
/// can map the owner's kind. Prints how long that took.
///
/// # Panics
/// When the ConfigMap is still there after 120 s.
async fn wait_until_the_garbage_collector_knows_users(admin: &Client) {
    const PROBE: &str = "homestead-bench-gc-probe";
    let started = Instant::now();
    let users: Api<User> = Api::all(admin.clone());
    let mut user = bench_user("probe", 0);
    user.metadata.name = Some(PROBE.to_owned());
    let user = users.create(&PostParams::default(), &user).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let probe: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": PROBE,
            "ownerReferences": [{
                "apiVersion": User::api_version(&()), "kind": User::kind(&()),
                "name": PROBE, "uid": user.uid().unwrap(),
            }],
        },
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &probe)
        .await
        .unwrap();
    users.delete(PROBE, &DeleteParams::default()).await.unwrap();
    while config_maps.get_opt(PROBE).await.unwrap().is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kube-controller-manager's garbage collector still does not know Users"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "kube-controller-manager's garbage collector knew Users after {}",
        secs(started.elapsed())
    );
}

/// Creates [`PROFILE`] with an empty spec (generation 1).
async fn create_profile(admin: &Client) {
    let profile = Profile::test(PROFILE);
    Api::<Profile>::all(admin.clone())
        .create(&PostParams::default(), &profile)
        .await
        .unwrap();
}

/// Merges `spec` into [`PROFILE`]'s spec, which makes it generation `generation`, and returns
/// the time until every one of the `count` Homestead Users reflects it (`reflects`).
async fn change_profile(
    admin: &Client,
    count: usize,
    spec: Value,
    generation: i64,
    reflects: fn(&User) -> bool,
) -> Duration {
    let reached = watch_users(admin, "homestead", count, reflects).await;
    let started = Instant::now();
    let changed = Api::<Profile>::all(admin.clone())
        .patch(
            PROFILE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(generation));
    reached.await.unwrap();
    started.elapsed()
}

/// The generation of [`PROFILE`] `user`'s status says it was provisioned with.
fn applied_generation(user: &User) -> Option<i64> {
    let applied = user.status.as_ref()?.profile.as_ref()?;
    (applied.name == PROFILE).then_some(applied.observed_generation?)
}

/// Gives [`PROFILE`] a quota (its generation 2) and returns the time until every one of the
/// `count` Homestead Users reflects it.
async fn profile_change(admin: &Client, count: usize) -> Duration {
    let quota = json!({ "quota": { "hard": { "pods": "10" } } });
    change_profile(admin, count, quota, 2, |u| applied_generation(u) == Some(2)).await
}

/// Takes the quota away from [`PROFILE`] again (its generation 3), so Homestead's namespaces
/// hold what the floor's hold (a RoleBinding) when offboarding starts, and returns the time
/// until every one of the `count` Homestead Users reflects it.
async fn profile_revert(admin: &Client, count: usize) -> Duration {
    let no_quota = json!({ "quota": null });
    change_profile(admin, count, no_quota, 3, |u| {
        applied_generation(u) == Some(3)
    })
    .await
}

/// Waits (at most 60 s) until [`PROFILE`]'s status counts `count` Users, all up to date: the
/// operator's Profile status controller writes it once its Users' changes have settled for a
/// second, so a restart right after the last User is Ready would leave that write to the next
/// process.
async fn profile_counts(admin: &Client, count: usize) {
    let profiles = Api::<Profile>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = profiles
            .get(PROFILE)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if usize::try_from(status.users_up_to_date).ok() == Some(count) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the Profile status never counted {count} Users: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Watches the Users of `run` until `done` holds for every one of `count` (or, with `count`
/// 0, until none is left once the watch has listed). Either way the answer is right whenever
/// the watch starts; [`watch_users`] starts it before the Users change, so the timing is too.
async fn wait_users(
    client: Client,
    run: &str,
    count: usize,
    done: impl Fn(&User) -> bool + Send + 'static,
) {
    let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={run}"));
    let mut events = watcher(Api::<User>::all(client), config).boxed();
    let (mut present, mut finished) = (HashSet::new(), HashSet::new());
    let mut listed = false;
    while let Some(event) = events.try_next().await.unwrap() {
        match event {
            watcher::Event::Apply(u) | watcher::Event::InitApply(u) => {
                present.insert(u.name_any());
                if done(&u) {
                    finished.insert(u.name_any());
                } else {
                    finished.remove(&u.name_any());
                }
            }
            watcher::Event::Delete(u) => {
                present.remove(&u.name_any());
                finished.remove(&u.name_any());
            }
            watcher::Event::InitDone => listed = true,
            watcher::Event::Init => {}
        }
        let complete = if count == 0 {
            present.is_empty()
        } else {
            finished.len() == count
        };
        if listed && complete {
            return;
        }
    }
}

/// Whether `user` is `Ready=True`.
fn is_ready(user: &User) -> bool {
    user.ready_condition().is_some_and(|c| c.status == "True")
}

/// Starts [`wait_users`] in the background and returns once its watch has listed.
async fn watch_users(
    client: &Client,
    run: &'static str,
    count: usize,
    done: fn(&User) -> bool,
) -> tokio::task::JoinHandle<()> {
    let task = tokio::spawn(wait_users(client.clone(), run, count, done));
    // The initial list of a few thousand Users takes well under this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    task
}

/// What `HOMESTEAD_BENCH_QUICK` asks for (see [`main`]).
struct Mode {
    /// `bare`: the bare floor alone, on a fresh control plane.
    bare: bool,
    /// `floor`: the floor's provisioning alone.
    floor_only: bool,
    /// `homestead`: Homestead's provisioning alone.
    homestead_only: bool,
    /// `used`: the floor's provisioning and offboarding, then Homestead's provisioning.
    first_half: bool,
    /// No floor (and, but for `offboard`, no offboarding).
    quick: bool,
    /// Whether Homestead offboards its Users.
    offboard: bool,
}

impl Mode {
    /// `HOMESTEAD_BENCH_QUICK=1`: Homestead's provisioning, restart, steady state and re-list
    /// only (no floor, no offboarding), to look at memory at scale in minutes.
    /// `HOMESTEAD_BENCH_QUICK=floor` or `homestead`: that side's provisioning only, on a fresh
    /// control plane, with its CPU per User (to compare the two in minutes); `used`: the floor's
    /// provisioning and offboarding, then Homestead's provisioning (the full run's first half);
    /// `offboard`: `1`, then Homestead's offboarding too; `bare`: the bare floor alone.
    fn from_env() -> Self {
        let mode = std::env::var("HOMESTEAD_BENCH_QUICK").unwrap_or_default();
        let homestead_only = mode == "homestead";
        Self {
            bare: mode == "bare",
            floor_only: mode == "floor",
            homestead_only,
            first_half: mode == "used",
            quick: mode == "1" || homestead_only || mode == "offboard",
            offboard: !(mode == "1" || homestead_only) || mode == "offboard",
        }
    }
}

/// The full run, or the part `HOMESTEAD_BENCH_QUICK` asks for ([`Mode`]), of
/// `HOMESTEAD_BENCH_USERS` (default 1000) Users.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let count: usize = std::env::var("HOMESTEAD_BENCH_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    if scale::on() {
        let side = std::env::var("HOMESTEAD_BENCH_QUICK").unwrap_or_default();
        return scale::run(count, side == "scale-homestead").await;
    }
    let mode = Mode::from_env();
    if mode.bare {
        return bare_only(count).await;
    }
    let plane = install();
    let admin = plane.client(ADMIN).await.unwrap();
    let operator_identity = plane.client(OPERATOR).await.unwrap();
    println!("{count} Users, {IN_FLIGHT} in flight, one local control plane\n");
    create_profile(&admin).await;
    wait_until_the_garbage_collector_knows_users(&admin).await;
    let background_fresh = background_cpu(plane, None).await;
    // `HOMESTEAD_BENCH_FLOOR_WITHOUT` (with `HOMESTEAD_BENCH_QUICK=floor` only): the
    // bounded floor less some of its safety layers.
    let floor = Floor::from_env();
    assert!(
        floor == Floor::BOUNDED || mode.floor_only,
        "HOMESTEAD_BENCH_FLOOR_WITHOUT needs HOMESTEAD_BENCH_QUICK=floor"
    );
    if !floor.policies {
        unbind_operator_policies(&admin, &operator_identity).await;
    }
    let clients = (&admin, &operator_identity);
    let first = first_floor(plane, clients, count, floor, &mode).await;
    let (floor_start, floor_end) = &first.cpu;
    if mode.floor_only {
        let title = "floor: CPU while provisioning";
        print_cpu(title, floor_start, floor_end, count, first.up);
        return;
    }
    let teams = workspaces_from_env();
    if teams > 0 {
        floor_workspaces(&admin, &operator_identity, teams, count).await;
    }
    let (operator, ours) = homestead_provisioning(plane, &admin, count).await;
    if teams > 0 {
        homestead_workspaces(&admin, &operator, teams, count).await;
    }
    if mode.homestead_only || mode.first_half {
        if mode.first_half {
            let title = "floor: CPU while provisioning";
            print_cpu(title, floor_start, floor_end, count, first.up);
            let ratio = ours.up.as_secs_f64() / first.up.as_secs_f64();
            println!("provisioning {ratio:.2}x the floor before");
        }
        let (start, end) = &ours.cpu;
        print_cpu(
            "homestead: CPU while provisioning",
            start,
            end,
            count,
            ours.up,
        );
        return;
    }
    let later = homestead_later(plane, &admin, count, operator, mode.offboard).await;
    let floors = if mode.quick {
        Floors::default()
    } else {
        floors_again(plane, clients, count).await
    };
    let events = audit_log(plane);
    print_times(&first, &ours, &later, &floors);
    print_all_requests(&events, &first, &ours, &later, count);
    let quick = (background_fresh, mode.quick);
    print_all_cpu((&first, &floors), &ours, quick, count);
    print_operator(&events, &ours, &later, count);
}
