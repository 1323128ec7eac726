//! Every bound the schema puts on a field is said in words where `kubectl explain` shows it:
//! a field with `maxLength`, `maxItems`, `maxProperties` or `maximum` names that number in its
//! description, or, for the items of a list or the values of a map (which `kubectl explain`
//! shows under the field itself), in the description of that field.

use serde_json::Value;

/// The bounds a schema node sets, as the numbers a description would write (`1000`, not
/// `1000.0`; thousands may be written `10,000`).
fn bounds(node: &Value) -> Vec<(&'static str, String)> {
    ["maxLength", "maxItems", "maxProperties", "maximum"]
        .into_iter()
        .filter_map(|key| {
            let n = node.get(key)?.as_f64()?;
            Some((key, format!("{n}")))
        })
        .collect()
}

fn says(description: &str, number: &str) -> bool {
    let plain = description.replace(',', "");
    plain
        .split(|c: char| !c.is_ascii_digit() && c != '-')
        .any(|word| word.trim_start_matches('-') == number.trim_start_matches('-'))
}

/// Collects, under `path`, every bound of `node` (and of its properties, items and map values)
/// that neither its description nor, for items and map values, `parent` says.
fn unsaid(node: &Value, parent: &str, path: &str, found: &mut Vec<String>) {
    let description = node
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for (key, number) in bounds(node) {
        if !says(description, &number) && !says(parent, &number) {
            found.push(format!("{path}: {key} {number}"));
        }
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            unsaid(child, "", &format!("{path}.{name}"), found);
        }
    }
    // Items and map values are shown under their field: its description may say their bounds.
    let here = format!("{parent} {description}");
    if let Some(items) = node.get("items") {
        unsaid(items, &here, &format!("{path}[]"), found);
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        unsaid(values, &here, &format!("{path}{{}}"), found);
    }
}

#[test]
fn every_bounded_field_states_its_limit() {
    let mut found = Vec::new();
    for crd in homestead_api::crds() {
        let crd = serde_json::to_value(crd).unwrap();
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            unsaid(&version["schema"]["openAPIV3Schema"], "", &kind, &mut found);
        }
    }
    assert!(
        found.is_empty(),
        "bounded fields whose description does not state the bound:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_bound_left_unsaid_is_found() {
    // The check itself: a description without the number is reported, one with it is not.
    let node = serde_json::json!({
        "properties": {
            "said": { "maxLength": 63, "description": "A name, at most 63 characters." },
            "unsaid": { "maxLength": 253, "description": "A role." },
            "list": {
                "description": "At most 16, each at most 253 characters.",
                "maxItems": 16,
                "items": { "maxLength": 253 }
            },
            "map": { "additionalProperties": { "maxLength": 4096 } }
        }
    });
    let mut found = Vec::new();
    unsaid(&node, "", "x", &mut found);
    found.sort();
    assert_eq!(
        found,
        ["x.map{}: maxLength 4096", "x.unsaid: maxLength 253"]
    );
}
