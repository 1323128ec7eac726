//! Why a live User has no access ([`Revocation`]): expiry wins over everything, then a
//! suspension by HR, then a deactivation by the identity provider. Pure.

use homestead_api::{Reason, Suspension, User};

/// Why a live User has no access: expiry first (it wins over everything), then a suspension by
/// HR, then a deactivation by the identity provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// `validUntil` has passed.
    Expired,
    /// Suspended, by HR or by the identity provider.
    Suspended(Suspension),
}

/// The [`Revocation`] in force for `user`, if any (`expired`: `validUntil` has passed).
pub fn revocation(user: &User, expired: bool) -> Option<Revocation> {
    if expired {
        Some(Revocation::Expired)
    } else {
        user.spec.suspension().map(Revocation::Suspended)
    }
}

impl Revocation {
    /// The `Ready` reason of a User without access for this reason.
    pub fn reason(self) -> Reason {
        match self {
            Self::Expired => Reason::Expired,
            Self::Suspended(_) => Reason::Suspended,
        }
    }

    /// Why access was revoked, for the Event that names the removed RoleBindings.
    pub fn why(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Suspended(Suspension::Spec) => "suspended",
            Self::Suspended(Suspension::Directory) => "deactivated by the identity provider",
        }
    }

    /// The `Ready` message for `user` with Namespace `namespace`.
    pub fn message(self, user: &User, namespace: &str) -> String {
        let kept = format!("access revoked; namespace {namespace:?} and its contents are kept");
        match self {
            Self::Expired => {
                let until = user.spec.valid_until.as_ref().map(|t| t.0.to_string());
                format!("expired at {}: {kept}", until.unwrap_or_default())
            }
            Self::Suspended(Suspension::Spec) => format!("suspended: {kept}"),
            Self::Suspended(Suspension::Directory) => {
                format!("deactivated by the identity provider (SCIM active=false): {kept}")
            }
        }
    }
}
