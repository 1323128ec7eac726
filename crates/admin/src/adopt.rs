//! `homestead adopt`: the platform's half of adopting existing namespaces, many at once
//! (docs/adoption.md). For each row of a CSV naming a namespace and the User it goes to, it
//! says what adoption would find and change (`--dry-run` stops there) and then hands the
//! namespace over: the label `homestead.dev/adopt-for=<User>` on the Namespace, which only
//! whoever may update Namespaces can write. The operator does the rest when the User asks for
//! that namespace (`spec.namespace.name`): the ownership labels and annotation, nothing in it
//! deleted, its RoleBindings named.

use std::io::Write;

use anyhow::Context as _;
use homestead_api::{LABEL_ADOPT_FOR, LABEL_MANAGED_BY, LABEL_USER, MANAGED_BY, User};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::access::inert;
use crate::args::{AccessFormat, AdoptArgs};

/// The field manager of the label `homestead adopt` writes.
pub const FIELD_MANAGER: &str = "homestead-adopt";

/// One row of the input: a namespace and the User it goes to.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Request {
    /// The existing namespace.
    pub namespace: String,
    /// The User (`metadata.name`) it goes to.
    pub user: String,
}

/// Where a namespace stands (`state` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Can be handed over; `--dry-run` left it as it was.
    Ready,
    /// Labelled for the User (now, or before).
    Handed,
    /// Already that User's home: nothing to do.
    Adopted,
    /// Cannot be adopted: `detail` says why; nothing written.
    Refused,
}

/// What adoption would find and change in one namespace: a row of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The namespace.
    pub namespace: String,
    /// The User it goes to.
    pub user: String,
    /// Where it stands.
    pub state: State,
    /// The RoleBindings in it now (names, separated by spaces): kept, unmanaged, unless the
    /// operator runs with `--revoke-adopted-role-bindings`.
    pub role_bindings: String,
    /// How many Pods run there now (none is deleted).
    pub pods: usize,
    /// What the User's reconcile will then do, or why the namespace cannot be adopted.
    pub detail: String,
}

/// What [`judge`] reads about one row, as the API server answered.
pub struct Found {
    /// The Namespace, if it exists.
    pub namespace: Option<Namespace>,
    /// The User, if it exists.
    pub user: Option<User>,
    /// The names of the RoleBindings in the namespace.
    pub role_bindings: Vec<String>,
    /// How many Pods are in the namespace.
    pub pods: usize,
}

/// Whether `namespace` is one Homestead never takes: `default`, `kube-*` or the operator's own
/// (`homestead-system` unless the chart was installed elsewhere; the operator refuses it
/// either way).
fn reserved(namespace: &str) -> bool {
    namespace == "default" || namespace.starts_with("kube-") || namespace == "homestead-system"
}

/// What adopting `request`'s namespace means for its User, `user` if it exists: what happens
/// next, in words; or why it is refused (the User asks for another namespace).
fn user_takes(request: &Request, user: Option<&User>) -> Result<Vec<String>, String> {
    let Some(user) = user else {
        return Ok(vec![format!(
            "no User {} yet: create it with spec.namespace.name={}",
            request.user, request.namespace
        )]);
    };
    let asks = user.spec.namespace.as_ref().and_then(|n| n.name.as_deref());
    if asks != Some(request.namespace.as_str()) {
        return Err(format!(
            "User {} asks for namespace {} (spec.namespace.name, immutable): offboard and recreate it to move it here",
            request.user,
            asks.unwrap_or("<prefix><name>")
        ));
    }
    // The label names the User; whoever writes Users decides who that is: say it.
    let mut then = vec![format!(
        "goes to {}, who signs in as {}",
        request.user, user.spec.identity.username
    )];
    if user.spec.deletion_policy == homestead_api::DeletionPolicy::Delete {
        then.push(
            "deletionPolicy Delete: offboarding the User will delete this namespace and everything in it".into(),
        );
    }
    Ok(then)
}

/// The report for `request`, from what was `found`: pure, so every case is a unit test.
pub fn judge(request: &Request, found: &Found) -> Report {
    let mut role_bindings = found.role_bindings.clone();
    role_bindings.sort();
    let report = |state, detail: String| Report {
        namespace: request.namespace.clone(),
        user: request.user.clone(),
        state,
        role_bindings: role_bindings.join(" "),
        pods: found.pods,
        detail,
    };
    let Some(namespace) = &found.namespace else {
        return report(State::Refused, "no such namespace".into());
    };
    if reserved(&request.namespace) {
        return report(
            State::Refused,
            "a reserved namespace: Homestead never takes it".into(),
        );
    }
    let labels = namespace.labels();
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY) {
        let owner = labels.get(LABEL_USER).map_or("nobody", String::as_str);
        return if owner == request.user {
            report(State::Adopted, format!("already {owner}'s home"))
        } else {
            report(
                State::Refused,
                format!("already Homestead's, for User {owner}: never moved to another"),
            )
        };
    }
    if namespace.metadata.deletion_timestamp.is_some() {
        return report(State::Refused, "terminating".into());
    }
    let mut then = match user_takes(request, found.user.as_ref()) {
        Ok(then) => then,
        Err(refusal) => return report(State::Refused, refusal),
    };
    then.push(format!(
        "labels {LABEL_MANAGED_BY}={MANAGED_BY} and {LABEL_USER}={} added, with Pod Security and the Profile's quota, limits and isolation; nothing deleted",
        request.user
    ));
    if let Some(enforce) = labels.get("pod-security.kubernetes.io/enforce")
        && enforce == "privileged"
    {
        then.push(
            "Pod Security enforce privileged becomes the operator's (baseline or restricted): new Pods that need privileged are refused".into(),
        );
    }
    if !role_bindings.is_empty() {
        then.push(format!(
            "{} RoleBinding(s) kept as unmanaged unless the operator runs with --revoke-adopted-role-bindings",
            role_bindings.len()
        ));
    }
    let state = if labels.get(LABEL_ADOPT_FOR) == Some(&request.user) {
        State::Handed
    } else {
        State::Ready
    };
    if let Some(other) = labels.get(LABEL_ADOPT_FOR)
        && other != &request.user
    {
        then.push(format!("handed to {other} before: now to {}", request.user));
    }
    report(state, then.join("; "))
}

/// Reads the input CSV (a header naming the columns `namespace` and `user`); `-` is standard
/// input.
///
/// # Errors
/// When the file cannot be read, or a row lacks a column.
pub fn read(path: &std::path::Path) -> anyhow::Result<Vec<Request>> {
    let input: Box<dyn std::io::Read> = if path == std::path::Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?)
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(input);
    reader
        .deserialize()
        .enumerate()
        .map(|(i, row)| row.with_context(|| format!("{} row {}", path.display(), i + 2)))
        .collect()
}

/// `homestead adopt`: reads the CSV, judges each row, and unless `--dry-run` labels each
/// namespace that is [`State::Ready`] `homestead.dev/adopt-for=<User>` (a JSON merge patch,
/// field manager `homestead-adopt`); prints the report. Exits 1 when a row is refused (the
/// others are still handed over).
///
/// # Errors
/// When the input cannot be read, or a read or write is refused (RBAC: it needs get
/// namespaces and users, list rolebindings and pods, and patch namespaces).
pub async fn run(args: AdoptArgs) -> anyhow::Result<std::process::ExitCode> {
    let requests = read(&args.file)?;
    let client = args.cluster.client().await?;
    let mut reports = Vec::with_capacity(requests.len());
    for request in &requests {
        let found = find(&client, request).await?;
        let mut report = judge(request, &found);
        if report.state == State::Ready && !args.dry_run {
            hand_over(&client, request).await?;
            report.state = State::Handed;
        }
        reports.push(report);
    }
    write(&reports, args.output, std::io::stdout().lock())?;
    let refused = reports.iter().any(|r| r.state == State::Refused);
    Ok(if refused {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Reads what [`judge`] needs about `request`.
async fn find(client: &Client, request: &Request) -> anyhow::Result<Found> {
    let name = &request.namespace;
    let namespace = Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading namespace {name}"))?;
    let user = Api::<User>::all(client.clone())
        .get_opt(&request.user)
        .await
        .with_context(|| format!("reading User {}", request.user))?;
    let (role_bindings, pods) = if namespace.is_some() {
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), name)
            .list_metadata(&ListParams::default())
            .await
            .with_context(|| format!("listing RoleBindings in {name}"))?;
        let pods = Api::<Pod>::namespaced(client.clone(), name)
            .list_metadata(&ListParams::default())
            .await
            .with_context(|| format!("listing Pods in {name}"))?;
        (
            bindings.items.iter().map(ResourceExt::name_any).collect(),
            pods.items.len(),
        )
    } else {
        (Vec::new(), 0)
    };
    Ok(Found {
        namespace,
        user,
        role_bindings,
        pods,
    })
}

/// Labels the namespace of `request` `homestead.dev/adopt-for=<User>`.
async fn hand_over(client: &Client, request: &Request) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "metadata": { "labels": { LABEL_ADOPT_FOR: request.user } } });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    Api::<Namespace>::all(client.clone())
        .patch(&request.namespace, &params, &Patch::Merge(&patch))
        .await
        .with_context(|| format!("labelling namespace {}", request.namespace))?;
    Ok(())
}

/// Writes `reports` as a table, CSV (cells a spreadsheet would take for a formula start with
/// `'`) or a JSON array.
///
/// # Errors
/// When `out` cannot be written.
pub fn write(reports: &[Report], format: AccessFormat, out: impl Write) -> anyhow::Result<()> {
    match format {
        AccessFormat::Json => serde_json::to_writer_pretty(out, reports)?,
        AccessFormat::Yaml => {
            let mut out = out;
            out.write_all(serde_saphyr::to_string(&reports)?.as_bytes())?
        }
        AccessFormat::Csv => {
            let mut csv = csv::Writer::from_writer(out);
            for report in reports {
                let mut report = report.clone();
                for cell in [&mut report.namespace, &mut report.user, &mut report.detail] {
                    *cell = inert(cell);
                }
                csv.serialize(report)?;
            }
            csv.flush()?;
        }
        AccessFormat::Table => {
            let mut table = tabwriter::TabWriter::new(out).padding(3);
            writeln!(table, "NAMESPACE\tUSER\tSTATE\tPODS\tROLEBINDINGS\tDETAIL")?;
            for r in reports {
                let state = serde_json::to_value(r.state)?;
                let bindings = if r.role_bindings.is_empty() {
                    "-"
                } else {
                    &r.role_bindings
                };
                writeln!(
                    table,
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    r.namespace,
                    r.user,
                    state.as_str().unwrap_or_default(),
                    r.pods,
                    bindings,
                    r.detail.replace(['\t', '\n'], " ")
                )?;
            }
            table.flush()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn namespace(labels: serde_json::Value) -> Option<Namespace> {
        Some(
            serde_json::from_value(json!({ "metadata": { "name": "legacy", "labels": labels } }))
                .unwrap(),
        )
    }

    fn user(spec: serde_json::Value) -> Option<User> {
        Some(User::test("alice").with_spec(spec))
    }

    fn found(namespace: Option<Namespace>, user: Option<User>) -> Found {
        Found {
            namespace,
            user,
            role_bindings: vec!["ci".into(), "dev".into()],
            pods: 3,
        }
    }

    fn request(namespace: &str) -> Request {
        Request {
            namespace: namespace.into(),
            user: "alice".into(),
        }
    }

    #[test]
    fn a_hand_made_namespace_for_a_user_asking_for_it_is_ready() {
        let asks = user(json!({ "namespace": { "name": "legacy" }, "deletionPolicy": "Retain" }));
        let report = judge(
            &request("legacy"),
            &found(namespace(json!({ "team": "ml" })), asks),
        );
        assert_eq!(report.state, State::Ready);
        assert_eq!((report.role_bindings.as_str(), report.pods), ("ci dev", 3));
        assert!(
            report.detail.contains("nothing deleted"),
            "{}",
            report.detail
        );
        assert!(
            report.detail.contains("2 RoleBinding(s) kept"),
            "{}",
            report.detail
        );
        assert!(
            !report.detail.contains("deletionPolicy Delete"),
            "{}",
            report.detail
        );
        assert!(
            report
                .detail
                .contains("goes to alice, who signs in as alice@example.com"),
            "{}",
            report.detail
        );
    }

    #[test]
    fn what_adoption_would_cost_is_said() {
        let asks = user(json!({ "namespace": { "name": "legacy" }, "deletionPolicy": "Delete" }));
        let privileged = namespace(json!({ "pod-security.kubernetes.io/enforce": "privileged" }));
        let report = judge(&request("legacy"), &found(privileged, asks));
        assert!(
            report.detail.contains("will delete this namespace"),
            "{}",
            report.detail
        );
        assert!(
            report.detail.contains("enforce privileged"),
            "{}",
            report.detail
        );
        let unknown = judge(&request("legacy"), &found(namespace(json!({})), None));
        assert_eq!(unknown.state, State::Ready);
        assert!(
            unknown
                .detail
                .contains("create it with spec.namespace.name=legacy")
        );
    }

    #[test]
    fn refuses_what_adoption_never_takes() {
        let asks = user(json!({ "namespace": { "name": "legacy" } }));
        let cases = [
            (
                request("legacy"),
                found(None, asks.clone()),
                "no such namespace",
            ),
            (
                request("kube-legacy"),
                found(namespace(json!({})), asks.clone()),
                "reserved",
            ),
            (
                request("legacy"),
                found(
                    namespace(json!({ LABEL_MANAGED_BY: MANAGED_BY, LABEL_USER: "bob" })),
                    asks.clone(),
                ),
                "for User bob",
            ),
            (
                request("legacy"),
                found(
                    namespace(json!({})),
                    user(json!({ "namespace": { "name": "other" } })),
                ),
                "asks for namespace other",
            ),
        ];
        for (request, found, why) in cases {
            let report = judge(&request, &found);
            assert_eq!(report.state, State::Refused, "{why}");
            assert!(report.detail.contains(why), "{}", report.detail);
        }
    }

    #[test]
    fn handed_and_adopted_namespaces_are_told_apart() {
        let asks = user(json!({ "namespace": { "name": "legacy" } }));
        let handed = namespace(json!({ LABEL_ADOPT_FOR: "alice" }));
        assert_eq!(
            judge(&request("legacy"), &found(handed, asks.clone())).state,
            State::Handed
        );
        let mine = namespace(json!({ LABEL_MANAGED_BY: MANAGED_BY, LABEL_USER: "alice" }));
        assert_eq!(
            judge(&request("legacy"), &found(mine, asks)).state,
            State::Adopted
        );
    }

    #[test]
    fn the_csv_reads_back() {
        let asks = user(json!({ "namespace": { "name": "legacy" } }));
        let reports = vec![judge(
            &request("legacy"),
            &found(namespace(json!({})), asks),
        )];
        let mut buffer = Vec::new();
        write(&reports, AccessFormat::Csv, &mut buffer).unwrap();
        let mut reader = csv::Reader::from_reader(buffer.as_slice());
        let read: Vec<Report> = reader.deserialize().map(Result::unwrap).collect();
        assert_eq!(read, reports);
        let mut table = Vec::new();
        write(&reports, AccessFormat::Table, &mut table).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert_eq!(table.lines().count(), 2, "{table}");
    }
}
