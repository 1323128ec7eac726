//! The Share kind at admission (docs: issue "People work in teams"): the API server itself
//! refuses a Share that names no grantee, more than 20, a grantee that is both or neither a
//! User and a group, a raw identity, `cluster-admin`, no `expiresAt` or no reason, with the rule
//! named. What a Share grants is the operator's (not yet built on this branch).

mod common;

use common::*;

/// A Share document in namespace `default` with `spec` (YAML flow mappings).
fn share(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}\n",
        api = homestead_api::API_VERSION
    )
}

#[test]
fn bad_shares_are_refused_at_admission_with_the_rule_named() {
    let _ = env();
    let good = "  to: [{user: bob}, {group: analysts}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: review";
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &share("fine", good),
    );
    assert!(ok, "a well-formed Share is accepted: {out}");
    let cases = [
        (
            "no grantee",
            "  to: []\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "should have at least 1 items",
        ),
        (
            "both",
            "  to: [{user: bob, group: analysts}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "exactly one of user",
        ),
        (
            "neither",
            "  to: [{}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "exactly one of user",
        ),
        (
            "raw identity",
            "  to: [{user: \"bob@example.com\"}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "should match",
        ),
        (
            "cluster-admin",
            "  to: [{user: bob}]\n  role: cluster-admin\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
            "cluster-admin",
        ),
        (
            "no expiry",
            "  to: [{user: bob}]\n  role: view\n  reason: r",
            "expiresAt: Required value",
        ),
        (
            "no reason",
            "  to: [{user: bob}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"",
            "reason: Required value",
        ),
    ];
    for (what, spec, rule) in cases {
        let (ok, out) = kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            &share("bad", spec),
        );
        assert!(!ok, "{what}: accepted: {out}");
        assert!(
            out.contains(rule),
            "{what}: refused without naming {rule:?}: {out}"
        );
    }
    let many: Vec<String> = (0..21).map(|i| format!("{{user: u{i}}}")).collect();
    let spec = format!(
        "  to: [{}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: r",
        many.join(", ")
    );
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &share("bad", &spec),
    );
    assert!(
        !ok && out.contains("must have at most 20 items"),
        "21 grantees: {out}"
    );
}
