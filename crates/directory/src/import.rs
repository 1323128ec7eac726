//! Importing a roster: each row becomes a User by server-side apply (field manager
//! `homestead-import`), only where it differs from the cluster, so importing the same roster
//! twice writes nothing. Users of the same source that left the roster are left, suspended or
//! deleted (`--prune`). A dry run asks the API server to validate every write (`dryRun=All`)
//! and stores nothing.
//!
//! A roster never prunes by accident (docs/directory.md, "Pruning"): a roster with no valid
//! row prunes nobody ([`ImportError::EmptyRoster`]), and a prune larger than the [`PruneLimit`]
//! (a count and a share of the source's Users) is refused whole, before anything is written,
//! unless the caller confirms at least that many ([`ImportError::MassPrune`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use homestead_api::{User, is_label_value};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::roster::{LABEL_SOURCE, Row, RowFailure};

/// The field manager of every write the import makes.
pub const FIELD_MANAGER: &str = "homestead-import";

/// What happens to Users of the same source that are no longer in the roster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prune {
    /// Nothing: they are reported as left alone.
    #[default]
    None,
    /// `spec.suspended: true`: access revoked, Namespace and data kept.
    Suspend,
    /// Deleted: offboarded per each User's `deletionPolicy`.
    Delete,
}

/// How many Users one import may prune before it needs a confirmation: a prune is a mass
/// prune when it acts on more than `max_count` Users, or on more than `max_percent` percent of
/// the source's Users (and on more than one). A mass prune goes ahead only when `confirmed`
/// is at least its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneLimit {
    /// The most Users pruned without a confirmation (count).
    pub max_count: usize,
    /// The largest share of the source's Users pruned without a confirmation (percent, 0-100).
    pub max_percent: u8,
    /// `--allow-mass-prune N`: the caller allows pruning up to this many Users (count).
    pub confirmed: Option<usize>,
}

impl Default for PruneLimit {
    /// 10 Users and 10 percent, nothing confirmed.
    fn default() -> Self {
        Self {
            max_count: 10,
            max_percent: 10,
            confirmed: None,
        }
    }
}

impl PruneLimit {
    /// Whether pruning `count` of the source's `total` Users needs a confirmation that is
    /// missing or smaller than `count`.
    pub fn refuses(&self, count: usize, total: usize) -> bool {
        let mass = count > self.max_count
            || (count > 1 && count * 100 > usize::from(self.max_percent) * total);
        mass && self.confirmed.is_none_or(|n| n < count)
    }
}

/// How to import.
#[derive(Clone, Debug)]
pub struct Options {
    /// The roster's name, set as the [`LABEL_SOURCE`] label on every User it declares; a valid
    /// label value.
    pub source: String,
    /// Validate every write on the API server (`dryRun=All`) and store nothing.
    pub dry_run: bool,
    /// What happens to Users of `source` missing from the roster.
    pub prune: Prune,
    /// How many Users a prune may act on without a confirmation.
    pub prune_limit: PruneLimit,
    /// Requests in flight at once.
    pub concurrency: usize,
}

/// What an import did (or, in a dry run, would do), by User name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Users created.
    pub created: Vec<String>,
    /// Users whose imported fields changed.
    pub changed: Vec<String>,
    /// Users already as the roster says: nothing written.
    pub unchanged: Vec<String>,
    /// Users of the source missing from the roster, suspended or deleted per [`Prune`].
    pub pruned: Vec<String>,
    /// Of `pruned` under [`Prune::Delete`], those whose `deletionPolicy` is `Retain`: their
    /// Namespace is kept (access revoked); every other one's is deleted with its contents.
    pub retained: Vec<String>,
    /// Users of the source missing from the roster, left alone ([`Prune::None`], or already
    /// suspended).
    pub left: Vec<String>,
    /// Rows that could not be applied, with the reason (the API server's message for a write
    /// it refused), and prunes that failed (line 0).
    pub failed: Vec<RowFailure>,
}

impl Report {
    /// Whether every row and prune succeeded.
    pub fn succeeded(&self) -> bool {
        self.failed.is_empty()
    }
}

/// Why an import could not start; nothing is written then.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// `--source` is not a valid label value.
    #[error(
        "--source {0:?} is not a valid label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    InvalidSource(String),
    /// Listing the existing Users failed.
    #[error("listing Users: {0}")]
    List(#[source] kube::Error),
    /// The roster has no valid row, yet it should prune: a truncated or header-only file
    /// would remove every User of the source.
    #[error(
        "the roster has no valid row: refusing to prune every User of source {0:?} (nothing was written)"
    )]
    EmptyRoster(String),
    /// The prune would act on more Users than [`PruneLimit`] allows without a confirmation.
    #[error(
        "refusing to {verb} {count} of the {total} Users of source {roster:?} (more than {max_count}, or more than {max_percent}% of them): {names}; nothing was written. Check the roster; if it is right, run again with --allow-mass-prune {count}"
    )]
    MassPrune {
        /// `suspend` or `delete`.
        verb: &'static str,
        /// How many Users would be pruned.
        count: usize,
        /// How many Users the source has.
        total: usize,
        /// The source (`--source`).
        roster: String,
        /// [`PruneLimit::max_count`].
        max_count: usize,
        /// [`PruneLimit::max_percent`].
        max_percent: u8,
        /// The first names of those Users, comma-separated.
        names: String,
    },
}

/// One write the import decided on.
enum Work<'a> {
    /// Apply `row` (a create when `new`).
    Apply { row: &'a Row, new: bool },
    /// Suspend or delete the User `name`, which left the roster.
    Prune { name: String },
}

/// Imports `rows` (see [`crate::roster::parse`]); `failures` are rows parsing already refused,
/// reported as they are. Lists the Users once, then writes only what differs, `concurrency`
/// at a time, calling `progress` after each row or prune.
///
/// # Errors
/// [`ImportError`] when the import cannot start, or would prune by accident (an empty roster,
/// a prune over [`Options::prune_limit`]): nothing is written then. A row the API server
/// refuses is not an error but a [`RowFailure`] in the [`Report`]; the other rows are still
/// applied.
pub async fn import(
    client: &Client,
    rows: &[Row],
    failures: Vec<RowFailure>,
    options: &Options,
    progress: impl Fn() + Sync,
) -> Result<Report, ImportError> {
    if options.source.is_empty() || !is_label_value(&options.source) {
        return Err(ImportError::InvalidSource(options.source.clone()));
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<User>(&()));
    let existing: HashMap<String, DynamicObject> = api
        .list(&ListParams::default())
        .await
        .map_err(ImportError::List)?
        .items
        .into_iter()
        .filter_map(|u| Some((u.metadata.name.clone()?, u)))
        .collect();

    let mut report = Report {
        failed: failures,
        ..Report::default()
    };
    let work = plan(rows, &existing, options, &mut report, &progress);
    check_prune(rows, &existing, &work, options)?;
    report.retained = work
        .iter()
        .filter_map(|w| match w {
            Work::Prune { name } if options.prune == Prune::Delete => Some(name),
            _ => None,
        })
        .filter(|name| existing[name.as_str()].data["spec"]["deletionPolicy"] == json!("Retain"))
        .cloned()
        .collect();
    let users: Api<User> = Api::all(client.clone());
    let outcomes: Vec<(Work<'_>, Result<(), String>)> = futures::stream::iter(work)
        .map(|work| {
            let users = users.clone();
            async move {
                let result = write(&users, &work, options).await;
                (work, result)
            }
        })
        .buffer_unordered(options.concurrency.max(1))
        .inspect(|_| progress())
        .collect()
        .await;
    for (work, result) in outcomes {
        report.record(work, result);
    }
    report.sort();
    Ok(report)
}

/// Refuses the prunes in `work` that `options` does not allow: any at all when `rows` is empty,
/// and more than [`Options::prune_limit`] of the source's `existing` Users unless confirmed.
fn check_prune(
    rows: &[Row],
    existing: &HashMap<String, DynamicObject>,
    work: &[Work<'_>],
    options: &Options,
) -> Result<(), ImportError> {
    let pruned: Vec<&str> = work
        .iter()
        .filter_map(|w| match w {
            Work::Prune { name } => Some(name.as_str()),
            Work::Apply { .. } => None,
        })
        .collect();
    if pruned.is_empty() {
        return Ok(());
    }
    if rows.is_empty() {
        return Err(ImportError::EmptyRoster(options.source.clone()));
    }
    let total = existing
        .values()
        .filter(|u| {
            u.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SOURCE)) == Some(&options.source)
        })
        .count();
    let limit = options.prune_limit;
    if !limit.refuses(pruned.len(), total) {
        return Ok(());
    }
    let shown = pruned.len().min(20);
    let mut names = pruned[..shown].join(", ");
    if pruned.len() > shown {
        names.push_str(&format!(" and {} more", pruned.len() - shown));
    }
    Err(ImportError::MassPrune {
        verb: if options.prune == Prune::Delete {
            "delete"
        } else {
            "suspend"
        },
        count: pruned.len(),
        total,
        roster: options.source.clone(),
        max_count: limit.max_count,
        max_percent: limit.max_percent,
        names,
    })
}

/// The writes `rows` need against the `existing` Users (by name): an apply for each row that
/// is new or differs, a prune for each User of `options.source` no longer in the roster (or in
/// it only as a failed row) that `options.prune` acts on. Rows already as imported and Users
/// left alone go straight into `report` (calling `progress` for each unchanged row).
fn plan<'a>(
    rows: &'a [Row],
    existing: &HashMap<String, DynamicObject>,
    options: &Options,
    report: &mut Report,
    progress: &impl Fn(),
) -> Vec<Work<'a>> {
    let mut work = Vec::new();
    for row in rows {
        match existing.get(&row.name) {
            None => work.push(Work::Apply { row, new: true }),
            Some(live) if imported_as(live, &row.user(&options.source)) => {
                report.unchanged.push(row.name.clone());
                progress();
            }
            Some(_) => work.push(Work::Apply { row, new: false }),
        }
    }
    let listed: HashSet<&str> = rows
        .iter()
        .map(|r| r.name.as_str())
        .chain(report.failed.iter().map(|f| f.name.as_str()))
        .collect();
    let mut gone: Vec<&DynamicObject> = existing
        .values()
        .filter(|u| {
            u.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SOURCE)) == Some(&options.source)
        })
        .filter(|u| !listed.contains(u.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    gone.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for user in gone {
        let name = user.metadata.name.clone().unwrap_or_default();
        let suspended = user.data["spec"]["suspended"] == json!(true);
        if options.prune == Prune::None || (options.prune == Prune::Suspend && suspended) {
            report.left.push(name);
        } else {
            work.push(Work::Prune { name });
        }
    }
    work
}

impl Report {
    /// Records the `result` of `work`: the API server's message, when it refused, as a
    /// [`RowFailure`] (line 0 for a prune).
    fn record(&mut self, work: Work<'_>, result: Result<(), String>) {
        match (work, result) {
            (Work::Apply { row, new: true }, Ok(())) => self.created.push(row.name.clone()),
            (Work::Apply { row, new: false }, Ok(())) => self.changed.push(row.name.clone()),
            (Work::Apply { row, .. }, Err(message)) => self.failed.push(RowFailure {
                line: row.line,
                name: row.name.clone(),
                message,
            }),
            (Work::Prune { name }, Ok(())) => self.pruned.push(name),
            (Work::Prune { name }, Err(message)) => self.failed.push(RowFailure {
                line: 0,
                name,
                message,
            }),
        }
    }

    /// Sorts every list by name, and the failures by line, then name.
    fn sort(&mut self) {
        for list in [
            &mut self.created,
            &mut self.changed,
            &mut self.unchanged,
            &mut self.pruned,
            &mut self.retained,
            &mut self.left,
        ] {
            list.sort();
        }
        self.failed.sort_by_key(|f| (f.line, f.name.clone()));
    }
}

/// Makes one write; returns the API server's message when it refuses.
async fn write(users: &Api<User>, work: &Work<'_>, options: &Options) -> Result<(), String> {
    let mut params = PatchParams::apply(FIELD_MANAGER);
    params.dry_run = options.dry_run;
    let result = match work {
        Work::Apply { row, .. } => users
            .patch(&row.name, &params, &Patch::Apply(row.user(&options.source)))
            .await
            .map(drop),
        Work::Prune { name } if options.prune == Prune::Suspend => {
            // A merge patch: an apply of `suspended` alone would drop the import's other fields.
            let params = PatchParams {
                dry_run: options.dry_run,
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            users
                .patch(
                    name,
                    &params,
                    &Patch::Merge(json!({ "spec": { "suspended": true } })),
                )
                .await
                .map(drop)
        }
        Work::Prune { name } => {
            let params = DeleteParams {
                dry_run: options.dry_run,
                ..DeleteParams::default()
            };
            users.delete(name, &params).await.map(drop)
        }
    };
    result.map_err(|error| match error {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    })
}

/// Whether the live User `live` already is what applying `desired` would make it: its source
/// label, every imported field with the same value, and no field the import set before that
/// the row no longer has (from `metadata.managedFields`).
fn imported_as(live: &DynamicObject, desired: &Value) -> bool {
    let label = live
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SOURCE));
    if label.map(String::as_str) != desired["metadata"]["labels"][LABEL_SOURCE].as_str() {
        return false;
    }
    let (want, have) = (&desired["spec"], &live.data["spec"]);
    let mut fields = BTreeSet::new();
    for (key, value) in want.as_object().into_iter().flatten() {
        if key == "identity" {
            for (sub, value) in value.as_object().into_iter().flatten() {
                if have["identity"][sub] != *value {
                    return false;
                }
                fields.insert(format!("identity.{sub}"));
            }
        } else if have[key] != *value {
            return false;
        }
        fields.insert(key.clone());
    }
    owned_spec_fields(live).is_subset(&fields)
}

/// The spec fields (`role`, `identity`, `identity.groups`, ...) the import's field manager owns
/// on `live`, by server-side apply.
fn owned_spec_fields(live: &DynamicObject) -> BTreeSet<String> {
    let mut owned = BTreeSet::new();
    let entries = live.meta().managed_fields.iter().flatten();
    for entry in entries.filter(|e| {
        e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply")
    }) {
        let Some(fields) = entry.fields_v1.as_ref() else {
            continue;
        };
        let spec = &fields.0["f:spec"];
        for (key, value) in spec.as_object().into_iter().flatten() {
            let Some(key) = key.strip_prefix("f:") else {
                continue;
            };
            owned.insert(key.to_owned());
            if key == "identity" {
                for sub in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                    if let Some(sub) = sub.strip_prefix("f:") {
                        owned.insert(format!("identity.{sub}"));
                    }
                }
            }
        }
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roster::parse;

    fn live(spec: Value, owned: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "User",
            "metadata": {
                "name": "alice", "labels": { LABEL_SOURCE: "hr" },
                "managedFields": [{ "manager": FIELD_MANAGER, "operation": "Apply",
                                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": owned } }],
            },
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_prune_over_the_count_or_the_share_needs_a_confirmation_of_at_least_its_size() {
        let limit = PruneLimit::default();
        assert!(!limit.refuses(1, 3), "one person leaving a small roster");
        assert!(!limit.refuses(10, 100), "10 of 100 is within both limits");
        assert!(limit.refuses(11, 1000), "over the count");
        assert!(limit.refuses(3, 20), "over the share");
        assert!(limit.refuses(500, 500), "everyone");
        let confirmed = PruneLimit {
            confirmed: Some(500),
            ..limit
        };
        assert!(!confirmed.refuses(500, 500));
        assert!(
            confirmed.refuses(501, 501),
            "a confirmation covers at most its own count"
        );
    }

    #[test]
    fn a_user_is_unchanged_only_when_every_imported_field_is_as_the_row_says() {
        let (rows, _) =
            parse("name,username,role\nalice,alice@example.com,edit\n".as_bytes()).unwrap();
        let desired = rows[0].user("hr");
        let owned = json!({ "f:identity": { "f:username": {} }, "f:role": {} });
        let spec = json!({ "identity": { "username": "alice@example.com" }, "role": "edit",
                           "suspended": false, "deletionPolicy": "Delete" });
        assert!(imported_as(&live(spec.clone(), owned.clone()), &desired));

        let mut edited = spec.clone();
        edited["role"] = json!("admin");
        assert!(
            !imported_as(&live(edited, owned.clone()), &desired),
            "a changed value"
        );

        let with_email = json!({ "f:identity": { "f:username": {} }, "f:role": {}, "f:email": {} });
        let mut spec_email = spec.clone();
        spec_email["email"] = json!("old@example.com");
        assert!(
            !imported_as(&live(spec_email, with_email), &desired),
            "a field the import set before and the row no longer has is removed by an apply"
        );
        let mut other = live(spec, owned);
        other.metadata.labels = Some([(LABEL_SOURCE.to_owned(), "other".to_owned())].into());
        assert!(!imported_as(&other, &desired), "another source");
    }
}
