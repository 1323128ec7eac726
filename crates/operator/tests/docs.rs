//! The docs name only metrics and alerts that exist (issue 50, "docs match the code"): every
//! `homestead_*` metric named in the README, `docs/`, the chart's README, its alert rules and
//! its dashboard is one the operator, the SCIM service or the homes API defines, and every
//! `Homestead*` alert the docs name is a rule in `charts/homestead/files/alerts.yaml`, with a
//! section of `docs/troubleshooting.md`. No cluster: files only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files people read: README.md, docs/*.md, the chart's README.
fn docs() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![
        root.join("README.md"),
        root.join("charts/homestead/README.md"),
    ];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The words of `text` that start with `prefix` and go on with `[A-Za-z0-9_]`, each standing
/// alone: not part of a Rust path (`tests::homestead_...`), a file name (`kubectl-homestead_...`)
/// or a longer word.
fn words(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "_:-/.".contains(c)) {
            continue;
        }
        let word: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // A Rust path (`homestead_model::identity`) names a crate, not a metric.
        if text[at + word.len()..].starts_with("::") {
            continue;
        }
        found.insert(word);
    }
    found
}

/// Every metric name defined in the source: the string literals of the metrics modules.
fn defined_metrics() -> BTreeSet<String> {
    let root = root();
    [
        "crates/reconciler/src/metrics.rs",
        "crates/directory/src/scim/metrics.rs",
        "crates/homes-api/src/metrics.rs",
        "crates/operator/src/homes.rs",
        "crates/operator/src/allocator.rs",
    ]
    .iter()
    .flat_map(|file| words(&read(&root.join(file)).replace('"', " "), "homestead_"))
    .collect()
}

/// Whether `name` is a metric of `defined`, or a series of one (a histogram's `_bucket`,
/// `_sum`, `_count`).
fn exists(name: &str, defined: &BTreeSet<String>) -> bool {
    defined.contains(name)
        || ["_bucket", "_sum", "_count"].iter().any(|s| {
            name.strip_suffix(s)
                .is_some_and(|base| defined.contains(base))
        })
}

#[test]
fn every_metric_the_docs_alerts_and_dashboard_name_exists() {
    let defined = defined_metrics();
    assert!(
        defined.len() > 20 && defined.contains("homestead_users"),
        "the metrics modules were not read: {defined:?}"
    );
    let root = root();
    let mut files = docs();
    files.push(root.join("charts/homestead/files/alerts.yaml"));
    files.push(root.join("charts/homestead/files/dashboard.json"));
    let mut missing = Vec::new();
    let mut named = 0;
    for file in &files {
        for name in words(&read(file), "homestead_") {
            named += 1;
            if !exists(&name, &defined) {
                missing.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(
        named > 30,
        "only {named} metric names found: is the scan reading the files?"
    );
    assert!(
        missing.is_empty(),
        "named, but no such metric: {missing:#?}"
    );
}

#[test]
fn every_alert_the_docs_name_exists_and_each_has_a_runbook() {
    let root = root();
    let rules = read(&root.join("charts/homestead/files/alerts.yaml"));
    let alerts: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("- alert: ")
                .or(l.trim().strip_prefix("alert: "))
        })
        .map(|a| a.trim().to_owned())
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    let mut missing = Vec::new();
    for file in docs() {
        for name in words(&read(&file), "Homestead") {
            // Alert names are CamelCase words after the prefix; `Homestead's` and the like are
            // prose.
            if name.len() > "Homestead".len() && !alerts.contains(&name) {
                missing.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "named, but no such alert: {missing:#?}");
    let runbooks = read(&root.join("docs/troubleshooting.md"));
    for alert in &alerts {
        assert!(
            runbooks.contains(&format!("## {alert}")) || runbooks.contains(&format!("### {alert}")),
            "docs/troubleshooting.md has no section for {alert}"
        );
    }
}

#[test]
fn the_scan_sees_a_name_that_does_not_exist() {
    let defined = defined_metrics();
    let text = "the `homestead_users` gauge, `homestead_reconcile_duration_seconds_bucket`, and \
                `homestead_no_such_metric`; not tests::homestead_x, kubectl-homestead_linux or \
                `homestead_model::identity`";
    let named = words(text, "homestead_");
    let missing: Vec<_> = named.iter().filter(|n| !exists(n, &defined)).collect();
    assert_eq!(missing, ["homestead_no_such_metric"]);
}
