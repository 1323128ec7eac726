//! Homestead's promises tried as an adversary would (docs/security.md), on the real
//! control plane: a person with `admin` in their namespace (their own token, or `kubectl --as`),
//! whoever holds the SCIM bearer token (over HTTPS, against a running `homestead scim`), and an
//! HR identity bound to `rbac/hr.yaml`'s `homestead-hr` (Users, and Shares in any home).
//! Each test is one attack that worked before these rules existed.

#[path = "../common/mod.rs"]
mod common;
mod hr;
mod operator_bounds;
mod scim_token;
mod shares;
mod tenant;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use homestead_api::User;
use homestead_testenv::{OPERATOR, SCIM};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn scim_service() -> &'static ScimService {
    static SERVICE: OnceLock<ScimService> = OnceLock::new();
    SERVICE.get_or_init(|| spawn_scim("scim-attacks", &[]))
}

/// A SCIM request with the service's bearer token, over HTTPS: status and JSON body.
fn scim(method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let service = scim_service();
    let (code, text) = https_request(
        &service.address,
        &service.ca,
        method,
        &format!("/scim/v2{path}"),
        &service.token,
        body.as_ref(),
    )
    .unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Creates a person over SCIM; returns their SCIM id.
fn scim_create(user_name: &str, extra: Value) -> String {
    let mut body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": user_name,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, created) = scim("POST", "/Users", Some(body));
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

/// The SCIM ids of the people whose `userName` is `user_name`, as the service lists them.
fn scim_lookup(user_name: &str) -> Vec<String> {
    let filter = format!("/Users?filter=userName%20eq%20%22{user_name}%22");
    let (status, list) = scim("GET", &filter, None);
    assert_eq!(status, 200, "{list}");
    list["Resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn patch_op(operations: Value) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": operations,
    })
}

/// Whether `result` is the API server's 403 (RBAC or an admission policy) naming `needle`.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, needle: &str) -> bool {
    match result {
        Err(kube::Error::Api(status)) => status.code == 403 && status.message.contains(needle),
        other => {
            eprintln!("expected 403 naming {needle:?}, got {other:?}");
            false
        }
    }
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as=PERSON`: "yes" or "no".
fn can(person: &str, verb: &str, resource: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(&["auth", "can-i", verb, resource, "-n", ns, &who], "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// As `person` (impersonated by the admin), binds ClusterRole `admin` to themselves in `ns`
/// under `name`: what a person with `admin` there can always do.
fn bind_myself(person: &str, ns: &str, name: &str) {
    let who = format!("--as={person}");
    let user = format!("--user={person}");
    let (ok, out) = kubectl(
        &[
            "create",
            "rolebinding",
            name,
            "--clusterrole=admin",
            &user,
            "-n",
            ns,
            &who,
        ],
        "",
    );
    assert!(ok, "{out}");
}

/// The names of the RoleBindings in `ns`, sorted.
async fn bindings(client: &Client, ns: &str) -> Vec<String> {
    let mut names: Vec<String> = Api::<RoleBinding>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// The notes of the Events with `reason` on User `user`.
fn event_notes(user: &str, reason: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={user},reason={reason}");
    let (_, out) = kubectl(
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ],
        "",
    );
    out.lines().map(str::to_owned).collect()
}

async fn merge(client: &Client, name: &str, patch: Value) -> Result<User, kube::Error> {
    Api::<User>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// As the cluster admin, binds `admin` to [`TENANT`] in `ns` under `name`.
fn bind_as_admin(ns: &str, name: &str) {
    let user = format!("--user={TENANT}");
    let (ok, out) = kubectl(
        &[
            "create",
            "rolebinding",
            name,
            "--clusterrole=admin",
            &user,
            "-n",
            ns,
        ],
        "",
    );
    assert!(ok, "{out}");
}

/// A Service as JSON: `spec` in namespace `ns`, named `name`, selecting `app: web`.
fn service(ns: &str, name: &str, spec: Value) -> String {
    let mut full = json!({ "selector": { "app": "web" }, "ports": [{ "port": 8080 }] });
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": name, "namespace": ns }, "spec": full })
    .to_string()
}

/// The Profile `status.profile` names for User `name`, once its status describes its
/// current generation.
async fn applied_profile(c: &Client, name: &str) -> Option<String> {
    let user = Api::<User>::all(c.clone()).get(name).await.unwrap();
    let status = user.status?;
    (status.observed_generation == user.metadata.generation)
        .then_some(status.profile.map(|p| p.name))?
}
