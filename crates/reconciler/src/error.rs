//! Errors of one reconcile: what failed, on which object, the bounded label each error carries
//! into `homestead_reconcile_errors_total`, and when to try again (per-User exponential backoff
//! with jitter, reset by the next successful reconcile).
//!
//! Refusals of bad input are not errors: they end in a `Ready=False` condition and a Warning
//! Event, and the reconcile succeeds (see [`crate::plan::validate`]). Waiting for a Namespace to finish
//! terminating is not an error either (see [`crate::flows::reconcile::reconcile()`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use homestead_api::{Failure, User, Verb};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;

/// Errors of one reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed; retried with per-User backoff.
    #[error("{verb} {kind} {name:?} failed: {source}")]
    Kube {
        /// What was being done.
        verb: Verb,
        /// The kind of the object (`Namespace`, `RoleBinding`, ...).
        kind: Cow<'static, str>,
        /// The object's name (`namespace/name` for namespaced objects).
        name: String,
        /// The underlying client error (the API server's `Status` for HTTP errors).
        #[source]
        source: kube::Error,
    },
    /// The User's Namespace is still being deleted. Offboarding returns it so the finalizer
    /// helper keeps the finalizer; [`crate::flows::reconcile::reconcile()`] turns it into a requeue, not a failure.
    #[error("namespace {0:?} is still terminating")]
    NamespaceTerminating(String),
    /// This replica may not write: it no longer holds (or cannot confirm it holds) the
    /// leader-election Lease.
    #[error("not the leader (the leader-election Lease is not confirmed): nothing written")]
    NotLeader,
    /// A shrunken slice of a total quota (`namespace/name`) was not enforced in time
    /// (kube-controller-manager had not copied its `spec.hard` to `status.hard`): the move
    /// stopped before any slice grew, and is tried again.
    #[error("slice {0} is not enforced yet: no slice grew")]
    NotEnforced(String),
    /// The finalizer helper failed: adding or removing the finalizer, or provisioning or
    /// offboarding (the inner error says which).
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<Error>>),
}

/// Result with the reconciler's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `reason` label of `homestead_reconcile_errors_total`: what failed, bounded. A failed
/// request is labelled by its verb ([`homestead_api::VerbNames::metric_label`], the one table
/// of a verb's names); the others by the snake_case of the variant's name.
/// [`ErrorLabel::all`] lets the counter start every series at 0 (one that appears only at its
/// first error cannot be rated or alerted on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorLabel {
    /// A request to the API server failed.
    Failed(Verb),
    /// The User's Namespace is still terminating (a requeue, counted apart).
    NamespaceTerminating,
    /// This replica may not write (it does not hold the Lease).
    NotLeader,
    /// Adding or removing the finalizer failed.
    FinalizerFailed,
    /// The object has no name or an invalid finalizer.
    InvalidObject,
    /// A shrunken slice of a total quota was not enforced in time.
    NotEnforced,
}

impl ErrorLabel {
    /// Every label, each once.
    pub fn all() -> impl Iterator<Item = ErrorLabel> {
        use strum::VariantArray;
        Verb::VARIANTS
            .iter()
            .map(|verb| Self::Failed(*verb))
            .chain([
                Self::NamespaceTerminating,
                Self::NotLeader,
                Self::FinalizerFailed,
                Self::InvalidObject,
                Self::NotEnforced,
            ])
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed(verb) => verb.names().metric_label,
            Self::NamespaceTerminating => "namespace_terminating",
            Self::NotLeader => "not_leader",
            Self::FinalizerFailed => "finalizer_failed",
            Self::InvalidObject => "invalid_object",
            Self::NotEnforced => "slice_not_enforced",
        }
    }
}

impl Error {
    /// An [`Error::Kube`] for `verb` on the object `name` of kind `kind`.
    pub fn kube(verb: Verb, kind: Cow<'static, str>, name: &str, source: kube::Error) -> Self {
        Self::Kube {
            verb,
            kind,
            name: name.to_owned(),
            source,
        }
    }

    /// The `reason` label of `homestead_reconcile_errors_total` for this error.
    pub fn metric_label(&self) -> ErrorLabel {
        use kube::runtime::finalizer::Error as F;
        match self {
            Self::Kube { verb, .. } => ErrorLabel::Failed(*verb),
            Self::NamespaceTerminating(_) => ErrorLabel::NamespaceTerminating,
            Self::NotLeader => ErrorLabel::NotLeader,
            Self::NotEnforced(_) => ErrorLabel::NotEnforced,
            Self::Finalizer(inner) => match inner.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.metric_label(),
                F::AddFinalizer(_) | F::RemoveFinalizer(_) => ErrorLabel::FinalizerFailed,
                F::UnnamedObject | F::InvalidFinalizer => ErrorLabel::InvalidObject,
            },
        }
    }

    /// The `Ready=False` reason of this error: `Forbidden` when the API server (RBAC, an
    /// admission policy or webhook) refused a request with 403, else the failure of the verb
    /// that failed ([`homestead_api::VerbNames::failure`]); `ApplyFailed` for any other error.
    pub fn failure(&self) -> Failure {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } if status.code == 403 => Failure::Forbidden,
            Self::Kube { verb, .. } => verb.names().failure,
            _ => Failure::ApplyFailed,
        }
    }

    /// The Namespace this error is waiting for, if it is the expected wait for a Namespace to
    /// terminate (directly, or from inside the finalizer helper) rather than a failure.
    pub fn terminating_namespace(&self) -> Option<&str> {
        use kube::runtime::finalizer::Error as F;
        match self {
            Self::NamespaceTerminating(ns) => Some(ns),
            Self::Finalizer(inner) => match inner.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.terminating_namespace(),
                _ => None,
            },
            Self::Kube { .. } | Self::NotLeader | Self::NotEnforced(_) => None,
        }
    }
}

/// Retry delays per object (a User by default) after failed reconciles: exponential from
/// [`Backoffs::MIN_DELAY`] (doubling each failure, with random jitter of up to the current
/// delay) to at most [`Backoffs::MAX_DELAY`] plus jitter. A successful reconcile of the object
/// resets it.
///
/// Built on `backon`'s [`ExponentialBuilder`]; one small iterator is held per failing object only.
#[derive(Debug)]
pub struct Backoffs<K: Resource<DynamicType = ()> = User> {
    builder: ExponentialBuilder,
    failing: Mutex<HashMap<ObjectRef<K>, ExponentialBackoff>>,
}

impl<K: Resource<DynamicType = ()>> Default for Backoffs<K> {
    fn default() -> Self {
        Self::new(Self::MIN_DELAY, Self::MAX_DELAY)
    }
}

impl<K: Resource<DynamicType = ()>> Backoffs<K> {
    /// Delay after a User's first failure: 1 second (plus jitter).
    pub const MIN_DELAY: Duration = Duration::from_secs(1);
    /// Longest delay between retries: 5 minutes (plus jitter), the resync period.
    pub const MAX_DELAY: Duration = Duration::from_secs(300);

    /// Backoffs from `min` to `max` (both before jitter).
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            builder: ExponentialBuilder::new()
                .with_min_delay(min)
                .with_max_delay(max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
            failing: Mutex::default(),
        }
    }

    /// The delay before retrying `user` after one more failure.
    pub fn next_delay(&self, user: ObjectRef<K>) -> Duration {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing
            .entry(user)
            .or_insert_with(|| self.builder.build())
            .next()
            .unwrap_or(Backoffs::<User>::MAX_DELAY)
    }

    /// Forgets `user`'s failures (after a successful reconcile).
    pub fn reset(&self, user: &ObjectRef<K>) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing.remove(user);
    }

    /// How many Users are currently backing off.
    pub fn failing(&self) -> usize {
        self.failing.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::finalizer::Error as F;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("boom", "InternalError")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn metric_labels_follow_the_verb_through_the_finalizer() {
        for (verb, label) in [
            (Verb::Get, "get_failed"),
            (Verb::DeleteCollection, "delete_collection_failed"),
            (Verb::Create, "create_failed"),
            (Verb::Apply, "apply_failed"),
            (Verb::Delete, "delete_failed"),
            (Verb::PatchStatus, "status_failed"),
        ] {
            let error = Error::kube(verb, "Namespace".into(), "user-a", api_error(500));
            assert_eq!(error.metric_label().as_str(), label);
            let wrapped = Error::Finalizer(Box::new(F::ApplyFailed(error)));
            assert_eq!(wrapped.metric_label().as_str(), label);
        }
        let finalizer = Error::Finalizer(Box::new(F::AddFinalizer(api_error(409))));
        assert_eq!(finalizer.metric_label().as_str(), "finalizer_failed");
        let unnamed = Error::Finalizer(Box::new(F::UnnamedObject));
        assert_eq!(unnamed.metric_label().as_str(), "invalid_object");
        // Every label the metric can get is one it starts at 0.
        let mut every = vec![
            finalizer.metric_label(),
            unnamed.metric_label(),
            Error::NotLeader.metric_label(),
            Error::NamespaceTerminating("user-a".into()).metric_label(),
            Error::NotEnforced("user-a/homestead-total".into()).metric_label(),
        ];
        every.extend(
            [
                Verb::Get,
                Verb::DeleteCollection,
                Verb::Create,
                Verb::Apply,
                Verb::Delete,
                Verb::PatchStatus,
            ]
            .map(|verb| {
                Error::kube(verb, "Namespace".into(), "user-a", api_error(500)).metric_label()
            }),
        );
        let mut every: Vec<&str> = every.into_iter().map(ErrorLabel::as_str).collect();
        every.sort_unstable();
        let mut known: Vec<&str> = ErrorLabel::all().map(ErrorLabel::as_str).collect();
        known.sort_unstable();
        assert_eq!(every, known);
    }

    #[test]
    fn only_a_terminating_namespace_is_a_wait() {
        let wait = Error::Finalizer(Box::new(F::CleanupFailed(Error::NamespaceTerminating(
            "user-a".into(),
        ))));
        assert_eq!(wait.terminating_namespace(), Some("user-a"));
        let failure = Error::kube(Verb::Delete, "Namespace".into(), "user-a", api_error(500));
        assert_eq!(failure.terminating_namespace(), None);
        let finalizer = Error::Finalizer(Box::new(F::RemoveFinalizer(api_error(500))));
        assert_eq!(finalizer.terminating_namespace(), None);
    }

    #[test]
    fn error_messages_name_verb_kind_and_object() {
        let error = Error::kube(Verb::PatchStatus, "User".into(), "alice", api_error(500));
        let message = error.to_string();
        assert!(
            message.starts_with("patch status of User \"alice\" failed"),
            "{message}"
        );
    }

    #[test]
    fn backoff_grows_per_user_with_jitter_and_resets() {
        let backoffs = Backoffs::new(Duration::from_secs(1), Duration::from_secs(8));
        let alice = ObjectRef::<User>::new("alice");
        let delays: Vec<Duration> = (0..6).map(|_| backoffs.next_delay(alice.clone())).collect();
        // Jitter adds up to the current delay: attempt n waits in [base_n, 2 * base_n).
        for (delay, base) in delays.iter().zip([1, 2, 4, 8, 8, 8]) {
            let base = Duration::from_secs(base);
            assert!(
                *delay >= base && *delay < base * 2,
                "{delay:?} for base {base:?}"
            );
        }
        // Another User starts from the beginning.
        let bob = backoffs.next_delay(ObjectRef::new("bob"));
        assert!(bob < Duration::from_secs(2), "{bob:?}");
        assert_eq!(backoffs.failing(), 2);
        backoffs.reset(&alice);
        assert_eq!(backoffs.failing(), 1);
        assert!(backoffs.next_delay(alice) < Duration::from_secs(2));
    }
}
