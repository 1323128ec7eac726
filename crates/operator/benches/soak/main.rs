//! `just soak [SECONDS] [SEED]`: an adversarial soak. On the real local control plane, with two
//! operator replicas and the SCIM service running, a seeded random workload of HR, the identity
//! provider (SCIM), tenants with their own tokens, the platform and faults runs for SECONDS
//! (default 600), while an oracle checks Homestead's promises every second; every 90 s (and at
//! the end) the workload pauses until the cluster is quiescent, and the oracle checks that it
//! equals what the workload's own log asks for and that the operator then makes no write.
//!
//! Each violation is written to `<target>/soak/` as a reproduction (the seed, the operations,
//! the quiescent point before it, the violation and the observed state);
//! `just soak-replay FILE` replays one. The last line is the summary:
//! `seed S: N operations, M faults, K violations`. Exits 1 if there was a violation.
//!
//! docs/soak.md lists the checks and the sentences of docs/security.md and docs/design.md they
//! stand for.

#[path = "../../tests/common/mod.rs"]
mod common;
mod faults;
mod model;
mod oracle;
mod totals;
mod workload;
mod workspaces;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homestead_testenv::{ADMIN, ControlPlane, Identity};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use faults::{Faults, Replica};
use model::{Clock, Model};
use oracle::{Audit, Oracle, Snapshot, Violation};
use workload::{Actors, DIRECTORY_PROFILE, GROUP_NAME, HR_PROFILES, Op, Outcome};

/// Seconds between quiescent points.
const QUIESCE_EVERY: f64 = 90.0;
/// How long the cluster must be converged with no operator write before a quiescent point, in
/// seconds.
const QUIET: f64 = 10.0;
/// How long the operator must make no write once the cluster is quiescent, in seconds.
const IDLE_WINDOW: u64 = 10;

/// One logged operation: when it started (seconds since the soak began), what, and how it came
/// out.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Logged {
    t: f64,
    op: Op,
    outcome: Option<Outcome>,
}

/// A reproduction: everything `just soak-replay` needs, and what was seen.
#[derive(Serialize, Deserialize)]
struct Reproduction {
    seed: u64,
    /// Index into `ops` of the first operation after the last quiescent point.
    quiescent_at: usize,
    ops: Vec<Logged>,
    /// The violation, or none for the log of a whole run.
    violation: Option<Violation>,
    observed: serde_json::Value,
}

fn plane() -> &'static ControlPlane {
    ControlPlane::shared(|o| {
        let o = homestead_api::crds()
            .into_iter()
            .fold(o, |o, crd| o.crd(crd));
        common::TENANTS
            .iter()
            .fold(o, |o, t| {
                o.identity(Identity::new(*t).in_group(common::TENANT_GROUP))
            })
            .identity(Identity::new(common::HR).in_group(common::HR_GROUP))
    })
}

/// Everything the soak shares between the workload, the oracle and the report.
struct Soak {
    seed: u64,
    clock: Clock,
    model: Arc<Mutex<Model>>,
    actors: Actors,
    log: Mutex<Vec<Logged>>,
    quiescent_at: Mutex<usize>,
    violations: Mutex<Vec<(Violation, Option<PathBuf>)>>,
    out_dir: PathBuf,
    peak_rss: Mutex<BTreeMap<String, u64>>,
    checkpoints: Mutex<u32>,
}

#[tokio::main]
async fn main() {
    let number = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok());
    let replay: Option<Reproduction> = std::env::var("HOMESTEAD_SOAK_REPLAY").ok().map(|path| {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    });
    let seconds = number("HOMESTEAD_SOAK_SECONDS").unwrap_or(600);
    let seed = replay
        .as_ref()
        .map(|r| r.seed)
        .or_else(|| number("HOMESTEAD_SOAK_SEED"))
        .unwrap_or_else(|| fastrand::u64(..1_000_000));
    let soak = Arc::new(setup(seed).await);
    let oracle = tokio::spawn(watch(soak.clone()));
    match replay {
        Some(r) => replay_ops(&soak, r).await,
        None => run(&soak, seconds).await,
    }
    quiesce(&soak).await;
    oracle.abort();
    report(&soak);
}

/// Starts the control plane, two operator replicas and the SCIM service, binds HR, creates the
/// soak's Profiles and the SCIM group.
async fn setup(seed: u64) -> Soak {
    let plane = plane();
    let env = common::env();
    let admin = plane.client(ADMIN).await.unwrap();
    let hr = common::hr().await;
    let mut tenants = Vec::new();
    for t in common::TENANTS {
        tenants.push(plane.client(t).await.unwrap());
    }
    let scim: &'static common::ScimService =
        Box::leak(Box::new(common::spawn_scim("scim-soak", &[])));
    let replicas = replicas(env).await;
    let clock = Clock::new();
    let model = profiles(&admin).await;
    ballast_groups(&admin).await;
    let model = Arc::new(Mutex::new(model));
    let faults = Arc::new(Faults {
        plane,
        replicas,
        admin: admin.clone(),
    });
    let actors = Actors::new(admin, hr, tenants, scim, model.clone(), clock, faults);
    let out_dir = PathBuf::from(
        std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_owned()),
    )
    .join("soak");
    std::fs::create_dir_all(&out_dir).unwrap();
    println!(
        "soak seed {seed}: control plane in {}",
        plane.dir().display()
    );
    Soak {
        seed,
        clock,
        model,
        actors,
        log: Mutex::default(),
        quiescent_at: Mutex::new(0),
        violations: Mutex::default(),
        out_dir,
        peak_rss: Mutex::default(),
        checkpoints: Mutex::new(0),
    }
}

/// The two operator replicas: the tests' operator and a standby (leader election on both).
async fn replicas(env: &'static common::Env) -> Vec<Replica> {
    let standby_address = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let standby: &'static Mutex<_> = Box::leak(Box::new(Mutex::new(
        common::spawn_standby(&standby_address).await,
    )));
    let replicas = vec![
        Replica {
            name: "homestead",
            pod: Mutex::new("homestead-test".into()),
            address: env.metrics_address.clone(),
            process: &env.operator,
            restarts: Mutex::new(0),
            in_fault: false.into(),
        },
        Replica {
            name: "homestead-standby",
            pod: Mutex::new("homestead-standby".into()),
            address: standby_address,
            process: standby,
            restarts: Mutex::new(0),
            in_fault: false.into(),
        },
    ];
    replicas
}

/// Creates the soak's Profiles (two HR may name, one directory groups choose) and the model
/// that knows their roles.
async fn profiles(admin: &kube::Client) -> Model {
    let mut model = Model::default();
    for (name, spec) in [
        (
            HR_PROFILES[0],
            json!({ "role": "admin", "networkIsolation": "None", "userOverrides": ["role"],
                    "workspaces": { "selfService": true, "max": workspaces::SELF_SERVICE_MAX },
                    "totalQuota": totals::total_quota() }),
        ),
        (
            HR_PROFILES[1],
            json!({ "role": "edit", "networkIsolation": "Isolated", "userOverrides": ["role"],
                    "totalQuota": totals::total_quota() }),
        ),
        (
            DIRECTORY_PROFILE,
            json!({ "role": "edit", "directory": { "groups": [GROUP_NAME] },
                    "totalQuota": totals::total_quota() }),
        ),
    ] {
        common::profile(admin, name, spec.clone()).await;
        model
            .profiles
            .insert(name.to_owned(), spec["role"].as_str().unwrap().to_owned());
    }
    model
}

/// How many large DirectoryGroups the soak keeps beside its own (`HOMESTEAD_SOAK_BALLAST_GROUPS`,
/// default 10), and how many member names each lists: enough that their first list after an
/// operator starts comes well after the Users', so every restart (the `restart-all` fault above
/// all) tries readiness from the one list of caches (docs/design.md, rule 29).
const BALLAST_MEMBERS: usize = 8_000;

/// Creates the ballast groups: names no User has, so they choose nothing for anyone.
async fn ballast_groups(admin: &kube::Client) {
    let count = std::env::var("HOMESTEAD_SOAK_BALLAST_GROUPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(10);
    let api: kube::Api<homestead_api::DirectoryGroup> = kube::Api::all(admin.clone());
    for g in 0..count {
        let name = format!("soak-ballast-{g}");
        let members: Vec<String> = (0..BALLAST_MEMBERS)
            .map(|i| format!("ballast-{g}-{i:05}"))
            .collect();
        let group: homestead_api::DirectoryGroup = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
            "metadata": { "name": name },
            "spec": { "displayName": name, "members": members },
        }))
        .expect("a valid DirectoryGroup");
        let _ = api
            .patch(
                &name,
                &kube::api::PatchParams::apply("soak").force(),
                &kube::api::Patch::Apply(&group),
            )
            .await
            .expect("a ballast group");
    }
}

/// The oracle, every second until aborted.
async fn watch(soak: Arc<Soak>) {
    let admin = soak.actors.admin.clone();
    let mut oracle = Oracle::new(admin, soak.clock, plane().dir().join("audit.log"));
    loop {
        let started = std::time::Instant::now();
        oracle.observe_lease(&soak.model).await;
        let before = soak.model.lock().unwrap().clone();
        if let Ok(snap) = oracle.snapshot().await {
            forget_gone(&soak.model, &snap);
            let found = oracle.check(&snap, &before, &soak.model).await;
            let broken: Vec<String> = std::mem::take(&mut *soak.actors.broken.lock().unwrap());
            let at = soak.clock.now();
            let found = found
                .into_iter()
                .chain(broken.into_iter().enumerate().map(|(i, b)| {
                    let (check, detail) = b.split_once(": ").unwrap_or(("workload", &b));
                    Violation {
                        check: check.to_owned(),
                        key: format!("{check} {at:.3} {i}"),
                        at,
                        detail: detail.to_owned(),
                    }
                }));
            for v in found {
                record(&soak, v, &snap);
            }
            let mut delays = soak_delays().lock().unwrap();
            delays.append(&mut oracle.delays.revocations);
        }
        for replica in &soak.actors.faults.replicas {
            if replica.restart_if_exited() {
                println!(
                    "operator replica {} exited at {:.1} s; started again",
                    replica.name,
                    soak.clock.now()
                );
            }
        }
        for (pod, bytes) in soak.actors.faults.peak_rss() {
            let mut peak = soak.peak_rss.lock().unwrap();
            let entry = peak.entry(pod).or_default();
            *entry = (*entry).max(bytes);
        }
        let rest = Duration::from_secs(1).saturating_sub(started.elapsed());
        tokio::time::sleep(rest).await;
    }
}

/// Revocation delays measured by the oracle, in seconds.
fn soak_delays() -> &'static Mutex<Vec<f64>> {
    static DELAYS: std::sync::OnceLock<Mutex<Vec<f64>>> = std::sync::OnceLock::new();
    DELAYS.get_or_init(Mutex::default)
}

/// Drops from the model the Users whose deletion finished: their names may be used again.
fn forget_gone(model: &Mutex<Model>, snap: &Snapshot) {
    let present: std::collections::BTreeSet<String> =
        snap.users.iter().map(|u| u.name_any()).collect();
    let mut model = model.lock().unwrap();
    let unsettled: std::collections::BTreeSet<String> = model
        .users
        .keys()
        .filter(|name| model.unsettled(name, snap.at))
        .cloned()
        .collect();
    model.users.retain(|name, u| {
        // An operation on it since the snapshot began may have made it again.
        let keep = u.deleting_at.is_none_or(|d| d > snap.at)
            || present.contains(name)
            || unsettled.contains(name);
        if !keep && std::env::var_os("HOMESTEAD_SOAK_DEBUG").is_some() {
            eprintln!("forgetting {name} (snapshot at {:.1}): {u:?}", snap.at);
        }
        keep
    });
}

/// Prints a violation and writes its reproduction.
fn record(soak: &Soak, violation: Violation, snap: &Snapshot) {
    let ops = soak.log.lock().unwrap().clone();
    let quiescent_at = *soak.quiescent_at.lock().unwrap();
    let model: Vec<serde_json::Value> = soak
        .model
        .lock()
        .unwrap()
        .users
        .iter()
        .map(|(name, u)| json!({ "name": name, "model": format!("{u:?}") }))
        .collect();
    let observed = json!({
        "model": model,
        "users": snap.users.iter().map(|u| json!({
            "name": u.name_any(), "spec": u.spec, "status": u.status,
            "deleting": u.metadata.deletion_timestamp.is_some(),
        })).collect::<Vec<_>>(),
        "roleBindings": snap.bindings.iter().filter(|b| b.namespace().is_some_and(|n| n.starts_with("user-"))).map(|b| json!({
            "namespace": b.namespace(), "name": b.name_any(), "role": b.role_ref.name,
            "subjects": b.subjects.iter().flatten().map(|s| s.name.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "namespaces": snap.namespaces.values().filter(|n| n.name_any().starts_with("user-")).map(|n| json!({
            "name": n.name_any(), "labels": n.labels(), "deleting": n.metadata.deletion_timestamp.is_some(),
        })).collect::<Vec<_>>(),
    });
    let n = soak.violations.lock().unwrap().len();
    let path = soak
        .out_dir
        .join(format!("violation-{}-{n}.json", soak.seed));
    let reproduction = Reproduction {
        seed: soak.seed,
        quiescent_at,
        ops,
        violation: Some(violation.clone()),
        observed,
    };
    let written = std::fs::write(&path, serde_json::to_vec_pretty(&reproduction).unwrap()).is_ok();
    println!(
        "VIOLATION {} at {:.1} s: {} (reproduction: {})",
        violation.check,
        violation.at,
        violation.detail,
        path.display()
    );
    soak.violations
        .lock()
        .unwrap()
        .push((violation, written.then_some(path)));
}

/// Carries out `op` now and logs it.
async fn step(soak: &Soak, op: Op) {
    let t = soak.clock.now();
    let index = {
        let mut log = soak.log.lock().unwrap();
        log.push(Logged {
            t,
            op: op.clone(),
            outcome: None,
        });
        log.len() - 1
    };
    let outcome = soak.actors.execute(&op).await;
    soak.log.lock().unwrap()[index].outcome = Some(outcome);
}

/// The seeded workload for `seconds`, pausing for a quiescent point every [`QUIESCE_EVERY`].
async fn run(soak: &Soak, seconds: u64) {
    let mut rng = fastrand::Rng::with_seed(soak.seed);
    let end = seconds as f64;
    let mut next_quiet = QUIESCE_EVERY;
    let mut last_fault = -20.0;
    // HOMESTEAD_SOAK_FIRST: stop at the first violation (to measure how soon one is found).
    let first_only = std::env::var_os("HOMESTEAD_SOAK_FIRST").is_some();
    while soak.clock.now() < end {
        if first_only && !soak.violations.lock().unwrap().is_empty() {
            break;
        }
        if soak.clock.now() >= next_quiet && end - soak.clock.now() > 30.0 {
            quiesce(soak).await;
            next_quiet = soak.clock.now() + QUIESCE_EVERY;
        }
        let fault_ok = {
            let model = soak.model.lock().unwrap();
            !model.faulty() && soak.clock.now() - last_fault > 20.0
        };
        let op = {
            let model = soak.model.lock().unwrap();
            workload::generate(&mut rng, &model, fault_ok)
        };
        if matches!(op, Op::Fault { .. }) {
            last_fault = soak.clock.now();
        }
        step(soak, op).await;
        Actors::pause(rng.u64(50..400)).await;
    }
}

/// Replays a reproduction: the operations before its quiescent point at once, then a
/// quiescent point, then the rest at their recorded pace.
async fn replay_ops(soak: &Soak, r: Reproduction) {
    println!(
        "replaying {} operations, {} of them after the quiescent point",
        r.ops.len(),
        r.ops.len() - r.quiescent_at
    );
    let (before, after) = r.ops.split_at(r.quiescent_at);
    for logged in before {
        step(soak, logged.op.clone()).await;
    }
    quiesce(soak).await;
    let (start, origin) = (soak.clock.now(), after.first().map_or(0.0, |l| l.t));
    for logged in after {
        let due = start + (logged.t - origin);
        let wait = due - soak.clock.now();
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        step(soak, logged.op.clone()).await;
    }
    if let Some(v) = &r.violation {
        println!(
            "replayed; the violation recorded was: {}: {}",
            v.check, v.detail
        );
    }
}

/// Waits until the cluster is quiescent (faults healed, pending expiries passed, offboardings
/// finished, every User current), checks `converged`, then that the operator makes no write for
/// [`IDLE_WINDOW`] seconds; marks a quiescent point.
async fn quiesce(soak: &Soak) {
    let started = soak.clock.now();
    let oracle = Oracle::new(soak.actors.admin.clone(), soak.clock, PathBuf::new());
    wait_until_quiet(soak, &oracle, started).await;
    let writes = idle_writes(soak, &oracle, started).await;
    *soak.quiescent_at.lock().unwrap() = soak.log.lock().unwrap().len();
    *soak.checkpoints.lock().unwrap() += 1;
    println!(
        "quiescent point {} at {:.0} s (waited {:.0} s): converged, {} operator writes in {IDLE_WINDOW} s",
        soak.checkpoints.lock().unwrap(),
        soak.clock.now(),
        soak.clock.now() - started,
        writes
    );
}

/// Waits until the cluster equals the model and the operator made no write (its Lease aside)
/// for [`QUIET`] seconds; records a `converges-after-quiescence` violation and gives up after
/// 150 s (`started`: when the quiescent point began).
async fn wait_until_quiet(soak: &Soak, oracle: &Oracle, started: f64) {
    let mut last = Vec::new();
    let mut settled_since: Option<f64> = None;
    // Quiet means converged and no operator write (its Lease aside) for [`QUIET`] seconds: a
    // Profile's or group's status may still be catching up after the Users are (a write that
    // failed during a fault is retried with backoff).
    let mut recent = Audit::new(plane().dir().join("audit.log"));
    recent.skip_to_end();
    loop {
        let now = soak.clock.now();
        recent.read();
        let writing = recent
            .operator_writes
            .drain(..)
            .any(|(resource, ..)| resource != "leases");
        let (faulty, expiring) = {
            let model = soak.model.lock().unwrap();
            let expiring = model
                .users
                .values()
                .any(|u| u.valid_until.is_some_and(|v| v > now - 1.0));
            (model.faulty(), expiring)
        };
        let snap = oracle.snapshot().await;
        // A Share that has not yet expired (tenants share for 2-60 s) will write its expiry.
        let since =
            k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
        let sharing = snap
            .as_ref()
            .is_ok_and(|snap| snap.shares.iter().any(|s| s.spec.expires_at.0 > since));
        let quiet = match (&snap, faulty || expiring || sharing) {
            (Ok(snap), false) => {
                last = differences(snap, &soak.model.lock().unwrap().clone());
                last.is_empty()
            }
            _ => false,
        };
        settled_since = if quiet && !writing {
            settled_since.or(Some(now))
        } else {
            None
        };
        if settled_since.is_some_and(|s| now - s >= QUIET) {
            break;
        }
        if now - started > 150.0 {
            let detail = format!("not quiescent after 150 s: {}", last.join("; "));
            if let Ok(snap) = snap {
                record(
                    soak,
                    Violation {
                        check: "converges-after-quiescence".into(),
                        key: format!("quiesce {started:.0}"),
                        at: now,
                        detail,
                    },
                    &snap,
                );
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How the cluster (`snap`) differs from `model`: [`Oracle::converged`]'s differences, and every
/// namespace still there after its User's Delete offboarding.
fn differences(snap: &Snapshot, model: &Model) -> Vec<String> {
    let mut last = Oracle::converged(snap, model);
    for o in &model.offboarded {
        let there = snap
            .namespaces
            .get(&o.namespace)
            .is_some_and(|n| o.uid.is_some() && n.uid() == o.uid);
        if there && !o.retain {
            last.push(format!(
                "{} is still there after its User's Delete offboarding",
                o.namespace
            ));
        }
    }
    last
}

/// Once quiet, watches the audit log for [`IDLE_WINDOW`] seconds: an operator write then (its
/// Lease aside) is a `steady-state-costs-nothing` violation. Returns how many there were.
async fn idle_writes(soak: &Soak, oracle: &Oracle, started: f64) -> usize {
    // No write once quiet: Events queued before are published first (a second).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let path = plane().dir().join("audit.log");
    let mut audit = Audit::new(path.clone());
    audit.skip_to_end();
    tokio::time::sleep(Duration::from_secs(IDLE_WINDOW)).await;
    audit.read();
    let writes: Vec<String> = audit
        .operator_writes
        .iter()
        .filter(|(resource, ..)| resource != "leases")
        .map(|(resource, ns, name, verb)| format!("{verb} {resource} {ns}/{name}"))
        .collect();
    if !writes.is_empty()
        && let Ok(snap) = oracle.snapshot().await
    {
        record(
            soak,
            Violation {
                check: "steady-state-costs-nothing".into(),
                key: format!("idle {started:.0}"),
                at: soak.clock.now(),
                detail: format!(
                    "{} operator writes in {IDLE_WINDOW} s of quiet: {}",
                    writes.len(),
                    writes.join(", ")
                ),
            },
            &snap,
        );
    }
    writes.len()
}

/// Prints the figures, then the one-line summary.
fn report(soak: &Soak) {
    let log = soak.log.lock().unwrap();
    let mut by_actor: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for l in log.iter() {
        let e = by_actor.entry(l.op.actor()).or_default();
        e.0 += 1;
        e.1 += usize::from(l.outcome.as_ref().is_some_and(|o| o.ok));
    }
    println!("operations by actor (accepted):");
    for (actor, (n, ok)) in &by_actor {
        println!("  {actor}: {n} ({ok})");
    }
    let model = soak.model.lock().unwrap();
    print_figures(soak, &model);
    println!("quiescent points: {}", soak.checkpoints.lock().unwrap());
    let violations = soak.violations.lock().unwrap();
    let paths: Vec<String> = violations
        .iter()
        .filter_map(|(_, p)| p.as_ref().map(|p| p.display().to_string()))
        .collect();
    let faults = log
        .iter()
        .filter(|l| matches!(l.op, Op::Fault { .. }))
        .count();
    // The whole run's log, replayable like a reproduction.
    let run_log = soak.out_dir.join(format!("run-{}.json", soak.seed));
    let whole = Reproduction {
        seed: soak.seed,
        quiescent_at: 0,
        ops: log.clone(),
        violation: None,
        observed: serde_json::Value::Null,
    };
    if std::fs::write(&run_log, serde_json::to_vec_pretty(&whole).unwrap()).is_ok() {
        println!("the run's operations: {}", run_log.display());
    }
    println!(
        "seed {}: {} operations, {faults} faults, {} violations{}",
        soak.seed,
        log.len(),
        violations.len(),
        if paths.is_empty() {
            String::new()
        } else {
            format!(" ({})", paths.join(", "))
        }
    );
    let failed = !violations.is_empty();
    drop(violations);
    drop(log);
    drop(model);
    std::process::exit(i32::from(failed));
}

/// The run's figures: the faults, how long revocations took, the replicas' memory and restarts.
fn print_figures(soak: &Soak, model: &Model) {
    println!("faults:");
    for f in &model.faults {
        println!(
            "  at {:.0} s: {} (healed after {:.1} s)",
            f.start,
            f.what,
            f.healed.map_or(f64::NAN, |h| h - f.start)
        );
    }
    let mut delays = soak_delays().lock().unwrap().clone();
    delays.sort_by(f64::total_cmp);
    let at = |q: f64| {
        delays
            .get(((delays.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "revocations observed complete: {} (seconds from the accepted change: median {:.1}, p99 {:.1}, max {:.1}; the oracle looks every second)",
        delays.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    for r in &soak.actors.faults.replicas {
        println!(
            "operator replica {}: peak RSS {:.1} MiB, restarted {} times",
            r.name,
            soak.peak_rss
                .lock()
                .unwrap()
                .get(r.name)
                .copied()
                .unwrap_or(0) as f64
                / 1048576.0,
            r.restarts.lock().unwrap()
        );
    }
}
