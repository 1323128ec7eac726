//! Reconciles against a mock API server (`tower-test`), for the failures a real server cannot
//! be made to produce on cue: a status patch that fails, an Event that cannot be published, a
//! 404 on delete, a 409 on create, a 403 on apply. Each test scripts the exact requests it
//! expects, in order (Events in their own order), and fails on any other (or on a request too
//! many).

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{FINALIZER, User};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Namespace;
use kube::client::Body;
use kube::runtime::controller::Action;

use crate::flows::requeue::Requeue;
use serde_json::{Value, json};

use crate::context::test::{ApiServer, Writers};
use crate::plan::desired::{Traits, desired_namespace, desired_role_binding};
use crate::plan::status::{Outcome, desired_status};
use crate::{Context, Error, error_policy, reconcile};
use homestead_api::Reason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// One expected request: its method, a fragment its path must contain, and the answer.
struct Expect {
    method: Method,
    path: &'static str,
    status: StatusCode,
    body: Value,
}

fn expect(method: Method, path: &'static str, status: StatusCode, body: Value) -> Expect {
    Expect {
        method,
        path,
        status,
        body,
    }
}

/// A Kubernetes `Status` error body with `code` and the reason the API server gives it.
fn failure(code: StatusCode) -> Value {
    let reason = match code {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::CONFLICT => "AlreadyExists",
        StatusCode::FORBIDDEN => "Forbidden",
        _ => "InternalError",
    };
    json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": format!("injected {code}"), "reason": reason, "code": code.as_u16(),
    })
}

/// Answers the scripted requests and returns the bodies the operator sent, by their place in
/// the script; panics on an unexpected request. Event creates are matched in their own order:
/// the [`crate::act::events::EventQueue`] publishes them beside the reconcile's own requests, so only
/// the order within each of the two is fixed.
async fn serve(mut server: ApiServer, script: Vec<Expect>) -> Vec<Value> {
    let is_event = |step: &Expect| step.path == EVENTS;
    let mut events = (0..script.len()).filter(|&i| is_event(&script[i]));
    let mut others = (0..script.len()).filter(|&i| !is_event(&script[i]));
    let mut sent = vec![Value::Null; script.len()];
    for _ in 0..script.len() {
        let (request, respond): (Request<Body>, _) = server
            .next_request()
            .await
            .expect("the client hung up before the script ended");
        let (method, path) = (request.method().clone(), request.uri().to_string());
        let next = if path.contains(EVENTS) {
            events.next()
        } else {
            others.next()
        };
        let Some(i) = next else {
            panic!("unexpected {method} {path}: the script has no more such requests");
        };
        let step = &script[i];
        assert_eq!(
            (&method, path.contains(step.path)),
            (&step.method, true),
            "expected {} …{}…, got {method} {path}",
            step.method,
            step.path
        );
        let bytes = request.into_body().collect_bytes().await.unwrap();
        sent[i] = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let response = Response::builder()
            .status(step.status)
            .body(Body::from(serde_json::to_vec(&step.body).unwrap()))
            .unwrap();
        respond.send_response(response);
    }
    sent
}

/// Runs one reconcile of `user` against `script`; returns its result and the request bodies.
/// Fails if the reconcile makes a request the script does not expect (it would wait forever).
async fn run(
    ctx: impl Into<Arc<Context>>,
    server: ApiServer,
    user: User,
    script: Vec<Expect>,
) -> (crate::Result<Requeue>, Vec<Value>) {
    let ctx = ctx.into();
    let server = tokio::spawn(serve(server, script));
    let result = tokio::time::timeout(Duration::from_secs(5), reconcile(Arc::new(user), ctx))
        .await
        .expect("reconcile made a request the script did not expect");
    let sent = server.await.expect("the script failed");
    (result, sent)
}

/// The script of a reconcile of `alice` whose one request is a status write that succeeds.
fn status_write_only(alice: &User) -> Vec<Expect> {
    vec![expect(
        Method::PATCH,
        "/users/alice/status",
        StatusCode::OK,
        json!(alice),
    )]
}

/// The end of a reconcile of `user` that changed something: its status write, then the Event.
fn status_write_and_event(user: &User) -> [Expect; 2] {
    [
        expect(
            Method::PATCH,
            "/users/alice/status",
            StatusCode::OK,
            json!(user),
        ),
        expect(Method::POST, EVENTS, StatusCode::CREATED, json!({})),
    ]
}

/// A live User with the finalizer already in place (so the finalizer helper goes straight to
/// provisioning).
fn finalized(name: &str, spec: Value) -> User {
    let mut u = User::test(name).with_spec(spec);
    u.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    u
}

/// Fills the caches with `user`'s Namespace and RoleBinding, as provisioning leaves them, and
/// gives `user` (generation 1) a `Ready=True` status from an earlier reconcile of that
/// generation (its message differs, so a reconcile writes the status once more).
fn provisioned(writers: &mut Writers, user: &mut User) {
    converged_earlier(user, Reason::Provisioned);
    writers.namespaces.insert(desired_namespace(
        user,
        "user-alice",
        Default::default(),
        Traits::default(),
    ));
    writers
        .role_bindings
        .insert(desired_role_binding(user, "user-alice"));
}

/// Gives `user` generation 1 and the `Ready=True` status (with `reason`) of an earlier
/// reconcile of that generation, whose message differs from any a reconcile writes now.
fn converged_earlier(user: &mut User, reason: Reason) {
    user.metadata.generation = Some(1);
    let earlier = Outcome::new("user-alice", reason, "converged earlier");
    user.status = Some(desired_status(user, &earlier, Time(Timestamp::now())));
}

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

#[tokio::test]
async fn failed_status_patch_is_an_error_and_publishes_nothing() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    provisioned(&mut writers, &mut alice);
    let script = vec![expect(
        Method::PATCH,
        "/users/alice/status",
        StatusCode::INTERNAL_SERVER_ERROR,
        failure(StatusCode::INTERNAL_SERVER_ERROR),
    )];
    let (result, sent) = run(ctx, server, alice, script).await;
    let error = result.expect_err("a failed status write fails the reconcile");
    assert_eq!(error.metric_label().as_str(), "status_failed");
    assert!(
        error.to_string().contains("patch status of User \"alice\""),
        "{error}"
    );
    assert_eq!(sent[0]["status"]["conditions"][0]["reason"], "Provisioned");
}

#[tokio::test]
async fn failed_event_publish_does_not_fail_the_reconcile() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    provisioned(&mut writers, &mut alice);
    converged_earlier(&mut alice, Reason::Suspended); // so Provisioned is a transition
    let script = vec![
        expect(
            Method::PATCH,
            "/users/alice/status",
            StatusCode::OK,
            json!(alice),
        ),
        expect(
            Method::POST,
            EVENTS,
            StatusCode::FORBIDDEN,
            failure(StatusCode::FORBIDDEN),
        ),
    ];
    let ctx = Arc::new(ctx);
    let (result, sent) = run(ctx.clone(), server, alice, script).await;
    assert_eq!(
        result.expect("Events are best effort"),
        Requeue::on_change()
    );
    assert_eq!(sent[1]["reason"], "Provisioned");
    assert!(ctx.cluster().events().drained(Duration::from_secs(5)).await);
    assert_eq!(
        ctx.metrics().events_failed.get(),
        1,
        "the refusal was counted"
    );
}

#[tokio::test]
async fn not_found_on_delete_counts_as_deleted() {
    let (ctx, server, mut writers) = Context::test();
    let mut frank = finalized("alice", json!({ "suspended": true }));
    provisioned(&mut writers, &mut frank);
    let mut script = vec![expect(
        Method::DELETE,
        "/namespaces/user-alice/rolebindings/homestead-user",
        StatusCode::NOT_FOUND,
        failure(StatusCode::NOT_FOUND),
    )];
    script.extend(status_write_and_event(&frank));
    let (result, sent) = run(ctx, server, frank, script).await;
    assert_eq!(
        result.expect("a binding already gone is revoked"),
        Requeue::on_change()
    );
    assert_eq!(sent[1]["status"]["conditions"][0]["reason"], "Suspended");
    // One Event: the transition to Suspended, naming the revocation.
    assert_eq!(sent[2]["reason"], "Suspended");
    let note = sent[2]["note"].as_str().unwrap();
    assert!(note.contains("removed every RoleBinding"), "{note}");
}

#[tokio::test]
async fn conflict_on_create_leaves_the_other_namespace_alone() {
    let (ctx, server, _writers) = Context::test();
    let alice = finalized("alice", json!({}));
    let foreign = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("user-alice".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    // Unknown to the cache: created right away (no read first), and read only on a conflict.
    let mut script = vec![
        expect(
            Method::POST,
            "/api/v1/namespaces",
            StatusCode::CONFLICT,
            failure(StatusCode::CONFLICT),
        ),
        expect(
            Method::GET,
            "/api/v1/namespaces/user-alice",
            StatusCode::OK,
            json!(foreign),
        ),
    ];
    script.extend(status_write_and_event(&alice));
    let (result, sent) = run(ctx, server, alice, script).await;
    assert_eq!(result.unwrap(), Requeue::on_change());
    assert_eq!(
        sent[0]["metadata"]["name"], "user-alice",
        "the create carried the namespace"
    );
    let ready = &sent[2]["status"]["conditions"][0];
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("NamespaceConflict"))
    );
    assert_eq!(sent[3]["type"], "Warning");
}

#[tokio::test]
async fn forbidden_apply_is_an_apply_error_and_writes_no_status() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    converged_earlier(&mut alice, Reason::Provisioned);
    writers.namespaces.insert(desired_namespace(
        &alice,
        "user-alice",
        Default::default(),
        Traits::default(),
    ));
    // A binding that drifted (someone removed its labels): repairing it is an apply. (Other
    // subjects would be an identity change: every binding removed, then a create.)
    let mut drifted = desired_role_binding(&alice, "user-alice");
    drifted.metadata.labels = None;
    writers.role_bindings.insert(drifted);
    let script = vec![expect(
        Method::PATCH,
        "/namespaces/user-alice/rolebindings/homestead-user",
        StatusCode::FORBIDDEN,
        failure(StatusCode::FORBIDDEN),
    )];
    let (result, sent) = run(ctx, server, alice, script).await;
    let error = result.expect_err("a refused apply fails the reconcile");
    assert_eq!(error.metric_label().as_str(), "apply_failed");
    assert!(
        error
            .to_string()
            .contains("RoleBinding \"user-alice/homestead-user\""),
        "{error}"
    );
    assert_eq!(sent[0]["roleRef"]["name"], "admin");
}

#[tokio::test]
async fn failures_back_off_per_user_and_a_success_resets_it() {
    let (ctx, server, mut writers) = Context::test();
    let ctx = Arc::new(ctx);
    let alice = finalized("alice", json!({}));
    let error = Error::kube(
        homestead_api::Verb::Apply,
        "RoleBinding".into(),
        "user-alice/homestead-user",
        kube::Error::Api(kube::core::Status::failure("x", "y").with_code(500).boxed()),
    );
    // Jitter adds up to the delay itself: failure n waits in [2^n s, 2^(n+1) s).
    for base in [1, 2, 4, 8] {
        let delay = ctx.retry_delay(&alice, &error);
        let base = Duration::from_secs(base);
        assert!(
            delay >= base && delay < base * 2,
            "{delay:?} for base {base:?}"
        );
    }
    assert_eq!(ctx.backoffs().failing(), 1);
    let errors = ctx
        .metrics()
        .errors
        .with_label_values(&["apply_failed"])
        .get();
    assert_eq!(errors, 4);
    let action = error_policy(Arc::new(User::test("bob")), &error, ctx.clone());
    assert_ne!(action, Requeue::on_change(), "a failure is always retried");
    assert_eq!(ctx.backoffs().failing(), 2);

    // A successful reconcile of alice (converged: no request at all) forgets her failures.
    let mut converged = alice;
    provisioned(&mut writers, &mut converged);
    let outcome = Outcome::new(
        "user-alice",
        Reason::Provisioned,
        "namespace \"user-alice\" provisioned; \"alice@example.com\" has ClusterRole \"admin\" there",
    )
    .with_role("admin");
    converged.status = Some(desired_status(&converged, &outcome, Time(Timestamp::now())));
    let (result, sent) = run(ctx.clone(), server, converged, vec![]).await;
    assert_eq!(result.unwrap(), Requeue::on_change());
    assert!(sent.is_empty(), "a converged User costs no request");
    assert_eq!(ctx.backoffs().failing(), 1, "only bob is still backing off");
}

#[tokio::test]
async fn offboarding_retains_a_namespace_that_has_become_reserved() {
    let (mut ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    provisioned(&mut writers, &mut alice);
    alice.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    ctx.config_mut()
        .reserved_namespaces
        .insert("user-alice".into());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "users.homestead.dev" },
        "spec": { "group": "homestead.dev", "names": { "kind": "User", "plural": "users" },
                  "scope": "Cluster", "versions": [] },
    });
    let bindings = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBindingList", "metadata": {},
        "items": [desired_role_binding(&alice, "user-alice")],
    });
    let script = vec![
        expect(
            Method::GET,
            "/customresourcedefinitions/users.homestead.dev",
            StatusCode::OK,
            crd,
        ),
        // One deletecollection, answered with what it deletes.
        expect(
            Method::DELETE,
            "/namespaces/user-alice/rolebindings?",
            StatusCode::OK,
            bindings,
        ),
        expect(Method::POST, EVENTS, StatusCode::CREATED, json!({})),
        expect(Method::POST, EVENTS, StatusCode::CREATED, json!({})),
        expect(
            Method::GET,
            "/api/v1/namespaces/user-alice",
            StatusCode::OK,
            json!(desired_namespace(
                &alice,
                "user-alice",
                Default::default(),
                Traits::default()
            )),
        ),
        expect(
            Method::PATCH,
            "/api/v1/namespaces/user-alice",
            StatusCode::OK,
            json!({}),
        ),
        expect(Method::POST, EVENTS, StatusCode::CREATED, json!({})),
        expect(Method::PATCH, "/users/alice", StatusCode::OK, json!(alice)),
    ];
    let (result, sent) = run(ctx, server, alice, script).await;
    assert_eq!(result.unwrap(), Requeue::on_change());
    assert_eq!(
        (sent[2]["type"].as_str(), sent[2]["reason"].as_str()),
        (Some("Warning"), Some("ReservedNamespace"))
    );
    assert_eq!(sent[3]["reason"], "AccessRevoked");
    assert!(
        sent[3]["note"]
            .as_str()
            .unwrap()
            .ends_with(": homestead-user"),
        "the Event names what the deletecollection removed: {}",
        sent[3]
    );
    let labels = &sent[5]["metadata"]["labels"];
    assert_eq!(
        labels["homestead.dev/retained-from"], "alice",
        "retained, not deleted: {}",
        sent[5]
    );
    assert!(labels.get("app.kubernetes.io/managed-by").is_none());
    assert!(
        sent[5]["metadata"]["annotations"]
            .get("homestead.dev/applied")
            .is_none(),
        "a retained Namespace carries no fingerprint of Homestead's: {}",
        sent[5]
    );
    assert_eq!(sent[6]["reason"], "NamespaceRetained");
}

#[tokio::test]
async fn a_replica_that_cannot_confirm_the_lease_writes_nothing() {
    let (ctx, server, _writers) = Context::test_fenced(crate::act::fence::Fence::closed());
    // A new User: provisioning would write a finalizer, a Namespace, a RoleBinding, a status.
    let fresh = User::test("alice");
    let (result, sent) = run(ctx, server, fresh, vec![]).await;
    assert_eq!(result.unwrap(), Requeue::after(Duration::from_secs(5)));
    assert!(sent.is_empty(), "a fenced replica made requests: {sent:?}");
}

/// A retained namespace's run that finds the fence closed (the replica paused past its last
/// confirmation of the Lease) looks again later: a binding that appeared meanwhile would
/// otherwise stay until the next one appears (soak seed 832573, docs/soak.md).
#[tokio::test]
async fn a_retained_namespace_run_that_cannot_write_looks_again() {
    let (ctx, _server, _writers) = Context::test_fenced(crate::act::fence::Fence::closed());
    let retained: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "metadata": { "name": "user-grace", "labels": { "homestead.dev/retained-from": "grace" } }
    }))
    .unwrap();
    let action = crate::flows::offboard::keep_retained_revoked(&retained, &ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
}

#[tokio::test]
async fn a_fence_that_closes_stops_the_next_write() {
    let (ctx, _server, _writers) = Context::test_fenced(crate::act::fence::Fence::closed());
    ctx.cluster()
        .fence()
        .hold_until(std::time::Instant::now() + Duration::from_secs(60));
    // Held: a reconcile may start. Then the Lease can no longer be confirmed:
    ctx.cluster().fence().hold_until(std::time::Instant::now());
    let error = ctx
        .cluster()
        .apply(&desired_namespace(
            &User::test("alice"),
            "user-alice",
            Default::default(),
            Traits::default(),
        ))
        .await
        .expect_err("a closed fence refuses the write");
    assert!(matches!(error, Error::NotLeader));
    assert_eq!(error.metric_label().as_str(), "not_leader");
}

/// The fence is checked by the client every request goes through, not by each caller: with it
/// closed, provisioning and offboarding a User (called directly, past the reconcile's own early
/// return) and an Event send reads at most, never a write; the reads reach the mock API server
/// (which records every request), so a write that got through would be seen.
#[tokio::test]
async fn a_fenced_replica_sends_no_write_of_any_kind() {
    let (ctx, mut server, mut writers) = Context::test_fenced(crate::act::fence::Fence::closed());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Some((request, respond)) = server.next_request().await {
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            record.lock().unwrap().push(format!("{method} {path}"));
            let (status, body) = if method == Method::GET && path.ends_with("/rolebindings") {
                let list = json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                                  "kind": "RoleBindingList", "metadata": {}, "items": []});
                (StatusCode::OK, list)
            } else if method == Method::GET && path.contains("customresourcedefinitions") {
                let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition", "metadata": {"name": "users.homestead.dev"},
                    "spec": {"group": "homestead.dev", "scope": "Cluster", "versions": [],
                             "names": {"kind": "User", "plural": "users"}}});
                (StatusCode::OK, crd)
            } else if method == Method::GET {
                (StatusCode::NOT_FOUND, failure(StatusCode::NOT_FOUND))
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    failure(StatusCode::INTERNAL_SERVER_ERROR),
                )
            };
            let body = Body::from(serde_json::to_vec(&body).unwrap());
            respond.send_response(Response::builder().status(status).body(body).unwrap());
        }
    });
    let alice = finalized("alice", json!({}));
    let provisioned_now = crate::flows::provision::provision(&alice, &ctx).await;
    assert!(
        matches!(provisioned_now, Err(Error::NotLeader)),
        "{provisioned_now:?}"
    );
    let mut leaving = finalized("alice", json!({}));
    provisioned(&mut writers, &mut leaving);
    leaving.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let offboarded = crate::flows::offboard::offboard(&leaving, &ctx).await;
    assert!(
        matches!(offboarded, Err(Error::NotLeader)),
        "{offboarded:?}"
    );
    ctx.cluster().publish(
        &alice,
        kube::runtime::events::EventType::Normal,
        "Provisioned",
        "queued while fenced".into(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|request| request.starts_with("GET ")),
        "a fenced replica sent a write: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|request| request.contains("customresourcedefinitions")),
        "offboarding reads the CRD (a read, which passes) before its first write: {seen:?}"
    );
}

#[tokio::test]
async fn a_binding_created_moments_ago_is_not_created_again_but_looked_at_again_soon() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    converged_earlier(&mut alice, Reason::Provisioned);
    writers.namespaces.insert(desired_namespace(
        &alice,
        "user-alice",
        Default::default(),
        Traits::default(),
    ));
    // This replica created the binding; the RoleBinding watch has not delivered it yet.
    let binding = desired_role_binding(&alice, "user-alice");
    ctx.cluster().recent().role_bindings.remember(binding);
    let script = status_write_only(&alice);
    let (result, sent) = run(ctx, server, alice, script).await;
    let action = result.expect("nothing failed");
    assert_ne!(
        action,
        Requeue::on_change(),
        "a binding deleted before the cache caught up must not wait for the resync"
    );
    assert_eq!(sent.len(), 1, "no second create of the binding");
}

#[tokio::test]
async fn a_generation_converged_moments_ago_is_not_applied_again_from_a_stale_cache() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    provisioned(&mut writers, &mut alice);
    // A spec change (generation 2) this replica has just converged: the status it wrote (for
    // generation 2) is not in the User cache yet, which still shows generation 1's. The echo
    // of one of its writes triggers this reconcile.
    alice.metadata.generation = Some(2);
    let print = crate::plan::status::convergence_print(Some(2), None);
    ctx.cluster()
        .recent()
        .convergence
        .remember("alice".into(), print);
    // Respecified, the Namespace would be read and applied again; converged, only the status
    // (which the cache shows for generation 1) is written.
    let script = status_write_only(&alice);
    let (result, sent) = run(ctx, server, alice, script).await;
    result.expect("nothing failed");
    assert_eq!(sent[0]["status"]["observedGeneration"], 2);
}

#[tokio::test]
async fn a_role_change_removes_every_binding_after_a_dry_run_no_name_can_block() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({ "role": "admin" }));
    provisioned(&mut writers, &mut alice);
    alice.spec.role = Some("view".into());
    let binding = |name: &str| {
        let mut b = desired_role_binding(&alice, "user-alice");
        b.metadata.name = Some(name.into());
        b.role_ref.name = "admin".into();
        b
    };
    // What the deletecollection removes: Homestead's binding, and two the person made under
    // `admin`, one of them with the name a fixed dry-run name would have collided with.
    let live = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBindingList", "metadata": {},
        "items": [binding("homestead-user"), binding("homestead-user-next"), binding("mine")],
    });
    let rolebindings = "/namespaces/user-alice/rolebindings";
    let mut script = vec![
        expect(
            Method::POST,
            "dryRun=All",
            StatusCode::CREATED,
            json!(binding("homestead-user-x7k2p")),
        ),
        expect(Method::DELETE, rolebindings, StatusCode::OK, live),
        expect(
            Method::POST,
            rolebindings,
            StatusCode::CREATED,
            json!(desired_role_binding(&alice, "user-alice")),
        ),
    ];
    script.extend(status_write_and_event(&alice));
    let ctx = Arc::new(ctx);
    let (result, sent) = run(ctx.clone(), server, alice, script).await;
    result.expect("the role change converges");
    assert_eq!(sent[0]["metadata"]["generateName"], "homestead-user-");
    assert!(sent[0]["metadata"].get("name").is_none(), "{}", sent[0]);
    assert_eq!(sent[2]["roleRef"]["name"], "view");
    assert!(ctx.cluster().events().drained(Duration::from_secs(5)).await);
    assert_eq!(sent[4]["reason"], "RoleChanged");
    let note = sent[4]["note"].as_str().unwrap();
    assert!(note.contains("homestead-user-next, mine"), "{note}");
}

#[tokio::test]
async fn an_offboarding_whose_namespace_the_watch_saw_go_asks_nothing_more() {
    let (ctx, server, _writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    converged_earlier(&mut alice, Reason::Terminating);
    alice.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    // The Namespace watch delivered its deletion: the cache no longer has it.
    ctx.cluster()
        .recent()
        .namespaces_gone
        .remember("user-alice".into());
    let script = vec![expect(
        Method::PATCH,
        "/users/alice",
        StatusCode::OK,
        json!(alice),
    )];
    let ctx = Arc::new(ctx);
    let (result, sent) = run(ctx.clone(), server, alice.clone(), script).await;
    assert_eq!(result.unwrap(), Requeue::on_change());
    // The finalizer helper's JSON patch removes the finalizer.
    let ops = sent[0].as_array().expect("a JSON patch");
    assert!(
        ops.iter()
            .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
        "{}",
        sent[0]
    );

    // Without that word from the watch, the API server is asked (one GET).
    let script = vec![
        expect(
            Method::GET,
            "/api/v1/namespaces/user-alice",
            StatusCode::NOT_FOUND,
            failure(StatusCode::NOT_FOUND),
        ),
        expect(Method::PATCH, "/users/alice", StatusCode::OK, json!(alice)),
    ];
    let (ctx, server, _writers) = Context::test();
    let (result, _) = run(ctx, server, alice, script).await;
    assert_eq!(result.unwrap(), Requeue::on_change());
}

/// The script of a reconcile of `alice` that deletes Homestead's RoleBinding, then writes her
/// status and publishes an Event.
fn revocation_then_status(alice: &User) -> Vec<Expect> {
    let mut script = vec![expect(
        Method::DELETE,
        "/namespaces/user-alice/rolebindings/homestead-user",
        StatusCode::OK,
        json!({}),
    )];
    script.extend(status_write_and_event(alice));
    script
}

/// Found by the soak: a suspended person kept access to their namespace while it terminated
/// (the reconcile waited for the namespace before revoking). A terminating namespace whose
/// RoleBindings the namespace controller has not removed yet is revoked at once. (A real
/// namespace controller removes them at a pace of its own, so this takes a scripted server.)
#[tokio::test]
async fn suspension_revokes_in_a_namespace_that_is_still_terminating() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({ "suspended": true }));
    provisioned(&mut writers, &mut alice);
    let mut terminating =
        desired_namespace(&alice, "user-alice", Default::default(), Traits::default());
    terminating.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    writers.namespaces.insert(terminating);
    let script = revocation_then_status(&alice);
    let ctx = Arc::new(ctx);
    let (result, sent) = run(ctx.clone(), server, alice, script).await;
    result.expect("the reconcile waits for the namespace");
    assert_eq!(
        sent[1]["status"]["conditions"][0]["reason"],
        "NamespaceTerminating"
    );
    assert!(ctx.cluster().events().drained(Duration::from_secs(5)).await);
    let note = sent[2]["note"].as_str().unwrap();
    assert!(note.contains("removed every RoleBinding"), "{note}");
}

/// Found by the soak: a RoleBinding a tenant made between an offboarding's revocation and its
/// namespace delete stayed until the namespace controller got to it, the next pass only waiting
/// for the deletion it had just asked for. The pass its watch event triggers removes it.
#[tokio::test]
async fn a_binding_made_while_the_namespace_was_being_deleted_is_removed() {
    let (ctx, server, mut writers) = Context::test();
    let mut alice = finalized("alice", json!({}));
    provisioned(&mut writers, &mut alice);
    converged_earlier(&mut alice, Reason::Terminating);
    alice.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    // This replica revoked access and deleted the namespace moments ago.
    let namespace = desired_namespace(&alice, "user-alice", Default::default(), Traits::default());
    ctx.cluster().recent().namespace_deletes.remember(
        "user-alice".into(),
        crate::plan::facts::print(&namespace.metadata.uid),
    );
    let script = revocation_then_status(&alice);
    let (result, sent) = run(ctx, server, alice, script).await;
    result.expect("the offboarding waits for the namespace");
    assert_eq!(sent.len(), 3, "{sent:?}");
}
