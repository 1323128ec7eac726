//! Reconciles run in this process against the real local control plane: [`reconcile`] called
//! directly, as the operator's Controller calls it, with a [`Context`] whose client is the
//! operator's own ServiceAccount identity (bounded by `rbac/` and its admission policy), and no
//! operator binary. The caches are left empty, so every decision that needs the cluster reads
//! it. What a person can do is checked with `kubectl auth can-i --as` against the real
//! aggregated roles (docs/design.md rules 6, 7, 11 and 12).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use homestead_api::{CONDITION_READY, FINALIZER, LABEL_RETAINED_FROM, User};
use homestead_reconciler::act::Cluster;
use homestead_reconciler::act::fence::Fence;
use homestead_reconciler::act::recent::Recent;
use homestead_reconciler::state::Caches;
use homestead_reconciler::{Config, Context, Metrics, reconcile};
use homestead_testenv::{ADMIN, ControlPlane, OPERATOR, Options};
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
use serde_json::json;

/// The control plane shared by this binary's tests, with the CRDs, the operator's namespace and
/// `rbac/` (its ClusterRole, bindings and admission policies) installed, once: the tests run
/// at once, and two `kubectl apply` of one new namespace race.
async fn plane() -> &'static ControlPlane {
    static INSTALLED: OnceLock<&'static ControlPlane> = OnceLock::new();
    INSTALLED.get_or_init(install)
}

/// Starts the shared control plane and installs what [`plane`] says.
fn install() -> &'static ControlPlane {
    let plane =
        ControlPlane::shared(|o: Options| homestead_api::crds().into_iter().fold(o, Options::crd));
    kubectl(plane, &["apply", "-f", "manifests/namespace.yaml"]);
    kubectl(plane, &["apply", "-k", "rbac/"]);
    plane
}

/// A reconcile Context as the operator builds one, acting as the operator's identity, with
/// empty caches (marked synced) and no leader election.
async fn context(plane: &ControlPlane) -> Arc<Context> {
    let client = plane.client(OPERATOR).await.unwrap();
    let reporter = Reporter {
        controller: "homestead".into(),
        instance: Some("in-process".into()),
    };
    let metrics = Metrics::new(&prometheus::Registry::new()).unwrap();
    let fence = Arc::new(Fence::always());
    let recent = Recent::default();
    let cluster = Cluster::new(client, &reporter, fence, recent, metrics.clone());
    let ctx = Context::new(cluster, Config::default(), Caches::empty(), metrics);
    ctx.mark_synced();
    Arc::new(ctx)
}

/// Creates the User `name` for `username` with `spec` (as HR would: the admin identity).
async fn create_user(admin: &Client, name: &str, username: &str, spec: serde_json::Value) {
    let user = User::test(name).with_spec(spec).with_username(username);
    Api::<User>::all(admin.clone())
        .create(&PostParams::default(), &user)
        .await
        .unwrap();
}

/// Reconciles the User `name` as the Controller would (the finalizer first, then the rest),
/// reading it afresh before each pass, until `done` holds for it (`None`: it is gone) or 60 s
/// pass. Returns the last state seen.
async fn reconcile_until(
    ctx: &Arc<Context>,
    admin: &Client,
    name: &str,
    done: impl Fn(Option<&User>) -> bool,
) -> Option<User> {
    let users = Api::<User>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let user = users.get_opt(name).await.unwrap();
        if done(user.as_ref()) {
            return user;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: not done after 60 s: {user:?}"
        );
        let user = user.expect("the User exists while not done");
        reconcile(Arc::new(user), ctx.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `(status, reason)` of `user`'s `Ready` condition.
fn ready(user: Option<&User>) -> Option<(String, String)> {
    let condition = user?
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)?;
    Some((condition.status.clone(), condition.reason.clone()))
}

/// Runs `kubectl <args>` as the admin from the repository's root; fails the test, with
/// kubectl's error, if it fails.
fn kubectl(plane: &ControlPlane, args: &[&str]) {
    let out = plane
        .kubectl(ADMIN)
        .unwrap()
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl auth can-i <verb> <resource> -n <namespace> --as <person>`.
fn can_i(plane: &ControlPlane, person: &str, verb: &str, resource: &str, namespace: &str) -> bool {
    let out = plane
        .kubectl(ADMIN)
        .unwrap()
        .args([
            "auth", "can-i", verb, resource, "-n", namespace, "--as", person,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// The reasons of the Events about the User `name`, once the context's queue has drained.
async fn event_reasons(ctx: &Context, admin: &Client, name: &str) -> Vec<String> {
    assert!(
        ctx.cluster()
            .events()
            .drained(Duration::from_secs(10))
            .await
    );
    let events = Api::<Event>::namespaced(admin.clone(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap();
    events.items.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn a_reconcile_provisions_a_namespace_and_access_and_reports_ready_with_one_event() {
    let plane = plane().await;
    let admin = plane.client(ADMIN).await.unwrap();
    let ctx = context(plane).await;
    let person = "ada@example.com";
    create_user(&admin, "ip-ada", person, json!({})).await;
    assert!(!can_i(plane, person, "create", "configmaps", "user-ip-ada"));

    let user = reconcile_until(&ctx, &admin, "ip-ada", |u| ready(u).is_some()).await;
    let user = user.expect("the User exists");
    assert_eq!(
        ready(Some(&user)),
        Some(("True".into(), "Provisioned".into()))
    );
    let status = user.status.as_ref().unwrap();
    assert_eq!(status.namespace.as_deref(), Some("user-ip-ada"));
    assert_eq!(status.observed_generation, user.metadata.generation);
    assert!(user.finalizers().iter().any(|f| f == FINALIZER));

    let namespace = Api::<Namespace>::all(admin.clone())
        .get("user-ip-ada")
        .await
        .unwrap();
    assert_eq!(
        namespace
            .labels()
            .get("homestead.dev/user")
            .map(String::as_str),
        Some("ip-ada")
    );
    assert_eq!(
        namespace.annotations().get("homestead.dev/user-uid"),
        user.metadata.uid.as_ref()
    );
    let binding = Api::<RoleBinding>::namespaced(admin.clone(), "user-ip-ada")
        .get("homestead-user")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "admin");
    assert!(can_i(plane, person, "create", "configmaps", "user-ip-ada"));
    assert!(!can_i(plane, person, "create", "configmaps", "default"));

    let reasons = event_reasons(&ctx, &admin, "ip-ada").await;
    assert_eq!(
        reasons,
        ["Provisioned"],
        "one Event reports the whole provisioning"
    );
}

#[tokio::test]
async fn offboarding_under_delete_revokes_first_then_deletes_the_namespace_then_the_user() {
    let plane = plane().await;
    let admin = plane.client(ADMIN).await.unwrap();
    let ctx = context(plane).await;
    let person = "bea@example.com";
    create_user(&admin, "ip-bea", person, json!({})).await;
    reconcile_until(&ctx, &admin, "ip-bea", |u| ready(u).is_some()).await;
    assert!(can_i(plane, person, "create", "configmaps", "user-ip-bea"));

    Api::<User>::all(admin.clone())
        .delete("ip-bea", &DeleteParams::default())
        .await
        .unwrap();
    // The first pass revokes every binding and starts deleting the namespace; the User stays
    // (its finalizer) and says what it waits for.
    let terminating = reconcile_until(&ctx, &admin, "ip-bea", |u| {
        ready(u).is_some_and(|(_, reason)| reason == "Terminating")
    })
    .await;
    assert!(
        terminating.is_some(),
        "the User stays while its namespace goes"
    );
    assert!(!can_i(plane, person, "create", "configmaps", "user-ip-bea"));
    assert!(!can_i(plane, person, "get", "pods", "user-ip-bea"));

    reconcile_until(&ctx, &admin, "ip-bea", |u| u.is_none()).await;
    let namespace = Api::<Namespace>::all(admin.clone())
        .get_opt("user-ip-bea")
        .await
        .unwrap();
    assert!(
        namespace.is_none(),
        "the User went only after its namespace: {namespace:?}"
    );
    // Provisioned, then Terminating (Normal: an offboarding someone asked for); no Event once
    // the User is gone, which nobody could `kubectl describe`.
    let reasons = event_reasons(&ctx, &admin, "ip-bea").await;
    assert_eq!(reasons, ["Provisioned", "Terminating"], "{reasons:?}");
}

#[tokio::test]
async fn offboarding_under_retain_keeps_the_namespace_without_any_access() {
    let plane = plane().await;
    let admin = plane.client(ADMIN).await.unwrap();
    let ctx = context(plane).await;
    let person = "cai@example.com";
    create_user(
        &admin,
        "ip-cai",
        person,
        json!({ "deletionPolicy": "Retain" }),
    )
    .await;
    reconcile_until(&ctx, &admin, "ip-cai", |u| ready(u).is_some()).await;
    // A binding the person made themselves, with their admin: revocation removes it too.
    let (me, subject) = (format!("--as={person}"), format!("--user={person}"));
    let mine = [
        "-n",
        "user-ip-cai",
        "create",
        "rolebinding",
        "mine",
        "--clusterrole=edit",
    ];
    kubectl(
        plane,
        &[&mine[..], &[subject.as_str(), me.as_str()]].concat(),
    );

    Api::<User>::all(admin.clone())
        .delete("ip-cai", &DeleteParams::default())
        .await
        .unwrap();
    reconcile_until(&ctx, &admin, "ip-cai", |u| u.is_none()).await;
    let namespace = Api::<Namespace>::all(admin.clone())
        .get("user-ip-cai")
        .await
        .unwrap();
    assert_eq!(
        namespace
            .labels()
            .get(LABEL_RETAINED_FROM)
            .map(String::as_str),
        Some("ip-cai")
    );
    assert!(
        namespace.owner_references().is_empty(),
        "no owner reference: nothing collects it"
    );
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "user-ip-cai")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(bindings.items.is_empty(), "{:?}", bindings.items);
    assert!(!can_i(plane, person, "get", "configmaps", "user-ip-cai"));
    let reasons = event_reasons(&ctx, &admin, "ip-cai").await;
    assert!(
        reasons.iter().any(|r| r == "NamespaceRetained"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn a_bulk_of_events_becomes_one_summary_and_warnings_stay_on_each_user() {
    use kube::runtime::events::{Event as Publish, EventType};
    let plane = plane().await;
    let ctx = context(plane).await;
    let admin = plane.client(ADMIN).await.unwrap();
    let user = User::test;
    let event = |type_, reason: &str| Publish {
        type_,
        reason: reason.to_owned(),
        note: Some(format!("{reason} in a bulk")),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    // A bulk import's worth at once (this test's runtime runs the publisher only when the test
    // waits, so all of them are waiting together): 100 Normal, one Warning.
    for i in 0..100 {
        let name = format!("ipc-bulk-{i:03}");
        ctx.cluster()
            .events()
            .publish(&user(&name), event(EventType::Normal, "Provisioned"));
    }
    ctx.cluster().events().publish(
        &user("ipc-bulk-refused"),
        event(EventType::Warning, "NamespaceConflict"),
    );
    assert!(
        ctx.cluster()
            .events()
            .drained(Duration::from_secs(30))
            .await
    );

    let events = Api::<Event>::namespaced(admin, "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let about = |e: &Event| e.involved_object.name.clone().unwrap_or_default();
    let summaries: Vec<&Event> = events
        .iter()
        .filter(|e| e.message.as_deref().unwrap_or("").contains("ipc-bulk-000"))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary: {summaries:?}");
    let summary = summaries[0];
    assert_eq!(
        summary.involved_object.kind.as_deref(),
        Some("CustomResourceDefinition")
    );
    assert_eq!(about(summary), "users.homestead.dev");
    assert!(
        summary.involved_object.uid.is_some(),
        "with the CRD's uid, so `kubectl describe crd` shows it"
    );
    assert_eq!(summary.reason.as_deref(), Some("Provisioned"));
    assert_eq!(summary.type_.as_deref(), Some("Normal"));
    let note = summary.message.as_deref().unwrap();
    assert!(note.starts_with("Provisioned: 100 Users at once"), "{note}");
    assert!(
        !events.iter().any(|e| about(e).starts_with("ipc-bulk-0")),
        "no per-User Normal Event besides the summary"
    );
    let warnings: Vec<&Event> = events
        .iter()
        .filter(|e| about(e) == "ipc-bulk-refused")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(warnings[0].reason.as_deref(), Some("NamespaceConflict"));
    assert_eq!(
        ctx.metrics().events_summarised.get(),
        100,
        "counted as folded"
    );
}

/// The initial state of a watch arrives streamed where the API server streams lists (the
/// `WatchList` feature: on by default in Kubernetes 1.32 and from 1.34 on) and paged otherwise
/// (`runtime::lists`), and holds the same objects either way: a watch configured by
/// `lists::config()` once probed sees exactly the Namespaces a list returns.
#[tokio::test]
async fn the_initial_state_is_streamed_where_the_api_server_streams_lists_and_is_complete() {
    use futures::TryStreamExt;
    use homestead_reconciler::runtime::lists;
    use kube::runtime::watcher::{self, watcher};

    let plane = plane().await;
    let admin = plane.client(ADMIN).await.unwrap();
    let version = admin.apiserver_version().await.unwrap();
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap();
    let streams = minor == 32 || minor >= 34;
    let probed = lists::probe(Api::<homestead_api::Profile>::all(admin.clone())).await;
    assert_eq!(probed, streams, "Kubernetes 1.{minor}");
    assert_eq!(
        lists::config().initial_list_strategy == watcher::InitialListStrategy::StreamingList,
        streams
    );
    let listed: std::collections::BTreeSet<String> = Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let mut events = Box::pin(watcher(Api::<Namespace>::all(admin), lists::config()));
    let mut watched = std::collections::BTreeSet::new();
    loop {
        match events.try_next().await.unwrap().unwrap() {
            watcher::Event::InitApply(ns) => {
                watched.insert(ns.name_any());
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    // The tests beside this one provision and offboard homes (`user-…`) meanwhile: every other
    // listed namespace was watched.
    let settled = |names: &std::collections::BTreeSet<String>| -> Vec<String> {
        names
            .iter()
            .filter(|n| !n.starts_with("user-"))
            .cloned()
            .collect()
    };
    assert_eq!(settled(&watched), settled(&listed));
    assert!(watched.contains("kube-system") && watched.contains("default"));
}
