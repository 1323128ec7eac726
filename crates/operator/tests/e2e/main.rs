//! The rules of docs/design.md, each proven on the real local control plane with the operator
//! binary running as `system:serviceaccount:homestead-system:homestead` under `rbac/`.

mod adoption;
#[path = "../common/mod.rs"]
mod common;
mod doctor;
mod offboarding;
mod ownership;
mod provisioning;

use std::time::{Duration, Instant};

use common::*;
use homestead_api::{
    ANNOTATION_USER_UID, FINALIZER, LABEL_MANAGED_BY, LABEL_RETAINED_FROM, LABEL_USER, User,
};
use homestead_testenv::OPERATOR;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const RB: &str = "homestead-user";

fn namespaces(c: &Client) -> Api<Namespace> {
    Api::all(c.clone())
}
fn users(c: &Client) -> Api<User> {
    Api::all(c.clone())
}
fn bindings(c: &Client, ns: &str) -> Api<RoleBinding> {
    Api::namespaced(c.clone(), ns)
}

async fn patch_spec(c: &Client, name: &str, spec: serde_json::Value) {
    users(c)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// Events on a User, by type and reason.
async fn event_reasons(c: &Client, user: &str) -> Vec<(String, String)> {
    user_events(c, user)
        .await
        .into_iter()
        .map(|(type_, reason, _)| (type_, reason))
        .collect()
}

/// Waits until an Event of `type_` and `reason` is recorded about `user` (Events are published
/// right after the status write, so they may trail it slightly).
async fn wait_event(c: &Client, user: &str, type_: &str, reason: &str) {
    let want = (type_.to_owned(), reason.to_owned());
    eventually(&format!("a {type_} Event {reason} on {user}"), 30, || {
        let want = want.clone();
        async move { event_reasons(c, user).await.contains(&want).then_some(()) }
    })
    .await;
}
