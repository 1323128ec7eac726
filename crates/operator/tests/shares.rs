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

/// Who may share, by what people can really do (`kubectl auth can-i --as` against the real
/// aggregated roles): `admin` in a namespace writes its Shares, `edit` and `view` read them.
#[tokio::test]
async fn admin_writes_shares_and_edit_and_view_read_them() {
    let _ = env();
    let ns = "shares-rbac";
    let (ok, out) = kubectl(&["create", "namespace", ns], "");
    assert!(ok || out.contains("AlreadyExists"), "{out}");
    for (person, role) in [
        ("ann@example.com", "admin"),
        ("ed@example.com", "edit"),
        ("vic@example.com", "view"),
    ] {
        let name = format!("share-rbac-{role}");
        let (ok, out) = kubectl(
            &[
                "create",
                "rolebinding",
                &name,
                "-n",
                ns,
                &format!("--clusterrole={role}"),
                &format!("--user={person}"),
            ],
            "",
        );
        assert!(ok || out.contains("AlreadyExists"), "{out}");
    }
    let can = |person: &str, verb: &str| {
        let who = format!("--as={person}");
        let (_, out) = kubectl(
            &[
                "auth",
                "can-i",
                verb,
                "shares.homestead.dev",
                "-n",
                ns,
                &who,
            ],
            "",
        );
        out.lines().next().unwrap_or_default().trim().to_owned()
    };
    // The aggregation controller may take a moment to fold the new rules in.
    let started = std::time::Instant::now();
    while can("ann@example.com", "create") != "yes" {
        assert!(
            started.elapsed().as_secs() < 30,
            "admin never got create on shares"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    for verb in [
        "create", "update", "patch", "delete", "get", "list", "watch",
    ] {
        assert_eq!(can("ann@example.com", verb), "yes", "admin {verb}");
    }
    for person in ["ed@example.com", "vic@example.com"] {
        for verb in ["get", "list", "watch"] {
            assert_eq!(can(person, verb), "yes", "{person} {verb}");
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert_eq!(can(person, verb), "no", "{person} may not {verb} shares");
        }
    }
    assert_eq!(can("nobody@example.com", "get"), "no");
}
