//! What the benchmark measures with: CPU and memory from /proc, the audit log's requests, the API
//! server's watch counters, and its CPU profiles.

use super::*;

// One thread, as the operator runs: the floors' client is then as cheap as a client can be made,
// and Homestead is measured against that, not against a client that spends CPU on tokio's
// worker threads (docs/performance.md).
/// CPU seconds per process, as [`cpu_seconds`] reads them.
pub(crate) type Cpu = BTreeMap<&'static str, f64>;

/// CPU time (user and system) of the control-plane processes of `plane`, of the operator
/// under benchmark (`operator`, its pid, while one runs) and of this benchmark process, in
/// seconds, by process name. Nothing else counts, an operator of `just up` included.
pub(crate) fn cpu_seconds(
    plane: &ControlPlane,
    operator: Option<u32>,
) -> BTreeMap<&'static str, f64> {
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
pub(crate) fn print_cpu(
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
pub(crate) async fn background_cpu(plane: &ControlPlane, operator: Option<u32>) -> f64 {
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
pub(crate) async fn settled_memory(pid: u32) {
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
pub(crate) fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// One request from the audit log, as far as the benchmark needs it.
pub(crate) struct Request {
    /// When the API server received it.
    pub(crate) at: Timestamp,
    /// Who made it: the operator, or the admin (the floor client and the benchmark itself).
    pub(crate) by_operator: bool,
    /// `verb resource[/subresource]`.
    pub(crate) kind: String,
    /// The benchmark User it concerns (`floor-00042`): the User, its Namespace or anything in
    /// it, or an Event about it.
    pub(crate) user: Option<String>,
    /// Whether it writes (create, update, patch, delete).
    pub(crate) write: bool,
    /// Whether it is about a Lease.
    pub(crate) lease: bool,
}

/// The completed requests of the operator and the admin in the audit log, read line by line
/// (kube-controller-manager's, the bulk of a namespace deletion, are skipped).
pub(crate) fn audit_log(plane: &ControlPlane) -> Vec<Request> {
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
pub(crate) const SUMMARY: &str = "*";

/// The benchmark User an audit event concerns (`floor-00042`), if any.
pub(crate) fn concerned_user(event: &Value) -> Option<String> {
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
pub(crate) fn request_kind(event: &Value) -> String {
    let r = &event["objectRef"];
    let verb = event["verb"].as_str().unwrap_or("?");
    let resource = r["resource"].as_str().unwrap_or("?");
    match r["subresource"].as_str() {
        Some(sub) => format!("{verb} {resource}/{sub}"),
        None => format!("{verb} {resource}"),
    }
}

/// Requests about `run`'s Users between `from` and `to`, by `verb resource`.
pub(crate) fn requests(
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
pub(crate) fn operator_overhead(
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
pub(crate) fn operator_writes(log: &[Request], (from, to): (Timestamp, Timestamp)) -> Vec<String> {
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
pub(crate) fn print_requests(
    floor: &BTreeMap<String, usize>,
    ours: &BTreeMap<String, usize>,
    count: usize,
) {
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

/// Waits until the operator has listed Users, Namespaces and RoleBindings again after `since`:
/// paged (a `list`), or streamed (a `watch` with `sendInitialEvents=true`, audited when its
/// response starts; docs/performance.md, "Memory").
pub(crate) async fn wait_relisted(plane: &ControlPlane, since: Timestamp) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let relisted = relisted_since(plane, since);
        if ["users", "namespaces", "rolebindings"]
            .iter()
            .all(|r| relisted.contains(*r))
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

/// The resources the operator listed after `since`, paged or streamed, from the audit log.
fn relisted_since(plane: &ControlPlane, since: Timestamp) -> HashSet<String> {
    crate::share_phases::operator_requests(plane, since, Timestamp::now())
        .filter(|e| {
            let uri = e["requestURI"].as_str().unwrap_or_default();
            match (e["verb"].as_str(), e["stage"].as_str()) {
                (Some("list"), Some("ResponseComplete")) => true,
                (Some("watch"), Some("ResponseStarted")) => uri.contains("sendInitialEvents=true"),
                _ => false,
            }
        })
        .filter_map(|e| e["objectRef"]["resource"].as_str().map(str::to_owned))
        .collect()
}

pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// How long after a provisioning phase starts its kube-apiserver CPU profile starts: past the
/// first seconds, sized for 10,000 Users, whose phases take 90 to 160 s.
pub(crate) const PPROF_DELAY: Duration = Duration::from_secs(15);

/// How long a kube-apiserver CPU profile samples, in seconds (within a 10,000-User phase).
pub(crate) const PPROF_SECONDS: u64 = 60;

/// With `HOMESTEAD_BENCH_PPROF=DIR`, starts a CPU profile of kube-apiserver
/// (`/debug/pprof/profile`, Go's pprof format) over [`PPROF_SECONDS`] seconds from
/// [`PPROF_DELAY`] after now, written to `DIR/<phase>.pprof`; await the handle before the
/// next phase starts. Without it, `None`.
pub(crate) fn profile_apiserver(
    admin: &Client,
    phase: &'static str,
) -> Option<tokio::task::JoinHandle<()>> {
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
pub(crate) async fn watch_counters(admin: &Client) -> BTreeMap<(&'static str, String), f64> {
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
pub(crate) fn print_watch_counters(
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
pub(crate) async fn profiled(profile: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = profile {
        task.await.unwrap();
    }
}
