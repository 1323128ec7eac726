//! Offboarding a deleted User (the finalizer's cleanup), per `deletionPolicy`:
//! `Delete` deletes the User's Namespace and holds the finalizer until it is gone; `Retain`
//! revokes access and releases the Namespace with its data; `Handover` revokes access and gives
//! the person's homes to their successor (`flows::handover`), else retains them. While the `users.homestead.dev`
//! CRD itself is being deleted (uninstall), every User is treated as `Retain`, so uninstalling
//! Homestead never deletes anyone's namespace (docs/design.md rule 7).

use std::time::Instant;

use homestead_api::{Change, DeletionPolicy, LABEL_RETAINED_FROM, RefusalKind, User};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use crate::act::access::{revoke, revoke_all};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::flows::handover::{Handed, hand_over};
use crate::flows::requeue::Requeue;
use crate::flows::total::release_slice;
use crate::plan::desired::{Traits, retained_namespace};
use crate::plan::ownership::is_owned_by;
use crate::plan::status::{Outcome, terminating_message};
use crate::plan::validate::namespace_name;

/// When a run that found this replica unable to write looks again.
pub const NOT_LEADER_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);
use crate::state::cache::CachedNamespace;
use homestead_api::Reason;

/// Offboards `user` (see the module docs). First, whatever the policy, every RoleBinding in
/// the User's Namespace is removed with one `deletecollection` (what exists at that moment,
/// not what a cache shows), so the person, their groups and their ServiceAccounts lose all
/// access at once. A Namespace that has become reserved is retained, never deleted. The
/// Namespace is looked up in the cache first ([`crate::act::Cluster::namespace`]): once its watch
/// has reported it gone, no request confirms it. Returns `Ok` when nothing of the User's is
/// left to wait for, so the finalizer helper removes the finalizer.
///
/// # Errors
/// [`Error::NamespaceTerminating`] while a `Delete` offboarding waits for the Namespace (the
/// finalizer must stay); [`Error::Kube`] when a request fails.
pub async fn offboard(user: &User, ctx: &Context) -> Result<Requeue> {
    let began = Instant::now();
    let owned = |ns: &CachedNamespace| is_owned_by(&ns.facts, user);
    let (cluster, caches) = (ctx.cluster(), ctx.caches());
    let name = namespace_name(user, ctx.config(), |n| {
        caches.namespace(n).is_some_and(|ns| owned(&ns))
    });
    let cached = caches.namespace(&name);
    let Some(namespace) = cluster
        .namespace(&name, cached)
        .await?
        .filter(|ns| owned(ns))
    else {
        if user.spec.deletion_policy == DeletionPolicy::Handover {
            // No home of their own, perhaps personal workspaces: those go to the successor.
            hand_over(user, ctx, None).await?;
        }
        // No Event: the User is about to go, and `kubectl describe` could not show it. The
        // `Terminating` Event said what offboarding does; the log and
        // `homestead_offboarding_duration_seconds` record the end.
        tracing::info!(user = %user.name_any(), namespace = %name, "offboarding complete: no namespace of this User remains");
        return Ok(Requeue::on_change());
    };
    if cluster.deleted_moments_ago(&namespace) || namespace.metadata.deletion_timestamp.is_some() {
        // Deleted moments ago by this replica (the watches have not caught up; their echoes
        // triggered this pass), or already on its way out (by an earlier pass or someone else):
        // nothing can be created in it any more, so only bindings still cached are left to
        // remove (one made between the revocation and the delete is cached if its watch
        // triggered this pass; one already gone counts as deleted; found by the soak), and the
        // Namespace watch says when it is gone.
        let bindings = caches.role_bindings_in(&name);
        let revoked = revoke(cluster, &name, bindings, "offboarding").await?;
        return wait_for_deletion(user, ctx, &namespace, revoked.into_iter().collect()).await;
    }
    let uninstalling = cluster.crd_is_deleting(began).await?;
    let policy = if uninstalling {
        DeletionPolicy::Retain
    } else {
        user.spec.deletion_policy
    };
    let revoked = revoke_all(cluster, &name, "offboarding").await?;
    let reserved = ctx.config().is_reserved(&name);
    if reserved && policy == DeletionPolicy::Delete {
        let note = format!(
            "namespace {name:?} is reserved now: it is retained (access revoked, data kept), never deleted"
        );
        cluster.publish(
            user,
            EventType::Warning,
            RefusalKind::ReservedNamespace.as_str(),
            note,
        );
    }
    let mut changes: Vec<(Change, String)> = revoked.into_iter().collect();
    match policy {
        DeletionPolicy::Delete if !reserved => {
            cluster.delete_namespace(&namespace).await?;
            let note = format!("deleting namespace {name:?} (deletionPolicy Delete)");
            changes.push((Change::NamespaceDeleting, note));
            wait_for_deletion(user, ctx, &namespace, changes).await
        }
        DeletionPolicy::Handover if !reserved => {
            for (change, note) in changes {
                cluster.record(user, change, note);
            }
            match hand_over(user, ctx, Some(&name)).await? {
                Handed::Done { own_home: true } => Ok(Requeue::on_change()),
                Handed::Done { own_home: false } | Handed::Fallback => {
                    retain_namespace(user, ctx, &namespace, uninstalling).await
                }
            }
        }
        _ => {
            for (change, note) in changes {
                cluster.record(user, change, note);
            }
            retain_namespace(user, ctx, &namespace, uninstalling).await
        }
    }
}

/// Reports what still blocks the terminating `namespace` as `Ready=False, Terminating` (one
/// Event on the transition, naming the `changes` made on the way) and waits: the finalizer
/// stays until the Namespace watch reports it gone.
async fn wait_for_deletion(
    user: &User,
    ctx: &Context,
    namespace: &CachedNamespace,
    changes: Vec<(Change, String)>,
) -> Result<Requeue> {
    let name = namespace.name_any();
    let message = terminating_message(&name, namespace.status.as_ref());
    let outcome = Outcome::new(name.clone(), Reason::Terminating, message).with_changes(changes);
    ctx.cluster().write_status(user, outcome).await?;
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
) -> Result<Requeue> {
    let name = namespace.name_any();
    // The Namespace keeps what its Profile gave it (Pod Security, labels); without the Profile,
    // what the User and the operator's flags say.
    let retained = match ctx.resolve(user) {
        Ok(resolved) => retained_namespace(
            &resolved.user,
            &name,
            resolved.pod_security,
            resolved.traits(),
        ),
        Err(_) => retained_namespace(user, &name, ctx.config().pod_security, Traits::default()),
    };
    // Its slice of the person's total goes first: Homestead writes nothing there after.
    release_slice(ctx, user, &name, "the namespace is retained").await?;
    ctx.cluster()
        .apply_over(&retained, namespace.metadata.uid.as_deref())
        .await?;
    let why = if uninstalling {
        "Homestead is being uninstalled"
    } else {
        "deletionPolicy Retain"
    };
    let note = format!("offboarding ({why}): access revoked, namespace {name:?} and its data kept");
    ctx.cluster().record(user, Change::NamespaceRetained, note);
    Ok(Requeue::on_change())
}

/// The standing revocation rule for retained Namespaces (docs: "Revocation is a standing
/// rule"): removes every RoleBinding the cache knows of in `namespace`, a Namespace labelled
/// `homestead.dev/retained-from` (its User is gone, so no User reconcile looks at it any more).
/// The operator runs it whenever such a Namespace appears and whenever a RoleBinding in one does,
/// for as long as the Namespace exists; Homestead never grants anything there.
///
/// Returns `Action::await_change()`: the next RoleBinding brings the next run; but while this
/// replica may not write (its fence closed for a moment: the process was paused past its last
/// confirmation of the Lease), a look again after 5 s, since dropping the run would leave a
/// binding that appeared meanwhile in place until the next one appears (found by the soak,
/// docs/soak.md).
///
/// # Errors
/// [`Error::Kube`] when a delete fails (the caller retries).
pub async fn keep_retained_revoked(namespace: &Namespace, ctx: &Context) -> Result<Action> {
    if !ctx.ready_to_write().await {
        return Ok(Action::requeue(NOT_LEADER_RECHECK));
    }
    let name = namespace.name_any();
    let from = namespace
        .labels()
        .get(LABEL_RETAINED_FROM)
        .cloned()
        .unwrap_or_default();
    let bindings = ctx.caches().role_bindings_in(&name);
    if let Some((_, note)) = revoke(ctx.cluster(), &name, bindings, "retained").await? {
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
        assert!(!ctx.cluster().crd_is_deleting(began).await.unwrap());
        answer.await.unwrap();
        assert!(
            !ctx.cluster().crd_is_deleting(began).await.unwrap(),
            "an offboarding that began before that GET uses its answer"
        );
        assert!(
            ctx.cluster().crd_is_deleting(Instant::now()).await.is_err(),
            "one that began after it reads the CRD itself"
        );
    }
}
