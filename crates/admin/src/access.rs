//! `homestead access`: where every access to a Homestead namespace comes from (docs/sharing.md,
//! "Where access comes from"). For every namespace labelled as Homestead's, every subject of
//! every RoleBinding there, its role, its source (the person's own home, a Share with its
//! reason and creator, through a directory group, or `unmanaged` for a RoleBinding no rule
//! accounts for) and until when; as a table, CSV or JSON. Reads only (Namespaces, RoleBindings,
//! Users, Shares and DirectoryGroups): the `homestead-auditor` ClusterRole is enough.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use homestead_api::{
    ANNOTATION_CREATED_BY, DirectoryGroup, HOME_ROLE_BINDING, LABEL_MANAGED_BY,
    LABEL_RETAINED_FROM, LABEL_SHARE, LABEL_USER, LABEL_WORKSPACE, MANAGED_BY, Share, User,
    WORKSPACE_ADMINS_BINDING, WORKSPACE_MEMBERS_BINDING, Workspace,
};
pub use homestead_model::homes::Source;
use homestead_model::homes::{Via, ways_in};
use homestead_model::workspace::way_in;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::args::{AccessArgs, AccessFormat};

/// One subject's access to one namespace: a row of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The namespace.
    pub namespace: String,
    /// The subject as bound: `User:bob@example.com`, `Group:devs`, `ServiceAccount:ns/name`.
    pub subject: String,
    /// The Homestead User the subject is, when it is one.
    pub person: String,
    /// The ClusterRole or Role bound.
    pub role: String,
    /// Where it comes from.
    pub source: Source,
    /// What exactly: the Profile of a home, or the Share (`name: reason (by creator)`) and group,
    /// or the RoleBinding no rule accounts for.
    pub detail: String,
    /// Until when (RFC 3339), or empty for as long as the home is the person's.
    pub until: String,
}

/// What [`rows`] reads, as listed from the API server.
pub struct Listed {
    /// Namespaces labelled as Homestead's.
    pub namespaces: Vec<Namespace>,
    /// Namespaces Homestead retained (labelled `homestead.dev/retained-from`).
    pub retained: Vec<Namespace>,
    /// RoleBindings in those namespaces.
    pub bindings: Vec<RoleBinding>,
    /// Every User.
    pub users: Vec<User>,
    /// Every Share.
    pub shares: Vec<Share>,
    /// Every DirectoryGroup.
    pub groups: Vec<DirectoryGroup>,
    /// Every Workspace.
    pub workspaces: Vec<Workspace>,
}

/// The report: one [`Row`] per subject of every RoleBinding in a Homestead namespace, sorted by
/// namespace, then person and subject.
pub fn rows(listed: &Listed) -> Vec<Row> {
    let by_username: BTreeMap<&str, &User> = listed
        .users
        .iter()
        .map(|u| (u.spec.identity.username.as_str(), u))
        .collect();
    // A namespace's holder: the User of a home, or the Workspace of a workspace (by the label
    // that names it, and which label that is).
    let owner_of = holders(&listed.namespaces);
    let shares: BTreeMap<(String, String), &Share> = listed
        .shares
        .iter()
        .map(|s| ((s.namespace().unwrap_or_default(), s.name_any()), s))
        .collect();
    let retained: std::collections::BTreeSet<String> =
        listed.retained.iter().map(ResourceExt::name_any).collect();
    let mut out: Vec<Row> = listed.retained.iter().map(retained_row).collect();
    for binding in &listed.bindings {
        let namespace = binding.namespace().unwrap_or_default();
        if retained.contains(&namespace) {
            out.extend(unmanaged_rows(binding, &namespace, &by_username));
            continue;
        }
        let Some((holder_label, owner)) = owner_of.get(&namespace) else {
            continue;
        };
        let labels = binding.labels();
        let ours = labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
            && labels.get(*holder_label) == Some(owner);
        let workspace = (*holder_label == LABEL_WORKSPACE)
            .then(|| listed.workspaces.iter().find(|w| &w.name_any() == owner))
            .flatten();
        let share = labels
            .get(LABEL_SHARE)
            .filter(|_| ours)
            .and_then(|name| shares.get(&(namespace.clone(), name.clone())));
        for subject in binding.subjects.iter().flatten() {
            let person = (subject.kind == "User")
                .then(|| by_username.get(subject.name.as_str()))
                .flatten();
            let (source, detail, until) = match share {
                Some(share) => share_source(share, person.copied(), &listed.groups),
                None if ours && workspace.is_some() && is_workspace_binding(binding) => {
                    workspace_source(workspace, person.copied(), &listed.groups)
                }
                None if ours && binding.name_any() == HOME_ROLE_BINDING => {
                    home_source(&listed.users, owner)
                }
                None => (
                    Source::Unmanaged,
                    format!("RoleBinding {}", binding.name_any()),
                    String::new(),
                ),
            };
            let subject_name = match &subject.namespace {
                Some(ns) if subject.kind == "ServiceAccount" => format!("{ns}/{}", subject.name),
                _ => subject.name.clone(),
            };
            out.push(Row {
                namespace: namespace.clone(),
                subject: format!("{}:{subject_name}", subject.kind),
                person: person.map(|u| u.name_any()).unwrap_or_default(),
                role: binding.role_ref.name.clone(),
                source,
                detail,
                until,
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.namespace, &a.person, &a.subject).cmp(&(&b.namespace, &b.person, &b.subject))
    });
    out
}

/// The rows of a RoleBinding in a retained namespace: `unmanaged`, since nothing Homestead
/// grants there (the operator removes it; docs/design.md rule 17).
fn unmanaged_rows(
    binding: &RoleBinding,
    namespace: &str,
    by_username: &BTreeMap<&str, &User>,
) -> Vec<Row> {
    binding
        .subjects
        .iter()
        .flatten()
        .map(|subject| Row {
            namespace: namespace.to_owned(),
            subject: format!("{}:{}", subject.kind, subject.name),
            person: (subject.kind == "User")
                .then(|| by_username.get(subject.name.as_str()))
                .flatten()
                .map(|u| u.name_any())
                .unwrap_or_default(),
            role: binding.role_ref.name.clone(),
            source: Source::Unmanaged,
            detail: format!("RoleBinding {} in a retained namespace", binding.name_any()),
            until: String::new(),
        })
        .collect()
}

/// The row of a namespace retained from `homestead.dev/retained-from`'s person or workspace:
/// nobody's home, no access (the operator removes any RoleBinding that appears there).
fn retained_row(namespace: &Namespace) -> Row {
    let from = namespace
        .labels()
        .get(LABEL_RETAINED_FROM)
        .cloned()
        .unwrap_or_default();
    Row {
        namespace: namespace.name_any(),
        subject: String::new(),
        person: String::new(),
        role: String::new(),
        source: Source::Retained,
        detail: format!("retained from {from}: nobody's home, no access"),
        until: String::new(),
    }
}

/// Each namespace's holder: the User of a home or the Workspace of a workspace, as the label
/// that names it and its value.
fn holders(namespaces: &[Namespace]) -> BTreeMap<String, (&'static str, String)> {
    namespaces
        .iter()
        .filter_map(|ns| {
            let labels = ns.labels();
            let holder = [LABEL_USER, LABEL_WORKSPACE]
                .into_iter()
                .find_map(|label| Some((label, labels.get(label)?.clone())))?;
            Some((ns.name_any(), holder))
        })
        .collect()
}

/// Source, detail and until of the person bound by the home of the User `owner` (its
/// `homestead-user` binding): `own home`, with the Profile it was provisioned with.
fn home_source(users: &[User], owner: &str) -> (Source, String, String) {
    let profile = users
        .iter()
        .find(|u| u.name_any() == owner)
        .and_then(|u| u.status.as_ref()?.profile.as_ref())
        .map(|p| format!(" (Profile {})", p.name));
    let detail = format!("own home{}", profile.unwrap_or_default());
    (Source::Home, detail, String::new())
}

/// Source, detail and until of a subject bound by `share`, by the model's way in
/// ([`ways_in`]): through a group when `person` is not named as a User grantee but is a member
/// that counts of a group grantee.
fn share_source(
    share: &Share,
    person: Option<&User>,
    groups: &[DirectoryGroup],
) -> (Source, String, String) {
    let creator = share
        .annotations()
        .get(ANNOTATION_CREATED_BY)
        .cloned()
        .unwrap_or_else(|| "unrecorded".to_owned());
    let base = format!(
        "share {}: {} (by {creator})",
        share.name_any(),
        share.spec.reason
    );
    let until = share.spec.expires_at.0.to_string();
    let Some(person) = person else {
        return (Source::Share, base, until);
    };
    let counting: Vec<&DirectoryGroup> =
        groups.iter().filter(|g| g.counts_member(person)).collect();
    let ways = ways_in(share, &person.name_any(), &counting);
    let way = ways
        .iter()
        .find(|via| matches!(via, Via::Share(_)))
        .or(ways.first());
    match way {
        Some(Via::Group { group, .. }) => (Source::Group, format!("group {group}, {base}"), until),
        _ => (Source::Share, base, until),
    }
}

/// Whether `binding` is one of a workspace's own RoleBindings (its admins', its members').
fn is_workspace_binding(binding: &RoleBinding) -> bool {
    let name = binding.name_any();
    name == WORKSPACE_ADMINS_BINDING || name == WORKSPACE_MEMBERS_BINDING
}

/// Source and detail of a subject bound by a workspace's own RoleBinding, by the model's way in
/// ([`way_in`]): the workspace's owner, an admin, or a member of its owner group that counts
/// `person`; `unmanaged` when none of these (the operator removes such a subject).
fn workspace_source(
    workspace: Option<&Workspace>,
    person: Option<&User>,
    groups: &[DirectoryGroup],
) -> (Source, String, String) {
    let (Some(workspace), Some(person)) = (workspace, person) else {
        return (
            Source::Unmanaged,
            "no such person".to_owned(),
            String::new(),
        );
    };
    let counting: Vec<&DirectoryGroup> =
        groups.iter().filter(|g| g.counts_member(person)).collect();
    let reason = &workspace.spec.reason;
    match way_in(workspace, &person.name_any(), &counting) {
        Some((_, via)) => (
            via.source(),
            format!("{}: {reason}", via.describe()),
            String::new(),
        ),
        None => (
            Source::Unmanaged,
            format!("workspace {}: not its owner's", workspace.name_any()),
            String::new(),
        ),
    }
}

/// Keeps the rows about `person` (a User's name) and in `namespace`, when given.
pub fn filter(rows: Vec<Row>, person: Option<&str>, namespace: Option<&str>) -> Vec<Row> {
    rows.into_iter()
        .filter(|r| person.is_none_or(|p| r.person == p))
        .filter(|r| namespace.is_none_or(|n| r.namespace == n))
        .collect()
}

/// A cell as a spreadsheet will read it: one starting with `=`, `+`, `-`, `@`, a tab or a
/// carriage return is prefixed with `'`, so a Share's reason (written by a tenant) is never run
/// as a formula when HR opens the CSV (OWASP, "CSV Injection").
pub fn inert(cell: &str) -> String {
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{cell}"),
        _ => cell.to_owned(),
    }
}

/// Writes `rows` to `out` as `format`: a table with a header (columns aligned), CSV (RFC 4180,
/// with a header, cells made [`inert`]) or a JSON array.
///
/// # Errors
/// When writing to `out` fails.
pub fn write(rows: &[Row], format: AccessFormat, out: impl Write) -> anyhow::Result<()> {
    match format {
        AccessFormat::Json => serde_json::to_writer_pretty(out, rows)?,
        AccessFormat::Yaml => {
            let mut out = out;
            out.write_all(serde_saphyr::to_string(&rows)?.as_bytes())?
        }
        AccessFormat::Csv => {
            let mut csv = csv::Writer::from_writer(out);
            for row in rows {
                let mut row = row.clone();
                for cell in [
                    &mut row.subject,
                    &mut row.person,
                    &mut row.role,
                    &mut row.detail,
                ] {
                    *cell = inert(cell);
                }
                csv.serialize(row)?;
            }
            csv.flush()?;
        }
        AccessFormat::Table => {
            let mut table = tabwriter::TabWriter::new(out).padding(3);
            writeln!(
                table,
                "NAMESPACE\tSUBJECT\tPERSON\tROLE\tSOURCE\tUNTIL\tDETAIL"
            )?;
            for r in rows {
                let source = serde_json::to_value(r.source)?;
                let until = if r.until.is_empty() { "-" } else { &r.until };
                let cells = [
                    r.namespace.as_str(),
                    &r.subject,
                    if r.person.is_empty() { "-" } else { &r.person },
                    &r.role,
                    source.as_str().unwrap_or_default(),
                    until,
                    &r.detail.replace(['\t', '\n'], " "),
                ];
                writeln!(table, "{}", cells.join("\t"))?;
            }
            table.flush()?;
        }
    }
    Ok(())
}

/// Runs `homestead access`: lists, reports, filters and prints to stdout.
///
/// # Errors
/// When the kubeconfig cannot be loaded or a list is refused (say, without the
/// `homestead-auditor` role).
pub async fn run(args: AccessArgs) -> anyhow::Result<std::process::ExitCode> {
    let client = args.cluster.client().await?;
    let listed = list(&client).await?;
    let rows = filter(
        rows(&listed),
        args.user.as_deref(),
        args.namespace.as_deref(),
    );
    write(&rows, args.output, std::io::stdout().lock())?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Lists what [`rows`] reads.
///
/// # Errors
/// The first list refused.
async fn list(client: &Client) -> anyhow::Result<Listed> {
    let managed = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&managed)
        .await
        .context("listing Homestead's namespaces")?
        .items;
    let retained = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default().labels(LABEL_RETAINED_FROM))
        .await
        .context("listing retained namespaces")?
        .items;
    let all = ListParams::default();
    let bindings = Api::<RoleBinding>::all(client.clone())
        .list(&all)
        .await
        .context("listing RoleBindings")?
        .items;
    let users = Api::<User>::all(client.clone())
        .list(&all)
        .await
        .context("listing Users")?
        .items;
    let shares = Api::<Share>::all(client.clone())
        .list(&all)
        .await
        .context("listing Shares")?
        .items;
    let groups = Api::<DirectoryGroup>::all(client.clone())
        .list(&all)
        .await
        .context("listing DirectoryGroups")?
        .items;
    let workspaces = Api::<Workspace>::all(client.clone())
        .list(&all)
        .await
        .context("listing Workspaces")?
        .items;
    Ok(Listed {
        namespaces,
        retained,
        bindings,
        users,
        shares,
        groups,
        workspaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed() -> Listed {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": "user-alice", "labels": {
                LABEL_MANAGED_BY: MANAGED_BY, LABEL_USER: "alice" } }
        }))
        .unwrap();
        let binding = |name: &str,
                       labels: serde_json::Value,
                       role: &str,
                       subjects: serde_json::Value| {
            serde_json::from_value::<RoleBinding>(json!({
                "metadata": { "name": name, "namespace": "user-alice", "labels": labels },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
                "subjects": subjects,
            }))
            .unwrap()
        };
        let user = |name: &str| json!({ "kind": "User", "name": format!("{name}@example.com") });
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "name": "review", "namespace": "user-alice",
                "annotations": { ANNOTATION_CREATED_BY: "alice@example.com" } },
            "spec": { "to": [{ "user": "bob" }, { "group": "analysts" }], "role": "view",
                "expiresAt": "2026-12-03T00:00:00Z",
                "reason": "=HYPERLINK(\"http://x\"), \"quoted\"\nand a new line" },
        }))
        .unwrap();
        Listed {
            namespaces: vec![ns],
            retained: vec![],
            bindings: vec![
                binding(
                    "homestead-user",
                    json!({ LABEL_MANAGED_BY: MANAGED_BY, LABEL_USER: "alice" }),
                    "admin",
                    json!([user("alice")]),
                ),
                binding(
                    "homestead-share-review",
                    json!({ LABEL_MANAGED_BY: MANAGED_BY, LABEL_USER: "alice", LABEL_SHARE: "review" }),
                    "view",
                    json!([user("bob"), user("carol")]),
                ),
                binding(
                    "by-hand",
                    json!({}),
                    "edit",
                    json!([user("mallory"), { "kind": "ServiceAccount", "name": "ci", "namespace": "user-alice" }]),
                ),
            ],
            users: ["alice", "bob", "carol"].map(User::test).to_vec(),
            shares: vec![share],
            groups: vec![DirectoryGroup::test("analysts", "Analysts").with_members(&["carol"])],
            workspaces: vec![],
        }
    }

    #[test]
    fn a_handed_over_home_names_its_leaver_and_a_retained_one_is_listed_with_what_is_bound_there() {
        let mut listed = listed();
        let namespace = |name: &str, labels: serde_json::Value| -> Namespace {
            serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } }))
                .unwrap()
        };
        listed.namespaces.push(namespace(
            "user-dora",
            json!({ LABEL_MANAGED_BY: MANAGED_BY, LABEL_WORKSPACE: "user-dora",
                    homestead_api::LABEL_HANDED_OVER_FROM: "dora" }),
        ));
        listed.retained.push(namespace(
            "user-erin",
            json!({ LABEL_RETAINED_FROM: "erin" }),
        ));
        listed.workspaces.push(
            serde_json::from_value(json!({
                "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
                "metadata": { "name": "user-dora" },
                "spec": { "owner": { "user": "alice" },
                    "reason": "handed over from dora, who left",
                    "namespace": { "name": "user-dora" } },
            }))
            .unwrap(),
        );
        listed.bindings.push(
            serde_json::from_value(json!({
                "metadata": { "name": "by-hand", "namespace": "user-erin" },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "view" },
                "subjects": [{ "kind": "User", "name": "mallory@example.com" }],
            }))
            .unwrap(),
        );
        listed.bindings.push(
            serde_json::from_value(json!({
                "metadata": { "name": WORKSPACE_ADMINS_BINDING, "namespace": "user-dora",
                    "labels": { LABEL_MANAGED_BY: MANAGED_BY, LABEL_WORKSPACE: "user-dora" } },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "admin" },
                "subjects": [{ "kind": "User", "name": "alice@example.com" }],
            }))
            .unwrap(),
        );
        let rows = rows(&listed);
        let dora = rows.iter().find(|r| r.namespace == "user-dora").unwrap();
        assert_eq!(
            (dora.person.as_str(), dora.source),
            ("alice", Source::Workspace)
        );
        assert_eq!(
            dora.detail,
            "workspace user-dora: handed over from dora, who left"
        );
        let erin: Vec<&Row> = rows.iter().filter(|r| r.namespace == "user-erin").collect();
        assert_eq!(erin[0].source, Source::Retained);
        assert!(
            erin[0].detail.contains("retained from erin"),
            "{}",
            erin[0].detail
        );
        // A binding someone made there shows, as no rule's.
        assert_eq!(erin[1].source, Source::Unmanaged);
        assert_eq!(erin[1].subject, "User:mallory@example.com");
    }

    #[test]
    fn every_subject_has_a_source() {
        let rows = rows(&listed());
        let got: Vec<(&str, &str, Source)> = rows
            .iter()
            .map(|r| (r.subject.as_str(), r.person.as_str(), r.source))
            .collect();
        assert_eq!(
            got,
            [
                ("ServiceAccount:user-alice/ci", "", Source::Unmanaged),
                ("User:mallory@example.com", "", Source::Unmanaged),
                ("User:alice@example.com", "alice", Source::Home),
                ("User:bob@example.com", "bob", Source::Share),
                ("User:carol@example.com", "carol", Source::Group),
            ]
        );
        let carol = &rows[4];
        assert!(
            carol.detail.starts_with("group analysts, share review:"),
            "{}",
            carol.detail
        );
        assert!(
            carol.detail.ends_with("(by alice@example.com)"),
            "{}",
            carol.detail
        );
        assert_eq!(carol.until, "2026-12-03T00:00:00Z");
        assert_eq!(filter(rows.clone(), Some("bob"), None).len(), 1);
        assert!(filter(rows, None, Some("user-bob")).is_empty());
    }

    /// A group the SCIM service writes counts only the Users it wrote (docs/security.md,
    /// "Membership by identity"), in `homestead access` as in the operator: carol, made by HR,
    /// is not reached through it, so her binding is the Share's, not the group's.
    #[test]
    fn a_scim_group_counts_only_the_users_scim_wrote() {
        let mut listed = listed();
        listed.groups = vec![
            DirectoryGroup::test("analysts", "Analysts")
                .with_members(&["carol"])
                .written_by_scim(),
        ];
        let source_of_carol = |listed: &Listed| {
            let found = rows(listed);
            let carol = found.iter().find(|r| r.person == "carol").unwrap();
            (carol.source, carol.detail.clone())
        };
        assert_eq!(source_of_carol(&listed).0, Source::Share);
        listed.users[2] = User::test("carol").written_by_scim();
        let (source, detail) = source_of_carol(&listed);
        assert_eq!(source, Source::Group, "{detail}");
    }

    /// The CSV reads back, cell for cell, as a spreadsheet would read it: quoted commas, quotes
    /// and new lines survive, and a cell that would be a formula is text.
    #[test]
    fn the_csv_round_trips_and_runs_no_formula() {
        let rows = rows(&listed());
        let mut buffer = Vec::new();
        write(&rows, AccessFormat::Csv, &mut buffer).unwrap();
        let mut reader = csv::ReaderBuilder::new().from_reader(buffer.as_slice());
        let headers = reader.headers().unwrap().clone();
        assert_eq!(
            headers.iter().collect::<Vec<_>>(),
            [
                "namespace",
                "subject",
                "person",
                "role",
                "source",
                "detail",
                "until"
            ]
        );
        let read: Vec<Row> = reader.deserialize().map(Result::unwrap).collect();
        assert_eq!(read.len(), rows.len());
        for (read, written) in read.iter().zip(&rows) {
            assert_eq!(read.detail, inert(&written.detail));
            assert_eq!(
                (&read.namespace, &read.source, &read.until),
                (&written.namespace, &written.source, &written.until)
            );
        }
        let bob = read.iter().find(|r| r.person == "bob").unwrap();
        assert!(
            bob.detail.contains("\"quoted\"\nand a new line"),
            "{}",
            bob.detail
        );
        assert_eq!(inert("=1+1"), "'=1+1");
        assert_eq!(inert("-x"), "'-x");
        assert_eq!(inert("plain"), "plain");
    }

    #[test]
    fn the_table_has_a_header_and_a_line_per_row() {
        let rows = rows(&listed());
        let mut buffer = Vec::new();
        write(&rows, AccessFormat::Table, &mut buffer).unwrap();
        let text = String::from_utf8(buffer).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), rows.len() + 1, "{text}");
        assert!(lines[0].starts_with("NAMESPACE"));
        let mut json = Vec::new();
        write(&rows, AccessFormat::Json, &mut json).unwrap();
        let back: Vec<Row> = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, rows);
    }
}
