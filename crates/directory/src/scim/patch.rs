//! SCIM PATCH (RFC 7644 §3.5.2): `add`, `replace` and `remove` operations applied to a
//! resource's JSON representation, which is then read back as a person.
//!
//! Attributes this service does not keep, and attributes of other schemas (extensions), may
//! be named; they are accepted and dropped, as on a POST or PUT, so an identity provider that sends more than the published schema (Entra ID's
//! default mappings do) keeps working. `id` and `meta` are read-only and ignored.

use scim_v2::filter::{
    AttrExp, AttrPath, CompValue, CompareOp, PatchPath, PatchValuePath, ValFilter,
};
use scim_v2::models::errors::ScimType;
use scim_v2::models::others::{OperationTarget, PatchOp, PatchOperation};
use serde_json::{Map, Value};

use super::error::ScimError;
use super::query::{get, is_core_uri, val_matches};

/// Top-level attributes that are read-only here: operations on them are ignored.
const READ_ONLY: [&str; 3] = ["id", "meta", "schemas"];

/// Applies every operation of `patch` to `resource` (a JSON object), in order.
///
/// # Errors
/// A 400 `invalidValue` for an `add` or `replace` without a value, `noTarget` when a
/// `replace` or `remove` with a value filter (`emails[type eq "work"]`) matches nothing,
/// `invalidPath` for a path under another schema's URN. An `add` with a value filter that
/// matches nothing adds the element the filter describes (Entra ID adds a person's first work
/// e-mail with `add` of `emails[type eq "work"].value`).
pub fn apply(resource: &mut Value, patch: &PatchOp) -> Result<(), ScimError> {
    for operation in &patch.operations {
        match operation {
            PatchOperation::Add(target) => set(resource, target, Op::Add)?,
            PatchOperation::Replace(target) => set(resource, target, Op::Replace)?,
            PatchOperation::Remove { path, value } => remove(resource, path, value.as_ref())?,
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Add,
    Replace,
}

fn object(resource: &mut Value) -> &mut Map<String, Value> {
    if !resource.is_object() {
        *resource = Value::Object(Map::new());
    }
    resource.as_object_mut().expect("just made an object")
}

/// The key under which `name` is stored in `map`: an existing key equal to it ignoring case,
/// else `name` itself.
fn key_of(map: &Map<String, Value>, name: &str) -> String {
    map.keys()
        .find(|k| k.eq_ignore_ascii_case(name))
        .cloned()
        .unwrap_or_else(|| name.to_owned())
}

fn set(resource: &mut Value, target: &OperationTarget, op: Op) -> Result<(), ScimError> {
    match target {
        OperationTarget::WithoutPath { value } => {
            for (key, value) in value {
                // The enterprise extension's `manager`, the one attribute of it kept.
                if key.eq_ignore_ascii_case(ENTERPRISE_USER) {
                    if let Some(manager) = manager_in(value) {
                        set_manager(resource, Some(manager));
                    }
                    continue;
                }
                // A core schema URN as a key holds attributes of that schema.
                if is_core_uri(Some(key)) && key.contains(':') {
                    if let Value::Object(inner) = value {
                        set(
                            resource,
                            &OperationTarget::WithoutPath {
                                value: inner.clone(),
                            },
                            op,
                        )?;
                    }
                    continue;
                }
                // Entra ID sends `"name.givenName": "Ada"` without a path.
                let path = match key.split_once('.') {
                    Some((top, sub)) => AttrPath::with_sub_attr(top, sub),
                    None => AttrPath::with_name(key.as_str()),
                };
                set_attr(resource, &path, value.clone(), op);
            }
            Ok(())
        }
        OperationTarget::WithPath { path, value } => {
            let value = value.clone().ok_or_else(|| {
                ScimError::invalid_value("an add or replace operation needs a value")
            })?;
            match path {
                PatchPath::Attr(attr) if is_manager(attr) => {
                    set_manager(resource, Some(value));
                    Ok(())
                }
                // The whole extension: of it, only `manager` counts.
                PatchPath::Attr(attr) if is_enterprise(attr) => {
                    if let Some(manager) = manager_in(&value) {
                        set_manager(resource, Some(manager));
                    }
                    Ok(())
                }
                PatchPath::Attr(attr) if elsewhere(attr) => Ok(()),
                PatchPath::Value(path) if elsewhere(&path.attr) => Ok(()),
                PatchPath::Attr(attr) => {
                    set_attr(resource, attr, value, op);
                    Ok(())
                }
                PatchPath::Value(path) => set_filtered(resource, path, value, op),
            }
        }
    }
}

/// The URN of SCIM's enterprise User extension (RFC 7643 §4.3).
pub const ENTERPRISE_USER: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";

/// Whether a path names the enterprise extension's `manager` (or its `value`).
fn is_manager(attr: &AttrPath) -> bool {
    attr.uri
        .as_deref()
        .is_some_and(|u| u.eq_ignore_ascii_case(ENTERPRISE_USER))
        && attr.name.eq_ignore_ascii_case("manager")
}

/// Whether a path names the enterprise extension as a whole: its URN, which the path grammar
/// reads as a URI whose last segment (`User`) is the attribute.
fn is_enterprise(attr: &AttrPath) -> bool {
    let whole = match &attr.uri {
        Some(uri) => format!("{uri}:{}", attr.name),
        None => attr.name.clone(),
    };
    attr.sub_attr.is_none() && whole.eq_ignore_ascii_case(ENTERPRISE_USER)
}

/// The `manager` of an enterprise extension object (its key compared without regard to case).
fn manager_in(extension: &Value) -> Option<Value> {
    extension.as_object().and_then(|e| {
        e.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("manager"))
            .map(|(_, v)| v.clone())
    })
}

/// Sets (or with `None` removes) the enterprise extension's `manager` of `resource`: a bare
/// string is the manager's `value` (their SCIM id), as Entra ID sends it; an object is kept as
/// it is.
fn set_manager(resource: &mut Value, manager: Option<Value>) {
    let map = object(resource);
    let key = key_of(map, ENTERPRISE_USER);
    let manager = match manager {
        Some(Value::String(id)) => Some(serde_json::json!({ "value": id })),
        Some(Value::Null) | None => None,
        Some(other) => Some(other),
    };
    let schemas = key_of(map, "schemas");
    let declared = |map: &mut Map<String, Value>, on: bool| {
        if let Some(Value::Array(list)) = map.get_mut(&schemas) {
            list.retain(|s| s.as_str() != Some(ENTERPRISE_USER));
            if on {
                list.push(Value::String(ENTERPRISE_USER.to_owned()));
            }
        }
    };
    match manager {
        Some(manager) => {
            let extension = object(map.entry(key).or_insert_with(|| Value::Object(Map::new())));
            extension.insert("manager".into(), manager);
            declared(map, true);
        }
        None => {
            // The manager is the one attribute of the extension kept: without it, no extension.
            map.remove(&key);
            declared(map, false);
        }
    }
}

/// Whether an operation's path is under another schema (an extension such as Entra ID's
/// enterprise `employeeNumber`): such operations are accepted and ignored, since nothing of
/// them is kept.
fn elsewhere(attr: &AttrPath) -> bool {
    !is_core_uri(attr.uri.as_deref())
}

/// `add` or `replace` of an attribute or a sub-attribute: a single value is set; a complex
/// value's sub-attributes are merged into the existing ones; an `add` to a multi-valued
/// attribute appends the new values, a `replace` replaces them all.
fn set_attr(resource: &mut Value, path: &AttrPath, value: Value, op: Op) {
    if READ_ONLY.iter().any(|r| path.name.eq_ignore_ascii_case(r)) {
        return;
    }
    let map = object(resource);
    let key = key_of(map, &path.name);
    if let Some(sub) = &path.sub_attr {
        let parent = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
        match parent {
            Value::Array(items) => {
                for item in items.iter_mut() {
                    let item = object(item);
                    let sub_key = key_of(item, sub);
                    item.insert(sub_key, value.clone());
                }
            }
            other => {
                let parent = object(other);
                let sub_key = key_of(parent, sub);
                parent.insert(sub_key, value);
            }
        }
        return;
    }
    match (map.get_mut(&key), value) {
        (_, Value::Null) => {
            map.remove(&key);
        }
        (Some(Value::Object(existing)), Value::Object(new)) => {
            for (k, v) in new {
                let k = key_of(existing, &k);
                existing.insert(k, v);
            }
        }
        (Some(Value::Array(existing)), new) if op == Op::Add => {
            let new = match new {
                Value::Array(items) => items,
                one => vec![one],
            };
            for item in new {
                if !existing.contains(&item) {
                    existing.push(item);
                }
            }
        }
        (_, new) => {
            map.insert(key, new);
        }
    }
}

/// `add` or `replace` with a value filter (`emails[type eq "work"].value`): sets the
/// sub-attribute of, or merges the value into, every element the filter matches.
fn set_filtered(
    resource: &mut Value,
    path: &PatchValuePath,
    value: Value,
    op: Op,
) -> Result<(), ScimError> {
    let map = object(resource);
    let key = key_of(map, &path.attr.name);
    let mut matched = false;
    if let Some(Value::Array(items)) = map.get_mut(&key) {
        for item in items.iter_mut().filter(|i| val_matches(&path.filter, i)) {
            matched = true;
            let element = object(item);
            match (&path.sub_attr, &value) {
                (Some(sub), value) => {
                    let sub_key = key_of(element, sub);
                    element.insert(sub_key, value.clone());
                }
                (None, Value::Object(new)) => {
                    for (k, v) in new {
                        let k = key_of(element, k);
                        element.insert(k, v.clone());
                    }
                }
                (None, _) => {
                    return Err(ScimError::invalid_value(format!(
                        "the value for {} must be an object",
                        path.attr.name
                    )));
                }
            }
        }
    }
    if matched {
        return Ok(());
    }
    if op == Op::Add {
        let mut element = described(&path.filter).ok_or_else(|| {
            ScimError::bad_request(
                ScimType::NoTarget,
                format!(
                    "no value of {} matches the filter, and the filter does not say what to add",
                    path.attr.name
                ),
            )
        })?;
        match (&path.sub_attr, value) {
            (Some(sub), value) => {
                element.insert(sub.clone(), value);
            }
            (None, Value::Object(new)) => element.extend(new),
            (None, _) => {
                return Err(ScimError::invalid_value(format!(
                    "the value for {} must be an object",
                    path.attr.name
                )));
            }
        }
        let list = map.entry(key).or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        list.as_array_mut()
            .expect("just made an array")
            .push(Value::Object(element));
        return Ok(());
    }
    Err(ScimError::bad_request(
        ScimType::NoTarget,
        format!("no value of {} matches the filter", path.attr.name),
    ))
}

/// The element a value filter made only of `eq` comparisons joined by `and` describes
/// (`type eq "work"` is `{"type": "work"}`); `None` for any other filter.
fn described(filter: &ValFilter) -> Option<Map<String, Value>> {
    match filter {
        ValFilter::Attr(AttrExp::Comparison(path, CompareOp::Eq, value))
            if path.sub_attr.is_none() =>
        {
            let value = match value {
                CompValue::Str(s) => Value::String(s.clone()),
                CompValue::True => Value::Bool(true),
                CompValue::False => Value::Bool(false),
                CompValue::Number(n) => Value::Number(n.clone()),
                CompValue::Null => return None,
            };
            Some(Map::from_iter([(path.name.clone(), value)]))
        }
        ValFilter::And(items) => items.as_slice().iter().try_fold(Map::new(), |mut all, f| {
            all.extend(described(f)?);
            Some(all)
        }),
        _ => None,
    }
}

/// `remove`: the attribute, its sub-attribute, the elements a value filter matches (or their
/// sub-attribute), or, with a `value` and no filter, the listed elements of a multi-valued
/// attribute (the form Entra ID sends for removing one member).
fn remove(resource: &mut Value, path: &PatchPath, value: Option<&Value>) -> Result<(), ScimError> {
    match path {
        PatchPath::Attr(attr) if is_manager(attr) || is_enterprise(attr) => {
            set_manager(resource, None);
            Ok(())
        }
        PatchPath::Attr(attr) if elsewhere(attr) => Ok(()),
        PatchPath::Value(path) if elsewhere(&path.attr) => Ok(()),
        PatchPath::Attr(attr) => {
            remove_attr(resource, attr, value);
            Ok(())
        }
        PatchPath::Value(path) => remove_filtered(resource, path, value),
    }
}

/// `remove` of `attr` (read-only attributes aside, which stay): the attribute, its
/// sub-attribute in every element or in the object, or, with a `value`, the listed elements of
/// a multi-valued attribute.
fn remove_attr(resource: &mut Value, attr: &AttrPath, value: Option<&Value>) {
    if READ_ONLY.iter().any(|r| attr.name.eq_ignore_ascii_case(r)) {
        return;
    }
    let map = object(resource);
    let key = key_of(map, &attr.name);
    match (&attr.sub_attr, map.get_mut(&key), value) {
        (None, Some(Value::Array(items)), Some(listed)) => {
            let listed = match listed {
                Value::Array(listed) => listed.clone(),
                one => vec![one.clone()],
            };
            items.retain(|item| !listed.iter().any(|l| same_element(item, l)));
        }
        (None, _, _) => {
            map.remove(&key);
        }
        (Some(sub), Some(Value::Array(items)), _) => {
            for item in items {
                if let Value::Object(element) = item {
                    let sub_key = key_of(element, sub);
                    element.remove(&sub_key);
                }
            }
        }
        (Some(sub), Some(Value::Object(parent)), _) => {
            let sub_key = key_of(parent, sub);
            parent.remove(&sub_key);
        }
        (Some(_), _, _) => {}
    }
}

/// `remove` of the elements of `path.attr` its value filter matches (only those with `value`,
/// when given), or of their sub-attribute.
///
/// # Errors
/// `noTarget` when the attribute has no values, or when no element matches (except for
/// `members`: removing someone who is not a member succeeds).
fn remove_filtered(
    resource: &mut Value,
    path: &PatchValuePath,
    value: Option<&Value>,
) -> Result<(), ScimError> {
    let map = object(resource);
    let key = key_of(map, &path.attr.name);
    let Some(Value::Array(items)) = map.get_mut(&key) else {
        return Err(ScimError::bad_request(
            ScimType::NoTarget,
            format!("{} has no values", path.attr.name),
        ));
    };
    let before = items.len();
    // The `value` of an element is what it is: removing it removes the element. With
    // a `value` in the operation, only the elements with that value (Entra ID sends
    // the address it removes).
    let whole = path
        .sub_attr
        .as_deref()
        .is_none_or(|sub| sub.eq_ignore_ascii_case("value"));
    let named =
        |item: &Value| value.is_none_or(|v| same_element(item, v) || get(item, "value") == Some(v));
    match path.sub_attr.as_deref() {
        Some(sub) if !whole => {
            for item in items.iter_mut().filter(|i| val_matches(&path.filter, i)) {
                if let Value::Object(element) = item {
                    let sub_key = key_of(element, sub);
                    element.remove(&sub_key);
                }
            }
        }
        _ => items.retain(|i| !(val_matches(&path.filter, i) && named(i))),
    }
    // Removing someone who is not a member succeeds: a provider may remove a person
    // from a group after the person is gone (Entra ID and Okta retry failures forever).
    let idempotent = path.attr.name.eq_ignore_ascii_case("members");
    if whole && items.len() == before && !idempotent {
        return Err(ScimError::bad_request(
            ScimType::NoTarget,
            format!("no value of {} matches the filter", path.attr.name),
        ));
    }
    Ok(())
}

/// Whether `item` is the element `listed` names: equal, or with the same `value`.
fn same_element(item: &Value, listed: &Value) -> bool {
    item == listed || (get(listed, "value").is_some() && get(item, "value") == get(listed, "value"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entra_ids_work_email_operations_add_replace_and_remove_it() {
        // No work e-mail yet: `Add` of the work e-mail's value creates the entry.
        let mut person = json!({"userName": "ada", "emails": [
            {"value": "ada@home.example", "type": "home"}
        ]});
        let add: PatchOp = serde_json::from_value(json!({
            "schemas": [scim_v2::schema_urns::PATCH_OP],
            "Operations": [{"op": "Add", "path": "emails[type eq \"work\"].value",
                            "value": "ada@example.com"}],
        }))
        .unwrap();
        apply(&mut person, &add).unwrap();
        assert_eq!(
            person["emails"][1],
            json!({"type": "work", "value": "ada@example.com"})
        );
        // A filter that does not say what the element is still finds no target.
        let mut unchanged = person.clone();
        let vague: PatchOp = serde_json::from_value(json!({
            "schemas": [scim_v2::schema_urns::PATCH_OP],
            "Operations": [{"op": "add", "path": "emails[type ne \"home\" and type ne \"work\"].value",
                            "value": "x@example.com"}],
        }))
        .unwrap();
        let error = apply(&mut unchanged, &vague).unwrap_err();
        assert_eq!(error.scim_type, Some(ScimType::NoTarget));

        // `Remove` of the work e-mail's value, with the value, removes that entry only.
        let out = patched(
            json!([{"op": "Remove", "path": "emails[type eq \"work\"].value",
                                  "value": "ada@example.com"}]),
        )
        .unwrap();
        assert_eq!(
            out["emails"],
            json!([{"value": "ada@home.example", "type": "home"}])
        );
        let error = patched(
            json!([{"op": "remove", "path": "emails[type eq \"work\"].value",
                                    "value": "someone@else.example"}]),
        )
        .unwrap_err();
        assert_eq!(error.scim_type, Some(ScimType::NoTarget));
    }

    #[test]
    fn the_whole_enterprise_extension_as_a_path_sets_and_removes_the_manager() {
        let urn = ENTERPRISE_USER;
        let extension = json!({"schemas": [urn], "manager": {"value": "m-1"}});
        for op in ["add", "replace"] {
            let user = patched(json!([{"op": op, "path": urn, "value": extension}])).unwrap();
            assert_eq!(user[urn]["manager"]["value"], "m-1", "{op}: {user}");
        }
        let user = patched(json!([
            {"op": "add", "path": urn, "value": extension},
            {"op": "remove", "path": urn},
        ]))
        .unwrap();
        assert!(user.get(urn).is_none(), "{user}");
    }

    fn patched(operations: Value) -> Result<Value, ScimError> {
        let patch: PatchOp = serde_json::from_value(json!({
            "schemas": [scim_v2::schema_urns::PATCH_OP],
            "Operations": operations,
        }))
        .unwrap();
        let mut resource = json!({
            "userName": "ada",
            "active": true,
            "name": {"givenName": "Ada", "familyName": "Lovelace"},
            "emails": [
                {"value": "ada@example.com", "type": "work", "primary": true},
                {"value": "ada@home.example", "type": "home"}
            ],
        });
        apply(&mut resource, &patch).map(|()| resource)
    }

    #[test]
    fn removing_a_non_member_from_a_group_succeeds_and_changes_nothing() {
        let patch: PatchOp = serde_json::from_value(json!({
            "schemas": [scim_v2::schema_urns::PATCH_OP],
            "Operations": [{"op": "remove", "path": "members[value eq \"gone\"]"}],
        }))
        .unwrap();
        let mut group = json!({"displayName": "Eng", "members": [{"value": "u1"}]});
        apply(&mut group, &patch).unwrap();
        assert_eq!(group["members"], json!([{"value": "u1"}]));
    }

    #[test]
    fn replace_active_with_and_without_a_path() {
        let with_path =
            patched(json!([{"op": "replace", "path": "active", "value": false}])).unwrap();
        assert_eq!(with_path["active"], false);
        // Entra ID and Okta send this form.
        let without = patched(
            json!([{"op": "Replace", "value": {"active": false, "name.familyName": "Byron"}}]),
        )
        .unwrap();
        assert_eq!(without["active"], false);
        assert_eq!(
            without["name"],
            json!({"givenName": "Ada", "familyName": "Byron"})
        );
    }

    #[test]
    fn value_filters_select_elements() {
        let out = patched(json!([{"op": "replace", "path": "emails[type eq \"work\"].value", "value": "ada@new.example"}])).unwrap();
        assert_eq!(out["emails"][0]["value"], "ada@new.example");
        assert_eq!(out["emails"][1]["value"], "ada@home.example");

        let out = patched(json!([{"op": "remove", "path": "emails[type eq \"home\"]"}])).unwrap();
        assert_eq!(out["emails"].as_array().unwrap().len(), 1);

        let err = patched(
            json!([{"op": "replace", "path": "emails[type eq \"other\"].value", "value": "x"}]),
        )
        .unwrap_err();
        assert_eq!(err.status, 400);
        assert_eq!(err.body().scim_type, Some(ScimType::NoTarget));
    }

    #[test]
    fn add_appends_remove_removes_and_read_only_is_ignored() {
        let out = patched(json!([
            {"op": "add", "path": "emails", "value": [{"value": "ada@third.example"}]},
            {"op": "remove", "path": "name.givenName"},
            {"op": "replace", "path": "id", "value": "mine"},
            {"op": "add", "path": "displayName", "value": "Ada L."}
        ]))
        .unwrap();
        assert_eq!(out["emails"].as_array().unwrap().len(), 3);
        assert_eq!(out["name"], json!({"familyName": "Lovelace"}));
        assert!(out.get("id").is_none());
        assert_eq!(out["displayName"], "Ada L.");

        let out = patched(
            json!([{"op": "remove", "path": "emails", "value": [{"value": "ada@home.example"}]}]),
        )
        .unwrap();
        assert_eq!(out["emails"].as_array().unwrap().len(), 1);

        let before = patched(json!([])).unwrap();
        let ignored = patched(json!([{"op": "replace", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber", "value": "7"}])).unwrap();
        assert_eq!(ignored, before, "another schema's attributes are not kept");
    }
}
