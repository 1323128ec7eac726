//! People over SCIM (docs/design.md rule 21): created, suspended and offboarded through the
//! identity provider's requests, with SCIM errors for bad requests, and the request shapes of
//! Entra ID and Okta.

use super::*;

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
    // Every SCIM metric the dashboard and the alerts query is one the service exports.
    let read = |file: &str| std::fs::read_to_string(repo_root().join(file)).unwrap();
    let queries =
        read("charts/homestead/files/dashboard.json") + &read("charts/homestead/files/alerts.yaml");
    let queried: std::collections::BTreeSet<&str> = queries
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("homestead_scim_"))
        .collect();
    assert!(
        queried.contains("homestead_scim_certificate_expiry_timestamp_seconds"),
        "{queried:?}"
    );
    for metric in queried {
        let base = metric.trim_end_matches("_bucket");
        assert!(
            metrics.contains(&format!("# TYPE {base} ")),
            "the dashboard or an alert queries {metric}, which the SCIM service's /metrics does not have"
        );
    }
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

/// The directory's manager (docs/handover.md): the enterprise extension's `manager` becomes
/// `spec.directory.manager` (by the User it names), set on create and by Entra ID's PATCH of
/// the manager path, cleared by a `remove`; a person the SCIM service owns, deleted under
/// `deletionPolicy: Handover` with no `successor` HR named, leaves their home to that manager.
/// The SCIM identity itself cannot set `successor` or `Handover`, and a manager set on a User
/// another writer owns counts for nothing.
#[tokio::test]
async fn the_directorys_manager_takes_a_leavers_home_over_scim() {
    let app = service().await;
    let admin = admin().await;
    let users: Api<User> = Api::all(admin.clone());
    let scenario = Scenario::new();
    for name in ["mona-mgr", "leon-left", "ned-hr"] {
        scenario.track(name);
        scenario.track_namespace(&format!("user-{name}"));
    }
    let mona = provisioned(&app, &admin, "mona.mgr@example.com", "mona-mgr").await;
    const ENTERPRISE: &str = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";
    let mut leon = scim_user("leon.left@example.com");
    leon["schemas"] = json!(["urn:ietf:params:scim:schemas:core:2.0:User", ENTERPRISE]);
    leon[ENTERPRISE] = json!({ "manager": { "value": mona } });
    let (status, created) = call(&app, "POST", "/Users", Some(TOKEN), Some(leon)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        created[ENTERPRISE]["manager"]["value"],
        mona.as_str(),
        "{created}"
    );
    let leon = created["id"].as_str().unwrap().to_owned();
    let user = wait_reason(&admin, "leon-left", "Provisioned").await;
    let manager = |u: &User| u.spec.directory.as_ref().and_then(|d| d.manager.clone());
    assert_eq!(manager(&user).as_deref(), Some("mona-mgr"));

    // Entra ID's PATCH of the manager: remove clears it, a bare id sets it again.
    let path = format!("{ENTERPRISE}:manager");
    for (op, want) in [("Remove", None), ("Add", Some("mona-mgr"))] {
        let mut operation = json!({ "op": op, "path": path });
        if op == "Add" {
            operation["value"] = json!(mona);
        }
        let (status, body) = call(
            &app,
            "PATCH",
            &format!("/Users/{leon}"),
            Some(TOKEN),
            Some(patch_op(json!([operation]))),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            manager(&users.get("leon-left").await.unwrap()).as_deref(),
            want
        );
    }

    // The SCIM identity may not choose who gets a home.
    for patch in [
        r#"{"spec":{"successor":"mona-mgr"}}"#,
        r#"{"spec":{"deletionPolicy":"Handover"}}"#,
    ] {
        let (ok, out) = kubectl_as(
            SCIM,
            &["patch", "user", "leon-left", "--type=merge", "-p", patch],
            "",
        );
        assert!(!ok && out.contains("homestead-scim-bounds"), "{out}");
    }
    // HR decides the policy; the identity provider's DELETE then hands the home over.
    let (ok, out) = kubectl(
        &[
            "patch",
            "user",
            "leon-left",
            "--type=merge",
            "-p",
            r#"{"spec":{"deletionPolicy":"Handover"}}"#,
        ],
        "",
    );
    assert!(ok, "{out}");
    let (status, body) = call(&app, "DELETE", &format!("/Users/{leon}"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let home = wait_workspace(&admin, "user-leon-left", "Provisioned").await;
    assert_eq!(home.spec.owner.user.as_deref(), Some("mona-mgr"));
    eventually("mona to have admin in user-leon-left", 30, || async {
        (can_create_configmaps("mona.mgr@example.com", "user-leon-left") == "yes").then_some(())
    })
    .await;
    assert_eq!(
        can_create_configmaps("leon.left@example.com", "user-leon-left"),
        "no"
    );

    // A manager on a User HR owns is not the directory's word: no successor, the home is kept.
    let ned = User::test("ned-hr").with_spec(json!({
        "deletionPolicy": "Handover", "directory": { "manager": "mona-mgr" },
    }));
    scenario.create(&admin, &ned).await;
    wait_reason(&admin, "ned-hr", "Provisioned").await;
    users
        .delete("ned-hr", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&users, "ned-hr", 30).await;
    let ns = Api::<Namespace>::all(admin.clone())
        .get("user-ned-hr")
        .await
        .unwrap();
    assert_eq!(
        ns.labels()
            .get("homestead.dev/retained-from")
            .map(String::as_str),
        Some("ned-hr")
    );
    let _ = Api::<homestead_api::Workspace>::all(admin.clone())
        .delete("user-leon-left", &kube::api::DeleteParams::default())
        .await;
}
