//! An HR identity that may only write `users` (docs/security.md): it cannot remove the cleanup
//! finalizer, write directory groups or Profiles, or give one person two homes (docs/design.md
//! rules 7 and 21, one person one User).

use super::*;

/// `kubectl auth can-i ARGS` for the impersonation flags `who`, asked as the admin: the first
/// line of the answer (`yes` or `no`).
fn can_i(who: &[&str], args: &[&str]) -> String {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    all.extend_from_slice(who);
    let (_, out) = kubectl(&all, "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// The impersonation flags of [`HR`], in [`HR_GROUP`].
fn hr_as() -> [String; 2] {
    [format!("--as={HR}"), format!("--as-group={HR_GROUP}")]
}

/// Finding 8: HR or the SCIM identity could remove `homestead.dev/cleanup` from a deleted
/// User, cutting offboarding short. Now only the operator may.
#[tokio::test]
async fn only_the_operator_removes_the_cleanup_finalizer() {
    let s = Scenario::new();
    let hr = hr().await;
    s.create(&hr, &User::test("atk-fin")).await;
    wait_reason(&hr, "atk-fin", "Provisioned").await;
    let strip = json!({ "metadata": { "finalizers": null } });
    assert!(forbidden(
        merge(&hr, "atk-fin", strip.clone()).await,
        "homestead.dev/cleanup"
    ));
    s.track("atk-fin-scim");
    scim_create("atk-fin-scim@example.com", json!({}));
    wait_reason(&hr, "atk-fin-scim", "Provisioned").await;
    let as_scim = env().plane.client(SCIM).await.unwrap();
    assert!(forbidden(
        merge(&as_scim, "atk-fin-scim", strip.clone()).await,
        "homestead.dev/cleanup"
    ));

    // Deleted: still the operator's to release, and it does once offboarding is done.
    let users: Api<User> = Api::all(hr.clone());
    users
        .delete("atk-fin", &DeleteParams::default())
        .await
        .unwrap();
    match merge(&hr, "atk-fin", strip).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {} // already offboarded
        refused => assert!(forbidden(refused, "homestead.dev/cleanup")),
    }
    wait_gone(&users, "atk-fin", 60).await;
    wait_gone(&Api::<Namespace>::all(admin().await), "user-atk-fin", 60).await;
}

/// Who may change which directory groups exist and who is in them: the SCIM identity (its own
/// groups only, see the scim tests) and cluster administrators. Not HR with its users-only
/// role, nor a person, even one with `admin` in their own namespace (a RoleBinding cannot
/// grant cluster-scoped objects); both may not write Profiles either.
#[tokio::test]
async fn neither_hr_nor_a_person_can_write_directory_groups_or_profiles() {
    let _hr = hr().await;
    let s = Scenario::new();
    let admin = admin().await;
    s.create(
        &admin,
        &User::test("grp-tenant").with_spec(json!({ "role": "admin" })),
    )
    .await;
    wait_reason(&admin, "grp-tenant", "Provisioned").await;
    let hr_as = hr_as();
    let hr_as = [&hr_as[0][..], &hr_as[1][..]];
    let person = ["--as=grp-tenant@example.com"];
    assert_eq!(
        can_i(&person, &["create", "pods", "-n", "user-grp-tenant"]),
        "yes",
        "the person really is admin in their namespace"
    );
    for who in [&hr_as[..], &person[..]] {
        for verb in ["create", "patch", "update", "delete"] {
            for resource in [
                "directorygroups.homestead.dev",
                "directorygroups.homestead.dev/status",
                "profiles.homestead.dev",
            ] {
                assert_eq!(
                    can_i(who, &[verb, resource]),
                    "no",
                    "{who:?} {verb} {resource}"
                );
            }
        }
    }
    assert_eq!(
        can_i(&hr_as, &["list", "directorygroups.homestead.dev"]),
        "yes"
    );
    assert_eq!(
        can_i(&person, &["list", "directorygroups.homestead.dev"]),
        "no"
    );
}

/// Issue 45, finding 4: the SCIM ServiceAccount (or HR by mistake) created a second User with
/// the username of a person HR had suspended, and that person had `admin` in the second
/// User's namespace. Now the younger User is refused (`DuplicateIdentity`, a Warning Event on
/// both), whatever its case, and gets the identity only once the older User is gone.
#[tokio::test]
async fn a_second_user_with_a_suspended_persons_identity_gets_no_access() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    s.create(
        &hr,
        &User::test("atk-frank").with_spec(
            json!({ "identity": { "username": "atk-frank@example.com" }, "suspended": true }),
        ),
    )
    .await;
    wait_reason(&c, "atk-frank", "Suspended").await;
    s.track("atk-frank-two");
    install_scim_identity();
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let two: User = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "metadata": { "name": "atk-frank-two", "labels": { "homestead.dev/writer": "scim" } },
        "spec": { "identity": { "username": "ATK-Frank@example.com" } },
    }))
    .unwrap();
    Api::<User>::all(as_scim)
        .create(&PostParams::default(), &two)
        .await
        .unwrap();
    wait_reason(&c, "atk-frank-two", "DuplicateIdentity").await;
    for ns in ["user-atk-frank", "user-atk-frank-two"] {
        for who in ["atk-frank@example.com", "ATK-Frank@example.com"] {
            assert_eq!(can(who, "get", "pods", ns), "no", "{who} in {ns}");
        }
    }
    assert!(
        bindings(&c, "user-atk-frank-two").await.is_empty(),
        "no RoleBinding for the duplicate"
    );
    eventually("a Warning Event on each User", 30, || async {
        let on_two = event_notes("atk-frank-two", "DuplicateIdentity");
        let on_frank = event_notes("atk-frank", "DuplicateIdentity");
        (!on_two.is_empty() && on_frank.iter().any(|n| n.contains("atk-frank-two"))).then_some(())
    })
    .await;

    // The identity is free once the older User is gone: the younger one gets it.
    Api::<User>::all(hr.clone())
        .delete("atk-frank", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(&c, "atk-frank-two", "Provisioned").await;
    eventually(
        "the person to have access through the remaining User",
        30,
        || async {
            (can("ATK-Frank@example.com", "get", "pods", "user-atk-frank-two") == "yes")
                .then_some(())
        },
    )
    .await;
}

/// Issue 45, finding 4, raced: five Users with one username created at once, before the
/// operator has seen any of them. However the watch events and reconciles interleave, exactly
/// one ends up with access (the oldest, on a tie the first by name), and every other one is
/// `DuplicateIdentity` with nothing in its namespace.
#[tokio::test]
async fn users_raced_into_one_identity_end_with_exactly_one_home() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    let names: Vec<String> = (0..5).map(|i| format!("atk-twin-{i}")).collect();
    let person = "atk-twin@example.com";
    let twins: Vec<User> = names
        .iter()
        .map(|name| User::test(name).with_spec(json!({ "identity": { "username": person } })))
        .collect();
    futures::future::join_all(twins.iter().map(|twin| s.create(&hr, twin))).await;
    let users: Api<User> = Api::all(c.clone());
    let reasons = eventually("every twin to settle", 60, || async {
        let mut reasons = Vec::new();
        for name in &names {
            let u = users.get(name).await.ok()?;
            let current = u.status.as_ref()?.observed_generation == u.metadata.generation;
            let reason = reason(&u).filter(|_| current)?;
            reasons.push(reason);
        }
        let provisioned = reasons.iter().filter(|r| *r == "Provisioned").count();
        let refused = reasons.iter().filter(|r| *r == "DuplicateIdentity").count();
        (provisioned == 1 && refused == names.len() - 1).then_some(reasons)
    })
    .await;
    let holder = &names[reasons.iter().position(|r| r == "Provisioned").unwrap()];
    for name in &names {
        let ns = format!("user-{name}");
        let expected = if name == holder { "yes" } else { "no" };
        eventually(&format!("access in {ns} to be {expected}"), 30, || async {
            (can_get_pods(person, &ns) == expected).then_some(())
        })
        .await;
        if name != holder {
            assert!(bindings(&c, &ns).await.is_empty(), "{ns} keeps a binding");
        }
    }
}

/// HR reads the Events of Users and nothing else of the cluster's Events; a help desk with
/// `homestead-viewer` sees people, Profiles, groups and Shares and their Users' Events, and
/// writes nothing (rbac/hr.yaml, rbac/viewer.yaml; docs/security.md).
#[tokio::test]
async fn hr_and_the_help_desk_read_only_the_events_they_need() {
    let _hr = hr().await;
    bind_roles("homestead-viewer", "helpdesk");
    let hr_as = hr_as();
    let hr_as = [&hr_as[0][..], &hr_as[1][..]];
    let desk = ["--as=desk-dana@example.com", "--as-group=helpdesk"];
    for who in [&hr_as[..], &desk[..]] {
        for events in ["events", "events.events.k8s.io"] {
            for verb in ["get", "list", "watch"] {
                assert_eq!(
                    can_i(who, &[verb, events, "-n", "default"]),
                    "yes",
                    "{who:?} {verb} {events}"
                );
            }
            for elsewhere in [&["-n", "kube-system"][..], &["-n", "user-alice"], &["-A"]] {
                let args = [&["list", events][..], elsewhere].concat();
                assert_eq!(can_i(who, &args), "no", "{who:?} {args:?}");
            }
            assert_eq!(can_i(who, &["create", events, "-n", "default"]), "no");
        }
        assert_eq!(can_i(who, &["get", "secrets", "-n", "default"]), "no");
    }
    for resource in [
        "users.homestead.dev",
        "profiles.homestead.dev",
        "directorygroups.homestead.dev",
    ] {
        for verb in ["get", "list", "watch"] {
            assert_eq!(can_i(&desk, &[verb, resource]), "yes", "{verb} {resource}");
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert_eq!(can_i(&desk, &[verb, resource]), "no", "{verb} {resource}");
        }
    }
    assert_eq!(can_i(&desk, &["list", "shares.homestead.dev", "-A"]), "yes");
    for verb in ["create", "update", "patch", "delete", "share-any-home"] {
        assert_eq!(
            can_i(&desk, &[verb, "shares.homestead.dev", "-n", "user-alice"]),
            "no",
            "{verb}"
        );
    }
    for (verb, resource) in [
        ("list", "namespaces"),
        ("list", "rolebindings.rbac.authorization.k8s.io"),
        ("list", "pods"),
    ] {
        assert_eq!(
            can_i(&desk, &[verb, resource, "-A"]),
            "no",
            "{verb} {resource}"
        );
    }
    // And for real: the help desk lists the Events in `default` with its own request.
    let (ok, out) = kubectl(
        &[
            "get",
            "events",
            "-n",
            "default",
            "--as=desk-dana@example.com",
            "--as-group=helpdesk",
        ],
        "",
    );
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &[
            "get",
            "events",
            "-n",
            "kube-system",
            "--as=desk-dana@example.com",
            "--as-group=helpdesk",
        ],
        "",
    );
    assert!(!ok && out.contains("Forbidden"), "{out}");
}

/// Adoption's confirmation (docs/adoption.md): the label `homestead.dev/adopt-for` hands a
/// Namespace to a User, so only the platform may write it. HR and the SCIM identity are refused
/// a real patch; a person with `admin` in their own home may not patch that Namespace or any
/// other; the namespace stays unlabelled and nobody's.
#[tokio::test]
async fn only_the_platform_hands_a_namespace_over() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("atk-adopt")).await;
    wait_reason(&c, "atk-adopt", "Provisioned").await;
    let legacy = "atk-adopt-legacy";
    s.track_namespace(legacy);
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": legacy } })).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let hand = Patch::Merge(json!({ "metadata": { "labels": {
        homestead_api::LABEL_ADOPT_FOR: "atk-adopt" } } }));
    let scim = env().plane.client(SCIM).await.unwrap();
    for (who, client) in [("HR", hr().await), ("the SCIM identity", scim)] {
        let patched = Api::<Namespace>::all(client)
            .patch(legacy, &PatchParams::default(), &hand)
            .await;
        assert!(forbidden(patched, "namespaces"), "{who}");
    }
    let tenant = ["--as=atk-adopt@example.com".to_owned()];
    let tenant: Vec<&str> = tenant.iter().map(String::as_str).collect();
    for ns in ["user-atk-adopt", legacy] {
        let target = format!("namespaces/{ns}");
        assert_eq!(can_i(&tenant, &["patch", &target]), "no", "{ns}");
        let hr = hr_as();
        let hr: Vec<&str> = hr.iter().map(String::as_str).collect();
        assert_eq!(can_i(&hr, &["patch", &target]), "no", "{ns}");
    }
    let untouched = Api::<Namespace>::all(c).get(legacy).await.unwrap();
    assert_eq!(
        untouched.labels().get(homestead_api::LABEL_ADOPT_FOR),
        None,
        "{:?}",
        untouched.labels()
    );
}
