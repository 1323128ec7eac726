//! The User's status and Events: one [`Reason`] enum for every `Ready` condition reason, one
//! [`Change`] enum for every Event about a change Homestead made, the pure [`desired_status`]
//! (following the Kubernetes API conventions for conditions), and the status write that sends
//! it only when it changed, with an Event on every transition (docs/design.md rules 9, 11, 16).

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use homestead_api::{
    AppliedProfile, CONDITION_EXPIRING, CONDITION_READY, FIELD_MANAGER, Profile, User, UserStatus,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use strum::VariantArray;

use crate::cache::CachedNamespace;
use crate::context::Context;
use crate::error::{Error, Result, Verb};
use crate::recent::user_key;
use crate::validate::RefusalKind;

/// Why the `Ready` condition is what it is; also the reason of the Event on each transition.
/// UpperCamelCase, as the API conventions ask of condition reasons: the variant's name is the
/// reason as written (derived, never spelled twice).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::VariantArray,
)]
pub enum Reason {
    /// Namespace and access are as declared (`Ready=True`).
    Provisioned,
    /// `spec.suspended`: access revoked, Namespace kept (`Ready=True`: that is the declared state).
    Suspended,
    /// `spec.validUntil` passed with `onExpiry: Suspend`: access revoked, Namespace kept
    /// (`Ready=True`: that is the declared state).
    Expired,
    /// The Namespace exists and is not this User's.
    NamespaceConflict,
    /// `spec.quota` is not what the API server accepts.
    InvalidQuota,
    /// `spec.namespace` labels or annotations are not what the API server accepts.
    InvalidMetadata,
    /// The Namespace name is reserved.
    ReservedNamespace,
    /// The Namespace name is not a DNS-1123 label.
    InvalidNamespaceName,
    /// `spec.namespace.name` matches none of the platform's allowed patterns.
    NamespaceNotAllowed,
    /// The role is not in the allow-list.
    RoleNotAllowed,
    /// A subject starts with `system:`.
    ForbiddenSubject,
    /// A reserved label or annotation key was asked for.
    ReservedKey,
    /// The Profile the User names (or the operator's default) does not exist.
    ProfileNotFound,
    /// The User sets a field its Profile does not let Users override.
    OverrideNotAllowed,
    /// An older User has the same identity (`spec.identity.username`).
    DuplicateIdentity,
    /// The User's Namespace is being deleted by someone else; Homestead waits for it to go.
    NamespaceTerminating,
    /// The User is being offboarded and its Namespace deleted.
    Terminating,
    /// The API server refused a request (HTTP 403: RBAC, an admission policy or a webhook).
    Forbidden,
    /// Reading the cluster failed.
    ReadFailed,
    /// Creating an object failed.
    CreateFailed,
    /// Applying an object failed (for example, the API server found it invalid).
    ApplyFailed,
    /// Deleting an object failed.
    DeleteFailed,
}

impl Reason {
    /// The reason as written into the condition and the Event.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether this reason means `Ready=True`.
    pub fn is_ready(self) -> bool {
        matches!(self, Self::Provisioned | Self::Suspended | Self::Expired)
    }

    /// Whether the Event of a transition to this reason is a Warning: `Ready=False` for any
    /// reason but `Terminating`, an offboarding someone asked for (Normal, as the Kubernetes
    /// convention keeps Warnings for what may need attention).
    pub fn is_warning(self) -> bool {
        !self.is_ready() && self != Self::Terminating
    }

    /// Whether `reason` (a condition's reason as written) is a refusal of the User's spec,
    /// which HR or the person must fix, rather than a transient failure of the API server, a
    /// suspension or offboarding. Unknown reasons (an older or newer Homestead's) count as
    /// refusals.
    pub fn refusal(reason: &str) -> bool {
        reason.parse::<Self>().map_or(true, Self::is_refusal)
    }

    /// Whether this reason is a refusal of the User's spec: one [`Refusal`] reports.
    pub fn is_refusal(self) -> bool {
        RefusalKind::VARIANTS
            .iter()
            .any(|kind| <&str>::from(kind) == self.as_str())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change Homestead made to a User's objects, or a moment in its life it reports; the reason of
/// the Normal Event that reports it (the variant's name, derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum Change {
    /// The Namespace was created.
    NamespaceCreated,
    /// The Namespace's labels, annotations or owner reference were brought back in line.
    NamespaceUpdated,
    /// The RoleBinding was created.
    AccessGranted,
    /// The role changed: the RoleBinding was replaced (its roleRef is immutable).
    RoleChanged,
    /// The identity (username or groups) changed, or someone rewrote Homestead's RoleBinding's
    /// subjects: every RoleBinding in the Namespace was removed, then Homestead's recreated.
    IdentityChanged,
    /// The RoleBinding had drifted and was restored.
    RoleBindingRepaired,
    /// The RoleBinding was removed (suspension).
    AccessRevoked,
    /// The ResourceQuota was created or updated.
    QuotaApplied,
    /// The ResourceQuota was removed (`spec.quota` dropped).
    QuotaRemoved,
    /// The Profile's LimitRange was created or updated.
    LimitRangeApplied,
    /// The LimitRange was removed (the Profile no longer has one).
    LimitRangeRemoved,
    /// The Profile's network isolation (a NetworkPolicy) was created or updated.
    IsolationApplied,
    /// The NetworkPolicy was removed (the Profile's `networkIsolation` is `None`).
    IsolationRemoved,
    /// Offboarding under `Delete`: the Namespace is being deleted.
    NamespaceDeleting,
    /// Offboarding under `Retain` (or uninstall): access revoked, Namespace kept.
    NamespaceRetained,
    /// The User moved to another Profile (its `spec.profile`, its directory groups or the
    /// operator's default changed).
    ProfileChanged,
    /// The User's access ends soon (`spec.validUntil` is within `--expiry-warning`).
    Expiring,
    /// `spec.validUntil` passed: access was revoked (or the User deleted, per `onExpiry`).
    Expired,
}

impl Change {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Whether a change of a User, from `before` (its cached version; `None`: new) to `after`,
/// calls for a reconcile: a new User, or a change to its spec or to the metadata reconciles
/// read (finalizers, deletion timestamp, generation, uid; [`crate::trim::trim_user`] drops the
/// rest), or a status without its `Ready` condition (someone cleared it). Any other change to
/// the status alone does not: the status is Homestead's own, written by [`Context::write_status`]
/// (nearly always this is the echo of that write), and reconciles only compare it with the
/// status they compute; one written by someone else is put right at the next resync or change.
pub fn triggers_reconcile(before: Option<&User>, after: &User) -> bool {
    before.is_none_or(|old| old.metadata != after.metadata || old.spec != after.spec)
        || after.ready_condition().is_none()
}

/// The outcome of a reconcile, written into the `Ready` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The Namespace the User has, or would have.
    pub namespace: String,
    /// Why `Ready` is what it is; [`Reason::is_ready`] decides its status.
    pub reason: Reason,
    /// A human-readable message: what is so, and what to do if anything.
    pub message: String,
    /// What this reconcile changed on the way, each with a note saying exactly what; reported
    /// in Events, never in the status.
    pub changes: Vec<(Change, String)>,
    /// The Profile (and its generation) the User's objects now reflect, for `status.profile`.
    pub profile: Option<AppliedProfile>,
    /// The `Expiring` condition as (status, reason, message), for a User with `validUntil`.
    pub expiring: Option<(bool, &'static str, String)>,
}

impl Outcome {
    /// An outcome for `namespace` with `reason` and `message`, and no change made.
    pub fn new(namespace: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            reason,
            message: message.into(),
            changes: Vec::new(),
            profile: None,
            expiring: None,
        }
    }

    /// This outcome, with the `Expiring` condition `expiring` (see
    /// [`crate::expiry::Expiry::condition`]).
    #[must_use]
    pub fn with_expiring(mut self, expiring: Option<(bool, &'static str, String)>) -> Self {
        self.expiring = expiring;
        self
    }

    /// This outcome, reached with `profile` applied.
    #[must_use]
    pub fn with_profile(mut self, profile: Option<AppliedProfile>) -> Self {
        self.profile = profile;
        self
    }

    /// This outcome, with the `changes` made on the way to it.
    #[must_use]
    pub fn with_changes(mut self, changes: Vec<(Change, String)>) -> Self {
        self.changes = changes;
        self
    }
}

/// A fingerprint of "generation `generation` of a User converged (`Ready=True`) with the
/// Profile `applied`" (`None`: no Profile), what [`Context::write_status`] remembers in
/// [`Recent::convergence`](crate::recent::Recent::convergence).
pub fn convergence_print(generation: Option<i64>, applied: Option<&AppliedProfile>) -> u64 {
    let mut hasher = DefaultHasher::new();
    (generation, applied).hash(&mut hasher);
    hasher.finish()
}

/// A fingerprint of what a status write sets, `lastTransitionTime` left out (a reconcile
/// working from a stale cache computes a different one for the same transition).
pub fn fingerprint(status: &UserStatus) -> u64 {
    let mut hasher = DefaultHasher::new();
    status.namespace.hash(&mut hasher);
    status.observed_generation.hash(&mut hasher);
    status.profile.hash(&mut hasher);
    for c in &status.conditions {
        (&c.type_, &c.status, &c.reason, &c.message).hash(&mut hasher);
        c.observed_generation.hash(&mut hasher);
    }
    hasher.finish()
}

/// The longest Event note the API server accepts (`events.k8s.io/v1`), in bytes.
const MAX_NOTE_BYTES: usize = 1024;

/// A reference to the Profile `applied` names, for an Event's related object.
fn profile_reference(applied: &AppliedProfile) -> ObjectReference {
    ObjectReference {
        api_version: Some(Profile::api_version(&()).into_owned()),
        kind: Some(Profile::kind(&()).into_owned()),
        name: Some(applied.name.clone()),
        ..ObjectReference::default()
    }
}

/// The Events that report `outcome`, as (type, reason, note). A `transition` of `Ready` (its
/// status or reason changes; see [`is_transition`]) is one Event with the new reason, the
/// message and every change made on the way, so provisioning a User costs one Event, not one
/// per object; otherwise each change is a Normal Event of its own, and an unchanged outcome
/// none.
pub fn events_for(transition: bool, outcome: &Outcome) -> Vec<(EventType, &'static str, String)> {
    if !transition {
        return outcome
            .changes
            .iter()
            .map(|(change, note)| (EventType::Normal, change.as_str(), note.clone()))
            .collect();
    }
    let type_ = if outcome.reason.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let mut note = outcome.message.clone();
    if !outcome.changes.is_empty() {
        let done: Vec<&str> = outcome.changes.iter().map(|(_, n)| n.as_str()).collect();
        note = format!("{note} (done: {})", done.join("; "));
    }
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    vec![(type_, outcome.reason.as_str(), note)]
}

/// The status `outcome` describes for `user`: `status.namespace`, `observedGeneration` (the
/// User's `metadata.generation`), `status.profile` and the `Ready` condition. Its `lastTransitionTime` is the
/// previous one while the condition's status stays the same, else `now` (API conventions:
/// it moves only on a transition).
pub fn desired_status(user: &User, outcome: &Outcome, now: Time) -> UserStatus {
    let previous = user
        .status
        .as_ref()
        .map_or(&[][..], |s| s.conditions.as_slice());
    let generation = user.metadata.generation;
    let mut conditions = vec![set_condition(
        previous,
        CONDITION_READY,
        outcome.reason.is_ready(),
        outcome.reason.as_str(),
        outcome.message.clone(),
        generation,
        &now,
    )];
    if let Some((expiring, reason, message)) = &outcome.expiring {
        conditions.push(set_condition(
            previous,
            CONDITION_EXPIRING,
            *expiring,
            reason,
            message.clone(),
            generation,
            &now,
        ));
    }
    UserStatus {
        namespace: Some(outcome.namespace.clone()),
        observed_generation: user.metadata.generation,
        profile: outcome.profile.clone(),
        conditions,
    }
}

/// The condition `type_` with `status`, `reason` and `message`, observed at `generation`, as
/// it follows `previous` (the object's current conditions): its `lastTransitionTime` is the
/// previous one of that type while the status stays the same, else `now` (Kubernetes API
/// conventions, "Typical status properties"; cert-manager's `SetCertificateCondition` does the
/// same). The one place that rule lives, for the User's `Ready` and `Expiring` and the
/// Profile's `Ready`.
pub fn set_condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = match previous.iter().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// `user`'s condition of type `type_`, if any.
fn condition<'a>(user: &'a User, type_: &str) -> Option<&'a Condition> {
    user.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether `current` already holds what Homestead writes into a status (`namespace`,
/// `observedGeneration` and the `Ready` condition); conditions other writers added are theirs
/// and never a reason to write.
pub fn status_matches(current: &UserStatus, desired: &UserStatus) -> bool {
    let ready = |s: &UserStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY)
            .cloned()
    };
    let expiring = |s: &UserStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_EXPIRING)
            .cloned()
    };
    current.namespace == desired.namespace
        && current.observed_generation == desired.observed_generation
        && current.profile == desired.profile
        && ready(current) == ready(desired)
        && expiring(current) == expiring(desired)
}

/// Whether `outcome` changes the `Ready` condition's status or reason (an Event-worthy
/// transition) compared with `user`'s current status.
pub fn is_transition(user: &User, outcome: &Outcome) -> bool {
    user.ready_condition().is_none_or(|c| {
        c.status
            != if outcome.reason.is_ready() {
                "True"
            } else {
                "False"
            }
            || c.reason != outcome.reason.as_str()
    })
}

/// A message naming what still blocks a terminating Namespace, from its status conditions
/// (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, deletion failures), or a
/// generic one when the namespace controller has not reported yet.
pub fn terminating_message(ns: &CachedNamespace) -> String {
    let name = ns.name_any();
    let blockers: Vec<String> = ns
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or("")))
        .collect();
    if blockers.is_empty() {
        format!("waiting for namespace {name:?} to be deleted")
    } else {
        format!(
            "waiting for namespace {name:?} to be deleted; {}",
            blockers.join("; ")
        )
    }
}

impl Context {
    /// Writes `outcome` into `user`'s status by server-side apply on the status subresource
    /// (field manager `homestead`), only if it differs from the current status, then queues
    /// the Events [`events_for`] says: one on a transition of `Ready` (Normal when ready, else
    /// Warning) summing up the changes made, else one per change.
    ///
    /// Returns when to look again, if the write was left out because this replica wrote the
    /// same status moments ago and the User watch has not delivered it yet (less than
    /// [`crate::recent::RECENT`]): if the cache still does not show it then, someone else
    /// changed the status since, and it is written again.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::PatchStatus`] when the patch fails; no Event is queued then.
    pub(crate) async fn write_status(
        &self,
        user: &User,
        outcome: Outcome,
    ) -> Result<Option<Duration>> {
        let written = match self.patch_status(user, &outcome).await? {
            Write::Made => true,
            Write::Unneeded => false,
            Write::Unconfirmed(left) => return Ok(Some(left)),
        };
        if written && outcome.reason.is_ready() {
            let print = convergence_print(user.metadata.generation, outcome.profile.as_ref());
            self.recent.convergence.remember(user_key(user), print);
        }
        let transition = written && is_transition(user, &outcome);
        if transition {
            self.metrics.observe_ready(user, outcome.reason);
        }
        for (type_, reason, note) in events_for(transition, &outcome) {
            // A move between Profiles is related to the Profile moved to.
            let related = (reason == Change::ProfileChanged.as_str())
                .then(|| outcome.profile.as_ref().map(profile_reference))
                .flatten();
            self.publish_related(user, type_, reason, note, related);
        }
        if let Some((true, _, message)) = &outcome.expiring
            && written
            && condition(user, CONDITION_EXPIRING).is_none_or(|c| c.status != "True")
        {
            self.publish(
                user,
                EventType::Normal,
                Change::Expiring.as_str(),
                message.clone(),
            );
        }
        Ok(None)
    }

    /// The status write of [`Context::write_status`]: none when the cached status already
    /// matches, nor when this replica wrote the same status moments ago and the User watch has
    /// not delivered it yet ([`crate::recent::RecentWrites`]).
    async fn patch_status(&self, user: &User, outcome: &Outcome) -> Result<Write> {
        let desired = desired_status(user, outcome, Time(k8s_openapi::jiff::Timestamp::now()));
        let (name, key) = (user.name_any(), user_key(user));
        if user
            .status
            .as_ref()
            .is_some_and(|s| status_matches(s, &desired))
        {
            self.recent.statuses.forget(&key);
            self.recent.convergence.forget(&key);
            return Ok(Write::Unneeded);
        }
        let print = fingerprint(&desired);
        if let Some(left) = self.recent.statuses.unconfirmed(&key, print) {
            return Ok(Write::Unconfirmed(left));
        }
        let patch = serde_json::json!({
            "apiVersion": User::api_version(&()),
            "kind": User::kind(&()),
            "status": desired,
        });
        Api::<User>::all(self.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|source| Error::kube(Verb::PatchStatus, User::kind(&()), &name, source))?;
        self.recent.statuses.remember(key, print);
        Ok(Write::Made)
    }
}

/// What [`Context::patch_status`] did.
enum Write {
    /// Wrote the status.
    Made,
    /// Nothing: the cached status already matches.
    Unneeded,
    /// Nothing: this replica wrote the same status moments ago; look again after this long.
    Unconfirmed(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::user;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    #[test]
    fn only_a_change_beyond_homesteads_own_status_triggers_a_reconcile() {
        let mut before = user("alice", json!({}));
        assert!(triggers_reconcile(None, &before), "a new User");
        let outcome = Outcome::new("user-alice", Reason::Provisioned, "ready");
        before.status = Some(desired_status(&before, &outcome, Time(Timestamp::now())));
        let mut echo = before.clone();
        let later = Outcome::new("user-alice", Reason::Provisioned, "ready again");
        echo.status = Some(desired_status(&echo, &later, Time(Timestamp::now())));
        assert!(!triggers_reconcile(Some(&before), &echo), "a status alone");
        let mut respecified = before.clone();
        respecified.spec.suspended = true;
        assert!(triggers_reconcile(Some(&before), &respecified), "the spec");
        let mut finalized = before.clone();
        finalized.metadata.finalizers = Some(vec!["homestead.dev/cleanup".into()]);
        assert!(
            triggers_reconcile(Some(&before), &finalized),
            "the metadata"
        );
        let mut cleared = before.clone();
        cleared.status.as_mut().unwrap().conditions.clear();
        assert!(triggers_reconcile(Some(&before), &cleared), "Ready cleared");
    }

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn outcome(reason: Reason) -> Outcome {
        Outcome {
            namespace: "user-alice".into(),
            reason,
            message: format!("{reason}"),
            changes: Vec::new(),
            profile: None,
            expiring: None,
        }
    }

    #[test]
    fn a_status_written_moments_ago_is_not_written_again() {
        let u = user("alice", json!({}));
        let recent = crate::recent::RecentWrites::default();
        let provisioned = fingerprint(&desired_status(&u, &outcome(Reason::Provisioned), at(1)));
        // The same status computed later (another lastTransitionTime) has the same fingerprint.
        assert_eq!(
            provisioned,
            fingerprint(&desired_status(&u, &outcome(Reason::Provisioned), at(2)))
        );
        let suspended = fingerprint(&desired_status(&u, &outcome(Reason::Suspended), at(1)));
        assert_ne!(provisioned, suspended);

        assert!(recent.unconfirmed("alice", provisioned).is_none());
        recent.remember("alice".into(), provisioned);
        assert!(recent.unconfirmed("alice", provisioned).is_some());
        assert!(
            recent.unconfirmed("alice", suspended).is_none(),
            "a different status is written"
        );
        assert!(recent.unconfirmed("bob", provisioned).is_none());
        recent.forget("alice");
        assert!(
            recent.unconfirmed("alice", provisioned).is_none(),
            "the cache shows it: compare again"
        );
    }

    #[test]
    fn one_event_per_transition_sums_up_the_changes() {
        let changes = vec![
            (
                Change::NamespaceCreated,
                "created namespace \"user-alice\"".to_owned(),
            ),
            (
                Change::AccessGranted,
                "bound ClusterRole \"edit\"".to_owned(),
            ),
        ];
        let done = outcome(Reason::Provisioned).with_changes(changes);
        let events = events_for(true, &done);
        assert_eq!(events.len(), 1);
        let (type_, reason, note) = &events[0];
        assert_eq!((*type_, *reason), (EventType::Normal, "Provisioned"));
        assert!(note.contains("created namespace") && note.contains("bound ClusterRole"));
        // Without a transition, each change is its own Event; nothing changed, no Event.
        let reasons: Vec<_> = events_for(false, &done).iter().map(|e| e.1).collect();
        assert_eq!(reasons, ["NamespaceCreated", "AccessGranted"]);
        assert!(events_for(false, &outcome(Reason::Provisioned)).is_empty());
        // A long note is cut to what the API server accepts.
        let long = outcome(Reason::Provisioned)
            .with_changes(vec![(Change::QuotaApplied, "x".repeat(5000))]);
        assert!(events_for(true, &long)[0].2.len() <= MAX_NOTE_BYTES);
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_does() {
        let mut u = user("alice", json!({}));
        u.metadata.generation = Some(3);
        let first = desired_status(&u, &outcome(Reason::Provisioned), at(100));
        let ready = &first.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Provisioned")
        );
        assert_eq!(ready.last_transition_time, at(100));
        assert_eq!(first.observed_generation, Some(3));
        assert_eq!(ready.observed_generation, Some(3));

        // Same status, even with another reason: the time stays.
        u.status = Some(first.clone());
        let suspended = desired_status(&u, &outcome(Reason::Suspended), at(200));
        assert_eq!(suspended.conditions[0].last_transition_time, at(100));
        // Recomputing the same outcome later gives the same status: nothing to write.
        assert_eq!(
            desired_status(&u, &outcome(Reason::Provisioned), at(300)),
            first
        );

        // True -> False moves it.
        let refused = desired_status(&u, &outcome(Reason::RoleNotAllowed), at(400));
        assert_eq!(refused.conditions[0].status, "False");
        assert_eq!(refused.conditions[0].last_transition_time, at(400));
    }

    #[test]
    fn conditions_of_other_writers_are_no_reason_to_write() {
        let u = user("alice", json!({}));
        let desired = desired_status(&u, &outcome(Reason::Provisioned), at(1));
        let mut current = desired.clone();
        current.conditions.push(Condition {
            type_: "Audited".into(),
            status: "True".into(),
            reason: "ByOthers".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(5),
        });
        assert!(status_matches(&current, &desired));
        current.conditions[0].message = "changed".into();
        assert!(!status_matches(&current, &desired));
    }

    #[test]
    fn transitions_are_status_or_reason_changes() {
        let mut u = user("alice", json!({}));
        assert!(
            is_transition(&u, &outcome(Reason::Provisioned)),
            "no condition yet"
        );
        u.status = Some(desired_status(&u, &outcome(Reason::Provisioned), at(1)));
        assert!(!is_transition(&u, &outcome(Reason::Provisioned)));
        assert!(is_transition(&u, &outcome(Reason::Suspended)));
        assert!(is_transition(&u, &outcome(Reason::NamespaceConflict)));
    }

    #[test]
    fn only_provisioned_and_suspended_are_ready() {
        let ready: Vec<Reason> = [
            Reason::Provisioned,
            Reason::Suspended,
            Reason::NamespaceConflict,
            Reason::InvalidQuota,
            Reason::InvalidMetadata,
            Reason::ReservedNamespace,
            Reason::InvalidNamespaceName,
            Reason::NamespaceNotAllowed,
            Reason::RoleNotAllowed,
            Reason::ForbiddenSubject,
            Reason::ReservedKey,
            Reason::NamespaceTerminating,
            Reason::Terminating,
            Reason::Forbidden,
            Reason::ReadFailed,
            Reason::CreateFailed,
            Reason::ApplyFailed,
            Reason::DeleteFailed,
        ]
        .into_iter()
        .filter(|r| r.is_ready())
        .collect();
        assert_eq!(ready, [Reason::Provisioned, Reason::Suspended]);
    }

    #[test]
    fn terminating_message_names_the_blockers() {
        let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
            "metadata": { "name": "user-alice", "deletionTimestamp": "2026-01-01T00:00:00Z" },
            "status": { "conditions": [
                { "type": "NamespaceDeletionDiscoveryFailure", "status": "False" },
                { "type": "NamespaceFinalizersRemaining", "status": "True", "message": "Some content in the namespace has finalizers remaining: example.com/block in 1 resource instances" },
            ] },
        }))
        .unwrap();
        let message = terminating_message(&ns.into());
        assert!(message.contains("example.com/block"), "{message}");
        assert!(!message.contains("DiscoveryFailure"), "{message}");
    }
}
