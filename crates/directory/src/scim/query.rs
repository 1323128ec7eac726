//! Evaluating a parsed SCIM filter (RFC 7644 §3.4.2.2) against a resource's JSON
//! representation, and the `attributes` / `excludedAttributes` projection (§3.4.2.5, §3.9).
//!
//! Attribute names compare case-insensitively (RFC 7643 §2.1). String values compare
//! case-insensitively too, except for the case-exact attributes `id` and `externalId`;
//! `meta.created` and `meta.lastModified` compare as date-times.

use std::cmp::Ordering;

use scim_v2::ScimDateTime;
use scim_v2::filter::{AttrExp, AttrPath, CompValue, CompareOp, Filter, ValFilter};
use scim_v2::schema_urns;
use serde_json::{Map, Value};

/// Attributes whose string values compare case-sensitively (RFC 7643 §3.1: `caseExact`).
const CASE_EXACT: [&str; 2] = ["id", "externalid"];
/// Attributes a response always carries, whatever `attributes` or `excludedAttributes` say
/// (RFC 7643 §7, `returned: always`).
const ALWAYS_RETURNED: [&str; 2] = ["schemas", "id"];

/// Rewrites each `attr[valFilter].sub <op> <value>` (and `.sub pr`) in a filter into
/// `attr[(valFilter) and sub <op> <value>]`, the form RFC 7644's grammar has for it; identity
/// providers (Entra ID) send the first. Returns `raw` unchanged when it has none; anything it
/// cannot read is left for the parser to refuse.
pub fn hoist_sub_attributes(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.contains("].") {
        return raw.into();
    }
    let mut out = String::with_capacity(raw.len() + 8);
    let mut rest = raw;
    while let Some(close) = find_unquoted(rest, "].") {
        let Some(open) = rest[..close].rfind('[') else {
            break;
        };
        let after = &rest[close + 2..];
        let sub_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(after.len());
        let (sub, tail) = after.split_at(sub_len);
        let Some((comparison, tail)) = comparison(tail) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push('[');
        out.push('(');
        out.push_str(&rest[open + 1..close]);
        out.push_str(") and ");
        out.push_str(sub);
        out.push_str(comparison);
        out.push(']');
        rest = tail;
    }
    out.push_str(rest);
    out.into()
}

/// The byte offset of the first `needle` in `text` outside double-quoted strings.
fn find_unquoted(text: &str, needle: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ if !quoted && text[i..].starts_with(needle) => return Some(i),
            _ => {}
        }
    }
    None
}

/// Splits ` <op> <value>` or ` pr` off the start of `text`: the comparison (with its leading
/// space) and what follows it.
fn comparison(text: &str) -> Option<(&str, &str)> {
    let trimmed = text.trim_start();
    let start = text.len() - trimmed.len();
    let op = trimmed.get(..2)?.to_ascii_lowercase();
    if op == "pr" {
        return Some(text.split_at(start + 2));
    }
    const OPS: [&str; 9] = ["eq", "ne", "co", "sw", "ew", "gt", "lt", "ge", "le"];
    if !OPS.contains(&op.as_str()) || !trimmed[2..].starts_with(' ') {
        return None;
    }
    let value = trimmed[2..].trim_start();
    let value_start = text.len() - value.len();
    let value_len = if value.starts_with('"') {
        let mut escaped = false;
        value
            .char_indices()
            .skip(1)
            .find(|&(_, c)| {
                let end = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                end
            })
            .map(|(i, _)| i + 1)?
    } else {
        value.find([' ', ')', ']']).unwrap_or(value.len())
    };
    Some(text.split_at(value_start + value_len))
}

/// Whether `resource` (a JSON object) matches `filter`.
pub fn matches(filter: &Filter, resource: &Value) -> bool {
    match filter {
        Filter::Attr(exp) => attr_matches(exp, resource, true),
        Filter::ValuePath(path) => {
            is_core_uri(path.attr.uri.as_deref())
                && match get(resource, &path.attr.name) {
                    Some(Value::Array(elements)) => {
                        elements.iter().any(|e| val_matches(&path.filter, e))
                    }
                    Some(element @ Value::Object(_)) => val_matches(&path.filter, element),
                    _ => false,
                }
        }
        Filter::Not(inner) => !matches(inner, resource),
        Filter::And(items) => items.as_slice().iter().all(|f| matches(f, resource)),
        Filter::Or(items) => items.as_slice().iter().any(|f| matches(f, resource)),
    }
}

/// Whether `element` (one value of a multi-valued complex attribute) matches `filter`, whose
/// attribute names are relative to the element (`emails[type eq "work"]`).
pub fn val_matches(filter: &ValFilter, element: &Value) -> bool {
    match filter {
        ValFilter::Attr(exp) => attr_matches(exp, element, false),
        ValFilter::Not(inner) => !val_matches(inner, element),
        ValFilter::And(items) => items.as_slice().iter().all(|f| val_matches(f, element)),
        ValFilter::Or(items) => items.as_slice().iter().any(|f| val_matches(f, element)),
    }
}

fn attr_matches(exp: &AttrExp, resource: &Value, root: bool) -> bool {
    match exp {
        AttrExp::Present(path) => values(resource, path, root).into_iter().any(|v| match v {
            Value::Null => false,
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => true,
        }),
        AttrExp::Comparison(path, op, expected) => {
            let case_exact = path.sub_attr.is_none()
                && CASE_EXACT.contains(&path.name.to_ascii_lowercase().as_str());
            let date = path.name.eq_ignore_ascii_case("meta")
                && path.sub_attr.as_deref().is_some_and(|s| {
                    s.eq_ignore_ascii_case("created") || s.eq_ignore_ascii_case("lastModified")
                });
            let found = values(resource, path, root);
            let any = |pred: &dyn Fn(&Value) -> bool| found.iter().any(|v| pred(v));
            match op {
                CompareOp::Eq => {
                    any(&|v| compare(v, expected, case_exact, date) == Some(Ordering::Equal))
                }
                CompareOp::Ne => {
                    !any(&|v| compare(v, expected, case_exact, date) == Some(Ordering::Equal))
                }
                CompareOp::Gt => {
                    any(&|v| compare(v, expected, case_exact, date) == Some(Ordering::Greater))
                }
                CompareOp::Ge => any(&|v| {
                    matches!(
                        compare(v, expected, case_exact, date),
                        Some(Ordering::Greater | Ordering::Equal)
                    )
                }),
                CompareOp::Lt => {
                    any(&|v| compare(v, expected, case_exact, date) == Some(Ordering::Less))
                }
                CompareOp::Le => any(&|v| {
                    matches!(
                        compare(v, expected, case_exact, date),
                        Some(Ordering::Less | Ordering::Equal)
                    )
                }),
                CompareOp::Co | CompareOp::Sw | CompareOp::Ew => {
                    let CompValue::Str(needle) = expected else {
                        return false;
                    };
                    let fold = |s: &str| {
                        if case_exact {
                            s.to_owned()
                        } else {
                            s.to_lowercase()
                        }
                    };
                    let needle = fold(needle);
                    any(&|v| {
                        v.as_str().is_some_and(|s| {
                            let s = fold(s);
                            match op {
                                CompareOp::Co => s.contains(&needle),
                                CompareOp::Sw => s.starts_with(&needle),
                                _ => s.ends_with(&needle),
                            }
                        })
                    })
                }
            }
        }
    }
}

/// Orders `actual` against `expected`, or `None` where they do not compare (different types,
/// booleans with anything but `eq`).
fn compare(actual: &Value, expected: &CompValue, case_exact: bool, date: bool) -> Option<Ordering> {
    match (actual, expected) {
        (Value::String(a), CompValue::Str(b)) if date => {
            let (a, b) = (
                a.parse::<ScimDateTime>().ok()?,
                b.parse::<ScimDateTime>().ok()?,
            );
            a.xsd_partial_cmp(&b)
        }
        (Value::String(a), CompValue::Str(b)) if case_exact => Some(a.as_str().cmp(b.as_str())),
        (Value::String(a), CompValue::Str(b)) => Some(a.to_lowercase().cmp(&b.to_lowercase())),
        (Value::Number(a), CompValue::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::Bool(a), CompValue::True) => (*a).then_some(Ordering::Equal),
        (Value::Bool(a), CompValue::False) => (!*a).then_some(Ordering::Equal),
        (Value::Null, CompValue::Null) => Some(Ordering::Equal),
        _ => None,
    }
}

/// Looks up `name` in a JSON object, ignoring case.
pub fn get<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// The core schemas this service serves (User and Group).
const CORE_URNS: [&str; 2] = [schema_urns::USER, schema_urns::GROUP];

/// Whether a path's schema URN (if any) is a core schema this service serves (User, Group).
pub fn is_core_uri(uri: Option<&str>) -> bool {
    uri.is_none_or(|u| CORE_URNS.iter().any(|c| u.eq_ignore_ascii_case(c)))
}

/// The values `path` names in `resource`: for a multi-valued attribute, one per element (its
/// sub-attribute, or its `value` when the path names none, RFC 7644 §3.4.2.2).
fn values<'a>(resource: &'a Value, path: &AttrPath, root: bool) -> Vec<&'a Value> {
    if root && !is_core_uri(path.uri.as_deref()) {
        return Vec::new();
    }
    let Some(top) = get(resource, &path.name) else {
        return Vec::new();
    };
    match (top, path.sub_attr.as_deref()) {
        (Value::Array(items), sub) => items
            .iter()
            .filter_map(|item| match item {
                Value::Object(_) => get(item, sub.unwrap_or("value")),
                other if sub.is_none() => Some(other),
                _ => None,
            })
            .collect(),
        (object @ Value::Object(_), Some(sub)) => get(object, sub).into_iter().collect(),
        (value, None) => vec![value],
        (_, Some(_)) => Vec::new(),
    }
}

/// One entry of `attributes` or `excludedAttributes`: a top-level attribute name and maybe a
/// sub-attribute, with a core schema's URN prefix removed.
fn split(attribute: &str) -> (String, Option<String>) {
    let attribute = attribute.trim();
    let bare = CORE_URNS
        .iter()
        .find_map(|urn| {
            let prefix = format!("{urn}:");
            (attribute.len() > prefix.len()
                && attribute[..prefix.len()].eq_ignore_ascii_case(&prefix))
            .then(|| &attribute[prefix.len()..])
        })
        .unwrap_or(attribute);
    match bare.split_once('.') {
        Some((top, sub)) => (top.to_ascii_lowercase(), Some(sub.to_ascii_lowercase())),
        None => (bare.to_ascii_lowercase(), None),
    }
}

/// Applies `attributes` (keep only these, plus `schemas` and `id`) or, when it is empty,
/// `excludedAttributes` (drop these, never `schemas` or `id`) to a resource's JSON object.
/// Entries are comma-separated attribute paths (`userName`, `name.givenName`,
/// `urn:ietf:params:scim:schemas:core:2.0:User:emails`).
pub fn project(resource: Value, attributes: &[String], excluded: &[String]) -> Value {
    let Value::Object(object) = resource else {
        return resource;
    };
    let attributes: Vec<_> = attributes.iter().map(|a| split(a)).collect();
    let excluded: Vec<_> = excluded.iter().map(|a| split(a)).collect();
    let mut out = Map::new();
    for (key, value) in object {
        let lower = key.to_ascii_lowercase();
        if ALWAYS_RETURNED.contains(&lower.as_str()) {
            out.insert(key, value);
        } else if !attributes.is_empty() {
            let subs: Vec<_> = attributes.iter().filter(|(t, _)| *t == lower).collect();
            if subs.iter().any(|(_, s)| s.is_none()) {
                out.insert(key, value);
            } else if !subs.is_empty() {
                let keep: Vec<&str> = subs.iter().filter_map(|(_, s)| s.as_deref()).collect();
                out.insert(key, retain_subs(value, |s| keep.contains(&s)));
            }
        } else {
            let subs: Vec<_> = excluded.iter().filter(|(t, _)| *t == lower).collect();
            if subs.iter().any(|(_, s)| s.is_none()) {
                continue;
            }
            let drop: Vec<&str> = subs.iter().filter_map(|(_, s)| s.as_deref()).collect();
            out.insert(key, retain_subs(value, |s| !drop.contains(&s)));
        }
    }
    Value::Object(out)
}

/// `value` (an object, or an array of objects) with only the sub-attributes whose lower-cased
/// name passes `keep`.
fn retain_subs(value: Value, keep: impl Fn(&str) -> bool + Copy) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| keep(&k.to_ascii_lowercase()))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|i| retain_subs(i, keep)).collect())
        }
        other => other,
    }
}

/// Splits a comma-separated `attributes` or `excludedAttributes` query parameter.
pub fn attribute_list(raw: Option<&str>) -> Vec<String> {
    raw.map(|r| {
        r.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ada() -> Value {
        json!({
            "schemas": [schema_urns::USER],
            "id": "7f0c",
            "externalId": "00uAda",
            "userName": "Ada@Example.com",
            "name": {"givenName": "Ada", "familyName": "Lovelace"},
            "emails": [
                {"value": "ada@example.com", "type": "work", "primary": true},
                {"value": "ada@home.example", "type": "home"}
            ],
            "active": true,
            "meta": {"created": "2026-11-01T10:00:00Z"}
        })
    }

    fn check(filter: &str) -> bool {
        matches(&filter.parse::<Filter>().unwrap(), &ada())
    }

    #[test]
    fn filters_match_as_rfc_7644_says() {
        assert!(
            check(r#"userName eq "ada@example.com""#),
            "userName is not case-exact"
        );
        assert!(check(r#"USERNAME Eq "ADA@EXAMPLE.COM""#));
        assert!(!check(r#"userName eq "bob@example.com""#));
        assert!(check(r#"externalId eq "00uAda""#));
        assert!(
            !check(r#"externalId eq "00uada""#),
            "externalId is case-exact"
        );
        assert!(check(r#"id eq "7f0c""#));
        assert!(check(r#"name.familyName sw "Love""#));
        assert!(
            check(r#"emails co "home.example""#),
            "a multi-valued attribute compares its values"
        );
        assert!(check(
            r#"emails[type eq "work" and value ew "example.com"]"#
        ));
        assert!(!check(r#"emails[type eq "other"]"#));
        assert!(check(r#"active eq true and not (active eq false)"#));
        assert!(check(r#"title pr or userName pr"#));
        assert!(!check(r#"title pr"#));
        assert!(
            check(r#"meta.created gt "2026-11-01T11:00:00+02:00""#),
            "09:00Z is before 10:00Z"
        );
        assert!(!check(r#"meta.created gt "2026-11-01T11:00:00Z""#));
        assert!(check(r#"meta.created ge "2026-11-01T10:00:00Z""#));
        assert!(check(
            r#"urn:ietf:params:scim:schemas:core:2.0:User:userName pr"#
        ));
        assert!(!check(r#"urn:example:other:userName pr"#));
    }

    #[test]
    fn a_value_path_with_a_sub_attribute_means_the_sub_attribute_inside_the_brackets() {
        let rewritten = |raw| hoist_sub_attributes(raw).into_owned();
        assert_eq!(
            rewritten(r#"emails[type eq "work"].value eq "ada@example.com""#),
            r#"emails[(type eq "work") and value eq "ada@example.com"]"#
        );
        assert_eq!(
            rewritten(r#"userName eq "a].b" and emails[type eq "work"].value pr"#),
            r#"userName eq "a].b" and emails[(type eq "work") and value pr]"#
        );
        assert_eq!(rewritten(r#"userName eq "x""#), r#"userName eq "x""#);
        // Entra ID's lookup by work e-mail finds Ada, and not by another address or type.
        let ada = ada();
        for (filter, want) in [
            (r#"emails[type eq "work"].value eq "ADA@example.com""#, true),
            (
                r#"emails[type eq "work"].value eq "bob@example.com""#,
                false,
            ),
            (
                r#"emails[type eq "home"].value eq "ada@example.com""#,
                false,
            ),
        ] {
            let parsed: Filter = hoist_sub_attributes(filter).parse().unwrap();
            assert_eq!(matches(&parsed, &ada), want, "{filter}");
        }
    }

    #[test]
    fn projection_keeps_id_and_schemas() {
        let only = project(ada(), &["userName".into(), "name.givenName".into()], &[]);
        assert_eq!(only["userName"], "Ada@Example.com");
        assert_eq!(only["name"], json!({"givenName": "Ada"}));
        assert_eq!(only["id"], "7f0c");
        assert!(only.get("emails").is_none() && only.get("meta").is_none());

        let without = project(
            ada(),
            &[],
            &["emails".into(), "name.familyName".into(), "id".into()],
        );
        assert!(without.get("emails").is_none());
        assert_eq!(without["name"], json!({"givenName": "Ada"}));
        assert_eq!(without["id"], "7f0c", "id is always returned");
    }
}
