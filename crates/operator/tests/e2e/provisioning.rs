//! Provisioning and its steady state (docs/design.md rules 1, 9, 10, 11 and 16): a User gets its
//! Namespace, access and quota, drift is repaired, a converged User costs no write, and every User
//! has a `Ready` condition that says why.

use super::*;

#[tokio::test]
async fn user_gets_namespace_rolebinding_quota_and_ready() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({
        "identity": { "username": "prov@example.com", "groups": ["team-a"] },
        "role": "edit",
        "namespace": { "labels": { "team": "a" }, "annotations": { "example.com/cc": "42" } },
        "quota": { "hard": { "pods": "5", "requests.memory": "1Gi" } },
    });
    let created = s.create(&c, &User::test("e2e-prov").with_spec(spec)).await;
    let u = wait_reason(&c, "e2e-prov", "Provisioned").await;
    let ready = u.ready_condition().unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.observed_generation, created.metadata.generation);
    assert_eq!(
        u.status.as_ref().unwrap().namespace.as_deref(),
        Some("user-e2e-prov")
    );
    assert!(u.finalizers().contains(&FINALIZER.to_owned()));

    let ns = namespaces(&c).get("user-e2e-prov").await.unwrap();
    assert_eq!(
        ns.labels().get(LABEL_MANAGED_BY).map(String::as_str),
        Some("homestead")
    );
    assert_eq!(
        ns.labels().get(LABEL_USER).map(String::as_str),
        Some("e2e-prov")
    );
    assert_eq!(ns.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        ns.annotations().get("example.com/cc").map(String::as_str),
        Some("42")
    );
    assert_eq!(
        ns.annotations().get(ANNOTATION_USER_UID),
        created.metadata.uid.as_ref()
    );
    // Semantic 8: under Delete (the default) the Namespace is owned by the User.
    let owners = ns.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(Some(&owners[0].uid), created.metadata.uid.as_ref());

    let rb = bindings(&c, "user-e2e-prov").get(RB).await.unwrap();
    assert_eq!(rb.role_ref.kind, "ClusterRole");
    assert_eq!(rb.role_ref.name, "edit");
    let subjects: Vec<(String, String)> = rb
        .subjects
        .unwrap()
        .into_iter()
        .map(|s| (s.kind, s.name))
        .collect();
    assert_eq!(
        subjects,
        [
            ("User".to_owned(), "prov@example.com".to_owned()),
            ("Group".to_owned(), "team-a".to_owned())
        ]
    );
    let quota: Api<ResourceQuota> = Api::namespaced(c.clone(), "user-e2e-prov");
    let hard = quota
        .get("homestead-quota")
        .await
        .unwrap()
        .spec
        .unwrap()
        .hard
        .unwrap();
    assert_eq!(hard["pods"].0, "5");

    // Semantic 11: the transition to Ready has an Event, one for the whole provisioning, that
    // says what was done.
    wait_event(&c, "e2e-prov", "Normal", "Provisioned").await;
    let events = user_events(&c, "e2e-prov").await;
    assert_eq!(events.len(), 1, "one Event per provisioning: {events:?}");
    let note = &events[0].2;
    for done in [
        "created namespace \"user-e2e-prov\"",
        "bound ClusterRole",
        "applied ResourceQuota",
    ] {
        assert!(note.contains(done), "{done:?} missing from {note:?}");
    }

    // Semantic 7: the finalizer was on the User before anything was created for it.
    let events = audit();
    let position = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        events.iter().position(|e| is_operator_write(e) && pred(e))
    };
    let finalizer = position(&|e| {
        e["objectRef"]["resource"] == "users"
            && e["objectRef"]["name"] == "e2e-prov"
            && e["objectRef"]["subresource"].is_null()
    })
    .expect("the operator patched the User (finalizer)");
    let namespace = position(&|e| {
        e["objectRef"]["resource"] == "namespaces" && e["objectRef"]["name"] == "user-e2e-prov"
    })
    .expect("the operator wrote the Namespace");
    assert!(
        finalizer < namespace,
        "finalizer at {finalizer}, namespace at {namespace}"
    );
}

#[tokio::test]
async fn converged_user_costs_no_write_even_when_reconciled_again() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-steady").with_spec(json!({ "quota": { "hard": { "requests.memory": "1024Mi", "requests.cpu": "1000m" } } }))).await;
    let before = wait_reason(&c, "e2e-steady", "Provisioned").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mark, reconciled) = (settled_mark().await, reconciles(&env().metrics_address));
    // Touch the Namespace without changing what Homestead set: a watch event, hence a
    // reconcile.
    Api::<Namespace>::all(c.clone())
        .patch(
            "user-e2e-steady",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "e2e/touch": "1" } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        reconciles(&env().metrics_address) > reconciled,
        "the annotation triggers a reconcile"
    );
    let writes: Vec<_> = audit()[mark..]
        .iter()
        .filter(|e| is_operator_write(e) && concerns(e, "e2e-steady", "user-e2e-steady"))
        .cloned()
        .collect();
    assert!(writes.is_empty(), "steady state wrote: {writes:#?}");
    // Semantic 9: status unchanged, lastTransitionTime included.
    let after = users(&c).get("e2e-steady").await.unwrap();
    assert_eq!(before.status, after.status);
}

#[tokio::test]
async fn a_status_someone_else_cleared_is_written_again() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(&c, &User::test("e2e-cleared")).await;
    wait_reason(&c, "e2e-cleared", "Provisioned").await;
    // Changes to the status alone are Homestead's own and trigger no reconcile, except one
    // that leaves the User without its Ready condition.
    let cleared = users(&c)
        .patch_status(
            "e2e-cleared",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": null })),
        )
        .await
        .unwrap();
    assert!(cleared.ready_condition().is_none(), "{:?}", cleared.status);
    wait_reason(&c, "e2e-cleared", "Provisioned").await;
}

#[tokio::test]
async fn drift_is_repaired() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-drift").with_spec(json!({ "role": "view" })),
    )
    .await;
    wait_reason(&c, "e2e-drift", "Provisioned").await;
    let rbs = bindings(&c, "user-e2e-drift");
    let original = rbs.get(RB).await.unwrap();
    rbs.delete(RB, &DeleteParams::default()).await.unwrap();
    eventually("the deleted RoleBinding to come back", 30, || async {
        let rb = rbs.get_opt(RB).await.ok()??;
        (rb.uid() != original.uid() && rb.role_ref.name == "view").then_some(())
    })
    .await;
    // Someone edits the subjects: Homestead takes them back.
    let mut edited = rbs.get(RB).await.unwrap();
    edited.subjects.as_mut().unwrap()[0].name = "mallory@example.com".into();
    edited.metadata.managed_fields = None;
    rbs.replace(RB, &PostParams::default(), &edited)
        .await
        .unwrap();
    eventually("the RoleBinding subjects to be repaired", 30, || async {
        let rb = rbs.get_opt(RB).await.ok()??;
        (rb.subjects?[0].name == "e2e-drift@example.com").then_some(())
    })
    .await;
}

#[tokio::test]
async fn namespace_labels_homestead_no_longer_wants_are_removed() {
    let s = Scenario::new();
    let c = admin().await;
    let spec = json!({ "namespace": { "labels": { "team": "a", "cost-center": "42" } } });
    s.create(&c, &User::test("e2e-relabel").with_spec(spec))
        .await;
    wait_reason(&c, "e2e-relabel", "Provisioned").await;
    // Created with one request; the labels set then must still be removable by apply.
    patch_spec(
        &c,
        "e2e-relabel",
        json!({ "namespace": { "labels": { "team": "a", "cost-center": null } } }),
    )
    .await;
    eventually("the dropped label to be removed", 30, || async {
        let ns = namespaces(&c).get("user-e2e-relabel").await.ok()?;
        let labels = ns.labels();
        (labels.get("team").map(String::as_str) == Some("a") && !labels.contains_key("cost-center"))
            .then_some(())
    })
    .await;
    wait_event(&c, "e2e-relabel", "Normal", "NamespaceUpdated").await;
}

#[tokio::test]
async fn role_change_recreates_the_rolebinding() {
    let s = Scenario::new();
    let c = admin().await;
    s.create(
        &c,
        &User::test("e2e-role").with_spec(json!({ "role": "edit" })),
    )
    .await;
    wait_reason(&c, "e2e-role", "Provisioned").await;
    let rbs = bindings(&c, "user-e2e-role");
    let before = rbs.get(RB).await.unwrap();
    patch_spec(&c, "e2e-role", json!({ "role": "view" })).await;
    wait_reason(&c, "e2e-role", "Provisioned").await;
    let after = rbs.get(RB).await.unwrap();
    assert_eq!(after.role_ref.name, "view");
    assert_ne!(
        after.uid(),
        before.uid(),
        "roleRef is immutable: the RoleBinding must be new"
    );
    wait_event(&c, "e2e-role", "Normal", "RoleChanged").await;
}

/// Rule 16 for a User made again under the name of one just deleted (found by the soak, seed
/// 46): the operator remembered the status it had written for the first one by name, took the
/// second one's identical status for that unconfirmed write, and left it without `Ready` until
/// a retry seconds later. Its first reconcile writes the second User's status: after the
/// second create, the operator's first status write for it comes before any second attempt at
/// its namespace.
#[tokio::test]
async fn a_user_made_again_under_a_deleted_ones_name_gets_its_own_status_at_once() {
    let s = Scenario::new();
    let c = admin().await;
    let taken = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("e2e-taken".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    s.track_namespace("e2e-taken");
    namespaces(&c)
        .create(&PostParams::default(), &taken)
        .await
        .unwrap();
    // A namespace someone else has: the User is refused with the same status both times.
    let spec = json!({ "namespace": { "name": "e2e-taken" } });
    s.create(&c, &User::test("e2e-again").with_spec(spec.clone()))
        .await;
    let first = wait_reason(&c, "e2e-again", "NamespaceConflict").await;
    users(&c)
        .delete("e2e-again", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&users(&c), "e2e-again", 30).await;
    let mark = audit().len();
    let second = s.create(&c, &User::test("e2e-again").with_spec(spec)).await;
    assert_ne!(first.uid(), second.uid(), "another User of the same name");
    wait_reason(&c, "e2e-again", "NamespaceConflict").await;
    let uid = second.uid().unwrap();
    // The operator's writes about it since the mark, as "verb resource[/subresource]".
    let writes_since = || -> Vec<String> {
        audit()[mark..]
            .iter()
            .filter(|e| is_operator_write(e))
            .filter_map(|e| {
                let r = &e["objectRef"];
                let about_it = (r["resource"] == "users" && r["name"] == "e2e-again")
                    || (r["resource"] == "namespaces" && r["name"] == "e2e-taken");
                about_it.then(|| {
                    format!(
                        "{} {}{}",
                        e["verb"].as_str().unwrap_or_default(),
                        r["resource"].as_str().unwrap_or_default(),
                        r["subresource"]
                            .as_str()
                            .map(|s| format!("/{s}"))
                            .unwrap_or_default()
                    )
                })
            })
            .collect()
    };
    // kube-apiserver logs a request's audit event once it has answered, so the status the test
    // read can precede its line in the log by a moment.
    let writes = eventually(
        &format!("the status write for User {uid} in the audit log"),
        10,
        || {
            let writes = writes_since();
            let written = writes.iter().any(|w| w == "patch users/status");
            std::future::ready(written.then_some(writes))
        },
    )
    .await;
    let first_status = writes
        .iter()
        .position(|w| w == "patch users/status")
        .unwrap();
    let attempts = writes[..first_status]
        .iter()
        .filter(|w| *w == "create namespaces")
        .count();
    assert_eq!(
        attempts, 1,
        "the first reconcile of the second User wrote its status: {writes:?}"
    );
}

#[tokio::test]
async fn metrics_and_probes_are_served() {
    let s = Scenario::new();
    let env = env();
    let c = admin().await;
    s.create(&c, &User::test("e2e-metrics")).await;
    wait_reason(&c, "e2e-metrics", "Provisioned").await;
    let (code, body) = http_get(&env.metrics_address, "/metrics").unwrap();
    assert_eq!(code, 200);
    for metric in [
        "homestead_reconciliations_total{result=\"success\"}",
        "homestead_reconcile_duration_seconds_bucket",
        "homestead_users{ready=\"True\",reason=\"Provisioned\"}",
        "homestead_user_time_to_ready_seconds_count",
        "homestead_offboarding_duration_seconds_bucket",
        "homestead_reconcile_errors_total{reason=\"apply_failed\"} 0",
        "homestead_build_info{version=\"0.1.0\"} 1",
        "homestead_retained_namespaces",
        "homestead_events_pending",
        "homestead_events_failed_total 0",
        // Its own requests: the Namespace it created, the watches it keeps.
        "homestead_api_requests_total{code=\"201\",verb=\"create\"}",
        "homestead_api_requests_total{code=\"200\",verb=\"watch\"}",
        "process_resident_memory_bytes",
    ] {
        assert!(
            body.contains(metric),
            "{metric} missing from /metrics:\n{body}"
        );
    }
    // The first Ready=True of e2e-metrics was timed.
    let ready_count: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("homestead_user_time_to_ready_seconds_count "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ready_count >= 1.0, "{body}");
    // jemalloc's account of its heap, read at the scrape: its live objects fill some of it.
    let allocated: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("homestead_allocator_bytes{state=\"allocated\"} "))
        .unwrap_or_else(|| panic!("no allocated bytes in /metrics:\n{body}"))
        .parse()
        .unwrap();
    assert!(allocated > 1e6, "{allocated} bytes allocated");

    // promtool (Prometheus's own checker, from Debian's package) finds nothing to lint.
    let promtool = repo_tool("tools/promtool/install.sh");
    let (ok, out) = run_with_stdin(
        std::process::Command::new(promtool).args(["check", "metrics"]),
        &body,
    );
    assert!(ok, "promtool check metrics: {out}");

    // Every metric the dashboard and the alerts query is one the operator exports (or
    // Prometheus's own `up`); the SCIM service's (`homestead_scim_*`) are checked in scim/people.rs.
    let dashboard =
        std::fs::read_to_string(repo_root().join("charts/homestead/files/dashboard.json")).unwrap();
    let alerts =
        std::fs::read_to_string(repo_root().join("charts/homestead/files/alerts.yaml")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(queries.len() >= 15, "{} dashboard queries", queries.len());
    queries.extend(
        alerts
            .lines()
            .filter_map(|l| l.trim().strip_prefix("expr:"))
            .map(str::to_owned),
    );
    let mut queried = std::collections::BTreeSet::new();
    for query in &queries {
        for word in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if (word.starts_with("homestead_") && !word.starts_with("homestead_scim_"))
                || word.starts_with("process_")
            {
                queried.insert(word.to_owned());
            }
        }
    }
    assert!(queried.len() >= 10, "{queried:?}");
    for metric in &queried {
        let exported = body
            .lines()
            .any(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")));
        assert!(
            exported,
            "the dashboard or an alert queries {metric}, which /metrics does not have"
        );
    }
    assert_eq!(http_get(&env.metrics_address, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(&env.metrics_address, "/readyz").unwrap().0, 200);
}
