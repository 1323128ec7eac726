//! The homes API's OpenAPI documents, which kube-apiserver's aggregator downloads and merges into
//! its own (`/openapi/v2`, and `/openapi/v3` with one document per group-version), so that
//! `kubectl explain homes` and clients generated from the cluster's schema know `Home`
//! (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-interface-definition>).
//!
//! Each schema carries `x-kubernetes-group-version-kind`, by which kubectl finds a kind's schema.
//! Metadata is described inline rather than by a reference into the core API's definitions, so
//! each document stands on its own.

use serde_json::{Value, json};

use crate::resource::{GROUP, GROUP_VERSION, VERSION};

/// The definitions' names: the group reversed, as Kubernetes names its own.
const HOME: &str = "dev.homestead.homes.v1alpha1.Home";
const HOME_LIST: &str = "dev.homestead.homes.v1alpha1.HomeList";

fn gvk(kind: &str) -> Value {
    json!([{ "group": GROUP, "version": VERSION, "kind": kind }])
}

fn string(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// The schema of use against limits: `hard` and `used`, each resource names to quantities.
fn usage(description: &str) -> Value {
    let amounts = |what: &str| {
        json!({ "type": "object", "description": what,
                "additionalProperties": { "type": "string" } })
    };
    json!({ "type": "object", "description": description, "properties": {
        "hard": amounts("The limits."),
        "used": amounts("What is used of them."),
    }})
}

/// The schemas of `Home` and `HomeList`; `reference` turns a definition's name into a `$ref`.
fn home(reference: &dyn Fn(&str) -> String) -> (Value, Value) {
    let home = json!({
        "type": "object",
        "description": "A namespace you can use through Homestead: your own home, or one \
            shared with you or a directory group you are in. Read-only; you see only your own.",
        "properties": {
            "apiVersion": string("homes.homestead.dev/v1alpha1"),
            "kind": string("Home"),
            "metadata": {
                "type": "object",
                "description": "The namespace's name, and since when you have it.",
                "properties": {
                    "name": string("The namespace."),
                    "creationTimestamp": { "type": "string", "format": "date-time",
                        "description": "Since your first way in." },
                },
            },
            "role": string("The ClusterRole you have there (the highest, with several ways in)."),
            "via": string("Your ways in: `own home`, `share <name>`, `group <group> (share <name>)`."),
            "until": { "type": "string", "format": "date-time",
                "description": "When your last way in ends; absent if one does not." },
            "state": string("Your own home's state: Active, Suspended, Expired, NotReady."),
            "user": string("Your User (metadata.name)."),
            "profile": string("The Profile your home was reconciled with, if any."),
            "total": usage("The total quota of this home's owner across all their homes \
                (hard and used, resource names to quantities); absent without one, or for a \
                home only shared with you."),
            "slice": usage("This home's slice of that total: its ResourceQuota \
                homestead-total (hard and used)."),
        },
        "x-kubernetes-group-version-kind": gvk("Home"),
    });
    let list = json!({
        "type": "object",
        "description": "Your homes.",
        "required": ["items"],
        "properties": {
            "apiVersion": string("homes.homestead.dev/v1alpha1"),
            "kind": string("HomeList"),
            "metadata": { "type": "object", "description": "The list's metadata." },
            "items": { "type": "array", "items": { "$ref": reference(HOME) } },
        },
        "x-kubernetes-group-version-kind": gvk("HomeList"),
    });
    (home, list)
}

/// The operations on `homes`, each answering with `$ref` to the definition it returns.
fn paths(reference: &dyn Fn(&str) -> String, v3: bool) -> Value {
    let response = |definition: &str| {
        let schema = json!({ "$ref": reference(definition) });
        if v3 {
            json!({ "200": { "description": "OK",
                "content": { "application/json": { "schema": schema } } } })
        } else {
            json!({ "200": { "description": "OK", "schema": schema } })
        }
    };
    let operation = |id: &str, action: &str, definition: &str| {
        json!({ "get": {
            "operationId": id,
            "description": "Your homes: only yours, never another person's.",
            "tags": ["homesHomesteadDev_v1alpha1"],
            "responses": response(definition),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": { "group": GROUP, "version": VERSION, "kind": "Home" },
        } })
    };
    let name = if v3 {
        json!({ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } })
    } else {
        json!({ "name": "name", "in": "path", "required": true, "type": "string" })
    };
    let mut one = operation("readHomesHomesteadDevV1alpha1Home", "get", HOME);
    one["parameters"] = json!([name]);
    json!({
        format!("/apis/{GROUP_VERSION}/homes"):
            operation("listHomesHomesteadDevV1alpha1Home", "list", HOME_LIST),
        format!("/apis/{GROUP_VERSION}/homes/{{name}}"): one,
    })
}

/// `/openapi/v2`: a Swagger 2.0 document of `homes`.
pub fn v2() -> Value {
    let reference = |name: &str| format!("#/definitions/{name}");
    let (home, list) = home(&reference);
    json!({
        "swagger": "2.0",
        "info": { "title": "Homestead homes API", "version": VERSION },
        "paths": paths(&reference, false),
        "definitions": { HOME: home, HOME_LIST: list },
    })
}

/// The path of the one group-version document under `/openapi/v3`.
pub const V3_PATH: &str = "apis/homes.homestead.dev/v1alpha1";

/// `/openapi/v3`: where each group-version's document is (the one).
pub fn v3_index() -> Value {
    json!({ "paths": { V3_PATH: { "serverRelativeURL": format!("/openapi/v3/{V3_PATH}") } } })
}

/// `/openapi/v3/apis/homes.homestead.dev/v1alpha1`: an OpenAPI 3.0 document of `homes`.
pub fn v3() -> Value {
    let reference = |name: &str| format!("#/components/schemas/{name}");
    let (home, list) = home(&reference);
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Homestead homes API", "version": VERSION },
        "paths": paths(&reference, true),
        "components": { "schemas": { HOME: home, HOME_LIST: list } },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `value`.
    fn references(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    found.push(r.clone());
                }
                map.values().for_each(|v| references(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| references(v, found)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_within_its_document() {
        for (document, prefix, definitions) in [
            (v2(), "#/definitions/", "/definitions"),
            (v3(), "#/components/schemas/", "/components/schemas"),
        ] {
            let mut found = Vec::new();
            references(&document, &mut found);
            assert!(found.len() >= 3, "{found:?}");
            for reference in found {
                let name = reference.strip_prefix(prefix).expect("a local reference");
                assert!(
                    document
                        .pointer(definitions)
                        .and_then(|d| d.get(name))
                        .is_some(),
                    "{reference} dangles"
                );
            }
        }
    }

    #[test]
    fn kubectl_finds_the_kinds_by_group_version_kind() {
        let schemas = v3();
        let home = &schemas["components"]["schemas"][HOME];
        assert_eq!(
            home["x-kubernetes-group-version-kind"][0],
            json!({ "group": "homes.homestead.dev", "version": "v1alpha1", "kind": "Home" })
        );
        assert_eq!(
            v3_index()["paths"][V3_PATH]["serverRelativeURL"],
            "/openapi/v3/apis/homes.homestead.dev/v1alpha1"
        );
    }
}
