//! The discovery endpoints (RFC 7644 §4): what this service provider supports, the resource
//! types it serves (`User`, `Group`), and their schemas: RFC 7643's core User schema trimmed to
//! the attributes Homestead keeps (see [`super::resource`]), so a client never sends a value
//! that would silently vanish, and the core Group schema.

use scim_v2::models::scim_schema::get_schemas;
use scim_v2::schema_urns;
use serde_json::{Value, json};

use super::patch::ENTERPRISE_USER;

/// The most resources one list or search response returns (`filter.maxResults`); `count`
/// above it is lowered to it (RFC 7644 §3.4.2.4).
pub const MAX_RESULTS: usize = 200;

/// The top-level attributes of the core User schema this service keeps.
const KEPT_ATTRIBUTES: [&str; 5] = ["userName", "name", "displayName", "emails", "active"];
/// The sub-attributes of `emails` this service keeps.
const KEPT_EMAIL_ATTRIBUTES: [&str; 3] = ["value", "type", "primary"];

/// `/ServiceProviderConfig`: PATCH and filtering supported (at most [`MAX_RESULTS`] results);
/// bulk, sorting, ETags and password changes not; authentication by bearer token.
/// `max_body_bytes` is the request size limit, in bytes.
pub fn service_provider_config(base: &str, max_body_bytes: usize) -> Value {
    json!({
        "schemas": [schema_urns::SERVICE_PROVIDER_CONFIG],
        "patch": {"supported": true},
        "bulk": {"supported": false, "maxOperations": 0, "maxPayloadSize": max_body_bytes},
        "filter": {"supported": true, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": false},
        "sort": {"supported": false},
        "etag": {"supported": false},
        "authenticationSchemes": [{
            "type": "oauthbearertoken",
            "name": "Bearer token",
            "description": "A bearer token from the service's token file (Authorization: Bearer <token>)",
            "specUri": "https://www.rfc-editor.org/rfc/rfc6750",
            "primary": true
        }],
        "meta": {
            "resourceType": "ServiceProviderConfig",
            "location": format!("{base}/ServiceProviderConfig")
        }
    })
}

/// The `User` resource type (RFC 7643 §6), with the enterprise extension (RFC 7643 §4.3) as
/// an optional schema extension: of it, only `manager` is kept ([`enterprise_schema`]).
pub fn user_resource_type(base: &str) -> Value {
    json!({
        "schemas": [schema_urns::RESOURCE_TYPE],
        "id": "User",
        "name": "User",
        "endpoint": "/Users",
        "description": "A person with a home on the cluster (a homestead.dev/v1alpha1 User)",
        "schema": schema_urns::USER,
        "schemaExtensions": [{"schema": ENTERPRISE_USER, "required": false}],
        "meta": {"resourceType": "ResourceType", "location": format!("{base}/ResourceTypes/User")}
    })
}

/// The `Group` resource type (RFC 7643 §6).
pub fn group_resource_type(base: &str) -> Value {
    json!({
        "schemas": [schema_urns::RESOURCE_TYPE],
        "id": "Group",
        "name": "Group",
        "endpoint": "/Groups",
        "description": "A directory group (a homestead.dev/v1alpha1 DirectoryGroup); Profiles may name it",
        "schema": schema_urns::GROUP,
        "meta": {"resourceType": "ResourceType", "location": format!("{base}/ResourceTypes/Group")}
    })
}

/// The core Group schema (RFC 7643 §8.7.1), all of which this service keeps, with
/// `displayName` required and unique (RFC 7643 leaves it optional).
pub fn group_schema(base: &str) -> Value {
    let schema = get_schemas(vec!["group"])
        .ok()
        .and_then(|mut s| s.pop())
        .expect("scim_v2 embeds the core Group schema");
    let mut schema = serde_json::to_value(schema).expect("a schema serializes");
    // Profiles select groups by displayName: it is required here, and unique among the
    // service's groups.
    if let Some(Value::Array(attributes)) = schema.get_mut("attributes") {
        for attribute in attributes.iter_mut().filter(|a| a["name"] == "displayName") {
            attribute["required"] = json!(true);
            attribute["uniqueness"] = json!("server");
        }
    }
    schema["schemas"] = json!([schema_urns::SCHEMA]);
    schema["meta"] = json!({
        "resourceType": "Schema",
        "location": format!("{base}/Schemas/{}", schema_urns::GROUP)
    });
    schema
}

/// The core User schema (RFC 7643 §8.7.1) with only the attributes this service keeps.
pub fn user_schema(base: &str) -> Value {
    let schema = get_schemas(vec!["user"])
        .ok()
        .and_then(|mut s| s.pop())
        .expect("scim_v2 embeds the core User schema");
    let mut schema = serde_json::to_value(schema).expect("a schema serializes");
    if let Some(Value::Array(attributes)) = schema.get_mut("attributes") {
        attributes.retain(|a| KEPT_ATTRIBUTES.contains(&a["name"].as_str().unwrap_or_default()));
        for attribute in attributes.iter_mut().filter(|a| a["name"] == "emails") {
            if let Some(Value::Array(subs)) = attribute.get_mut("subAttributes") {
                subs.retain(|s| {
                    KEPT_EMAIL_ATTRIBUTES.contains(&s["name"].as_str().unwrap_or_default())
                });
            }
        }
    }
    schema["schemas"] = json!([schema_urns::SCHEMA]);
    schema["meta"] = json!({
        "resourceType": "Schema",
        "location": format!("{base}/Schemas/{}", schema_urns::USER)
    });
    schema
}

/// The enterprise User extension's schema (RFC 7643 §4.3) with the one attribute this service
/// keeps: `manager`, of which `value` (the SCIM id of the person's manager; the User it names
/// becomes the successor of a handover HR names none for, docs/handover.md).
pub fn enterprise_schema(base: &str) -> Value {
    json!({
        "schemas": [schema_urns::SCHEMA],
        "id": ENTERPRISE_USER,
        "name": "EnterpriseUser",
        "description": "Enterprise User: only manager is kept",
        "attributes": [{
            "name": "manager",
            "type": "complex",
            "multiValued": false,
            "description": "The person's manager, who takes their homes when they leave if HR names no successor.",
            "required": false,
            "mutability": "readWrite",
            "returned": "default",
            "subAttributes": [{
                "name": "value",
                "type": "string",
                "multiValued": false,
                "description": "The id of the manager's SCIM User.",
                "required": false,
                "caseExact": false,
                "mutability": "readWrite",
                "returned": "default",
                "uniqueness": "none"
            }]
        }],
        "meta": {
            "resourceType": "Schema",
            "location": format!("{base}/Schemas/{ENTERPRISE_USER}")
        }
    })
}

/// A ListResponse (RFC 7644 §3.4.2) of all of `resources`, for the discovery collections.
pub fn list_of(resources: Vec<Value>) -> Value {
    json!({
        "schemas": [schema_urns::LIST_RESPONSE],
        "totalResults": resources.len(),
        "startIndex": 1,
        "itemsPerPage": resources.len(),
        "Resources": resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_type_offers_the_enterprise_extension_with_its_manager_only() {
        let base = "https://scim.example/scim/v2";
        let user = user_resource_type(base);
        assert_eq!(user["schemaExtensions"][0]["schema"], ENTERPRISE_USER);
        let schema = enterprise_schema(base);
        assert_eq!(schema["id"], ENTERPRISE_USER);
        let attributes = schema["attributes"].as_array().unwrap();
        assert_eq!(attributes.len(), 1);
        assert_eq!(attributes[0]["name"], "manager");
        assert_eq!(attributes[0]["subAttributes"][0]["name"], "value");
    }

    #[test]
    fn the_schema_offers_only_what_is_kept() {
        let schema = user_schema("https://scim.example/scim/v2");
        let mut names: Vec<&str> = schema["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        let mut kept = KEPT_ATTRIBUTES;
        kept.sort_unstable();
        assert_eq!(names, kept);
        assert_eq!(schema["id"], schema_urns::USER);
        let emails = schema["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "emails")
            .unwrap();
        assert_eq!(
            emails["subAttributes"].as_array().unwrap().len(),
            KEPT_EMAIL_ATTRIBUTES.len()
        );
    }
}
