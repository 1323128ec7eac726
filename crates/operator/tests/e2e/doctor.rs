//! `homestead doctor` against the local control plane (docs/operations.md, "Before go-live"):
//! with a person whose User binds the username the API server gives them, every check passes;
//! with a person the authenticator names with a prefix, the identity check fails and names the
//! prefix and the fix.

use super::*;
use homestead_testenv::ADMIN;

/// Runs `homestead doctor` as the admin with `person`'s own kubeconfig; returns (success,
/// stdout).
fn doctor(person: &str) -> (bool, String) {
    let plane = env().plane;
    let dir = plane.dir();
    let admin = plane
        .write_kubeconfig(ADMIN, &dir.join("doctor-admin.kubeconfig"))
        .unwrap();
    let file = dir.join(format!(
        "doctor-{}.kubeconfig",
        person.replace([':', '@'], "-")
    ));
    let person = plane.write_kubeconfig(person, &file).unwrap();
    run_with_stdin(
        std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
            .arg("doctor")
            .arg("--kubeconfig")
            .arg(admin)
            .arg("--person-kubeconfig")
            .arg(person),
        "",
    )
}

#[tokio::test]
async fn doctor_passes_a_sound_cluster_and_names_a_prefixed_identity() {
    let s = Scenario::new();
    let c = admin().await;
    let sound =
        User::test("e2e-doc-tey").with_spec(json!({ "identity": { "username": TENANTS[5] } }));
    // The authenticator calls this person `oidc:doc-pat@example.com` (PREFIXED).
    let prefixed = User::test("e2e-doc-pat")
        .with_spec(json!({ "identity": { "username": "doc-pat@example.com" } }));
    s.create(&c, &sound).await;
    s.create(&c, &prefixed).await;
    wait_reason(&c, "e2e-doc-tey", "Provisioned").await;
    wait_reason(&c, "e2e-doc-pat", "Provisioned").await;

    let (ok, out) = doctor(TENANTS[5]);
    println!("homestead doctor, a sound identity:\n{out}");
    assert!(ok, "{out}");
    for check in [
        "ok    CRDs:",
        "ok    admission policies:",
        "ok    admission in force:",
        "ok    identity mapping:",
    ] {
        assert!(out.contains(check), "no {check:?} in:\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");

    let (ok, out) = doctor(PREFIXED);
    println!("homestead doctor, a prefixed identity:\n{out}");
    assert!(!ok, "a failed check exits 1: {out}");
    assert!(out.contains("FAIL  identity mapping:"), "{out}");
    assert!(out.contains("the prefix \"oidc:\""), "{out}");
    assert!(
        out.contains("User e2e-doc-pat binds \"doc-pat@example.com\""),
        "{out}"
    );
    assert!(out.contains("--oidc-username-prefix=-"), "{out}");
}
