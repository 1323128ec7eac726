//! Shares tried as their adversaries would (docs/sharing.md, docs/security.md): HR or the SCIM
//! identity making a second User with someone's identity, a grantee's name given to another
//! person, an owner sharing with themselves to outlast a downgrade, and a home handed to a new
//! owner with the old owner's Shares in it. Each was reproduced against the release before
//! issue 61; each asks what the person can really do (`kubectl auth can-i`).

use super::*;
use homestead_api::LABEL_ADOPT_FOR;

/// A Share of `ns` named `name` to `to` (a YAML flow sequence) with `role`, for an hour,
/// created as `owner` (impersonated; the admission policy checks the creator annotation).
fn share_as(owner: &str, ns: &str, name: &str, to: &str, role: &str) {
    let until =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let until = until.round(k8s_openapi::jiff::Unit::Second).unwrap();
    let doc = format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    homestead.dev/created-by: \"{owner}\"\nspec:\n  to: {to}\n  role: {role}\n  expiresAt: \"{until}\"\n  reason: \"attack\"\n",
        api = homestead_api::API_VERSION
    );
    let (ok, out) = kubectl(&[&format!("--as={owner}"), "create", "-f", "-"], &doc);
    assert!(ok, "{out}");
}

/// `can` answered `want` each time over `secs` seconds, sampled every 250 ms.
async fn holds(person: &str, verb: &str, resource: &str, ns: &str, want: &str, secs: u64) {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        assert_eq!(
            can(person, verb, resource, ns),
            want,
            "{person} {verb} {resource} in {ns}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Issue 61, B3: HR made a second User with a suspended person's username; it was refused
/// (`DuplicateIdentity`), but a Share to it bound that username, and the suspended person could
/// create deployments in the sharer's home. Now a Share grants nothing to a duplicate.
#[tokio::test]
async fn a_share_grants_nothing_to_a_user_refused_as_a_duplicate_identity() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    let frank = "atk-sfrank@example.com";
    s.create(
        &hr,
        &User::test("atk-sfrank")
            .with_spec(json!({ "identity": { "username": frank }, "suspended": true })),
    )
    .await;
    wait_reason(&c, "atk-sfrank", "Suspended").await;
    s.create(
        &hr,
        &User::test("atk-sfrank-two").with_spec(json!({ "identity": { "username": frank } })),
    )
    .await;
    wait_reason(&c, "atk-sfrank-two", "DuplicateIdentity").await;
    s.create(&c, &User::test("atk-sowner")).await;
    wait_reason(&c, "atk-sowner", "Provisioned").await;
    let home = "user-atk-sowner";
    share_as(
        "atk-sowner@example.com",
        home,
        "to-dup",
        "[{user: atk-sfrank-two}]",
        "edit",
    );
    let share = wait_share(&c, home, "to-dup", "Suspended").await;
    let grantee = &share.status.unwrap().grantees[0];
    assert_eq!(grantee.active, Some(0), "{grantee:?}");
    holds(frank, "create", "deployments.apps", home, "no", 3).await;
    assert!(
        !bindings(&c, home)
            .await
            .iter()
            .any(|b| b.starts_with("homestead-share-")),
        "no Share RoleBinding for a duplicate"
    );
}

/// Issue 61, B4: alice shared with HR's carl; HR deleted carl and the SCIM identity made a new
/// User `carl` with another person's identity, who then had edit in alice's home. Now a Share
/// records the uid of each User it resolves and refuses a later User of that name
/// (`GranteeReplaced`), until the owner names them again.
#[tokio::test]
async fn a_share_follows_the_user_it_was_made_for_not_the_name() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    s.create(&c, &User::test("atk-gowner")).await;
    s.create(&hr, &User::test("atk-carl")).await;
    wait_reason(&c, "atk-gowner", "Provisioned").await;
    wait_reason(&c, "atk-carl", "Provisioned").await;
    let home = "user-atk-gowner";
    share_as(
        "atk-gowner@example.com",
        home,
        "to-carl",
        "[{user: atk-carl}]",
        "edit",
    );
    wait_share(&c, home, "to-carl", "Active").await;
    eventually("carl to get the share", 30, || async {
        (can("atk-carl@example.com", "get", "pods", home) == "yes").then_some(())
    })
    .await;

    Api::<User>::all(hr.clone())
        .delete("atk-carl", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<User>::all(c.clone()), "atk-carl", 60).await;
    let stranger = "atk-stranger@example.com";
    install_scim_identity();
    let as_scim = env().plane.client(SCIM).await.unwrap();
    let impostor: User = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "metadata": { "name": "atk-carl", "labels": { "homestead.dev/writer": "scim" } },
        "spec": { "identity": { "username": stranger } },
    }))
    .unwrap();
    Api::<User>::all(as_scim)
        .create(&PostParams::default(), &impostor)
        .await
        .unwrap();
    wait_reason(&c, "atk-carl", "Provisioned").await;
    let share = wait_share(&c, home, "to-carl", "Refused").await;
    let message = &share.status.as_ref().unwrap().conditions[0].message;
    assert!(message.contains("GranteeReplaced"), "{message}");
    holds(stranger, "get", "pods", home, "no", 3).await;
    assert_eq!(can("atk-carl@example.com", "get", "pods", home), "no");
}

/// Issue 61, B6: an owner shared their home with their own User (edit), then HR lowered them to
/// `view`: the downgrade removed every binding, and the Share put its own back, so the person
/// still read Secrets. Now a Share to oneself is refused (`SelfShare`), and no Share binds the
/// home's owner, even through a group they are in.
#[tokio::test]
async fn a_share_to_oneself_grants_nothing_and_a_downgrade_holds() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    s.create(&hr, &User::test("atk-self")).await;
    s.create(&hr, &User::test("atk-self-mate")).await;
    wait_reason(&c, "atk-self", "Provisioned").await;
    wait_reason(&c, "atk-self-mate", "Provisioned").await;
    let home = "user-atk-self";
    let me = "atk-self@example.com";
    share_as(me, home, "to-me", "[{user: atk-self}]", "edit");
    let refused = wait_share(&c, home, "to-me", "Refused").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert!(message.contains("SelfShare"), "{message}");

    let groups: Api<homestead_api::DirectoryGroup> = Api::all(c.clone());
    let _ = groups
        .delete("atk-self-team", &DeleteParams::default())
        .await;
    wait_gone(&groups, "atk-self-team", 30).await;
    let mut team = homestead_api::DirectoryGroup::test("atk-self-team", "atk-self-team")
        .with_members(&["atk-self", "atk-self-mate"]);
    team.metadata.generation = None;
    team.status = None;
    groups.create(&PostParams::default(), &team).await.unwrap();
    share_as(me, home, "to-team", "[{group: atk-self-team}]", "edit");
    wait_share(&c, home, "to-team", "Active").await;
    eventually("the team mate to get the share", 30, || async {
        (can(
            "atk-self-mate@example.com",
            "create",
            "deployments.apps",
            home,
        ) == "yes")
            .then_some(())
    })
    .await;

    merge(&hr, "atk-self", json!({ "spec": { "role": "view" } }))
        .await
        .unwrap();
    eventually("the downgrade to take effect", 30, || async {
        (can(me, "get", "secrets", home) == "no").then_some(())
    })
    .await;
    wait_share(&c, home, "to-team", "Active").await;
    holds(me, "get", "secrets", home, "no", 4).await;
    holds(me, "create", "deployments.apps", home, "no", 1).await;
    assert_eq!(
        can(
            "atk-self-mate@example.com",
            "create",
            "deployments.apps",
            home
        ),
        "yes"
    );
    let _ = groups
        .delete("atk-self-team", &DeleteParams::default())
        .await;
}

/// Issue 61, B7: a person offboarded with `Retain` left a Share to bob in their home; the
/// platform handed the namespace to a new person (adoption), and the Share was `Active` again:
/// bob was in a home nobody had shared with him. Now a Share records the owner it was made under
/// and ends (`HandedOver`) when the home has another.
#[tokio::test]
async fn a_home_handed_to_a_new_owner_ends_the_previous_owners_shares() {
    let s = Scenario::new();
    let hr = hr().await;
    let c = admin().await;
    let ns = "user-atk-leaver";
    s.track_namespace(ns);
    s.create(
        &hr,
        &User::test("atk-leaver").with_spec(json!({ "deletionPolicy": "Retain" })),
    )
    .await;
    s.create(&hr, &User::test("atk-lbob")).await;
    wait_reason(&c, "atk-leaver", "Provisioned").await;
    wait_reason(&c, "atk-lbob", "Provisioned").await;
    share_as(
        "atk-leaver@example.com",
        ns,
        "to-bob",
        "[{user: atk-lbob}]",
        "edit",
    );
    wait_share(&c, ns, "to-bob", "Active").await;
    eventually("bob to get the share", 30, || async {
        (can("atk-lbob@example.com", "get", "pods", ns) == "yes").then_some(())
    })
    .await;

    Api::<User>::all(hr.clone())
        .delete("atk-leaver", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<User>::all(c.clone()), "atk-leaver", 60).await;
    assert_eq!(can("atk-lbob@example.com", "get", "pods", ns), "no");
    s.create(
        &hr,
        &User::test("atk-heir").with_spec(json!({ "namespace": { "name": ns } })),
    )
    .await;
    wait_reason(&c, "atk-heir", "NamespaceConflict").await;
    let (ok, out) = kubectl(
        &[
            "label",
            "namespace",
            ns,
            &format!("{LABEL_ADOPT_FOR}=atk-heir"),
        ],
        "",
    );
    assert!(ok, "{out}");
    wait_reason(&c, "atk-heir", "Provisioned").await;
    wait_share(&c, ns, "to-bob", "HandedOver").await;
    holds("atk-lbob@example.com", "get", "pods", ns, "no", 3).await;
    // The namespace is no longer retained: a RoleBinding the heir makes there stays, and so
    // does the heir's own access (the retained-namespace controller would remove both).
    let (_, labels) = kubectl(
        &["get", "namespace", ns, "-o", "jsonpath={.metadata.labels}"],
        "",
    );
    assert!(!labels.contains("retained-from"), "{labels}");
    let (ok, out) = kubectl(
        &[
            "--as=atk-heir@example.com",
            "create",
            "rolebinding",
            "heir-sa",
            "--clusterrole=view",
            "-n",
            ns,
            &format!("--serviceaccount={ns}:default"),
        ],
        "",
    );
    assert!(ok, "{out}");
    holds("atk-heir@example.com", "get", "pods", ns, "yes", 5).await;
    assert!(bindings(&c, ns).await.contains(&"heir-sa".to_owned()));
}

/// Issue 61, B9: a Share named with 64 to 237 characters was admitted, but its RoleBinding's
/// label could not hold the name, so it never got a status and failed every reconcile. Now the
/// API server refuses such a name, naming the rule.
#[tokio::test]
async fn a_share_name_longer_than_its_label_can_hold_is_refused_at_admission() {
    let _ = env();
    let name = "a".repeat(64);
    let doc = format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    homestead.dev/created-by: {admin}\nspec:\n  to: [{{user: bob}}]\n  role: view\n  expiresAt: \"2030-01-01T00:00:00Z\"\n  reason: long\n",
        api = homestead_api::API_VERSION,
        admin = homestead_testenv::ADMIN
    );
    let (ok, out) = kubectl(&["create", "--dry-run=server", "-f", "-"], &doc);
    assert!(!ok, "a 64-character Share name was admitted");
    assert!(out.contains("at most 63"), "{out}");
}

/// Issue 61, B5: what a Share gave outlived it. With `admin` through a Share, bob bound himself
/// and a third person, and both kept admin after the Share expired; with `edit`, bob minted a
/// 24-hour token for a ServiceAccount the owner had bound to `admin`, and used it after the
/// Share ended. Now a Share never grants `admin` (the schema refuses it), and in a home only
/// its owner and the platform bind people or mint ServiceAccount credentials
/// (`homestead-home-grants`), whoever RBAC lets try: a grantee, or a ServiceAccount a grantee
/// acts as.
#[tokio::test]
async fn what_a_share_gave_ends_with_it() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("atk-giver")).await;
    s.create(&c, &User::test("atk-taker-b")).await;
    wait_reason(&c, "atk-giver", "Provisioned").await;
    wait_reason(&c, "atk-taker-b", "Provisioned").await;
    let home = "user-atk-giver";
    let (owner, bob) = ("atk-giver@example.com", "atk-taker-b@example.com");
    let ci = format!("system:serviceaccount:{home}:ci");

    // The owner runs CI as a ServiceAccount bound to admin (bindings of ServiceAccounts stay as
    // RBAC allows), and may mint its tokens.
    let as_owner = format!("--as={owner}");
    for args in [
        vec!["create", "serviceaccount", "ci", "-n", home],
        vec![
            "create",
            "rolebinding",
            "ci-admin",
            "--clusterrole=admin",
            "-n",
            home,
            &format!("--serviceaccount={home}:ci"),
        ],
        vec!["create", "token", "ci", "-n", home, "--duration=10m"],
    ] {
        let (ok, out) = kubectl(&[&[as_owner.as_str()][..], &args[..]].concat(), "");
        assert!(ok, "the owner: {args:?}: {out}");
    }

    // admin is never shared: refused at admission, naming the rule.
    let until =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let until = until.round(k8s_openapi::jiff::Unit::Second).unwrap();
    let admin_share = format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: co-admin\n  namespace: {home}\n  annotations:\n    homestead.dev/created-by: \"{owner}\"\nspec:\n  to: [{{user: atk-taker-b}}]\n  role: admin\n  expiresAt: \"{until}\"\n  reason: attack\n",
        api = homestead_api::API_VERSION
    );
    let (ok, out) = kubectl(&[&as_owner, "create", "-f", "-"], &admin_share);
    assert!(!ok && out.contains("at most edit"), "{out}");

    share_as(owner, home, "to-bob", "[{user: atk-taker-b}]", "edit");
    wait_share(&c, home, "to-bob", "Active").await;
    eventually("bob to get edit", 30, || async {
        (can(bob, "create", "deployments.apps", home) == "yes").then_some(())
    })
    .await;
    // RBAC lets bob mint tokens and act as the ServiceAccounts (edit can); admission does not
    // let either outlast the Share.
    assert_eq!(can(bob, "create", "serviceaccounts/token", home), "yes");
    let as_bob = format!("--as={bob}");
    let (ok, out) = kubectl(
        &[
            &as_bob,
            "create",
            "token",
            "ci",
            "-n",
            home,
            "--duration=24h",
        ],
        "",
    );
    assert!(
        !ok && out.contains("home-grants"),
        "bob minted a token: {out}"
    );
    let legacy = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: ci-forever\n  namespace: {home}\n  annotations:\n    kubernetes.io/service-account.name: ci\ntype: kubernetes.io/service-account-token\n"
    );
    let (ok, out) = kubectl(&[&as_bob, "create", "-f", "-"], &legacy);
    assert!(
        !ok && out.contains("home-grants"),
        "bob made a token Secret: {out}"
    );
    // As the ServiceAccount (what edit's impersonation gives): no token, no person bound.
    let as_ci = format!("--as={ci}");
    let (ok, out) = kubectl(&[&as_ci, "create", "token", "ci", "-n", home], "");
    assert!(
        !ok && out.contains("home-grants"),
        "the ServiceAccount minted its token: {out}"
    );
    let (ok, out) = kubectl(
        &[
            &as_ci,
            "create",
            "rolebinding",
            "bob-forever",
            "--clusterrole=admin",
            "-n",
            home,
            &format!("--user={bob}"),
        ],
        "",
    );
    assert!(
        !ok && out.contains("home-grants"),
        "the ServiceAccount bound bob: {out}"
    );
    // Nor a ServiceAccount of bob's own home, whose tokens bob may mint there.
    let (ok, out) = kubectl(
        &[
            &as_ci,
            "create",
            "rolebinding",
            "bob-sa-forever",
            "--clusterrole=admin",
            "-n",
            home,
            "--serviceaccount=user-atk-taker-b:default",
        ],
        "",
    );
    assert!(
        !ok && out.contains("home-grants"),
        "the ServiceAccount bound bob's own: {out}"
    );
    // Its own namespace's ServiceAccounts stay as RBAC allows.
    let (ok, out) = kubectl(
        &[
            &as_ci,
            "create",
            "rolebinding",
            "ci-view",
            "--clusterrole=view",
            "-n",
            home,
            &format!("--serviceaccount={home}:ci"),
        ],
        "",
    );
    assert!(ok, "{out}");

    // The Share ends (expiresAt a few seconds from now): bob has nothing left in the home.
    let soon = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_secs(3))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap();
    let (ok, out) = kubectl(
        &[
            &as_owner,
            "patch",
            "share",
            "to-bob",
            "-n",
            home,
            "--type=merge",
            "-p",
            &format!("{{\"spec\":{{\"expiresAt\":\"{soon}\"}}}}"),
        ],
        "",
    );
    assert!(ok, "{out}");
    wait_share(&c, home, "to-bob", "Expired").await;
    eventually("bob to lose the share", 30, || async {
        (can(bob, "get", "pods", home) == "no").then_some(())
    })
    .await;
    for (verb, resource) in [
        ("create", "deployments.apps"),
        ("get", "secrets"),
        ("create", "rolebindings"),
    ] {
        assert_eq!(can(bob, verb, resource, home), "no", "{verb} {resource}");
    }
}

/// Issue 61, B9: a home made governed later kept the RoleBindings its owner had made to people
/// before (`unmanaged` in `homestead access`, still admin). Now a governed Profile's rule is a
/// standing rule: under `ServiceAccountsOnly` a binding to anything but the home's own
/// ServiceAccounts is removed, under `Forbid` every tenant binding, whoever made it.
#[tokio::test]
async fn a_home_made_governed_later_keeps_no_binding_it_does_not_admit() {
    let s = Scenario::new();
    let c = admin().await;
    let profile_name = "atk-governed-later";
    profile(
        &c,
        profile_name,
        json!({ "sharing": { "tenantRoleBindings": "Allow" } }),
    )
    .await;
    s.create(
        &c,
        &User::test("atk-gov").with_spec(json!({ "profile": profile_name })),
    )
    .await;
    wait_reason(&c, "atk-gov", "Provisioned").await;
    let home = "user-atk-gov";
    let owner = "atk-gov@example.com";
    let colleague = "atk-gov-colleague@example.com";
    let as_owner = format!("--as={owner}");
    for args in [
        vec![
            "create",
            "rolebinding",
            "colleague",
            "--clusterrole=admin",
            "-n",
            home,
            &format!("--user={colleague}"),
        ],
        vec!["create", "serviceaccount", "deployer", "-n", home],
        vec![
            "create",
            "rolebinding",
            "deployer",
            "--clusterrole=edit",
            "-n",
            home,
            &format!("--serviceaccount={home}:deployer"),
        ],
    ] {
        let (ok, out) = kubectl(&[&[as_owner.as_str()][..], &args[..]].concat(), "");
        assert!(ok, "{args:?}: {out}");
    }
    assert_eq!(can(colleague, "get", "secrets", home), "yes");

    let profiles: Api<homestead_api::Profile> = Api::all(c.clone());
    let govern = |rule: &str| json!({ "spec": { "sharing": { "tenantRoleBindings": rule } } });
    profiles
        .patch(
            profile_name,
            &PatchParams::default(),
            &Patch::Merge(govern("ServiceAccountsOnly")),
        )
        .await
        .unwrap();
    eventually("the colleague's binding to go", 30, || async {
        (can(colleague, "get", "secrets", home) == "no").then_some(())
    })
    .await;
    assert_eq!(bindings(&c, home).await, ["deployer", "homestead-user"]);
    profiles
        .patch(
            profile_name,
            &PatchParams::default(),
            &Patch::Merge(govern("Forbid")),
        )
        .await
        .unwrap();
    eventually("the ServiceAccount's binding to go too", 30, || async {
        (bindings(&c, home).await == ["homestead-user"]).then_some(())
    })
    .await;
    assert_eq!(
        can(owner, "get", "secrets", home),
        "yes",
        "the owner keeps the home"
    );
    let _ = profiles
        .delete(profile_name, &DeleteParams::default())
        .await;
}
