//! The guards of a person's namespace, which exist before any access is granted (docs/design.md,
//! "Guards before access"): Homestead's ResourceQuota, LimitRange and NetworkPolicy, each
//! applied when the cache shows something else than desired, removed when nothing is desired
//! ([`ensure`]).

use std::sync::Arc;

use homestead_api::Change;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::DeleteParams;
use kube::runtime::reflector::ObjectRef;

use super::Cluster;
use super::client::Object;
use crate::error::Result;
use crate::plan::ownership::{Holder, labelled_for};
use crate::state::cache::CachedGuard;

/// One object Homestead keeps in a person's Namespace, as the cache (in its form `C`: the
/// whole object, or [`CachedGuard`]) and the desired state have it.
pub struct Managed<K, C = K> {
    /// The cached object, if any (only one labelled as the User's counts).
    pub cached: Option<Arc<C>>,
    /// The object Homestead wants, or `None` for none.
    pub desired: Option<K>,
    /// Whether the cached object already is the desired one, as (desired, cached).
    pub matches: fn(&K, &C) -> bool,
    /// The Event reasons of an apply and of a removal.
    pub changes: (Change, Change),
    /// Why it is removed, for the Event's note.
    pub why_removed: &'static str,
}

/// A cached object whose labels say whose it is.
pub trait Labelled {
    /// Whether it carries `holder`'s label (`homestead.dev/user=<name>` for a User).
    fn is_labelled_for<H: Holder>(&self, holder: &H) -> bool;
}

impl Labelled for ResourceQuota {
    fn is_labelled_for<H: Holder>(&self, holder: &H) -> bool {
        labelled_for(&self.metadata, holder)
    }
}

impl<K> Labelled for CachedGuard<K> {
    fn is_labelled_for<H: Holder>(&self, holder: &H) -> bool {
        self.labelled_for(holder)
    }
}

/// Applies `managed.desired` (server-side apply) when the cache shows something else, or
/// deletes the object `name` when nothing is desired and the cache has it labelled as `user`'s.
/// Returns the change made, if any.
///
/// # Errors
/// The apply's or the deletion's error, when the API server refuses it or cannot be reached.
pub async fn ensure<K: Object, C: Labelled, H: Holder>(
    cluster: &Cluster,
    user: &H,
    namespace: &str,
    name: &str,
    managed: Managed<K, C>,
) -> Result<Option<(Change, String)>> {
    let kind = K::kind(&());
    let (applied, removed) = managed.changes;
    // Only an object labelled as this User's is Homestead's to repair or remove.
    let cached = managed.cached.filter(|o| o.is_labelled_for(user));
    match (managed.desired, cached) {
        (Some(desired), Some(cached)) if (managed.matches)(&desired, &cached) => Ok(None),
        (Some(desired), _) => {
            cluster.apply(&desired).await?;
            Ok(Some((
                applied,
                format!("applied {kind} {namespace}/{name}"),
            )))
        }
        (None, Some(_)) => {
            let reference = ObjectRef::<K>::new(name).within(namespace);
            cluster.delete(&reference, &DeleteParams::default()).await?;
            let note = format!("removed {kind} {namespace}/{name}: {}", managed.why_removed);
            Ok(Some((removed, note)))
        }
        (None, None) => Ok(None),
    }
}
