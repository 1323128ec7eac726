//! The SCIM service on the real control plane, as its own identity (`manifests/scim/`): a
//! person created over SCIM gets a namespace and access, `active: false` revokes it, DELETE
//! offboards; requests without a valid token get 401 and change nothing; the admission policy
//! keeps the SCIM identity to the fields SCIM maps; `homestead scim` puts a rotated token file
//! and certificate in force without a restart.

#[path = "../common/mod.rs"]
mod common;
mod groups;
mod people;
mod rotation;

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::*;
use homestead_api::{DIRECTORY_FLOOR_PROFILE, User};
use homestead_directory::scim::groups::watch_groups;
use homestead_directory::scim::{Scim, Settings, Tokens, router, watch_users};
use homestead_testenv::SCIM;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tower::ServiceExt as _;

const TOKEN: &str = "a-test-token-for-scim";

/// The SCIM router as the SCIM identity, with [`TOKEN`] accepted, once its cache is synced.
async fn service() -> axum::Router {
    let plane = env().plane;
    install_scim_identity();
    let client = plane.client(SCIM).await.unwrap();
    let (store, keep) = watch_users(client.clone());
    tokio::spawn(keep);
    let (groups, keep) = watch_groups(client.clone());
    tokio::spawn(keep);
    let tokens = Arc::new(Tokens::default());
    assert_eq!(
        tokens.set_from("# rotated out soon\nold-token\n\n  a-test-token-for-scim \n"),
        Some(2)
    );
    let scim = Scim::new(
        client,
        store,
        groups,
        tokens,
        Settings {
            profile: None,
            max_body_bytes: 64 * 1024,
            base_url: Some("https://scim.test/scim/v2".into()),
        },
    );
    scim.wait_until_ready().await;
    router(scim)
}

/// Sends `method path` with `body` (JSON) and bearer `token`; returns the status and the JSON
/// body (`Null` when empty).
async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("/scim/v2{path}"))
        .header(header::CONTENT_TYPE, "application/scim+json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, json)
}

/// `GET path` over HTTPS to `address`, trusting only the CA in `ca` (PEM), with bearer `token`:
/// the status code, or the error if the connection or TLS handshake fails.
fn https_get(address: &str, ca: &Path, path: &str, token: &str) -> Result<u16, String> {
    https_request(address, ca, "GET", path, token, None).map(|(code, _)| code)
}

/// Waits until `process` has logged `what`.
async fn logged(process: &homestead_testenv::Supervised, what: &str) {
    eventually(&format!("{what:?} in the log"), 30, || async {
        process.log_tail(200).contains(what).then_some(())
    })
    .await;
}

/// Writes `contents` beside `path` and renames it into place, as the kubelet swaps a mounted
/// Secret's files, so the service never reads half a file.
fn replace_file(path: &Path, contents: &[u8]) {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, contents).unwrap();
    std::fs::rename(&partial, path).unwrap();
}

/// A PatchOp request (RFC 7644 §3.5.2) with `operations`.
fn patch_op(operations: Value) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": operations,
    })
}

/// A SCIM User for `user_name`, active.
fn scim_user(user_name: &str) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": user_name,
        "active": true
    })
}

/// Creates the SCIM User `user_name` (whose User is `name`) and returns its SCIM id once the
/// operator has provisioned it.
async fn provisioned(
    app: &axum::Router,
    admin: &kube::Client,
    user_name: &str,
    name: &str,
) -> String {
    let (status, created) = call(
        app,
        "POST",
        "/Users",
        Some(TOKEN),
        Some(scim_user(user_name)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    wait_reason(admin, name, "Provisioned").await;
    created["id"].as_str().unwrap().to_owned()
}

/// `kubectl auth can-i create configmaps -n NS --as=PERSON`: "yes" under `admin` or `edit`,
/// "no" under `view` (the directory floor of a SCIM person without a group Profile).
fn can_create_configmaps(person: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(
        &["auth", "can-i", "create", "configmaps", "-n", ns, &who],
        "",
    );
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// Waits until User `name`'s status says it reflects Profile `profile` chosen by directory
/// group `group` (`None`, `None`: no Profile).
async fn wait_profile(
    admin: &kube::Client,
    name: &str,
    profile: Option<&str>,
    group: Option<&str>,
) {
    let users: Api<User> = Api::all(admin.clone());
    eventually(
        &format!("User {name} to reflect Profile {profile:?} via {group:?}"),
        60,
        || {
            let users = users.clone();
            async move {
                let user = users.get(name).await.ok()?;
                let status = user.status?;
                let applied = status.profile.as_ref();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                (ready
                    && applied.map(|a| a.name.as_str()) == profile
                    && applied.and_then(|a| a.group.as_deref()) == group)
                    .then_some(())
            }
        },
    )
    .await;
}
