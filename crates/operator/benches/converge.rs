//! `just bench`: how fast the operator provisions a bulk HR import, what it costs the API
//! server, and what it holds in memory, on the real local control plane.
//!
//! Creates `HOMESTEAD_BENCH_USERS` Users (default 500) at once, then reports: seconds until all
//! are `Ready=True` and Users per second; the operator's write requests (from the audit log) per
//! User; writes during 10 s of steady state afterwards (leases excluded; expected 0); and the
//! operator's peak resident memory (VmHWM) in MiB. Figures, not assertions: compare runs.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use homestead_api::User;
use homestead_testenv::{ADMIN, ControlPlane, OPERATOR, Options, free_port};
use kube::CustomResourceExt;
use kube::api::{Api, ListParams, PostParams};

fn operator_writes(plane: &ControlPlane) -> Vec<String> {
    plane
        .audit_events()
        .unwrap()
        .into_iter()
        .filter(|e| e["user"]["username"] == OPERATOR)
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "patch" | "update" | "delete")
            )
        })
        .map(|e| {
            e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .filter(|r| r != "leases")
        .collect()
}

/// Peak resident set of the process whose command line mentions `needle`, in KiB.
fn peak_rss_kib(needle: &str) -> Option<u64> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .find_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            if !cmdline.contains(needle) || cmdline.starts_with("bash") {
                return None;
            }
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::var("HOMESTEAD_BENCH_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let plane = ControlPlane::start(Options::default().crd(User::crd()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    for args in [
        ["apply", "-f", "manifests/namespace.yaml"],
        ["apply", "-k", "rbac/"],
    ] {
        let out = plane
            .kubectl(ADMIN)
            .unwrap()
            .current_dir(root)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kubeconfig = plane
        .write_kubeconfig(OPERATOR, &plane.dir().join("operator.kubeconfig"))
        .unwrap();
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    let _operator = plane
        .spawn(
            "homestead",
            Path::new(env!("CARGO_BIN_EXE_homestead")),
            &[
                format!("--metrics-address={address}"),
                "--log-level=warn".into(),
            ],
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("POD_NAMESPACE", "homestead-system".into()),
            ],
        )
        .unwrap();
    let client = plane.client(ADMIN).await.unwrap();
    let users: Api<User> = Api::all(client);

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
    let writes = operator_writes(&plane).len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady = operator_writes(&plane).len() - writes;
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
