//! The committed `manifests/crd.yaml` must be exactly what the Rust types generate.

#[test]
fn committed_crd_matches_the_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/crd.yaml");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == homestead_api::crd_yaml(),
        "manifests/crd.yaml is stale: run `just generate` and commit the result"
    );
}
