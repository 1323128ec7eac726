//! The HR path on the real control plane: `homestead import` of a roster (good and bad rows,
//! re-import without writes, a changed row, prune in each mode, dry run), and access that ends
//! on `validUntil`.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use homestead_api::User;
use homestead_testenv::ADMIN;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

/// Writes `csv` to a file named `file` in the control plane's directory and returns its path.
fn roster(file: &str, csv: &str) -> PathBuf {
    let path = env().plane.dir().join(file);
    std::fs::write(&path, csv).unwrap();
    path
}

/// Runs `homestead import ROSTER ARGS` as the admin (HR); returns (success, stdout).
fn import(roster: &PathBuf, args: &[&str]) -> (bool, String) {
    let plane = env().plane;
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("hr.kubeconfig"))
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_homestead"))
        .arg("import")
        .arg(roster)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.success(), format!("{stdout}{stderr}"))
}

/// The admin's writes to a prune test's Users (names starting with `prefix`; the other tests
/// here run at the same time) since audit event `mark` that changed something (dry runs and refused requests
/// excluded), as `verb name`.
fn user_writes_since(mark: usize, prefix: &str) -> Vec<String> {
    audit()[mark..]
        .iter()
        .filter(|e| e["user"]["username"] == ADMIN && e["objectRef"]["resource"] == "users")
        .filter(|e| {
            e["objectRef"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            )
        })
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .contains("dryRun")
        })
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// HR runs the CLI as kubectl runs: `--kubeconfig` and `--context` choose the cluster, with no
/// `KUBECONFIG` in the environment and no `~/.kube/config`; a context the file lacks is an
/// error that names it, and nothing is written.
#[tokio::test]
async fn the_cli_takes_kubectls_kubeconfig_and_context_flags() {
    let plane = env().plane;
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("hr-flags.kubeconfig"))
        .unwrap();
    let context = serde_saphyr::from_str::<Value>(&std::fs::read_to_string(&kubeconfig).unwrap())
        .unwrap()["current-context"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = roster(
        "flags.csv",
        "name,username
hr-flo,flo@example.com
",
    );
    let run = |args: &[&str]| {
        run_with_stdin(
            Command::new(env!("CARGO_BIN_EXE_homestead"))
                .args(args)
                .env_remove("KUBECONFIG")
                .env("HOME", plane.dir().join("no-home")),
            "",
        )
    };
    let file = kubeconfig.to_str().unwrap();
    let roster = path.to_str().unwrap();
    let (ok, out) = run(&["import", roster, "--dry-run", "--kubeconfig", file]);
    assert!(ok, "{out}");
    assert!(out.contains("hr-flo"), "{out}");
    let in_context = |context: &str| {
        run(&[
            "import",
            roster,
            "--dry-run",
            "--kubeconfig",
            file,
            "--context",
            context,
        ])
    };
    let (ok, out) = in_context(&context);
    assert!(ok, "{out}");
    let (ok, out) = in_context("elsewhere");
    assert!(!ok && out.contains("elsewhere"), "{out}");
    let (ok, out) = run(&["access", "-o", "json", "--kubeconfig", file]);
    assert!(ok && out.trim_start().starts_with('['), "{out}");
    // Without them (and nothing in the environment), no cluster: an error, not a guess.
    let (ok, _) = run(&["import", roster, "--dry-run"]);
    assert!(!ok);
    let users: Api<User> = Api::all(admin().await);
    assert!(users.get_opt("hr-flo").await.unwrap().is_none(), "dry runs");
}

/// HR runs the CLI as a kubectl plugin, installed by krew (kubectl's plugin manager, built from
/// its Go module) from `plugins/homestead.yaml` as `tools/krew/package.sh` fills it: kubectl
/// lists it and runs `kubectl homestead access` against the cluster of its own environment; the
/// plugin names itself `kubectl homestead` and, with no command, prints its usage rather than
/// start the operator. An archive whose checksum is not the manifest's is refused.
#[tokio::test]
async fn krew_installs_it_and_kubectl_runs_it_as_its_homestead_plugin() {
    let plane = env().plane;
    let dir = plane.dir().join("krew");
    let _ = std::fs::remove_dir_all(&dir);
    let (dist, root) = (dir.join("dist"), dir.join("root"));
    let tool = |script: &str| repo_root().join(script);
    let (ok, out) = run_with_stdin(
        Command::new(tool("tools/krew/package.sh"))
            .arg(env!("CARGO_BIN_EXE_homestead"))
            .arg(&dist)
            .arg("https://releases.invalid/homestead/v0.1.0"),
        "",
    );
    assert!(ok, "{out}");
    let (ok, out) = run_with_stdin(&mut Command::new(tool("tools/krew/install.sh")), "");
    assert!(ok, "{out}");
    // The script prints the binary's path (and go its progress, on stderr).
    let krew = out
        .lines()
        .find(|l| l.ends_with("/krew"))
        .unwrap_or_else(|| panic!("no krew path in {out}"))
        .to_owned();
    let (manifest, archive) = (
        dist.join("homestead.yaml"),
        dist.join("kubectl-homestead_linux_amd64.tar.gz"),
    );
    let install = |manifest: &std::path::Path| {
        run_with_stdin(
            Command::new(&krew)
                .arg("install")
                .arg(format!("--manifest={}", manifest.display()))
                .arg(format!("--archive={}", archive.display()))
                .env("KREW_ROOT", &root),
            "",
        )
    };
    // A manifest naming another checksum: krew refuses the archive.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let forged = dir.join("forged.yaml");
    let checksum = text
        .lines()
        .find(|l| l.trim_start().starts_with("sha256:"))
        .unwrap();
    std::fs::write(
        &forged,
        text.replace(checksum, &format!("      sha256: \"{}\"", "0".repeat(64))),
    )
    .unwrap();
    let (ok, out) = install(&forged);
    assert!(!ok && out.to_lowercase().contains("checksum"), "{out}");
    let (ok, out) = install(&manifest);
    assert!(ok && out.contains("Installed plugin: homestead"), "{out}");

    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("hr-plugin.kubeconfig"))
        .unwrap();
    let kubectl = plane.kubectl(ADMIN).unwrap().get_program().to_owned();
    let run = |args: &[&str]| {
        run_with_stdin(
            Command::new(&kubectl)
                .args(args)
                .env(
                    "PATH",
                    format!("{}:/usr/bin:/bin", root.join("bin").display()),
                )
                .env("KUBECONFIG", &kubeconfig),
            "",
        )
    };
    let (ok, out) = run(&["plugin", "list"]);
    assert!(ok && out.contains("kubectl-homestead"), "{out}");
    let (ok, out) = run(&["homestead", "access", "-o", "json"]);
    assert!(ok && out.trim_start().starts_with('['), "{out}");
    let (ok, out) = run(&["homestead", "--help"]);
    assert!(ok && out.contains("Usage: kubectl homestead"), "{out}");
    // No command: the usage and a failure (the operator would have run until stopped).
    let (ok, out) = run(&["homestead"]);
    assert!(!ok && out.contains("Usage: kubectl homestead"), "{out}");
}

#[tokio::test]
async fn a_roster_imports_its_good_rows_and_reports_the_bad_ones_by_line() {
    let s = Scenario::new();
    let c = admin().await;
    for name in ["hr-ann", "hr-ben", "hr-cat"] {
        s.track(name);
    }
    let path = roster(
        "good-and-bad.csv",
        "name,username,email,displayName,profile,role,groups,validUntil\n\
         hr-ann,ann@example.com,ann@example.com,Ann Example,,edit,,\n\
         hr-ben,ben@example.com,,,,cluster-admin,,\n\
         HR_Bad,bad@example.com,,,,,,\n\
         hr-cat,cat@example.com,,,,,devs; ops,\n",
    );
    let (ok, out) = import(&path, &["--source", "hr-test"]);
    assert!(!ok, "a failed row fails the import: {out}");
    assert!(out.contains("created: 2: hr-ann, hr-cat"), "{out}");
    assert!(
        out.contains("line 3: hr-ben:") && out.contains("cluster-admin"),
        "the server's message, by line: {out}"
    );
    assert!(out.contains("line 4: HR_Bad:"), "{out}");
    let users: Api<User> = Api::all(c.clone());
    let cat = users.get("hr-cat").await.unwrap();
    assert_eq!(cat.spec.identity.groups, ["devs", "ops"]);
    assert_eq!(cat.labels()["homestead.dev/roster-source"], "hr-test");
    assert!(users.get_opt("hr-ben").await.unwrap().is_none());
    wait_reason(&c, "hr-ann", "Provisioned").await;

    let (ok, out) = import(&path, &["--dry-run", "--source", "hr-test"]);
    assert!(!ok, "{out}");
    assert!(out.contains("unchanged: 2"), "{out}");
}

#[tokio::test]
async fn reimport_writes_nothing_a_changed_row_one_user_and_prune_does_what_it_says() {
    let s = Scenario::new();
    let c = admin().await;
    for name in ["hr-p1", "hr-p2", "hr-p3"] {
        s.track(name);
    }
    let all = "name,username,email\n\
               hr-p1,p1@example.com,p1@example.com\n\
               hr-p2,p2@example.com,p2@example.com\n\
               hr-p3,p3@example.com,p3@example.com\n";
    let path = roster("people.csv", all);
    let (ok, out) = import(&path, &[]);
    assert!(ok, "{out}");
    assert!(out.contains("created: 3"), "{out}");
    let users: Api<User> = Api::all(c.clone());
    assert_eq!(
        users.get("hr-p1").await.unwrap().labels()["homestead.dev/roster-source"],
        "people.csv",
        "the source defaults to the file name"
    );

    let mark = settled_mark().await;
    let (ok, out) = import(&path, &[]);
    assert!(ok && out.contains("unchanged: 3"), "{out}");
    assert_eq!(
        user_writes_since(mark, "hr-p"),
        Vec::<String>::new(),
        "a re-import writes nothing"
    );

    let mark = settled_mark().await;
    roster(
        "people.csv",
        &all.replace("p2@example.com,p2@", "p2@example.com,new-p2@"),
    );
    let (ok, out) = import(&path, &[]);
    assert!(ok && out.contains("changed: 1: hr-p2"), "{out}");
    assert_eq!(user_writes_since(mark, "hr-p"), ["patch hr-p2"]);
    assert_eq!(
        users.get("hr-p2").await.unwrap().spec.email.as_deref(),
        Some("new-p2@example.com")
    );

    // hr-p3 leaves the roster.
    let without = all
        .replace("p2@example.com,p2@", "p2@example.com,new-p2@")
        .replace("hr-p3,p3@example.com,p3@example.com\n", "");
    roster("people.csv", &without);
    let mark = settled_mark().await;
    let (ok, out) = import(&path, &[]);
    assert!(
        ok && out.contains("left alone (no longer in the roster): 1: hr-p3"),
        "{out}"
    );
    let (ok, out) = import(
        &path,
        &["--dry-run", "--prune", "delete", "--source", "people.csv"],
    );
    assert!(
        ok && out.contains("would be deleted (no longer in the roster): 1: hr-p3"),
        "{out}"
    );
    // A dry-run delete carries dryRun in its body, which the audit log does not record: the
    // User itself shows it was not deleted.
    let writes: Vec<String> = user_writes_since(mark, "hr-p")
        .into_iter()
        .filter(|w| w != "delete hr-p3")
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "neither prune none nor a dry run writes"
    );
    let p3 = users.get("hr-p3").await.unwrap();
    assert!(p3.metadata.deletion_timestamp.is_none() && !p3.spec.suspended);

    let (ok, out) = import(&path, &["--prune", "suspend", "--source", "people.csv"]);
    assert!(
        ok && out.contains("suspended (no longer in the roster): 1: hr-p3"),
        "{out}"
    );
    wait_reason(&c, "hr-p3", "Suspended").await;
    let (ok, out) = import(&path, &["--prune", "suspend", "--source", "people.csv"]);
    assert!(
        ok && out.contains("left alone (no longer in the roster): 1: hr-p3"),
        "{out}"
    );

    let (ok, out) = import(&path, &["--prune", "delete", "--source", "people.csv"]);
    assert!(
        ok && out.contains("deleted (no longer in the roster): 1: hr-p3"),
        "{out}"
    );
    wait_gone(&users, "hr-p3", 120).await;
    assert!(users.get_opt("hr-p1").await.unwrap().is_some());
}

/// A bad roster deletes nobody (docs/directory.md, "Pruning"): pruning needs `--source`, a
/// header-only roster prunes nobody, and a truncated one that would remove more than the
/// limit is refused whole until HR confirms the count; the dry run names who would lose their
/// namespace and who would keep it.
#[tokio::test]
async fn a_truncated_or_empty_roster_prunes_nobody_without_a_confirmation() {
    let s = Scenario::new();
    let c = admin().await;
    let names: Vec<String> = (1..=12).map(|i| format!("hr-m{i:02}")).collect();
    for name in &names {
        s.track(name);
    }
    let mut all = String::from("name,username\n");
    for name in &names {
        all.push_str(&format!("{name},{name}@example.com\n"));
    }
    let path = roster("people-2026-11-26.csv", &all);
    let (ok, out) = import(&path, &["--source", "hr-mass"]);
    assert!(ok && out.contains("created: 12"), "{out}");
    let users: Api<User> = Api::all(c.clone());
    users
        .patch(
            "hr-m12",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": { "deletionPolicy": "Retain" } })),
        )
        .await
        .unwrap();

    let (ok, out) = import(&path, &["--prune", "delete"]);
    assert!(
        !ok && out.contains("--source"),
        "--prune without --source is refused: {out}"
    );

    let header_only = roster("people-2026-11-27.csv", "name,username\n");
    let mark = settled_mark().await;
    let (ok, out) = import(&header_only, &["--prune", "delete", "--source", "hr-mass"]);
    assert!(!ok && out.contains("no valid row"), "{out}");

    // Truncated after the first row: eleven of twelve would go.
    let truncated = roster(
        "people-2026-11-28.csv",
        &all.lines().take(2).collect::<Vec<_>>().join("\n"),
    );
    let (ok, out) = import(&truncated, &["--prune", "delete", "--source", "hr-mass"]);
    assert!(
        !ok && out.contains("refusing to delete 11 of the 12 Users")
            && out.contains("--allow-mass-prune 11"),
        "{out}"
    );
    let (ok, out) = import(
        &truncated,
        &[
            "--prune",
            "delete",
            "--source",
            "hr-mass",
            "--allow-mass-prune",
            "10",
        ],
    );
    assert!(
        !ok,
        "a confirmation of fewer than would go is refused: {out}"
    );
    assert_eq!(
        user_writes_since(mark, "hr-m"),
        Vec::<String>::new(),
        "no refused import writes"
    );
    for name in &names {
        let user = users.get(name).await.unwrap();
        assert!(user.metadata.deletion_timestamp.is_none(), "{name} kept");
    }

    let (ok, out) = import(
        &truncated,
        &[
            "--prune",
            "delete",
            "--source",
            "hr-mass",
            "--allow-mass-prune",
            "11",
            "--dry-run",
        ],
    );
    assert!(
        ok && out.contains("would be deleted (no longer in the roster): 11")
            && out
                .contains("deleted with their namespace and its data (deletionPolicy Delete): 10")
            && out.contains(
                "retained, namespace kept with access revoked (deletionPolicy Retain): 1: hr-m12"
            ),
        "{out}"
    );
    let (ok, out) = import(
        &truncated,
        &[
            "--prune",
            "suspend",
            "--source",
            "hr-mass",
            "--allow-mass-prune",
            "11",
        ],
    );
    assert!(
        ok && out.contains("suspended (no longer in the roster): 11"),
        "{out}"
    );
    wait_reason(&c, "hr-m02", "Suspended").await;
    assert!(!users.get("hr-m01").await.unwrap().spec.suspended);
}

/// `now + seconds`, to the second, in RFC 3339.
fn in_seconds(seconds: i64) -> String {
    let at = Timestamp::now() + SignedDuration::from_secs(seconds);
    Timestamp::from_second(at.as_second()).unwrap().to_string()
}

/// The condition `type_` of `user`, as JSON.
fn condition(user: &User, type_: &str) -> Value {
    let status = serde_json::to_value(user.status.as_ref().unwrap()).unwrap();
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn access_ends_at_valid_until_and_expiring_says_so_before() {
    let s = Scenario::new();
    let c = admin().await;
    // Both expire 30 s from now: room for a busy CI machine to provision them first (a 10 s
    // window once expired before the check that access had begun), and one wait for both.
    let until = in_seconds(30);
    s.create(
        &c,
        &User::test("hr-temp").with_spec(json!({ "validUntil": until })),
    )
    .await;
    s.create(
        &c,
        &User::test("hr-leaver").with_spec(json!({ "validUntil": until, "onExpiry": "Delete" })),
    )
    .await;
    let temp = wait_reason(&c, "hr-temp", "Provisioned").await;
    let expiring = condition(&temp, "Expiring");
    assert_eq!(
        expiring["status"], "True",
        "within the 14-day warning: {expiring}"
    );
    assert_eq!(expiring["reason"], "ExpiresSoon");
    assert_eq!(can_get_pods("hr-temp@example.com", "user-hr-temp"), "yes");
    wait_reason(&c, "hr-leaver", "Provisioned").await;

    let expired = wait_reason(&c, "hr-temp", "Expired").await;
    assert_eq!(can_get_pods("hr-temp@example.com", "user-hr-temp"), "no");
    assert_eq!(
        condition(&expired, "Ready")["status"],
        "True",
        "expiry is the declared state"
    );
    // Ready stays True (Provisioned to Expired), so its lastTransitionTime does not move;
    // Expiring's does (True to False) at the moment access ends.
    let expiring = condition(&expired, "Expiring");
    assert_eq!(expiring["status"], "False");
    let at: Timestamp = expiring["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let until: Timestamp = until.parse().unwrap();
    assert!(at >= until, "access ended early: {at} < {until}");
    // The reconcile is requeued for the moment itself; the bound here is generous for a busy
    // test machine, docs/directory.md gives the precision measured.
    assert!(
        at.duration_since(until) < SignedDuration::from_secs(10),
        "access ended at {at}, {} after validUntil",
        at.duration_since(until)
    );
    assert_eq!(condition(&expired, "Expiring")["reason"], "Expired");
    assert!(
        Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
            .get_opt("user-hr-temp")
            .await
            .unwrap()
            .is_some(),
        "onExpiry Suspend keeps the namespace"
    );

    let users: Api<User> = Api::all(c.clone());
    wait_gone(&users, "hr-leaver", 90).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    wait_gone(&namespaces, "user-hr-leaver", 90).await;
}

/// A roster's `successor` column (docs/handover.md): the row's User names its successor and is
/// handed over when it leaves; pruned from the roster with `--prune delete`, their home goes to
/// that successor as a workspace of theirs, and the leaver's access ends.
#[tokio::test]
async fn a_roster_names_a_successor_who_gets_the_leavers_home() {
    let client = admin().await;
    let csv = "name,username,successor\n\
               rs-sam,rs-sam@example.com,\n\
               rs-lee,rs-lee@example.com,rs-sam\n";
    let (ok, out) = import(&roster("successor.csv", csv), &["--source=rs"]);
    assert!(ok, "{out}");
    let lee = wait_reason(&client, "rs-lee", "Provisioned").await;
    wait_reason(&client, "rs-sam", "Provisioned").await;
    assert_eq!(lee.spec.successor.as_deref(), Some("rs-sam"));
    assert_eq!(
        lee.spec.deletion_policy,
        homestead_api::DeletionPolicy::Handover
    );
    // The next roster leaves lee out: pruned, and the home is sam's.
    let csv = "name,username\nrs-sam,rs-sam@example.com\n";
    let (ok, out) = import(
        &roster("successor-2.csv", csv),
        &["--source=rs", "--prune=delete", "--allow-mass-prune=1"],
    );
    assert!(ok, "{out}");
    let home = wait_workspace(&client, "user-rs-lee", "Provisioned").await;
    assert_eq!(home.spec.owner.user.as_deref(), Some("rs-sam"));
    eventually("rs-sam to reach the handed-over home", 30, || async {
        (can_get_pods("rs-sam@example.com", "user-rs-lee") == "yes").then_some(())
    })
    .await;
    assert_eq!(can_get_pods("rs-lee@example.com", "user-rs-lee"), "no");
    let users: Api<User> = Api::all(client.clone());
    assert!(
        users
            .get_opt("rs-lee")
            .await
            .unwrap()
            .is_none_or(|u| u.metadata.deletion_timestamp.is_some())
    );
    let _ = users.delete("rs-sam", &Default::default()).await;
    let _ = Api::<homestead_api::Workspace>::all(client)
        .delete("user-rs-lee", &Default::default())
        .await;
}
