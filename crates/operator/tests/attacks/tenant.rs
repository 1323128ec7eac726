//! A person with `admin` in their own namespace (docs/security.md): they cannot keep access past a
//! revocation, open an isolated namespace, block a downgrade, get a role before the guards, or
//! route other people's traffic through a Service (docs/design.md rules 12, 17, 18, 19, 20).

use super::*;

/// Finding 3: a tenant creating RoleBindings in a loop while HR deletes their `Retain` User kept
/// admin in the retained namespace. Now a retained namespace has every RoleBinding removed for
/// as long as it exists, whoever makes one and whenever.
#[tokio::test]
async fn retain_offboarding_leaves_no_binding_a_racing_tenant_made() {
    let s = Scenario::new();
    let c = admin().await;
    let ns = "user-atk-retain";
    s.track_namespace(ns);
    s.create(
        &c,
        &User::test("atk-retain")
            .with_spec(json!({ "identity": { "username": TENANT }, "deletionPolicy": "Retain" })),
    )
    .await;
    wait_reason(&c, "atk-retain", "Provisioned").await;

    // The tenant, with their own token, binds admin to themselves as fast as they can.
    let tom = env().plane.client(TENANT).await.unwrap();
    let racing = tokio::spawn(async move {
        let api: Api<RoleBinding> = Api::namespaced(tom, "user-atk-retain");
        let (mut made, deadline) = (0, Instant::now() + Duration::from_secs(8));
        for i in 0.. {
            if Instant::now() > deadline {
                break;
            }
            let binding: RoleBinding = serde_json::from_value(json!({
                "metadata": { "name": format!("mine-{i}") },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "admin" },
                "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                               "name": TENANT }],
            }))
            .unwrap();
            if api.create(&PostParams::default(), &binding).await.is_ok() {
                made += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        made
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    Api::<User>::all(c.clone())
        .delete("atk-retain", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&Api::<User>::all(c.clone()), "atk-retain", 60).await;
    let made = racing.await.unwrap();
    println!("the tenant created {made} RoleBindings while racing the offboarding");
    assert!(made > 0, "the race never started");
    wait_no_role_bindings(&c, ns, 30).await;
    assert_eq!(can_get_pods(TENANT, ns), "no");
    let retained = Api::<Namespace>::all(c.clone()).get(ns).await.unwrap();
    assert_eq!(
        retained
            .labels()
            .get("homestead.dev/retained-from")
            .map(String::as_str),
        Some("atk-retain")
    );

    // Later, anyone's binding in the retained namespace goes too (the standing rule).
    bind_as_admin(ns, "granted-later");
    wait_no_role_bindings(&c, ns, 30).await;
}

/// Finding 4: with role `edit` in an `Isolated` namespace, the person's own allow-all
/// NetworkPolicy undid the isolation (NetworkPolicies add up). Now the API server refuses it,
/// and Homestead's own policy cannot be widened or removed by the tenant.
#[tokio::test]
async fn a_tenant_cannot_open_an_isolated_namespace() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "atk-isolated",
        json!({ "role": "edit", "networkIsolation": "Isolated" }),
    )
    .await;
    s.create(
        &c,
        &User::test("atk-iso").with_spec(
            json!({ "identity": { "username": TENANTS[1] }, "profile": "atk-isolated" }),
        ),
    )
    .await;
    wait_reason(&c, "atk-iso", "Provisioned").await;
    let ns = "user-atk-iso";
    let tom = env().plane.client(TENANTS[1]).await.unwrap();
    let policies: Api<NetworkPolicy> = Api::namespaced(tom, ns);
    let policy = |name: &str, spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).unwrap()
    };
    let allow_all = policy(
        "let-everyone-in",
        json!({ "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                "ingress": [{}], "egress": [{}] }),
    );
    assert!(forbidden(
        policies.create(&PostParams::default(), &allow_all).await,
        "isolated"
    ));
    let from_everywhere = policy(
        "from-all-namespaces",
        json!({ "podSelector": {}, "ingress": [{ "from": [{ "namespaceSelector": {} }] }] }),
    );
    assert!(forbidden(
        policies
            .create(&PostParams::default(), &from_everywhere)
            .await,
        "isolated"
    ));
    // Egress is judged like ingress (issue 45, finding 2): no ipBlock peer reaches the world,
    // the node, the API server or another namespace's Pods, nor any other namespace.
    for (name, to) in [
        (
            "egress-to-the-world",
            json!([{ "ipBlock": { "cidr": "0.0.0.0/0" } }]),
        ),
        (
            "egress-to-the-node",
            json!([{ "ipBlock": { "cidr": "10.244.0.1/32" } }]),
        ),
        (
            "egress-to-everyone-but",
            json!([{ "ipBlock": { "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"] } }]),
        ),
        (
            "egress-to-all-namespaces",
            json!([{ "namespaceSelector": {} }]),
        ),
    ] {
        let egress = policy(
            name,
            json!({ "podSelector": {}, "policyTypes": ["Egress"], "egress": [{ "to": to }] }),
        );
        assert!(
            forbidden(
                policies.create(&PostParams::default(), &egress).await,
                "may open egress only to Pods of this namespace"
            ),
            "{name}"
        );
    }
    // What stays the tenant's to decide: narrowing traffic within their own namespace.
    let within = policy(
        "web-from-my-pods",
        json!({ "podSelector": { "matchLabels": { "app": "web" } },
                "ingress": [{ "from": [{ "podSelector": {} }] }] }),
    );
    policies
        .create(&PostParams::default(), &within)
        .await
        .unwrap();
    // Homestead's own policy: neither widened nor removed.
    let widen = json!({ "spec": { "ingress": [{}] } });
    assert!(forbidden(
        policies
            .patch(
                "homestead-isolation",
                &PatchParams::default(),
                &Patch::Merge(&widen)
            )
            .await,
        "homestead-isolation"
    ));
    assert!(forbidden(
        policies
            .delete("homestead-isolation", &DeleteParams::default())
            .await,
        "homestead-isolation"
    ));
}

/// Finding 5: `validUntil` passed while the User was refused (a role outside the allow-list),
/// and access stayed. Now expiry wins over every other state.
#[tokio::test]
async fn expiry_ends_access_while_the_user_is_refused() {
    let s = Scenario::new();
    let c = admin().await;
    let person = "atk-expiry@example.com";
    let until = k8s_openapi::jiff::Timestamp::now() + Duration::from_secs(20);
    s.create(
        &c,
        &User::test("atk-expiry").with_spec(
            json!({ "identity": { "username": person }, "validUntil": until.to_string() }),
        ),
    )
    .await;
    wait_reason(&c, "atk-expiry", "Provisioned").await;
    merge(
        &c,
        "atk-expiry",
        json!({ "spec": { "role": "not-allowed" } }),
    )
    .await
    .unwrap();
    wait_reason(&c, "atk-expiry", "RoleNotAllowed").await;
    assert_eq!(
        can_get_pods(person, "user-atk-expiry"),
        "yes",
        "a refusal alone keeps the access the User had"
    );
    eventually("access to end at validUntil", 60, || async {
        let expired = k8s_openapi::jiff::Timestamp::now() > until;
        (expired && can_get_pods(person, "user-atk-expiry") == "no").then_some(())
    })
    .await;
    wait_no_role_bindings(&c, "user-atk-expiry", 10).await;
}

/// Finding 6: a tenant's RoleBinding named `homestead-user-next` blocked a role change
/// (`CreateFailed`, admin kept), and a downgrade left the admin binding the person had made
/// for themselves. Now neither works.
#[tokio::test]
async fn a_downgrade_cannot_be_blocked_and_removes_what_granted_more() {
    let s = Scenario::new();
    let hr = hr().await;
    let person = "atk-down@example.com";
    let ns = "user-atk-down";
    s.create(
        &hr,
        &User::test("atk-down")
            .with_spec(json!({ "identity": { "username": person }, "role": "admin" })),
    )
    .await;
    wait_reason(&hr, "atk-down", "Provisioned").await;
    bind_myself(person, ns, "homestead-user-next");
    bind_myself(person, ns, "mine");
    merge(&hr, "atk-down", json!({ "spec": { "role": "view" } }))
        .await
        .unwrap();
    let downgraded = wait_reason(&hr, "atk-down", "Provisioned").await;
    assert!(
        downgraded
            .ready_condition()
            .unwrap()
            .message
            .contains("\"view\""),
        "{:?}",
        downgraded.ready_condition()
    );
    assert_eq!(bindings(&admin().await, ns).await, ["homestead-user"]);
    assert_eq!(can(person, "get", "pods", ns), "yes");
    assert_eq!(can(person, "create", "deployments.apps", ns), "no");
    assert_eq!(
        can(
            person,
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            ns
        ),
        "no"
    );
}

/// Finding 7: the RoleBinding was written before the quota, LimitRange and NetworkPolicy, so a
/// fast tenant got a pod past limits that did not exist yet. Now every guard is written first.
#[tokio::test]
async fn guards_exist_before_the_first_role_binding() {
    let s = Scenario::new();
    let c = admin().await;
    profile(
        &c,
        "atk-guarded",
        json!({
            "quota": { "hard": { "pods": "10" } },
            "limitRange": { "limits": [{ "type": "Container", "max": { "memory": "2Gi" } }] },
            "networkIsolation": "Isolated",
        }),
    )
    .await;
    let mark = settled_mark().await;
    s.create(
        &c,
        &User::test("atk-guard").with_spec(json!({ "profile": "atk-guarded" })),
    )
    .await;
    wait_reason(&c, "atk-guard", "Provisioned").await;
    let writes: Vec<String> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_change(e) && e["objectRef"]["namespace"] == "user-atk-guard")
        .map(|e| {
            e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let first_binding = writes
        .iter()
        .position(|r| r == "rolebindings")
        .unwrap_or_else(|| panic!("no RoleBinding written: {writes:?}"));
    for guard in ["resourcequotas", "limitranges", "networkpolicies"] {
        let at = writes.iter().position(|r| r == guard);
        assert!(
            at.is_some_and(|at| at < first_binding),
            "{guard} not written before the RoleBinding: {writes:?}"
        );
    }
}

/// Issue 45, finding 1: a person with `admin` gave a Service `spec.externalIPs` naming another
/// person's Pod IP, and kube-proxy sent everyone's traffic for that Pod to theirs
/// (CVE-2020-8554; the traffic itself is tried on the node in `node.rs`). Now the API server
/// refuses externalIPs and the Service types that reach beyond the cluster network in every
/// Homestead namespace, and the other kinds that could route traffic stay out of a tenant's
/// reach.
#[tokio::test]
async fn a_tenant_cannot_route_other_peoples_traffic_through_a_service() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("atk-svc").with_spec(json!({ "identity": { "username": TENANTS[2] } })),
    )
    .await;
    wait_reason(&c, "atk-svc", "Provisioned").await;
    let ns = "user-atk-svc";
    let plane = env().plane;
    refused_once_loaded(
        plane,
        TENANTS[2],
        &service(ns, "steal", json!({ "externalIPs": ["10.244.0.50"] })),
        "CVE-2020-8554",
    );
    for kind in ["NodePort", "LoadBalancer"] {
        let (ok, out) = kubectl_as(
            TENANTS[2],
            &["create", "-f", "-"],
            &service(ns, "expose", json!({ "type": kind })),
        );
        assert!(
            !ok && out.contains(&format!("a Service of type {kind} is refused")),
            "{kind}: {out}"
        );
    }
    // A plain ClusterIP Service and an ExternalName (a DNS alias; traffic to it is judged by
    // NetworkPolicy at its real destination) stay the tenant's to make.
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &["create", "-f", "-"],
        &service(ns, "web", json!({})),
    );
    assert!(ok, "{out}");
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &["create", "-f", "-"],
        &service(
            ns,
            "alias",
            json!({ "type": "ExternalName", "externalName": "example.com", "selector": null }),
        ),
    );
    assert!(ok, "{out}");
    // Nor can the tenant add externalIPs to a Service that exists.
    let (ok, out) = kubectl_as(
        TENANTS[2],
        &[
            "-n",
            ns,
            "patch",
            "service",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"externalIPs":["10.244.0.50"]}}"#,
        ],
        "",
    );
    assert!(!ok && out.contains("CVE-2020-8554"), "{out}");
    // A load balancer's ingress IP in a Service's status: RBAC (`admin` has no
    // services/status) and, should a cluster grant it, the policy refuse it to the tenant.
    let steer_status = || {
        kubectl_as(
            TENANTS[2],
            &[
                "-n",
                ns,
                "patch",
                "service",
                "web",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.244.0.50"}]}}}"#,
            ],
            "",
        )
    };
    let (ok, out) = steer_status();
    assert!(
        !ok && out.contains("cannot patch resource \"services/status\""),
        "{out}"
    );
    // A cluster that grants it anyway (a Role of the admin's): the policy still refuses.
    let who = format!("--user={}", TENANTS[2]);
    for args in [
        vec![
            "create",
            "role",
            "lb-status",
            "--verb=patch",
            "--resource=services/status",
        ],
        vec![
            "create",
            "rolebinding",
            "lb-status",
            "--role=lb-status",
            &who,
        ],
    ] {
        let mut args = args;
        args.extend(["-n", ns]);
        let (ok, out) = kubectl(&args, "");
        assert!(ok, "{out}");
    }
    eventually(
        "the granted status patch to reach the policy",
        30,
        || async {
            let (ok, out) = steer_status();
            assert!(!ok, "the tenant set a load balancer address: {out}");
            out.contains("status.loadBalancer").then_some(())
        },
    )
    .await;
    // The other ways to steer traffic are not a tenant's at all: hand-written Endpoints and
    // EndpointSlices.
    for (verb, resource) in [
        ("create", "endpoints"),
        ("update", "endpoints"),
        ("create", "endpointslices.discovery.k8s.io"),
    ] {
        assert_eq!(
            can(TENANTS[2], verb, resource, ns),
            "no",
            "{verb} {resource}"
        );
    }
}
