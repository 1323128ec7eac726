//! The vocabulary of Homestead's statuses and Events, beside the types it describes (as
//! cert-manager keeps its condition reasons next to its API types), so a client (a dashboard, a
//! script, the SCIM service) can match on a reason instead of a string it copied.
//!
//! - [`ConditionType`]: the condition types Homestead writes.
//! - [`Reason`]: why a User's `Ready` condition is what it is (also the reason of the Event on
//!   each transition); a refusal is [`Reason::Refused`] with its [`RefusalKind`], a failed
//!   request [`Reason::Failed`] with its [`Verb`].
//! - [`ExpiringReason`]: the User's `Expiring` condition; [`ProfileReason`]: a Profile's `Ready`.
//! - [`Change`]: the Normal Events that report a change Homestead made.
//! - [`Verb`]: a request Homestead makes, with the one table of its names (in messages, in the
//!   `Ready` reason of its failure, in the error metric's label).
//!
//! Every reason is UpperCamelCase as the Kubernetes API conventions ask ("Typical status
//! properties"); each enum derives its strings from its variants' names, so none is spelled
//! twice. `as_str` gives the string written; `FromStr` reads one back.

use std::fmt;
use std::str::FromStr;

use strum::VariantArray;

/// The longest Event note the API server accepts (`events.k8s.io/v1` `note`), in bytes.
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// The condition types Homestead writes (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum ConditionType {
    /// A User's or a Profile's `Ready`: whether what it declares is in place.
    Ready,
    /// A User's `Expiring`: whether its `validUntil` is within the warning window.
    Expiring,
}

impl ConditionType {
    /// The condition type as written (`Ready`, `Expiring`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The kinds of refusal of a User's spec: the `Ready=False` reasons that ask HR, the person or
/// the platform for a fix (the variant's name as written).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
pub enum RefusalKind {
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
    /// The Namespace exists and is not this User's.
    NamespaceConflict,
    /// `spec.quota` is not what the API server accepts.
    InvalidQuota,
    /// `spec.namespace` labels or annotations are not what the API server accepts.
    InvalidMetadata,
    /// The Profile the User names (or the operator's default) does not exist.
    ProfileNotFound,
    /// An older User has the same identity (`spec.identity.username`).
    DuplicateIdentity,
    /// The User sets a field its Profile does not let Users override.
    OverrideNotAllowed,
}

impl RefusalKind {
    /// The reason as written.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A request Homestead makes to the API server. [`Verb::names`] is the one table of what a
/// verb is called where: in an error message, in the `Ready` reason of its failure, and in the
/// `reason` label of `homestead_reconcile_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::VariantArray)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// DELETE of every object of a kind in a namespace (`deletecollection`).
    DeleteCollection,
    /// POST that fails if the object exists.
    Create,
    /// Server-side apply (PATCH `application/apply-patch+yaml`) with field manager `homestead`.
    Apply,
    /// DELETE (an object already gone counts as deleted).
    Delete,
    /// Server-side apply of a status subresource.
    PatchStatus,
}

/// What a [`Verb`] is called where (see [`Verb::names`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbNames {
    /// As it reads in an error message: "get", "patch status of", ...
    pub message: &'static str,
    /// The `Ready=False` reason when it fails (several verbs share one: a person fixes the
    /// same thing whichever of them failed).
    pub failure: Failure,
    /// The `reason` label of `homestead_reconcile_errors_total` (snake_case).
    pub metric_label: &'static str,
}

impl Verb {
    /// The one table of this verb's names.
    pub const fn names(self) -> VerbNames {
        let (message, failure, metric_label) = match self {
            Self::Get => ("get", Failure::ReadFailed, "get_failed"),
            Self::DeleteCollection => (
                "delete every",
                Failure::DeleteFailed,
                "delete_collection_failed",
            ),
            Self::Create => ("create", Failure::CreateFailed, "create_failed"),
            Self::Apply => ("apply", Failure::ApplyFailed, "apply_failed"),
            Self::Delete => ("delete", Failure::DeleteFailed, "delete_failed"),
            Self::PatchStatus => ("patch status of", Failure::ApplyFailed, "status_failed"),
        };
        VerbNames {
            message,
            failure,
            metric_label,
        }
    }

    /// The verb as it reads in an error message ("get", "patch status of", ...).
    pub fn as_str(self) -> &'static str {
        self.names().message
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `Ready=False` reasons of a request that failed (the variant's name as written).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
pub enum Failure {
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

/// Why a User's `Ready` condition is what it is; also the reason of the Event on each
/// transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Namespace and access are as declared (`Ready=True`).
    Provisioned,
    /// `spec.suspended` (or SCIM `active=false`): access revoked, Namespace kept (`Ready=True`:
    /// that is the declared state).
    Suspended,
    /// `spec.validUntil` passed with `onExpiry: Suspend`: access revoked, Namespace kept
    /// (`Ready=True`: that is the declared state).
    Expired,
    /// The spec is refused; its kind says why (`Ready=False`).
    Refused(RefusalKind),
    /// The User's Namespace is being deleted by someone else; Homestead waits for it to go.
    NamespaceTerminating,
    /// The User is being offboarded and its Namespace deleted.
    Terminating,
    /// A request failed; retried with backoff (`Ready=False`).
    Failed(Failure),
}

/// The reasons that are neither a refusal nor a failure, as written.
const OWN: [(&str, Reason); 5] = [
    ("Provisioned", Reason::Provisioned),
    ("Suspended", Reason::Suspended),
    ("Expired", Reason::Expired),
    ("NamespaceTerminating", Reason::NamespaceTerminating),
    ("Terminating", Reason::Terminating),
];

impl Reason {
    /// Every reason, each once.
    pub fn all() -> impl Iterator<Item = Reason> {
        OWN.iter()
            .map(|(_, reason)| *reason)
            .chain(RefusalKind::VARIANTS.iter().copied().map(Self::Refused))
            .chain(Failure::VARIANTS.iter().copied().map(Self::Failed))
    }

    /// The reason as written into the condition and the Event.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused(kind) => kind.into(),
            Self::Failed(failure) => failure.into(),
            own => OWN
                .iter()
                .find(|(_, reason)| *reason == own)
                .map(|(name, _)| *name)
                .expect("every other reason is in OWN"),
        }
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

    /// Whether this reason is a refusal of the User's spec, which HR or the person must fix,
    /// rather than a transient failure, a suspension or offboarding.
    pub fn is_refusal(self) -> bool {
        matches!(self, Self::Refused(_))
    }

    /// Whether `reason` (a condition's reason as written) is a refusal; unknown reasons (an
    /// older or newer Homestead's) count as refusals.
    pub fn refusal(reason: &str) -> bool {
        reason.parse::<Self>().map_or(true, Self::is_refusal)
    }
}

impl FromStr for Reason {
    type Err = strum::ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((_, reason)) = OWN.iter().find(|(name, _)| *name == s) {
            return Ok(*reason);
        }
        s.parse()
            .map(Self::Refused)
            .or_else(|_| s.parse().map(Self::Failed))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<RefusalKind> for Reason {
    fn from(kind: RefusalKind) -> Self {
        Self::Refused(kind)
    }
}

/// The reasons of a User's `Expiring` condition (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum ExpiringReason {
    /// `validUntil` is further ahead than `--expiry-warning` (`Expiring=False`).
    NotSoon,
    /// Within the warning window (`Expiring=True`).
    ExpiresSoon,
    /// `validUntil` has passed (`Expiring=False`: nothing is about to end any more).
    Expired,
}

impl ExpiringReason {
    /// The reason as written.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The reasons of a Profile's `Ready` condition (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum ProfileReason {
    /// Every User of the Profile reflects its current generation (`Ready=True`).
    RolledOut,
    /// Some Users still reflect an earlier generation, or none yet (`Ready=False`).
    RollingOut,
}

impl ProfileReason {
    /// The reason as written.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The reasons of a Share's `Ready` condition (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum ShareReason {
    /// The grantees have the access (`Ready=True`).
    Active,
    /// `spec.expiresAt` has passed: the access is gone (`Ready=False`).
    Expired,
    /// The Share exceeds a limit in force (`Ready=False`; the message names the rule).
    Refused,
    /// The home is suspended, expired, retained or offboarding: no access while it is
    /// (`Ready=False`).
    Suspended,
    /// The home has changed hands (adopted or handed over) since the Share was made: it ends
    /// with its owner's hold on the home (`Ready=False`).
    HandedOver,
}

impl ShareReason {
    /// The reason as written.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A change Homestead made to a User's objects, or a moment in its life it reports; the reason
/// of the Normal Event that reports it (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum Change {
    /// The Namespace was created.
    NamespaceCreated,
    /// An existing Namespace the platform labelled `homestead.dev/adopt-for=<User>` became the
    /// User's (nothing in it deleted; its RoleBindings named, kept or revoked per the operator).
    NamespaceAdopted,
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
    /// RoleBindings were removed (suspension, expiry, offboarding, a retained Namespace).
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
    /// Offboarding under `Handover`: access revoked, a home given to the successor as a
    /// personal workspace of theirs (on the leaver's User).
    NamespaceHandedOver,
    /// A leaver's home became this User's personal workspace (on the successor's User).
    HomeReceived,
    /// The User moved to another Profile (its `spec.profile`, its directory groups or the
    /// operator's default changed).
    ProfileChanged,
    /// The User's access ends soon (`spec.validUntil` is within `--expiry-warning`).
    Expiring,
    /// `spec.validUntil` passed: access was revoked (or the User deleted, per `onExpiry`).
    Expired,
}

impl Change {
    /// The Event reason as written.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_as_itself_and_is_written_once() {
        let mut written: Vec<&str> = Reason::all().map(Reason::as_str).collect();
        for reason in Reason::all() {
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(reason));
        }
        let count = written.len();
        written.sort_unstable();
        written.dedup();
        assert_eq!(
            written.len(),
            count,
            "a reason is written twice: {written:?}"
        );
        assert_eq!(count, 22);
    }

    #[test]
    fn refusals_and_only_they_ask_for_a_fix() {
        for kind in RefusalKind::VARIANTS {
            assert!(Reason::Refused(*kind).is_refusal());
            assert!(Reason::refusal(kind.as_str()));
        }
        for reason in Reason::all().filter(|r| !matches!(r, Reason::Refused(_))) {
            assert!(!reason.is_refusal(), "{reason}");
            assert!(!Reason::refusal(reason.as_str()), "{reason}");
        }
        assert!(
            Reason::refusal("SomethingNew"),
            "an unknown reason is a refusal"
        );
    }

    #[test]
    fn one_table_names_each_verb_in_message_reason_and_metric() {
        let names: Vec<_> = Verb::VARIANTS.iter().map(|v| v.names()).collect();
        assert_eq!(Verb::Get.names().failure, Failure::ReadFailed);
        assert_eq!(Verb::Get.names().metric_label, "get_failed");
        assert_eq!(Verb::Get.to_string(), "get");
        let mut labels: Vec<_> = names.iter().map(|n| n.metric_label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Verb::VARIANTS.len(), "one label per verb");
        assert!(names.iter().all(|n| n.failure != Failure::Forbidden));
    }
}
