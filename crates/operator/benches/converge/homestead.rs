//! Homestead's side: the operator process, its provisioning and offboarding, and what follows
//! them (a restart, steady state, a forced re-list, a Profile change).

use super::*;

/// Waits until the operator serving `metrics_address` has no Event queued
/// (`homestead_events_pending` is 0); returns how long that took.
pub(crate) async fn events_published(metrics_address: &str) -> Duration {
    let started = Instant::now();
    while metric(metrics_address, "homestead_events_pending") != Some(0.0) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// The value of the unlabelled metric `name` of the operator serving `metrics_address`.
pub(crate) fn metric(metrics_address: &str, name: &str) -> Option<f64> {
    let (_, body) = common::http_get(metrics_address, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Homestead: creates `count` Users and returns the time until all are `Ready=True`.
pub(crate) async fn homestead_provision(client: &Client, count: usize) -> Duration {
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
pub(crate) async fn homestead_offboard(client: &Client, count: usize) -> Duration {
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

/// Homestead's provisioning of every User from a freshly started operator.
pub(crate) struct Provisioning {
    /// Start to all caches synced, with no User.
    pub(crate) first_sync: Duration,
    /// RSS with no User, MiB.
    pub(crate) idle_rss: f64,
    /// Cores busy with nothing to do before it.
    pub(crate) background: f64,
    /// Create to all Ready.
    pub(crate) up: Duration,
    /// CPU before and after it.
    pub(crate) cpu: (Cpu, Cpu),
    /// From the first create to the last Event published.
    pub(crate) window: (Timestamp, Timestamp),
}

/// Starts the operator and has it provision `count` Users; prints what it took. Returns the
/// operator, still running, and the figures.
pub(crate) async fn homestead_provisioning(
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
pub(crate) async fn after_provisioning(
    operator: &Operator,
    cpu: (&Cpu, &Cpu),
    count: usize,
    until: Duration,
) {
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
pub(crate) struct Later {
    /// Peak RSS while provisioning, MiB.
    pub(crate) peak_provisioning: f64,
    /// Restart to all caches synced, with every User.
    pub(crate) restart_sync: Duration,
    /// The steady state after the restart.
    pub(crate) steady: (Timestamp, Timestamp),
    /// RSS and peak RSS in steady state, MiB.
    pub(crate) steady_rss: (f64, f64),
    /// Peak RSS during a re-list and RSS 10 s after it, MiB.
    pub(crate) relist_rss: (f64, f64),
    /// A Profile change: its time to reach every User, and its window.
    pub(crate) rollout: Duration,
    pub(crate) change: (Timestamp, Timestamp),
    /// Delete to all gone, and its window.
    pub(crate) down: Duration,
    pub(crate) offboarding: (Timestamp, Timestamp),
}

/// Runs [`Later`]'s phases with `operator` (stopped at the end).
pub(crate) async fn homestead_later(
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
pub(crate) async fn relist(plane: &ControlPlane, operator: &Operator) -> (f64, f64) {
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
pub(crate) async fn profile_rollouts(
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
