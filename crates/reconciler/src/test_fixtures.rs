//! Builders shared by the unit tests.

use homestead_api::User;
use serde_json::{Value, json};

/// A User named `name` with uid `uid-<name>`, identity `<name>@example.com` in group `team`,
/// and the rest of its spec from `spec`.
pub fn user(name: &str, mut spec: Value) -> User {
    spec["identity"] = json!({ "username": format!("{name}@example.com"), "groups": ["team"] });
    serde_json::from_value(json!({
        "apiVersion": "homestead.dev/v1alpha1",
        "kind": "User",
        "metadata": { "name": name, "uid": format!("uid-{name}"), "generation": 1 },
        "spec": spec,
    }))
    .unwrap()
}
