//! The SCIM service on the real control plane, as its own identity (`manifests/scim/`): a
//! person created over SCIM gets a namespace and access, `active: false` revokes it, DELETE
//! offboards; requests without a valid token get 401 and change nothing; the admission policy
//! keeps the SCIM identity to the fields SCIM maps; `homestead scim` puts a rotated token file
//! and certificate in force without a restart.

mod common;

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

#[tokio::test]
async fn a_person_is_created_suspended_and_offboarded_over_scim() {
    let app = service().await;
    let admin = admin().await;
    let users: Api<User> = Api::all(admin.clone());
    let person = "grace.hopper@example.com";
    let scenario = Scenario::new();
    scenario.track("grace-hopper");
    scenario.track_namespace("user-grace-hopper");

    // Without a token, or with a wrong one: 401 with a SCIM error, and nothing written.
    let body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": person,
        "externalId": "00u-grace",
        "name": {"givenName": "Grace", "familyName": "Hopper"},
        "displayName": "Grace Hopper",
        "emails": [{"value": person, "type": "work", "primary": true}],
        "active": true
    });
    let mark = settled_mark().await;
    for token in [None, Some("wrong"), Some("")] {
        let (status, error) = call(&app, "POST", "/Users", token, Some(body.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            error["schemas"][0],
            "urn:ietf:params:scim:api:messages:2.0:Error"
        );
        assert_eq!(error["status"], "401");
    }
    assert_eq!(
        call(&app, "GET", "/Users", None, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert!(users.get_opt("grace-hopper").await.unwrap().is_none());
    let scim_requests = audit()[mark..]
        .iter()
        .filter(|e| e["user"]["username"] == SCIM && e["objectRef"]["name"] == "grace-hopper")
        .count();
    assert_eq!(scim_requests, 0, "a refused request reaches no API server");

    // Create: 201, the id is the User's uid, the namespace is provisioned and access granted.
    let (status, created) = call(&app, "POST", "/Users", Some(TOKEN), Some(body.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let user = wait_reason(&admin, "grace-hopper", "Provisioned").await;
    assert_eq!(user.metadata.uid.as_deref(), Some(id.as_str()));
    assert_eq!(user.spec.identity.username, person);
    assert_eq!(user.spec.email.as_deref(), Some(person));
    assert_eq!(created["name"]["familyName"], "Hopper");
    assert_eq!(
        created["meta"]["location"],
        format!("https://scim.test/scim/v2/Users/{id}")
    );
    assert_eq!(can_get_pods(person, "user-grace-hopper"), "yes");

    // The same userName again (any case) is a uniqueness conflict.
    let mut again = body.clone();
    again["userName"] = json!("Grace.Hopper@example.com");
    let (status, error) = call(&app, "POST", "/Users", Some(TOKEN), Some(again)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["scimType"], "uniqueness");

    // Found by filter; a malformed filter is invalidFilter.
    let filter = "/Users?filter=userName%20eq%20%22GRACE.HOPPER@example.com%22";
    let (status, list) = call(&app, "GET", filter, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["totalResults"], 1);
    assert_eq!(list["Resources"][0]["id"], id.as_str());
    let (_, list) = call(
        &app,
        "GET",
        "/Users?filter=externalId%20eq%20%2200u-grace%22",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(list["totalResults"], 1);
    let (status, error) = call(
        &app,
        "GET",
        "/Users?filter=userName%20garbage",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["scimType"], "invalidFilter");

    // PATCH active: false (the form Entra ID sends): suspended, access revoked, namespace kept.
    let patch = patch_op(json!([{"op": "Replace", "path": "active", "value": "False"}]));
    let (status, patched) = call(
        &app,
        "PATCH",
        &format!("/Users/{id}"),
        Some(TOKEN),
        Some(patch),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["active"], false);
    assert_eq!(
        patched["displayName"], "Grace Hopper",
        "a PATCH changes only what it names"
    );
    wait_reason(&admin, "grace-hopper", "Suspended").await;
    assert_eq!(can_get_pods(person, "user-grace-hopper"), "no");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    assert!(
        namespaces
            .get_opt("user-grace-hopper")
            .await
            .unwrap()
            .is_some()
    );

    // The admission policy keeps the SCIM identity to SCIM's fields, whatever its RBAC allows.
    let scim_client = env().plane.client(SCIM).await.unwrap();
    let as_scim: Api<User> = Api::all(scim_client);
    let refused = as_scim
        .patch(
            "grace-hopper",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"role": "edit"}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403 && s.message.contains("SCIM")),
        "{refused:?}"
    );

    // DELETE: 204, then the User is offboarded (deletionPolicy Delete) and gone from SCIM.
    let (status, _) = call(&app, "DELETE", &format!("/Users/{id}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = call(&app, "GET", &format!("/Users/{id}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["status"], "404");
    wait_gone(&users, "grace-hopper", 120).await;
    wait_gone(&namespaces, "user-grace-hopper", 120).await;
}

#[tokio::test]
async fn bad_requests_get_scim_errors_and_write_nothing() {
    let app = service().await;
    let users: Api<User> = Api::all(admin().await);

    // The API server's own validation (CEL) comes back as invalidValue with its message.
    let body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": "system:admin"
    });
    let (status, error) = call(&app, "POST", "/Users", Some(TOKEN), Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["scimType"], "invalidValue");
    assert!(
        error["detail"].as_str().unwrap().contains("system:"),
        "{error}"
    );
    assert!(users.get_opt("system-admin").await.unwrap().is_none());

    // Not JSON, no userName, too large, an unknown id, an unknown endpoint.
    let (status, error) = call(&app, "POST", "/Users", Some(TOKEN), Some(json!("nope"))).await;
    assert_eq!(
        (status, error["scimType"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalidSyntax"))
    );
    let (status, _) = call(
        &app,
        "POST",
        "/Users",
        Some(TOKEN),
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let huge = json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "x".repeat(100 * 1024)});
    let (status, _) = call(&app, "POST", "/Users", Some(TOKEN), Some(huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, error) = call(&app, "GET", "/Users/no-such-id", Some(TOKEN), None).await;
    assert_eq!(
        (status, error["status"].clone()),
        (StatusCode::NOT_FOUND, json!("404"))
    );
    let (status, error) = call(&app, "GET", "/Groups/no-such-id", Some(TOKEN), None).await;
    assert_eq!(
        (status, error["status"].clone()),
        (StatusCode::NOT_FOUND, json!("404"))
    );
    let (status, error) = call(&app, "GET", "/Bulk", Some(TOKEN), None).await;
    assert_eq!(
        (status, error["status"].clone()),
        (StatusCode::NOT_FOUND, json!("404"))
    );
    let (status, error) = call(
        &app,
        "POST",
        "/Groups",
        Some(TOKEN),
        Some(json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "members": []})),
    )
    .await;
    assert_eq!(
        (status, error["scimType"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalidValue")),
        "a Group without a displayName"
    );
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

#[tokio::test]
async fn a_rotated_token_and_certificate_take_effect_without_a_restart() {
    install_scim_identity();
    let plane = env().plane;
    let dir = plane.dir().join("scim-rotation");
    let (old, new) = (dir.join("old"), dir.join("new"));
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    let old = homestead_testenv::scim_credentials(&old).unwrap();
    let new = homestead_testenv::scim_credentials(&new).unwrap();
    let read = |path: &Path| std::fs::read_to_string(path).unwrap().trim().to_owned();
    let (old_token, new_token) = (read(&old.token), read(&new.token));
    // The files the service is given; the test rewrites them as a Secret rotation would.
    let (token_file, cert_file, key_file) =
        (dir.join("token"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(&old.token, &token_file).unwrap();
    std::fs::copy(&old.cert, &cert_file).unwrap();
    std::fs::copy(&old.key, &key_file).unwrap();
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let kubeconfig = plane
        .write_kubeconfig(SCIM, &dir.join("scim.kubeconfig"))
        .unwrap();
    let service = plane
        .spawn(
            "scim-rotation",
            Path::new(env!("CARGO_BIN_EXE_homestead")),
            &[
                "--log-format=text".to_owned(),
                "scim".to_owned(),
                format!("--address={address}"),
                format!("--token-file={}", token_file.display()),
                format!("--tls-cert={}", cert_file.display()),
                format!("--tls-key={}", key_file.display()),
                "--reload-interval=1s".to_owned(),
            ],
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("RUST_LOG", "info".to_owned()),
            ],
        )
        .unwrap();
    let get = |ca: &Path, token: &str| https_get(&address, ca, "/scim/v2/Users", token);

    eventually("the SCIM service to serve the first token", 60, || async {
        (get(&old.ca, &old_token) == Ok(200)).then_some(())
    })
    .await;
    assert_eq!(get(&old.ca, &new_token), Ok(401));

    // The Secret's token is rotated: the new one is accepted, the old one no longer is.
    replace_file(&token_file, format!("{new_token}\n").as_bytes());
    eventually("the rotated token to be accepted", 30, || async {
        (get(&old.ca, &new_token) == Ok(200)).then_some(())
    })
    .await;
    assert_eq!(get(&old.ca, &old_token), Ok(401));

    // A token file caught mid-rewrite (empty) keeps the tokens in force.
    replace_file(&token_file, b"\n");
    logged(&service, "holds no token; keeping the previous tokens").await;
    assert_eq!(get(&old.ca, &new_token), Ok(200));

    // The certificate is rotated to one from another CA: clients that trust only the old CA
    // now fail the handshake, clients that trust the new one get through.
    replace_file(&key_file, &std::fs::read(&new.key).unwrap());
    replace_file(&cert_file, &std::fs::read(&new.cert).unwrap());
    eventually("the rotated certificate to be served", 30, || async {
        (get(&new.ca, &new_token) == Ok(200)).then_some(())
    })
    .await;
    let refused = get(&old.ca, &new_token);
    assert!(refused.is_err(), "the old CA still verifies: {refused:?}");

    // A certificate that does not load keeps the one in force.
    replace_file(&cert_file, b"not a certificate");
    logged(&service, "does not load; keeping the previous one").await;
    assert_eq!(get(&new.ca, &new_token), Ok(200));
}

#[tokio::test]
async fn a_create_while_the_previous_user_is_offboarding_says_when_to_retry() {
    // JumpCloud's test connection creates, deletes and creates the same person again.
    let app = service().await;
    let admin = admin().await;
    let users: Api<User> = Api::all(admin.clone());
    let scenario = Scenario::new();
    scenario.track("jo-jump");
    scenario.track_namespace("user-jo-jump");
    let body = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": "jo.jump@example.com",
        "active": true
    });
    let (status, created) = call(&app, "POST", "/Users", Some(TOKEN), Some(body.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    wait_reason(&admin, "jo-jump", "Provisioned").await;
    // A finalizer of the test's holds the User in offboarding for as long as the test likes.
    users
        .patch(
            "jo-jump",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/metadata/finalizers/-", "value": "e2e.homestead.dev/hold"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let (status, _) = call(&app, "DELETE", &format!("/Users/{id}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // The lookup says the person is gone, and a create says when to come back.
    let filter = "/Users?filter=userName%20eq%20%22jo.jump@example.com%22";
    let (status, list) = call(&app, "GET", filter, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["totalResults"], 0, "{list}");
    let (status, error) = call(&app, "POST", "/Users", Some(TOKEN), Some(body.clone())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{error}");
    assert!(
        error["detail"]
            .as_str()
            .is_some_and(|d| d.contains("still being offboarded")),
        "{error}"
    );

    // Once the operator has offboarded the previous User and it is gone, the same create
    // succeeds.
    eventually(
        "the operator to finish offboarding jo-jump",
        120,
        || async {
            let user = users.get("jo-jump").await.ok()?;
            (user.metadata.finalizers.as_deref() == Some(&["e2e.homestead.dev/hold".to_owned()]))
                .then_some(())
        },
    )
    .await;
    users
        .patch(
            "jo-jump",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await
        .unwrap();
    wait_gone(&users, "jo-jump", 120).await;
    let (status, again) = call(&app, "POST", "/Users", Some(TOKEN), Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_ne!(
        again["id"],
        id.as_str(),
        "a new User, with a uid of its own"
    );

    // The service's own /metrics (no token) counted each answer by route, never by id.
    let response = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let metrics = String::from_utf8_lossy(&bytes);
    for line in [
        r#"homestead_scim_requests_total{method="POST",route="/scim/v2/Users",status="201"} 2"#,
        r#"homestead_scim_requests_total{method="POST",route="/scim/v2/Users",status="503"} 1"#,
        r#"homestead_scim_requests_total{method="DELETE",route="/scim/v2/Users/{id}",status="204"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    assert!(metrics.contains("homestead_scim_request_duration_seconds_bucket"));
    let managed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("homestead_scim_users "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("homestead_scim_users");
    assert!(managed >= 1, "{metrics}");
    // Every SCIM metric the dashboard queries is one the service exports.
    let dashboard =
        std::fs::read_to_string(repo_root().join("charts/homestead/files/dashboard.json")).unwrap();
    let queried: std::collections::BTreeSet<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("homestead_scim_"))
        .collect();
    assert!(queried.len() >= 3, "{queried:?}");
    for metric in queried {
        let base = metric.trim_end_matches("_bucket");
        assert!(
            metrics.contains(&format!("# TYPE {base} ")),
            "the dashboard queries {metric}, which the SCIM service's /metrics does not have"
        );
    }
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

#[tokio::test]
async fn a_directory_group_chooses_a_profile_for_its_members_and_leaving_it_moves_them_back() {
    let app = service().await;
    let admin = admin().await;
    let scenario = Scenario::new();
    let people = [
        ("ann.grp@example.com", "ann-grp"),
        ("ben.grp@example.com", "ben-grp"),
        ("cat.grp@example.com", "cat-grp"),
    ];
    for (_, name) in people {
        scenario.track(name);
        scenario.track_namespace(&format!("user-{name}"));
    }
    // The platform team says: members of the directory group "Analysts (e2e)" get edit.
    profile(
        &admin,
        "e2e-analysts",
        json!({ "role": "edit", "directory": { "groups": ["Analysts (e2e)"] } }),
    )
    .await;
    let mut ids = Vec::new();
    for (user_name, name) in people {
        ids.push(provisioned(&app, &admin, user_name, name).await);
        wait_profile(&admin, name, Some(DIRECTORY_FLOOR_PROFILE), None).await;
        assert_eq!(
            can_create_configmaps(user_name, &format!("user-{name}")),
            "no",
            "no group yet: the directory floor (view), never the operator's open default"
        );
    }

    // Entra ID's first question about a group: does it exist? Not yet.
    let lookup =
        "/Groups?excludedAttributes=members&filter=displayName%20eq%20%22Analysts%20(e2e)%22";
    let (status, list) = call(&app, "GET", lookup, Some(TOKEN), None).await;
    assert_eq!(
        (status, list["totalResults"].as_u64()),
        (StatusCode::OK, Some(0)),
        "{list}"
    );

    // The group with three members: each gets the Profile, and can only view.
    let members: Vec<Value> = ids.iter().map(|id| json!({ "value": id })).collect();
    let (status, group) = call(
        &app,
        "POST",
        "/Groups",
        Some(TOKEN),
        Some(json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "Analysts (e2e)",
            "externalId": "grp-analysts",
            "members": members,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{group}");
    assert_eq!(
        group["members"].as_array().map(Vec::len),
        Some(3),
        "{group}"
    );
    let group_id = group["id"].as_str().unwrap().to_owned();
    for (user_name, name) in people {
        wait_profile(&admin, name, Some("e2e-analysts"), Some("analysts-e2e")).await;
        let ns = format!("user-{name}");
        assert_eq!(
            can_create_configmaps(user_name, &ns),
            "yes",
            "{name} edits now"
        );
        assert_eq!(can_get_pods(user_name, &ns), "yes", "{name} still views");
    }
    // Operators see the group, its members and what it selects; and each move as an Event.
    let groups: Api<homestead_api::DirectoryGroup> = Api::all(admin.clone());
    eventually("the group's status to count its members", 30, || {
        let groups = groups.clone();
        async move {
            let status = groups.get("analysts-e2e").await.ok()?.status?;
            (status.members == 3 && status.profile.as_deref() == Some("e2e-analysts")).then_some(())
        }
    })
    .await;
    let (ok, table) = kubectl(&["get", "directorygroups", "analysts-e2e"], "");
    assert!(
        ok && table.contains("Analysts (e2e)") && table.contains("e2e-analysts"),
        "{table}"
    );
    let (ok, described) = kubectl(
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            "involvedObject.name=ann-grp,reason=ProfileChanged",
            "-o",
            "jsonpath={.items[*].message}",
        ],
        "",
    );
    assert!(
        ok && described.contains("\"e2e-analysts\" (directory group analysts-e2e)"),
        "{described}"
    );

    // Entra ID removes one member: ben goes back to what he had without the group.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Groups/{group_id}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "Remove", "path": "members", "value": [{ "value": ids[1] }] }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_profile(&admin, "ben-grp", Some(DIRECTORY_FLOOR_PROFILE), None).await;
    assert_eq!(
        can_create_configmaps(people[1].0, "user-ben-grp"),
        "no",
        "ben left the group: back at the directory floor"
    );
    // Issue 45, finding 6: leaving every group never lifts isolation or grants admin.
    let ben_ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .get("user-ben-grp")
        .await
        .unwrap();
    assert_eq!(
        ben_ns
            .labels()
            .get("homestead.dev/isolation")
            .map(String::as_str),
        Some("Isolated"),
        "the directory floor isolates"
    );
    // Both moves stay visible: the move back is an Event of its own, not folded into the first.
    eventually("ben's Event for moving back", 30, || async {
        let (ok, notes) = kubectl(
            &[
                "get",
                "events",
                "-A",
                "--field-selector",
                "involvedObject.name=ben-grp,reason=ProfileChanged",
                "-o",
                "jsonpath={.items[*].message}",
            ],
            "",
        );
        (ok && notes.contains("(directory group analysts-e2e) -> \"directory-floor\""))
            .then_some(())
    })
    .await;
    assert_eq!(
        can_create_configmaps(people[0].0, "user-ann-grp"),
        "yes",
        "ann is still in it"
    );

    // Deleting the group moves the rest back.
    let (status, _) = call(
        &app,
        "DELETE",
        &format!("/Groups/{group_id}"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for (user_name, name) in [people[0], people[2]] {
        wait_profile(&admin, name, Some(DIRECTORY_FLOOR_PROFILE), None).await;
        assert_eq!(
            can_create_configmaps(user_name, &format!("user-{name}")),
            "no",
            "{name}: the group is gone, back at the directory floor"
        );
    }
    let _ = Api::<homestead_api::Profile>::all(admin.clone())
        .delete("e2e-analysts", &Default::default())
        .await;
}

#[tokio::test]
async fn groups_answer_the_request_shapes_of_entra_id_okta_and_jumpcloud() {
    let app = service().await;
    let admin = admin().await;
    let scenario = Scenario::new();
    for name in ["gus-shape", "hal-shape"] {
        scenario.track(name);
        scenario.track_namespace(&format!("user-{name}"));
    }
    let gus = provisioned(&app, &admin, "gus.shape@example.com", "gus-shape").await;
    let hal = provisioned(&app, &admin, "hal.shape@example.com", "hal-shape").await;
    let group = |display: &str, members: &[&str]| {
        json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": display,
            "members": members.iter().map(|id| json!({ "value": id, "display": "x" })).collect::<Vec<_>>(),
        })
    };

    // Okta's Group Push: create with members; a second group with the same name is a conflict.
    let (status, created) = call(
        &app,
        "POST",
        "/Groups",
        Some(TOKEN),
        Some(group("Shapes", &[&gus])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["members"][0]["value"], gus.as_str());
    assert_eq!(created["members"][0]["type"], "User");
    let (status, error) = call(
        &app,
        "POST",
        "/Groups",
        Some(TOKEN),
        Some(group("Shapes", &[])),
    )
    .await;
    assert_eq!(
        (status, error["scimType"].as_str()),
        (StatusCode::CONFLICT, Some("uniqueness")),
        "{error}"
    );

    // Entra ID: get without members; is hal a member (no); add hal; is hal a member (yes).
    let (status, got) = call(
        &app,
        "GET",
        &format!("/Groups/{id}?excludedAttributes=members"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        got.get("members").is_none() && got["displayName"] == "Shapes",
        "{got}"
    );
    let member_query = format!(
        "/Groups?filter=id%20eq%20%22{id}%22%20and%20members%5Bvalue%20eq%20%22{hal}%22%5D&excludedAttributes=members"
    );
    let (_, list) = call(&app, "GET", &member_query, Some(TOKEN), None).await;
    assert_eq!(list["totalResults"], 0, "{list}");
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Groups/{id}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "Add", "path": "members", "value": [{ "value": hal }] }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, list) = call(&app, "GET", &member_query, Some(TOKEN), None).await;
    assert_eq!(list["totalResults"], 1, "{list}");
    assert!(list["Resources"][0].get("members").is_none(), "{list}");

    // Okta: rename without a path (id is read-only and ignored); remove by value filter.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Groups/{id}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "replace", "value": { "id": id, "displayName": "Shapes 2" } },
            { "op": "remove", "path": format!("members[value eq \"{gus}\"]") }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["displayName"], "Shapes 2");
    assert_eq!(body["members"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(body["members"][0]["value"], hal.as_str());
    // Removing gus again (a provider retrying, or catching up after gus left) succeeds.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Groups/{id}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "remove", "path": format!("members[value eq \"{gus}\"]") }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["members"].as_array().map(Vec::len), Some(1), "{body}");

    // JumpCloud and Okta replace the whole group with PUT; an unknown member id is dropped, not
    // an error that loses the request.
    let (status, body) = call(
        &app,
        "PUT",
        &format!("/Groups/{id}"),
        Some(TOKEN),
        Some(group("Shapes 2", &[&gus, "no-such-id"])),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["members"].as_array().map(Vec::len), Some(1), "{body}");
    let groups: Api<homestead_api::DirectoryGroup> = Api::all(admin.clone());
    let stored = groups.get("shapes").await.unwrap();
    assert_eq!(stored.spec.members, vec!["gus-shape".to_owned()]);
    assert_eq!(stored.spec.display_name, "Shapes 2");

    // Replace members with none (Entra ID's "replace members"), list by displayName, delete.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Groups/{id}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "Replace", "path": "members", "value": [] }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, list) = call(
        &app,
        "GET",
        "/Groups?filter=displayName%20eq%20%22Shapes%202%22",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(
        (
            list["totalResults"].as_u64(),
            list["Resources"][0]["members"].as_array().map(Vec::len)
        ),
        (Some(1), Some(0)),
        "{list}"
    );
    let (status, _) = call(&app, "DELETE", &format!("/Groups/{id}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", &format!("/Groups/{id}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, types) = call(&app, "GET", "/ResourceTypes/Group", Some(TOKEN), None).await;
    assert_eq!(types["endpoint"], "/Groups");
}

#[tokio::test]
async fn a_stolen_scim_token_cannot_choose_a_profile_or_take_a_group() {
    install_scim_identity();
    let admin = admin().await;
    let scim = env().plane.client(SCIM).await.unwrap();
    // The platform's own group, made by hand: the SCIM identity cannot change or delete it.
    let groups: Api<homestead_api::DirectoryGroup> = Api::all(admin.clone());
    let _ = groups
        .delete("platform-admins-e2e", &Default::default())
        .await;
    wait_gone(&groups, "platform-admins-e2e", 30).await;
    let hand_made: homestead_api::DirectoryGroup = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
        "metadata": { "name": "platform-admins-e2e" },
        "spec": { "displayName": "Platform admins", "members": ["someone"] },
    }))
    .unwrap();
    groups
        .create(&Default::default(), &hand_made)
        .await
        .unwrap();
    let as_scim: Api<homestead_api::DirectoryGroup> = Api::all(scim.clone());
    fn forbidden<T>(result: Result<T, kube::Error>) -> bool {
        matches!(result, Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422)
    }
    let take = Patch::Merge(json!({ "spec": { "members": ["mallory"] } }));
    assert!(forbidden(
        as_scim
            .patch("platform-admins-e2e", &PatchParams::default(), &take)
            .await
    ));
    assert!(forbidden(
        as_scim
            .patch(
                "platform-admins-e2e",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "metadata": { "labels": { "homestead.dev/writer": "scim" } } })
                )
            )
            .await
    ));
    assert!(forbidden(
        as_scim
            .delete("platform-admins-e2e", &Default::default())
            .await
            .map(|_| ())
    ));
    // Nor write Profiles, nor create a person with a Profile of its choosing.
    let profile: homestead_api::Profile = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": { "name": "mallory-profile" }, "spec": { "directory": { "groups": ["x"] } },
    }))
    .unwrap();
    assert!(forbidden(
        Api::<homestead_api::Profile>::all(scim.clone())
            .create(&Default::default(), &profile)
            .await
    ));
    let mut chosen = User::test("mallory-scim").with_spec(json!({ "profile": "e2e-analysts" }));
    chosen.metadata.labels = Some([("homestead.dev/writer".to_owned(), "scim".to_owned())].into());
    assert!(forbidden(
        Api::<User>::all(scim)
            .create(&Default::default(), &chosen)
            .await
    ));
    groups
        .delete("platform-admins-e2e", &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_work_email_and_names_answer_entra_id_and_okta_request_shapes() {
    let app = service().await;
    let admin = admin().await;
    let users: Api<User> = Api::all(admin.clone());
    let scenario = Scenario::new();
    for name in ["eve-mail", "hal-hr"] {
        scenario.track(name);
        scenario.track_namespace(&format!("user-{name}"));
    }
    // Entra ID creates a person without an e-mail, then adds the work e-mail by value path.
    let (status, created) = call(
        &app,
        "POST",
        "/Users",
        Some(TOKEN),
        Some(scim_user("eve.mail@example.com")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let eve = created["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Users/{eve}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "Add", "path": "emails[type eq \"work\"].value", "value": "eve@example.com" }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        users.get("eve-mail").await.unwrap().spec.email.as_deref(),
        Some("eve@example.com")
    );
    // ... finds the person by it ...
    let lookup =
        "/Users?filter=emails%5Btype%20eq%20%22work%22%5D.value%20eq%20%22eve@example.com%22";
    let (status, list) = call(&app, "GET", lookup, Some(TOKEN), None).await;
    assert_eq!(
        (status, list["totalResults"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{list}"
    );
    // ... and removes it with its value.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("/Users/{eve}"),
        Some(TOKEN),
        Some(patch_op(json!([
            { "op": "Remove", "path": "emails[type eq \"work\"].value", "value": "eve@example.com" }
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(users.get("eve-mail").await.unwrap().spec.email, None);

    // A person HR made, with an e-mail (no type) and names, handed over to SCIM.
    let mut hr = User::test("hal-hr").with_spec(json!({
        "email": "hal@example.com", "givenName": "Hal", "familyName": "Abelson",
    }));
    hr.metadata.labels = Some([("homestead.dev/writer".to_owned(), "scim".to_owned())].into());
    scenario.create(&admin, &hr).await;
    let by_name = "/Users?filter=userName%20eq%20%22hal-hr@example.com%22";
    let found = eventually("the service to see hal-hr", 30, || async {
        let (_, list) = call(&app, "GET", by_name, Some(TOKEN), None).await;
        (list["totalResults"] == 1).then(|| list["Resources"][0].clone())
    })
    .await;
    // Okta reads the names; Entra ID replaces the work e-mail.
    assert_eq!(
        found["name"],
        json!({"givenName": "Hal", "familyName": "Abelson"}),
        "{found}"
    );
    assert_eq!(
        found["emails"][0],
        json!({"value": "hal@example.com", "type": "work", "primary": true})
    );
    let hal = found["id"].as_str().unwrap();
    let (status, body) = call(&app, "PATCH", &format!("/Users/{hal}"), Some(TOKEN), Some(patch_op(json!([
        { "op": "Replace", "path": "emails[type eq \"work\"].value", "value": "hal@mit.example" }
    ])))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored = users.get("hal-hr").await.unwrap().spec;
    assert_eq!(
        (stored.email.as_deref(), stored.given_name.as_deref()),
        (Some("hal@mit.example"), Some("Hal")),
        "the e-mail replaced, the names kept"
    );
}
