//! Offboarding a deleted User (the finalizer's cleanup), per `deletionPolicy`:
//! `Delete` deletes the User's Namespace and holds the finalizer until it is gone; `Retain`
//! revokes access and releases the Namespace with its data. While the `users.homestead.dev`
//! CRD itself is being deleted (uninstall), every User is treated as `Retain`, so uninstalling
//! Homestead never deletes anyone's namespace (docs/design.md rule 7).

use std::time::Instant;

use homestead_api::{CRD_NAME, DeletionPolicy, LABEL_RETAINED_FROM, User};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use crate::cache::{CachedNamespace, print};
use crate::context::Context;
use crate::desired::retained_namespace;
use crate::error::{Error, Result};
use crate::ownership::is_owned_by;
use crate::provision::{cached_bindings_in, revoke, revoke_all};
use crate::status::{Change, Outcome, Reason, terminating_message};
use crate::validate::namespace_name;

/// Offboards `user` (see the module docs). First, whatever the policy, every RoleBinding in
/// the User's Namespace is removed with one `deletecollection` (what exists at that moment,
/// not what a cache shows), so the person, their groups and their ServiceAccounts lose all
/// access at once. A Namespace that has become reserved is retained, never deleted. The
/// Namespace is looked up in the cache first ([`Context::managed_namespace`]): once its watch
/// has reported it gone, no request confirms it. Returns `Ok` when nothing of the User's is
/// left to wait for, so the finalizer helper removes the finalizer.
///
/// # Errors
/// [`Error::NamespaceTerminating`] while a `Delete` offboarding waits for the Namespace (the
/// finalizer must stay); [`Error::Kube`] when a request fails.
pub async fn offboard(user: &User, ctx: &Context) -> Result<Action> {
    let began = Instant::now();
    let owned = |ns: &CachedNamespace| is_owned_by(&ns.facts, user);
    let name = namespace_name(user, &ctx.config, |n| {
        ctx.cached_namespace(n).is_some_and(|ns| owned(&ns))
    });
    let Some(namespace) = ctx.managed_namespace(&name).await?.filter(|ns| owned(ns)) else {
        // No Event: the User is about to go, and `kubectl describe` could not show it. The
        // `Terminating` Event said what offboarding does; the log and
        // `homestead_offboarding_duration_seconds` record the end.
        tracing::info!(user = %user.name_any(), namespace = %name, "offboarding complete: no namespace of this User remains");
        return Ok(Action::await_change());
    };
    let deleted_here = ctx
        .recent
        .namespace_deletes
        .unconfirmed(&name, print(&namespace.uid()))
        .is_some();
    if deleted_here {
        // This replica revoked access and deleted it moments ago; the watches have not caught
        // up with the deletion (their echoes triggered this pass). A RoleBinding made between
        // the revocation and the delete is in the cache if its watch triggered this pass:
        // remove what the cache shows (one already gone counts as deleted; found by the soak).
        let revoked = revoke(ctx, &name, cached_bindings_in(ctx, &name), "offboarding").await?;
        return wait_for_deletion(user, ctx, &namespace, revoked.into_iter().collect()).await;
    }
    if namespace.metadata.deletion_timestamp.is_some() {
        // Already on its way out (deleted by an earlier pass, or by someone else): nothing can
        // be created in it any more, so only bindings still cached are left to remove, and the
        // Namespace watch says when it is gone.
        let revoked = revoke(ctx, &name, cached_bindings_in(ctx, &name), "offboarding").await?;
        return wait_for_deletion(user, ctx, &namespace, revoked.into_iter().collect()).await;
    }
    let uninstalling = crd_is_deleting(ctx, began).await?;
    let policy = if uninstalling {
        DeletionPolicy::Retain
    } else {
        user.spec.deletion_policy
    };
    let revoked = revoke_all(ctx, &name, "offboarding").await?;
    let reserved = ctx.config.is_reserved(&name);
    if reserved && policy == DeletionPolicy::Delete {
        let note = format!(
            "namespace {name:?} is reserved now: it is retained (access revoked, data kept), never deleted"
        );
        ctx.publish(
            user,
            EventType::Warning,
            Reason::ReservedNamespace.as_str(),
            note,
        );
    }
    let mut changes: Vec<(Change, String)> = revoked.into_iter().collect();
    match policy {
        DeletionPolicy::Delete if !reserved => {
            delete_namespace(ctx, &namespace).await?;
            let note = format!("deleting namespace {name:?} (deletionPolicy Delete)");
            changes.push((Change::NamespaceDeleting, note));
            wait_for_deletion(user, ctx, &namespace, changes).await
        }
        _ => {
            for (change, note) in changes {
                ctx.record(user, change, note);
            }
            retain_namespace(user, ctx, &namespace, uninstalling).await
        }
    }
}

/// The last answer to "is the `users.homestead.dev` CRD being deleted?", with when the GET
/// that gave it was sent; shared by every offboarding.
#[derive(Debug, Default)]
pub struct UninstallCheck(tokio::sync::Mutex<Option<(Instant, bool)>>);

/// Whether the `users.homestead.dev` CRD itself is gone or being deleted (Homestead is being
/// uninstalled), as read by a GET sent after `since` (when this reconcile began, after it saw
/// the User deleted). The API server marks the CRD deleted before it deletes any User of it,
/// so such a GET sees the mark of any uninstall that deleted this User; one GET serves every
/// offboarding that began before it was sent, and offboardings arriving meanwhile wait for it
/// rather than sending their own. A bulk offboarding reads the CRD a few times, not once per
/// User.
async fn crd_is_deleting(ctx: &Context, since: Instant) -> Result<bool> {
    let mut last = ctx.uninstall_check.0.lock().await;
    if let Some((sent, deleting)) = *last
        && sent >= since
    {
        return Ok(deleting);
    }
    let sent = Instant::now();
    let crd = ctx
        .get(&ObjectRef::<CustomResourceDefinition>::new(CRD_NAME))
        .await?;
    let deleting = crd.is_none_or(|crd| crd.metadata.deletion_timestamp.is_some());
    *last = Some((sent, deleting));
    Ok(deleting)
}

/// `Delete`: deletes the Namespace, with its uid as precondition, so a namespace recreated by
/// someone else under the same name is never deleted.
async fn delete_namespace(ctx: &Context, namespace: &CachedNamespace) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: namespace.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    let name = namespace.name_any();
    ctx.delete(&ObjectRef::<Namespace>::new(&name), &params)
        .await?;
    let print = print(&namespace.uid());
    ctx.recent.namespace_deletes.remember(name, print);
    Ok(())
}

/// Reports what still blocks the terminating `namespace` as `Ready=False, Terminating` (one
/// Event on the transition, naming the `changes` made on the way) and waits: the finalizer
/// stays until the Namespace watch reports it gone.
async fn wait_for_deletion(
    user: &User,
    ctx: &Context,
    namespace: &CachedNamespace,
    changes: Vec<(Change, String)>,
) -> Result<Action> {
    let name = namespace.name_any();
    let message = terminating_message(namespace);
    let outcome = Outcome::new(name.clone(), Reason::Terminating, message).with_changes(changes);
    ctx.write_status(user, outcome).await?;
    Err(Error::NamespaceTerminating(name))
}

/// `Retain` (or uninstall, or a Namespace that has become reserved): releases the Namespace
/// (managed labels and owner reference removed, `homestead.dev/retained-from` set) with its
/// data. Access was revoked before.
async fn retain_namespace(
    user: &User,
    ctx: &Context,
    namespace: &CachedNamespace,
    uninstalling: bool,
) -> Result<Action> {
    let name = namespace.name_any();
    // The Namespace keeps what its Profile gave it (Pod Security, labels); without the Profile,
    // what the User and the operator's flags say.
    let retained = match ctx.resolve(user) {
        Ok(resolved) => retained_namespace(
            &resolved.user,
            &name,
            resolved.pod_security,
            resolved.isolation.is_some(),
        ),
        Err(_) => retained_namespace(user, &name, ctx.config.pod_security, false),
    };
    ctx.apply_over(&retained, namespace.metadata.uid.as_deref())
        .await?;
    let why = if uninstalling {
        "Homestead is being uninstalled"
    } else {
        "deletionPolicy Retain"
    };
    let note = format!("offboarding ({why}): access revoked, namespace {name:?} and its data kept");
    ctx.record(user, Change::NamespaceRetained, note);
    Ok(Action::await_change())
}

/// The standing revocation rule for retained Namespaces (docs: "Revocation is a standing
/// rule"): removes every RoleBinding the cache knows of in `namespace`, a Namespace labelled
/// `homestead.dev/retained-from` (its User is gone, so no User reconcile looks at it any more).
/// The operator runs it whenever such a Namespace appears and whenever a RoleBinding in one does,
/// for as long as the Namespace exists; Homestead never grants anything there.
///
/// Returns `Action::await_change()`: the next RoleBinding brings the next run.
///
/// # Errors
/// [`Error::NotLeader`] on a replica that does not hold the Lease; [`Error::Kube`] when a
/// delete fails (the caller retries).
pub async fn keep_retained_revoked(namespace: &Namespace, ctx: &Context) -> Result<Action> {
    ctx.wait_synced().await;
    if !ctx.fence.is_held() {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let from = namespace
        .labels()
        .get(LABEL_RETAINED_FROM)
        .cloned()
        .unwrap_or_default();
    let bindings = cached_bindings_in(ctx, &name);
    if let Some((_, note)) = revoke(ctx, &name, bindings, "retained").await? {
        tracing::warn!(namespace = %name, retained_from = %from, "{note}");
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};

    #[tokio::test]
    async fn one_read_of_the_crd_serves_every_offboarding_that_began_before_it() {
        let (ctx, mut server, _writers) = Context::test();
        let began = Instant::now();
        let answer = tokio::spawn(async move {
            let (request, respond) = server.next_request().await.expect("one GET");
            assert_eq!(request.method(), Method::GET);
            assert!(request.uri().path().ends_with("/users.homestead.dev"));
            let crd = serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": { "name": "users.homestead.dev" },
                "spec": { "group": "homestead.dev", "scope": "Cluster", "versions": [],
                          "names": { "kind": "User", "plural": "users" } },
            });
            let body = kube::client::Body::from(serde_json::to_vec(&crd).unwrap());
            respond.send_response(
                http::Response::builder()
                    .status(StatusCode::OK)
                    .body(body)
                    .unwrap(),
            );
            // The mock API server goes away: any further request fails.
        });
        assert!(!crd_is_deleting(&ctx, began).await.unwrap());
        answer.await.unwrap();
        assert!(
            !crd_is_deleting(&ctx, began).await.unwrap(),
            "an offboarding that began before that GET uses its answer"
        );
        assert!(
            crd_is_deleting(&ctx, Instant::now()).await.is_err(),
            "one that began after it reads the CRD itself"
        );
    }
}
