//! Directory groups over SCIM: a group chooses a Profile for its members, answers the request
//! shapes of Entra ID, Okta and JumpCloud, and a stolen token can neither choose a Profile nor
//! take a group (docs/design.md rule 21).

use super::*;

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
