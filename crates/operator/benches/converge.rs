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
//! past a resync).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use common::{install, operator_pid, reconciles, spawn_operator_with};
use futures::{StreamExt, TryStreamExt};
use homestead_api::{
    AppliedProfile, FIELD_MANAGER, FINALIZER, LABEL_MANAGED_BY, MANAGED_BY, Profile, User,
};
use homestead_api::{Change, Reason};
use homestead_reconciler::plan::config::PodSecurity;
use homestead_reconciler::plan::desired::{desired_namespace, desired_role_binding};
use homestead_reconciler::plan::status::{Outcome, desired_status, events_for};
use homestead_testenv::{ADMIN, ControlPlane, OPERATOR, Supervised, free_port};
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

/// Users created, deleted or provisioned at once, by the floor client and by the benchmark.
const IN_FLIGHT: usize = 64;
/// Label telling the two runs' Users apart (`floor` or `homestead`).
const RUN_LABEL: &str = "bench-run";
/// Steady state observed after convergence, in seconds.
const STEADY_SECONDS: u64 = 30;

/// The Profile every benchmark User names: empty at first (so provisioning makes exactly the
/// floor's objects), then given a quota to time a Profile change.
const PROFILE: &str = "bench";

/// A run's Users: `<run>-00042`, labelled `bench-run=<run>`, role `edit`, Profile [`PROFILE`],
/// deletionPolicy Delete, no quota (the floor makes no quota either).
fn bench_user(run: &str, i: usize) -> User {
    User::test(&format!("{run}-{i:05}"))
        .with_username(&format!("{run}-{i}@example.com"))
        .with_label(RUN_LABEL, run)
        .with_role("edit")
        .with_profile(PROFILE)
        .with_spec(json!({ "deletionPolicy": "Delete" }))
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

/// Runs `f(i)` for `0..count`, `IN_FLIGHT` at a time; panics on the first error.
async fn each<F, Fut>(count: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    futures::stream::iter(0..count)
        .map(f)
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
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

/// Which of Homestead's safety layers a floor carries (docs/performance.md, "Where the cost
/// goes"): the bounded floor all three; the bare floor neither the identity nor the objects
/// (the policies stay bound, but match none of its requests).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Floor {
    /// Whether the operator's identity makes every request but HR's: RBAC for a
    /// ServiceAccount, API priority and fairness, and the admission policies' match conditions.
    /// Without it, the cluster admin (RBAC allows it at once; exempt from API priority and
    /// fairness; no policy matches it).
    identity: bool,
    /// Whether the Namespace and RoleBinding are Homestead's (ownership and Pod Security
    /// labels, annotations, owner references). Without it, the least that gives a person
    /// access: a Namespace with a name, a RoleBinding with a roleRef and a subject.
    objects: bool,
    /// Whether the operator's admission policies are bound. Without it, their bindings are
    /// deleted before the floor runs (on a control plane of its own only).
    policies: bool,
}

impl Floor {
    /// Homestead's identity, objects and admission policies.
    const BOUNDED: Self = Self {
        identity: true,
        objects: true,
        policies: true,
    };
    /// The admin and the least objects (the policies stay bound, matching no request of it).
    /// Users named `bare-00042`.
    const BARE: Self = Self {
        identity: false,
        objects: false,
        policies: true,
    };

    /// The bounded floor without the layers `HOMESTEAD_BENCH_FLOOR_WITHOUT` names
    /// (comma-separated `identity`, `objects`, `policies`), to measure what each costs.
    ///
    /// # Panics
    /// On any other name, and for `objects` without `policies` or `identity` (the policies
    /// would refuse the least objects).
    fn from_env() -> Self {
        let mut floor = Self::BOUNDED;
        let without = std::env::var("HOMESTEAD_BENCH_FLOOR_WITHOUT").unwrap_or_default();
        for layer in without.split(',').map(str::trim).filter(|l| !l.is_empty()) {
            match layer {
                "identity" => floor.identity = false,
                "objects" => floor.objects = false,
                "policies" => floor.policies = false,
                other => panic!(
                    "HOMESTEAD_BENCH_FLOOR_WITHOUT: no layer {other:?} (identity, objects, policies)"
                ),
            }
        }
        assert!(
            floor.objects || !floor.identity || !floor.policies,
            "HOMESTEAD_BENCH_FLOOR_WITHOUT=objects needs policies (or identity) too: the \
             operator's admission policies refuse the least objects"
        );
        floor
    }

    /// The run label and User name prefix.
    fn run(self) -> &'static str {
        if self == Self::BARE { "bare" } else { "floor" }
    }
}

/// Deletes, as `admin`, the bindings of the operator's admission policies and waits until the
/// API server admits, as `operator`, a Namespace they would refuse (a dry run).
async fn unbind_operator_policies(admin: &Client, operator: &Client) {
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone());
    for name in ["homestead-operator-bounds", "homestead-operator-namespaced"] {
        bindings
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let unlabelled: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "user-unbound" } })).unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = Api::<Namespace>::all(operator.clone())
        .create(&dry_run, &unlabelled)
        .await
    {
        assert!(Instant::now() < deadline, "the policies still apply: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The least Namespace and RoleBinding that give `user` ClusterRole `edit` in `ns`.
fn bare_objects(user: &User, ns: &str) -> (Namespace, RoleBinding) {
    let namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    let binding = serde_json::from_value(json!({
        "metadata": { "name": "homestead-user", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": user.spec.identity.username }],
    }))
    .unwrap();
    (namespace, binding)
}

/// A floor: provisions `count` Users with only the unavoidable requests (create the User, add
/// the finalizer, create the Namespace and the RoleBinding, write the status). `admin` creates
/// each User, as HR would; the rest is made as [`Floor`] says, by `operator` or by `admin`.
/// Returns the time until a User watch has seen every one `Ready=True`: measured exactly as
/// Homestead's time is, the watch's cost to the API server included.
async fn floor_provision(
    admin: &Client,
    operator: &Client,
    count: usize,
    floor: Floor,
) -> Duration {
    let operator = if floor.identity { operator } else { admin };
    let run = floor.run();
    let hr: Api<User> = Api::all(admin.clone());
    let users: Api<User> = Api::all(operator.clone());
    // `HOMESTEAD_BENCH_FLOOR_EVENT=1`: the floor also publishes the one Event per User that
    // Homestead does, as Homestead does, to measure what that Event costs.
    let recorder = std::env::var("HOMESTEAD_BENCH_FLOOR_EVENT")
        .is_ok_and(|v| v == "1")
        .then(|| {
            let reporter = Reporter {
                controller: "homestead".into(),
                instance: Some("floor".into()),
            };
            Recorder::new(operator.clone(), reporter)
        });
    // `HOMESTEAD_BENCH_FLOOR_WATCH=1`: the floor also holds the watches an operator needs
    // (Users; Namespaces labelled as Homestead's; RoleBindings), reading and dropping every
    // event, to measure what serving them costs the API server.
    let watches = std::env::var("HOMESTEAD_BENCH_FLOOR_WATCH")
        .is_ok_and(|v| v == "1")
        .then(|| operator_watches(operator));
    let ready = watch_users(admin, run, count, is_ready).await;
    let started = Instant::now();
    each(count, |i| {
        let clients = (hr.clone(), users.clone(), operator.clone());
        floor_user(clients, (run, i), floor, recorder.clone())
    })
    .await;
    ready.await.unwrap();
    let elapsed = started.elapsed();
    for watch in watches.into_iter().flatten() {
        watch.abort();
    }
    elapsed
}

/// One User of a floor run: created by HR (`clients.0`), then as the floor's identity
/// (`clients.1` for Users, `clients.2` for the rest) the finalizer, the Namespace and the
/// RoleBinding (Homestead's objects, or the bare ones) and the `Ready` status; and, with
/// `recorder`, the Event Homestead would publish.
async fn floor_user(
    (hr, users, client): (Api<User>, Api<User>, Client),
    (run, i): (&str, usize),
    floor: Floor,
    recorder: Option<Recorder>,
) -> kube::Result<()> {
    let user = hr
        .create(&PostParams::default(), &bench_user(run, i))
        .await?;
    let name = user.name_any();
    // As the operator's own field manager, never HR's: the User then keeps the three
    // managedFields entries it has under Homestead (HR's, the finalizer's, the
    // status's), not two.
    let finalizer = json!({ "metadata": { "finalizers": [FINALIZER] } });
    let operator_patch = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    users
        .patch(&name, &operator_patch, &Patch::Merge(&finalizer))
        .await?;
    let ns = format!("user-{name}");
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let (namespace, binding) = if floor.objects {
        (
            desired_namespace(&user, &ns, PodSecurity::default(), false),
            desired_role_binding(&user, &ns),
        )
    } else {
        bare_objects(&user, &ns)
    };
    Api::<Namespace>::all(client.clone())
        .create(&post, &namespace)
        .await?;
    Api::<RoleBinding>::namespaced(client, &ns)
        .create(&post, &binding)
        .await?;
    // The bounded floor's Ready condition says what Homestead's says; the bare floor's
    // the least.
    let who = &user.spec.identity.username;
    let message = if floor.objects {
        format!(
            "namespace {ns:?} provisioned (Profile {PROFILE:?}); {who:?} has ClusterRole \"edit\" there"
        )
    } else {
        "provisioned".to_owned()
    };
    let outcome =
        Outcome::new(&ns, Reason::Provisioned, message.clone()).with_profile(bench_profile(1));
    let status = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "status": desired_status(&user, &outcome, Time(Timestamp::now())),
    });
    users
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await?;
    if let Some(recorder) = recorder {
        floor_event(&recorder, &user, &ns, message).await?;
    }
    Ok(())
}

/// The Event Homestead's provisioning of `user` in `ns` publishes: `message`, and the changes
/// summed up by the same `events_for`, published by `recorder`.
async fn floor_event(
    recorder: &Recorder,
    user: &User,
    ns: &str,
    message: String,
) -> kube::Result<()> {
    // The Event Homestead's provisioning publishes: its message, and the changes
    // summed up by the same `events_for`.
    let who = &user.spec.identity.username;
    let granted = format!("bound ClusterRole \"edit\" to {who:?} in namespace {ns:?}");
    let outcome = Outcome::new(ns, Reason::Provisioned, message).with_changes(vec![
        (
            Change::NamespaceCreated,
            format!("created namespace {ns:?}"),
        ),
        (Change::AccessGranted, granted),
    ]);
    for (type_, reason, note) in events_for(true, &outcome) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        recorder.publish(&event, &user.object_ref(&())).await?;
    }
    Ok(())
}

/// Watches, as `client`, what Homestead's operator watches of a provisioning (every User,
/// the Namespaces labelled as Homestead's, every RoleBinding), dropping every event.
fn operator_watches(client: &Client) -> Vec<tokio::task::JoinHandle<()>> {
    fn drain<K>(api: Api<K>, config: watcher::Config) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        tokio::spawn(watcher(api, config).for_each(|_| async {}))
    }
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    vec![
        drain(Api::<User>::all(client.clone()), watcher::Config::default()),
        drain(Api::<Namespace>::all(client.clone()), managed),
        drain(
            Api::<RoleBinding>::all(client.clone()),
            watcher::Config::default(),
        ),
    ]
}

/// Waits until the operator serving `metrics_address` has no Event queued
/// (`homestead_events_pending` is 0); returns how long that took.
async fn events_published(metrics_address: &str) -> Duration {
    let started = Instant::now();
    while metric(metrics_address, "homestead_events_pending") != Some(0.0) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// The value of the unlabelled metric `name` of the operator serving `metrics_address`.
fn metric(metrics_address: &str, name: &str) -> Option<f64> {
    let (_, body) = common::http_get(metrics_address, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The floor's offboarding of `count` Users: `admin` deletes each User (its finalizer holds
/// it); `operator` deletes its Namespace, and removes the finalizer as soon as the Namespace
/// watch reports it gone. Returns the time until every User is gone.
async fn floor_offboard(admin: &Client, operator: &Client, count: usize) -> Duration {
    let hr: Api<User> = Api::all(admin.clone());
    let users: Api<User> = Api::all(operator.clone());
    let client = operator;
    let gone = watch_users(admin, "floor", 0, |_| false).await;
    let releaser = {
        let users = users.clone();
        let namespaces = watcher(Api::<Namespace>::all(client.clone()), Default::default());
        tokio::spawn(async move {
            namespaces
                .try_filter_map(|e| async move {
                    Ok(match e {
                        watcher::Event::Delete(ns) => ns
                            .name_any()
                            .strip_prefix("user-")
                            .filter(|n| n.starts_with("floor-"))
                            .map(str::to_owned),
                        _ => None,
                    })
                })
                .map_err(|e| panic!("namespace watch: {e}"))
                .try_for_each_concurrent(IN_FLIGHT, |name: String| {
                    let users = users.clone();
                    async move {
                        let release = json!({ "metadata": { "finalizers": null } });
                        users
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                            .await
                            .unwrap();
                        Ok::<(), ()>(())
                    }
                })
                .await
        })
    };
    let started = Instant::now();
    each(count, |i| {
        let (hr, client) = (hr.clone(), client.clone());
        async move {
            let name = format!("floor-{i:05}");
            hr.delete(&name, &DeleteParams::default()).await?;
            Api::<Namespace>::all(client)
                .delete(&format!("user-{name}"), &DeleteParams::background())
                .await
                .map(drop)
        }
    })
    .await;
    gone.await.unwrap();
    releaser.abort();
    started.elapsed()
}

/// Homestead: creates `count` Users and returns the time until all are `Ready=True`.
async fn homestead_provision(client: &Client, count: usize) -> Duration {
    let users: Api<User> = Api::all(client.clone());
    let ready = watch_users(client, "homestead", count, is_ready).await;
    let started = Instant::now();
    each(count, |i| {
        let users = users.clone();
        async move {
            users
                .create(&PostParams::default(), &bench_user("homestead", i))
                .await
                .map(drop)
        }
    })
    .await;
    ready.await.unwrap();
    started.elapsed()
}

/// Homestead's offboarding: deletes `count` Users and returns the time until all are gone.
async fn homestead_offboard(client: &Client, count: usize) -> Duration {
    let users: Api<User> = Api::all(client.clone());
    let gone = watch_users(client, "homestead", 0, |_| false).await;
    let started = Instant::now();
    each(count, |i| {
        let users = users.clone();
        async move {
            users
                .delete(&format!("homestead-{i:05}"), &DeleteParams::default())
                .await
                .map(drop)
        }
    })
    .await;
    gone.await.unwrap();
    started.elapsed()
}

/// A field of `/proc/<pid>/status` in MiB (`VmRSS`: resident now; `VmHWM`: peak).
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// CPU time (user and system) of the control-plane processes of `plane`, of the operator
/// under benchmark (`operator`, its pid, while one runs) and of this benchmark process, in
/// seconds, by process name. Nothing else counts, an operator of `just up` included.
fn cpu_seconds(plane: &ControlPlane, operator: Option<u32>) -> BTreeMap<&'static str, f64> {
    // Linux clock ticks per second (`getconf CLK_TCK`), 100 on every common kernel.
    const TICKS: f64 = 100.0;
    let dir = plane.dir().display().to_string();
    let me = std::process::id();
    let mut cpu = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let program = cmdline.split('\0').next().unwrap_or_default();
        let name = match program.rsplit('/').next().unwrap_or_default() {
            _ if pid == me => "benchmark client",
            _ if Some(pid) == operator => "operator",
            "etcd" if cmdline.contains(&dir) => "etcd",
            "kube-apiserver" if cmdline.contains(&dir) => "kube-apiserver",
            "kube-controller-manager" if cmdline.contains(&dir) => "kube-controller-manager",
            _ => continue,
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name; utime and stime are the 14th and 15th
        // fields of the whole line.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        *cpu.entry(name).or_default() += ticks / TICKS;
    }
    cpu
}

/// Prints the CPU each process used between two [`cpu_seconds`] snapshots, in milliseconds per
/// User (`count` Users) and, with the wall time `elapsed`, as cores busy on average.
fn print_cpu(
    title: &str,
    before: &BTreeMap<&'static str, f64>,
    after: &BTreeMap<&'static str, f64>,
    count: usize,
    elapsed: Duration,
) {
    println!("{title}:");
    let mut total = 0.0;
    for (name, end) in after {
        let used = end - before.get(name).copied().unwrap_or(0.0);
        total += used;
        println!(
            "  {name:<26} {:>8.2} ms per User {:>6.2} cores",
            used * 1000.0 / count as f64,
            used / elapsed.as_secs_f64()
        );
    }
    println!(
        "  {:<26} {:>8.2} ms per User {:>6.2} cores",
        "all",
        total * 1000.0 / count as f64,
        total / elapsed.as_secs_f64()
    );
}

/// Cores the control plane (and an idle operator, if one runs) keeps busy over 10 s with no
/// request from the benchmark: work left over from an earlier phase.
async fn background_cpu(plane: &ControlPlane, operator: Option<u32>) -> f64 {
    let window = Duration::from_secs(10);
    let before = cpu_seconds(plane, operator);
    tokio::time::sleep(window).await;
    let after = cpu_seconds(plane, operator);
    let used: f64 = after
        .iter()
        .filter(|(name, _)| **name != "benchmark client")
        .map(|(name, end)| end - before.get(name).copied().unwrap_or(0.0))
        .sum();
    used / window.as_secs_f64()
}

/// `HOMESTEAD_BENCH_SETTLE=SECONDS`: waits that long with nothing changing (a resync of every
/// User runs every 300 s) and prints the operator `pid`'s RSS and its peak since the import.
async fn settled_memory(pid: u32) {
    let Some(seconds) = std::env::var("HOMESTEAD_BENCH_SETTLE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    reset_peak(pid);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    println!(
        "homestead: RSS {seconds} s after that, nothing changed: {:.1} MiB (peak in between {:.1} MiB)",
        memory_mib(pid, "VmRSS"),
        memory_mib(pid, "VmHWM")
    );
}

/// Resets the peak resident set (`VmHWM`) of `pid` to its current one (Linux `clear_refs`).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// The operator under benchmark: a release binary with default flags.
struct Operator {
    /// Stops the operator when dropped.
    _process: Supervised,
    address: String,
}

impl Operator {
    /// Starts it and returns once it logged that every cache is synced, with the time that took.
    async fn start(pod: &str) -> (Self, Duration) {
        let address = format!("127.0.0.1:{}", free_port().unwrap());
        let started = Instant::now();
        let process = spawn_operator_with("homestead", pod, &address, &[]);
        while !process.log_tail(usize::MAX).contains("caches synced") {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "operator not synced:\n{}",
                process.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (
            Self {
                _process: process,
                address,
            },
            started.elapsed(),
        )
    }

    fn pid(&self) -> u32 {
        operator_pid(&self.address).expect("operator running")
    }
}

/// One request from the audit log, as far as the benchmark needs it.
struct Request {
    /// When the API server received it.
    at: Timestamp,
    /// Who made it: the operator, or the admin (the floor client and the benchmark itself).
    by_operator: bool,
    /// `verb resource[/subresource]`.
    kind: String,
    /// The benchmark User it concerns (`floor-00042`): the User, its Namespace or anything in
    /// it, or an Event about it.
    user: Option<String>,
    /// Whether it writes (create, update, patch, delete).
    write: bool,
    /// Whether it is about a Lease.
    lease: bool,
}

/// The completed requests of the operator and the admin in the audit log, read line by line
/// (kube-controller-manager's, the bulk of a namespace deletion, are skipped).
fn audit_log(plane: &ControlPlane) -> Vec<Request> {
    use std::io::BufRead;
    let file = std::fs::File::open(plane.dir().join("audit.log")).unwrap();
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|line| !line.contains("\"userAgent\":\"kube-controller-manager"))
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter_map(|e| {
            let by = e["user"]["username"].as_str()?;
            if by != OPERATOR && by != ADMIN {
                return None;
            }
            Some(Request {
                at: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                by_operator: by == OPERATOR,
                kind: request_kind(&e),
                user: concerned_user(&e),
                write: matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete" | "deletecollection")
                ),
                lease: e["objectRef"]["resource"] == "leases",
            })
        })
        .collect()
}

/// What [`concerned_user`] says of a request about a summary Event (many Users' Events folded
/// into one): it counts towards whichever run's requests are being counted.
const SUMMARY: &str = "*";

/// The benchmark User an audit event concerns (`floor-00042`), if any.
fn concerned_user(event: &Value) -> Option<String> {
    let r = &event["objectRef"];
    let name = r["name"].as_str().unwrap_or_default();
    let user = match (r["resource"].as_str()?, r["namespace"].as_str()) {
        ("users", _) => name,
        ("namespaces", None) => name.strip_prefix("user-")?,
        // A summary of many Users' Events, about the Users CRD: counted with every run.
        ("events", Some("default")) if name.starts_with("users.homestead.dev.") => {
            return Some(SUMMARY.to_owned());
        }
        ("events", Some("default")) => name.split('.').next()?,
        (_, Some(ns)) => ns.strip_prefix("user-")?,
        _ => return None,
    };
    (user.starts_with("floor-") || user.starts_with("bare-") || user.starts_with("homestead-"))
        .then(|| user.to_owned())
}

/// `verb resource[/subresource]` of an audit event.
fn request_kind(event: &Value) -> String {
    let r = &event["objectRef"];
    let verb = event["verb"].as_str().unwrap_or("?");
    let resource = r["resource"].as_str().unwrap_or("?");
    match r["subresource"].as_str() {
        Some(sub) => format!("{verb} {resource}/{sub}"),
        None => format!("{verb} {resource}"),
    }
}

/// Requests about `run`'s Users between `from` and `to`, by `verb resource`.
fn requests(
    log: &[Request],
    run: &str,
    (from, to): (Timestamp, Timestamp),
) -> BTreeMap<String, usize> {
    let prefix = format!("{run}-");
    let mut counts = BTreeMap::new();
    for r in log.iter().filter(|r| r.at >= from && r.at <= to) {
        if r.user
            .as_ref()
            .is_some_and(|u| u.starts_with(&prefix) || u == SUMMARY)
        {
            *counts.entry(r.kind.clone()).or_default() += 1;
        }
    }
    counts
}

/// The operator's requests between `from` and `to` about no benchmark User (lists, watches,
/// Lease renewals, the CRD), by `verb resource`.
fn operator_overhead(
    log: &[Request],
    (from, to): (Timestamp, Timestamp),
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in log.iter().filter(|r| r.at >= from && r.at <= to) {
        if r.by_operator && r.user.is_none() {
            *counts.entry(r.kind.clone()).or_default() += 1;
        }
    }
    counts
}

/// The operator's writes between `from` and `to` (Lease renewals excluded).
fn operator_writes(log: &[Request], (from, to): (Timestamp, Timestamp)) -> Vec<String> {
    log.iter()
        .filter(|r| r.at >= from && r.at <= to && r.by_operator && r.write && !r.lease)
        .map(|r| {
            format!(
                "{} ({})",
                r.kind,
                r.user.as_deref().unwrap_or("no one User")
            )
        })
        .collect()
}

/// Prints two request tables side by side, per User.
fn print_requests(floor: &BTreeMap<String, usize>, ours: &BTreeMap<String, usize>, count: usize) {
    let keys: std::collections::BTreeSet<&String> = floor.keys().chain(ours.keys()).collect();
    let per = |m: &BTreeMap<String, usize>, k: &String| {
        m.get(k).copied().unwrap_or(0) as f64 / count as f64
    };
    println!("  {:<36} {:>8} {:>10}", "request", "floor", "homestead");
    for k in keys {
        println!("  {k:<36} {:>8.2} {:>10.2}", per(floor, k), per(ours, k));
    }
    let total = |m: &BTreeMap<String, usize>| m.values().sum::<usize>() as f64 / count as f64;
    println!(
        "  {:<36} {:>8.2} {:>10.2}",
        "total per User",
        total(floor),
        total(ours)
    );
}

/// Waits until the operator has listed Users, Namespaces and RoleBindings again after `since`.
async fn wait_relisted(plane: &ControlPlane, since: Timestamp) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let log = audit_log(plane);
        let relisted: HashSet<&str> = log
            .iter()
            .filter(|r| r.by_operator && r.at > since && r.kind.starts_with("list "))
            .map(|r| r.kind.trim_start_matches("list "))
            .collect();
        if ["users", "namespaces", "rolebindings"]
            .iter()
            .all(|r| relisted.contains(r))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no re-list after the API server restart"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// How long after a provisioning phase starts its kube-apiserver CPU profile starts: past the
/// first seconds, sized for 10,000 Users, whose phases take 90 to 160 s.
const PPROF_DELAY: Duration = Duration::from_secs(15);
/// How long a kube-apiserver CPU profile samples, in seconds (within a 10,000-User phase).
const PPROF_SECONDS: u64 = 60;

/// With `HOMESTEAD_BENCH_PPROF=DIR`, starts a CPU profile of kube-apiserver
/// (`/debug/pprof/profile`, Go's pprof format) over [`PPROF_SECONDS`] seconds from
/// [`PPROF_DELAY`] after now, written to `DIR/<phase>.pprof`; await the handle before the
/// next phase starts. Without it, `None`.
fn profile_apiserver(admin: &Client, phase: &'static str) -> Option<tokio::task::JoinHandle<()>> {
    let dir = std::path::PathBuf::from(std::env::var_os("HOMESTEAD_BENCH_PPROF")?);
    let client = admin.clone();
    Some(tokio::spawn(async move {
        tokio::time::sleep(PPROF_DELAY).await;
        let uri = format!("/debug/pprof/profile?seconds={PPROF_SECONDS}");
        let request = http::Request::get(uri).body(Vec::new()).unwrap();
        let mut body = client.request_stream(request).await.unwrap();
        let mut bytes = Vec::new();
        futures::AsyncReadExt::read_to_end(&mut body, &mut bytes)
            .await
            .unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{phase}.pprof"));
        std::fs::write(&path, bytes).unwrap();
        println!("kube-apiserver CPU profile of {phase}: {}", path.display());
    }))
}

/// kube-apiserver's own watch counters, by metric and resource (`users`, `namespaces`,
/// `rolebindings`; every version and group of a resource summed): events sent
/// (`apiserver_watch_events_total`), their bytes (`apiserver_watch_events_sizes_sum`), watchers
/// closed for falling behind (`apiserver_terminated_watchers_total`) and events replayed to
/// watches as they started (`apiserver_init_events_total`).
async fn watch_counters(admin: &Client) -> BTreeMap<(&'static str, String), f64> {
    const METRICS: [&str; 4] = [
        "apiserver_watch_events_total",
        "apiserver_watch_events_sizes_sum",
        "apiserver_terminated_watchers_total",
        "apiserver_init_events_total",
    ];
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(request).await.unwrap();
    let mut counters = BTreeMap::new();
    for line in text.lines() {
        let Some((metric, rest)) = line.split_once('{') else {
            continue;
        };
        let Some(metric) = METRICS.into_iter().find(|m| *m == metric) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let resource = labels
            .split(',')
            .find_map(|l| l.strip_prefix("resource=\""))
            .map(|r| r.trim_end_matches('"'));
        let (Some(resource @ ("users" | "namespaces" | "rolebindings")), Ok(value)) =
            (resource, value.parse::<f64>())
        else {
            continue;
        };
        *counters.entry((metric, resource.to_owned())).or_default() += value;
    }
    counters
}

/// Prints, between two [`watch_counters`] snapshots, the watch events (and KiB) kube-apiserver
/// sent per User (`count` Users) for Users, Namespaces and RoleBindings (what serving every
/// watcher cost it: the benchmark's User watch, kube-controller-manager's informers, the
/// operator's watches), and how many User watchers it closed for falling behind and how many
/// User events it replayed to watches as they (re)started.
fn print_watch_counters(
    title: &str,
    before: &BTreeMap<(&'static str, String), f64>,
    after: &BTreeMap<(&'static str, String), f64>,
    count: usize,
) {
    let delta = |metric: &'static str, resource: &str| {
        let key = (metric, resource.to_owned());
        after.get(&key).copied().unwrap_or_default() - before.get(&key).copied().unwrap_or_default()
    };
    let per_user = |resource: &str| {
        let count = count as f64;
        format!(
            "{resource} {:.2} ({:.1} KiB)",
            delta("apiserver_watch_events_total", resource) / count,
            delta("apiserver_watch_events_sizes_sum", resource) / 1024.0 / count
        )
    };
    println!(
        "{title}: watch events per User sent by kube-apiserver: {}, {}, {}; User watchers it \
         closed for falling behind: {}, User events it replayed to starting watches: {}",
        per_user("users"),
        per_user("namespaces"),
        per_user("rolebindings"),
        delta("apiserver_terminated_watchers_total", "users"),
        delta("apiserver_init_events_total", "users"),
    );
}

/// Waits for a profile [`profile_apiserver`] started, if it did.
async fn profiled(profile: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = profile {
        task.await.unwrap();
    }
}

/// `HOMESTEAD_BENCH_QUICK=bare`: the bare floor's provisioning alone on a fresh control plane,
/// with its CPU per User.
async fn bare_only(count: usize) {
    let plane = install();
    let admin = plane.client(ADMIN).await.unwrap();
    create_profile(&admin).await;
    println!("{count} Users, {IN_FLIGHT} in flight, one local control plane\n");
    wait_until_the_garbage_collector_knows_users(&admin).await;
    let start = cpu_seconds(plane, None);
    let sent_before = watch_counters(&admin).await;
    let profile = profile_apiserver(&admin, "bare");
    let bare_up = floor_provision(&admin, &admin, count, Floor::BARE).await;
    let end = cpu_seconds(plane, None);
    let sent_after = watch_counters(&admin).await;
    profiled(profile).await;
    println!("bare floor: provisioned in {}", secs(bare_up));
    print_watch_counters("bare floor", &sent_before, &sent_after, count);
    print_cpu(
        "bare floor: CPU while provisioning",
        &start,
        &end,
        count,
        bare_up,
    );
}

// One thread, as the operator runs: the floors' client is then as cheap as a client can be made,
// and Homestead is measured against that, not against a client that spends CPU on tokio's
// worker threads (docs/performance.md).
/// CPU seconds per process, as [`cpu_seconds`] reads them.
type Cpu = BTreeMap<&'static str, f64>;

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

/// The floor's first provisioning and offboarding, before Homestead runs.
#[derive(Default)]
struct FirstFloor {
    /// Create to all Ready.
    up: Duration,
    /// Delete to all gone.
    down: Duration,
    /// CPU before and after its provisioning.
    cpu: (Cpu, Cpu),
    /// From its first create to its last Ready, and from then to its offboarding's end.
    provisioning: (Timestamp, Timestamp),
    offboarding: (Timestamp, Timestamp),
}

/// The floor's provisioning, then (unless `mode.quick`) its offboarding, as `operator` with
/// `floor`'s safety layers.
async fn first_floor(
    plane: &ControlPlane,
    clients: (&Client, &Client),
    count: usize,
    floor: Floor,
    mode: &Mode,
) -> FirstFloor {
    let (admin, operator) = clients;
    let mut run = FirstFloor::default();
    let t0 = Timestamp::now();
    let cpu_start = cpu_seconds(plane, None);
    let sent_before = watch_counters(admin).await;
    let mut profile = None;
    if !mode.quick {
        profile = profile_apiserver(admin, "floor");
        run.up = floor_provision(admin, operator, count, floor).await;
        if floor == Floor::BOUNDED {
            println!("floor: provisioned in {}", secs(run.up));
        } else {
            println!("floor ({floor:?}): provisioned in {}", secs(run.up));
        }
    }
    run.cpu = (cpu_start, cpu_seconds(plane, None));
    let sent_after = watch_counters(admin).await;
    profiled(profile).await;
    if !mode.quick {
        print_watch_counters("floor", &sent_before, &sent_after, count);
    }
    let t1 = Timestamp::now();
    if !mode.quick && !mode.floor_only {
        run.down = floor_offboard(admin, operator, count).await;
        println!("floor: offboarded in {}", secs(run.down));
    }
    run.provisioning = (t0, t1);
    run.offboarding = (t1, Timestamp::now());
    run
}

/// Homestead's provisioning of every User from a freshly started operator.
struct Provisioning {
    /// Start to all caches synced, with no User.
    first_sync: Duration,
    /// RSS with no User, MiB.
    idle_rss: f64,
    /// Cores busy with nothing to do before it.
    background: f64,
    /// Create to all Ready.
    up: Duration,
    /// CPU before and after it.
    cpu: (Cpu, Cpu),
    /// From the first create to the last Event published.
    window: (Timestamp, Timestamp),
}

/// Starts the operator and has it provision `count` Users; prints what it took. Returns the
/// operator, still running, and the figures.
async fn homestead_provisioning(
    plane: &ControlPlane,
    admin: &Client,
    count: usize,
) -> (Operator, Provisioning) {
    let (operator, first_sync) = Operator::start("homestead-bench").await;
    let idle_rss = memory_mib(operator.pid(), "VmRSS");
    let background = background_cpu(plane, Some(operator.pid())).await;
    let cpu_start = cpu_seconds(plane, Some(operator.pid()));
    let t3 = Timestamp::now();
    let reconciles_before = reconciles(&operator.address);
    let sent_before = watch_counters(admin).await;
    let profile = profile_apiserver(admin, "homestead");
    let up = homestead_provision(admin, count).await;
    let cpu_end = cpu_seconds(plane, Some(operator.pid()));
    let sent_after = watch_counters(admin).await;
    println!("homestead: all Ready in {}", secs(up));
    print_watch_counters("homestead", &sent_before, &sent_after, count);
    // Events are published off the reconcile path, with a small share of the API server while
    // provisioning; the requests counted and the CPU printed below include them.
    let lag = events_published(&operator.address).await;
    let t4 = Timestamp::now();
    let cpu_events = cpu_seconds(plane, Some(operator.pid()));
    println!(
        "homestead: every Event published {} after the last User was Ready",
        secs(lag)
    );
    // The reconciles the last writes trigger come after the last User turned Ready.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(lag)).await;
    let reconciled = reconciles(&operator.address) - reconciles_before;
    println!(
        "homestead: {:.2} reconciles per User while provisioning",
        reconciled as f64 / count as f64
    );
    profiled(profile).await;
    after_provisioning(&operator, (&cpu_start, &cpu_events), count, up + lag).await;
    let figures = Provisioning {
        first_sync,
        idle_rss,
        background,
        up,
        cpu: (cpu_start, cpu_end),
        window: (t3, t4),
    };
    (operator, figures)
}

/// What the operator holds once the import is through, without a restart (what the queues, the
/// Recorders' caches and the allocator still hold then), and its CPU until every Event was
/// published (`until` after the first create).
async fn after_provisioning(operator: &Operator, cpu: (&Cpu, &Cpu), count: usize, until: Duration) {
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "homestead: RSS 10 s after the last Event, no restart: {:.1} MiB (peak so far {:.1} MiB)",
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM")
    );
    let title = "homestead: CPU until every Event was published";
    print_cpu(title, cpu.0, cpu.1, count, until);
    settled_memory(operator.pid()).await;
}

/// Homestead after its provisioning: a restart over converged Users, steady state, a forced
/// re-list, a Profile change and its revert, and (per the mode) offboarding.
struct Later {
    /// Peak RSS while provisioning, MiB.
    peak_provisioning: f64,
    /// Restart to all caches synced, with every User.
    restart_sync: Duration,
    /// The steady state after the restart.
    steady: (Timestamp, Timestamp),
    /// RSS and peak RSS in steady state, MiB.
    steady_rss: (f64, f64),
    /// Peak RSS during a re-list and RSS 10 s after it, MiB.
    relist_rss: (f64, f64),
    /// A Profile change: its time to reach every User, and its window.
    rollout: Duration,
    change: (Timestamp, Timestamp),
    /// Delete to all gone, and its window.
    down: Duration,
    offboarding: (Timestamp, Timestamp),
}

/// Runs [`Later`]'s phases with `operator` (stopped at the end).
async fn homestead_later(
    plane: &ControlPlane,
    admin: &Client,
    count: usize,
    operator: Operator,
    offboard: bool,
) -> Later {
    let peak_provisioning = memory_mib(operator.pid(), "VmHWM");
    // A restart over converged Users (the Profile's status counting them all too), then
    // steady state.
    profile_counts(admin, count).await;
    drop(operator);
    let (operator, restart_sync) = Operator::start("homestead-bench-2").await;
    let t5 = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(STEADY_SECONDS)).await;
    let steady = (t5, Timestamp::now());
    let steady_rss = (
        memory_mib(operator.pid(), "VmRSS"),
        memory_mib(operator.pid(), "VmHWM"),
    );
    let relist_rss = relist(plane, &operator).await;
    let (rollout, change) = profile_rollouts(admin, count, &operator).await;
    let t7 = Timestamp::now();
    let mut down = Duration::ZERO;
    if offboard {
        down = homestead_offboard(admin, count).await;
        let lag = events_published(&operator.address).await;
        println!(
            "homestead: offboarded in {} (every Event {} later)",
            secs(down),
            secs(lag)
        );
    }
    Later {
        peak_provisioning,
        restart_sync,
        steady,
        steady_rss,
        relist_rss,
        rollout,
        change,
        down,
        offboarding: (t7, Timestamp::now()),
    }
}

/// A forced re-list: the API server restarts, its watch cache starts over, and every watch of
/// `operator` lists again. Returns its peak RSS during it and its RSS 10 s after, MiB.
async fn relist(plane: &ControlPlane, operator: &Operator) -> (f64, f64) {
    reset_peak(operator.pid());
    let before = Timestamp::now();
    plane.restart_apiserver().await.unwrap();
    wait_relisted(plane, before).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    (
        memory_mib(operator.pid(), "VmHWM"),
        memory_mib(operator.pid(), "VmRSS"),
    )
}

/// A Profile change (a quota added) and its revert; returns the change's time to reach every
/// User and its window (Events included, so the requests counted for it include them).
async fn profile_rollouts(
    admin: &Client,
    count: usize,
    operator: &Operator,
) -> (Duration, (Timestamp, Timestamp)) {
    let from = Timestamp::now();
    let rollout = profile_change(admin, count).await;
    let lag = events_published(&operator.address).await;
    let to = Timestamp::now();
    println!(
        "homestead: a Profile change reached all {count} Users in {} (every Event {} later)",
        secs(rollout),
        secs(lag)
    );
    let reverted = profile_revert(admin, count).await;
    let lag = events_published(&operator.address).await;
    println!(
        "homestead: taking the quota away again reached all {count} Users in {} (every Event {} later)",
        secs(reverted),
        secs(lag)
    );
    (rollout, (from, to))
}

/// The floors after Homestead: the bounded floor again and the bare floor.
#[derive(Default)]
struct Floors {
    /// Cores busy with nothing to do before the floor again.
    background: f64,
    /// The bounded floor again: create to all Ready, and its CPU.
    again: Duration,
    cpu_again: (Cpu, Cpu),
    /// The bare floor: create to all Ready, and its CPU.
    bare: Duration,
    cpu_bare: (Cpu, Cpu),
}

/// The bounded floor again, then the bare floor last, on the control plane as every run left
/// it: its Users would be reconciled by Homestead earlier, and cleaning them up takes the
/// namespace controller as long as an offboarding. So it may be slower than on a fresh control
/// plane, which flatters Homestead's ratio to it; `HOMESTEAD_BENCH_QUICK=bare` measures it on a
/// fresh one.
async fn floors_again(plane: &ControlPlane, clients: (&Client, &Client), count: usize) -> Floors {
    let (admin, operator) = clients;
    let background = background_cpu(plane, None).await;
    let start = cpu_seconds(plane, None);
    let profile = profile_apiserver(admin, "floor-again");
    let again = floor_provision(admin, operator, count, Floor::BOUNDED).await;
    let cpu_again = (start, cpu_seconds(plane, None));
    println!("floor again: provisioned in {}", secs(again));
    profiled(profile).await;
    let start = cpu_seconds(plane, None);
    let bare = floor_provision(admin, operator, count, Floor::BARE).await;
    let cpu_bare = (start, cpu_seconds(plane, None));
    println!("bare floor: provisioned in {}\n", secs(bare));
    Floors {
        background,
        again,
        cpu_again,
        bare,
        cpu_bare,
    }
}

/// The table of times: create to all Ready and offboarding, against the floors.
fn print_times(floor: &FirstFloor, ours: &Provisioning, later: &Later, floors: &Floors) {
    let ratio = |ours: Duration, floor: Duration| ours.as_secs_f64() / floor.as_secs_f64();
    let mean = (floor.up + floors.again) / 2;
    println!("| | floor client before | after | mean | Homestead | ratio to the mean |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| create to all Ready | {} | {} | {} | {} | {:.2}x |",
        secs(floor.up),
        secs(floors.again),
        secs(mean),
        secs(ours.up),
        ratio(ours.up, mean)
    );
    println!(
        "| create to all Ready, bare floor (admin, least objects; run last) | {} | not run | {} | {} | {:.2}x |",
        secs(floors.bare),
        secs(floors.bare),
        secs(ours.up),
        ratio(ours.up, floors.bare)
    );
    println!(
        "| bounded floor (mean) against the bare floor | | | | | {:.2}x |",
        ratio(mean, floors.bare)
    );
    println!(
        "| offboarding (Delete) | {} | not run | {} | {} | {:.2}x |",
        secs(floor.down),
        secs(floor.down),
        secs(later.down),
        ratio(later.down, floor.down)
    );
    println!();
}

/// Requests per User from the audit log `events`: provisioning and offboarding against the
/// floor's, and a Profile change.
fn print_all_requests(
    events: &[Request],
    floor: &FirstFloor,
    ours: &Provisioning,
    later: &Later,
    count: usize,
) {
    println!("requests per User while provisioning (audit log):");
    print_requests(
        &requests(events, "floor", floor.provisioning),
        &requests(events, "homestead", ours.window),
        count,
    );
    println!("requests per User while offboarding (audit log):");
    print_requests(
        &requests(events, "floor", floor.offboarding),
        &requests(events, "homestead", later.offboarding),
        count,
    );
    println!(
        "requests per User for a Profile change (a quota added), {} in all:",
        secs(later.rollout)
    );
    let change = requests(events, "homestead", later.change);
    for (k, n) in &change {
        println!("  {k:<36} {:>8.2}", *n as f64 / count as f64);
    }
    println!(
        "  {:<36} {:>8.2}",
        "total per User",
        change.values().sum::<usize>() as f64 / count as f64
    );
}

/// CPU per User of each side's provisioning (the floors' unless `quick`, when they did not
/// run), and the cores busy with nothing to do before each.
fn print_all_cpu(
    (floor, floors): (&FirstFloor, &Floors),
    ours: &Provisioning,
    (background, quick): (f64, bool),
    count: usize,
) {
    if !quick {
        let (start, end) = &floor.cpu;
        print_cpu("floor: CPU while provisioning", start, end, count, floor.up);
        let (start, end) = &floors.cpu_again;
        let title = "floor again: CPU while provisioning";
        print_cpu(title, start, end, count, floors.again);
        let (start, end) = &floors.cpu_bare;
        let title = "bare floor: CPU while provisioning";
        print_cpu(title, start, end, count, floors.bare);
    }
    let (start, end) = &ours.cpu;
    print_cpu(
        "homestead: CPU while provisioning",
        start,
        end,
        count,
        ours.up,
    );
    println!(
        "cores busy with nothing to do, before the floor: {background:.2}; before Homestead: {:.2}; before the floor again: {:.2}",
        ours.background, floors.background
    );
}

/// The operator's own figures: requests about no one User, time to sync, writes in steady
/// state, memory.
fn print_operator(events: &[Request], ours: &Provisioning, later: &Later, count: usize) {
    println!("operator requests about no one User while provisioning (watches, lists, Leases):");
    for (k, n) in operator_overhead(events, ours.window) {
        println!("  {k:<36} {n:>8}");
    }
    println!();
    println!(
        "operator start to all caches synced: {} (no Users), {} ({count} Users, after a restart)",
        secs(ours.first_sync),
        secs(later.restart_sync)
    );
    let steady_writes = operator_writes(events, later.steady);
    println!(
        "operator writes in {STEADY_SECONDS} s of steady state after that restart: {} (Lease renewals excluded){}",
        steady_writes.len(),
        if steady_writes.is_empty() {
            String::new()
        } else {
            format!(": {}", steady_writes.join(", "))
        }
    );
    let ((steady, steady_peak), (relist_peak, relist_after)) = (later.steady_rss, later.relist_rss);
    println!(
        "operator RSS with no User:              {:.1} MiB",
        ours.idle_rss
    );
    println!(
        "operator peak RSS while provisioning:   {:.1} MiB",
        later.peak_provisioning
    );
    println!(
        "operator RSS in steady state:           {steady:.1} MiB (peak since restart {steady_peak:.1} MiB)"
    );
    println!(
        "operator peak RSS during a re-list:     {relist_peak:.1} MiB ({:.2}x steady; {relist_after:.1} MiB 10 s after)",
        relist_peak / steady
    );
}

/// The full run, or the part `HOMESTEAD_BENCH_QUICK` asks for ([`Mode`]), of
/// `HOMESTEAD_BENCH_USERS` (default 1000) Users.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let count: usize = std::env::var("HOMESTEAD_BENCH_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
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
    let (operator, ours) = homestead_provisioning(plane, &admin, count).await;
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
