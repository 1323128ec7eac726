//! Shares, decided (docs/sharing.md): whether a [`Share`] grants anything now, to whom, and
//! what its status says. Expiry wins; then a home that is not open (its owner suspended,
//! expired, offboarding, not provisioned yet); then the limits in force ([`Limits`], from the
//! owner's Profile or the operator's flags); then the grantees, each resolved from the caches
//! to an identity or to nothing. Pure: the caller passes the caches' answers and the time.
//!
//! A Share is made by one owner for particular Users (docs/sharing.md, "A grantee is a User"):
//! its status records the uid of the home's owner and of each User grantee when it first
//! resolves them ([`Recorded`]). A home that changed hands since (adoption, handover) ends the
//! Share (`HandedOver`); a grantee name that now belongs to another User refuses it
//! (`GranteeReplaced`). A Share to the home's own owner is refused (`SelfShare`), and the
//! owner's identity is never a Share's subject, so no Share outlasts a downgrade of the owner;
//! a User refused as `DuplicateIdentity` has no access through any Share (rule 26).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use homestead_api::{
    DirectoryGroup, GranteeStatus, LABEL_MANAGED_BY, LABEL_SHARE, MANAGED_BY, SHARE_BINDING_PREFIX,
    Share, ShareReason, ShareSpec, ShareStatus, SharingLimits, User,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::plan::config::{SharingDefaults, parse_duration};
use crate::plan::facts::print;
use homestead_model::roles::role_within;

/// What a decision reads of a Share: its metadata (name, namespace, uid, generation, creation
/// time), its spec, and what its status recorded (`observedGeneration`, `renewedAt`).
#[derive(Clone, Copy, Debug)]
pub struct ShareRef<'a> {
    /// The Share's metadata.
    pub meta: &'a ObjectMeta,
    /// Its spec.
    pub spec: &'a ShareSpec,
    /// Its status's `observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Its status's `renewedAt`.
    pub renewed_at: Option<&'a Time>,
}

impl<'a> ShareRef<'a> {
    /// The parts of a whole `share`.
    pub fn of(share: &'a Share) -> Self {
        let status = share.status.as_ref();
        Self {
            meta: &share.metadata,
            spec: &share.spec,
            observed_generation: status.and_then(|s| s.observed_generation),
            renewed_at: status.and_then(|s| s.renewed_at.as_ref()),
        }
    }

    fn name(&self) -> &'a str {
        self.meta.name.as_deref().unwrap_or_default()
    }
}

/// What a Share's status recorded of whom it was made by and for: the uid of its home's owner
/// and of each User grantee (by name), each when the operator first resolved it. Empty for a
/// Share never resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// `status.ownerUid`.
    pub owner_uid: Option<String>,
    /// `status.grantees[].uid` of the User grantees, by `user`.
    pub grantees: BTreeMap<String, String>,
}

impl Recorded {
    /// What `status` recorded.
    pub fn of(status: Option<&ShareStatus>) -> Self {
        let Some(status) = status else {
            return Self::default();
        };
        Self {
            owner_uid: status.owner_uid.clone(),
            grantees: status
                .grantees
                .iter()
                .filter_map(|g| Some((g.user.clone()?, g.uid.clone()?)))
                .collect(),
        }
    }
}

/// A Kubernetes uid (a UUID, 36 characters) in 16 bytes, as the operator's Share cache keeps
/// it; `None` for a uid that is not a UUID.
pub fn compact_uid(uid: &str) -> Option<u128> {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    (uid.len() == 36 && hex.len() == 32)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
}

/// The uid [`compact_uid`] made `compact` of, in the API server's form (lower-case
/// `8-4-4-4-12` hexadecimal).
pub fn uid_string(compact: u128) -> String {
    let hex = format!("{compact:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A fingerprint of a whole Share status (its JSON), to tell whether a status differs from the
/// one the cache holds without keeping that status.
pub fn status_print(status: &ShareStatus) -> u64 {
    print(&serde_json::to_vec(status).unwrap_or_default())
}

/// The longest Share name its RoleBinding can carry: the name is the value of the label
/// `homestead.dev/share`, at most 63 characters (admission refuses longer names; this refuses
/// those made before it did).
pub const MAX_SHARE_NAME_LEN: usize = 63;

/// The name of the RoleBinding of the Share `share` (by `metadata.name`).
pub fn binding_name(share: &str) -> String {
    format!("{SHARE_BINDING_PREFIX}{share}")
}

/// The Share a RoleBinding named `binding` belongs to, by name, if its name says it is one's.
pub fn share_of_binding(binding: &str) -> Option<&str> {
    binding.strip_prefix(SHARE_BINDING_PREFIX)
}

/// The sharing limits in force for one home: the owner's Profile's `spec.sharing`, each field
/// it leaves unset taken from the operator's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Whether the owner may share at all.
    pub enabled: bool,
    /// The highest ClusterRole a Share may grant.
    pub max_role: String,
    /// The longest a Share may last from its creation or renewal.
    pub max_duration: Duration,
    /// Whether DirectoryGroups may be grantees.
    pub groups: bool,
    /// Where the limits come from, for messages: `Profile "x"` or `the operator's flags`.
    pub source: String,
}

impl Limits {
    /// The limits of a home whose owner uses `profile` (its name and `spec.sharing`), else the
    /// operator's `defaults`. A `maxDuration` that does not parse (the schema admits none such)
    /// falls back to the operator's.
    pub fn of(profile: Option<(&str, Option<&SharingLimits>)>, defaults: &SharingDefaults) -> Self {
        let Some((name, Some(sharing))) = profile else {
            return Self {
                enabled: defaults.enabled,
                max_role: defaults.max_role.clone(),
                max_duration: defaults.max_duration,
                groups: defaults.groups,
                source: "the operator's flags".to_owned(),
            };
        };
        Self {
            enabled: sharing.enabled,
            max_role: sharing
                .max_role
                .clone()
                .unwrap_or_else(|| defaults.max_role.clone()),
            max_duration: sharing
                .max_duration
                .as_deref()
                .and_then(|d| parse_duration(d).ok())
                .unwrap_or(defaults.max_duration),
            groups: sharing.groups,
            source: format!("Profile {name:?}"),
        }
    }
}

/// The role a Share never grants, whatever the limits: `admin` writes RoleBindings, and a
/// grantee who could bind would keep what they bound after the Share ends (docs/sharing.md,
/// "What a Share gave ends with it"). The Share schema refuses it too.
pub const SHARE_ROLE_NEVER: &str = "admin";

/// The rule a refused Share breaks, named in its `Ready` message and Warning Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub enum ShareRule {
    /// The namespace is not (or no longer) a person's home.
    NotAHome,
    /// The home's owner may not share.
    SharingDisabled,
    /// The role is not in the operator's allow-list.
    RoleNotAllowed,
    /// The role grants more than the limit's `maxRole`.
    RoleAboveLimit,
    /// `expiresAt` is further than `maxDuration` from the creation or renewal.
    TooLong,
    /// A grantee is a group where groups may not be.
    GroupsNotAllowed,
    /// The Share's name is too long for its RoleBinding's.
    NameTooLong,
    /// The role lets a grantee create RoleBindings (`admin`): access given through the Share
    /// could outlive it. A Share grants at most `edit`.
    RoleGrantsBinding,
    /// A grantee is the home's own owner (by name or identity), who has the home already.
    SelfShare,
    /// A User grantee's name now belongs to another User than the one the Share was made for.
    GranteeReplaced,
}

/// Whether the home a Share is in may be shared now.
#[derive(Clone, Debug)]
pub enum Home {
    /// The namespace is no live person's home (not Homestead's, retained, or its uid
    /// annotation names another User).
    NotAHome,
    /// A home, closed: its owner has no access (the reason, for messages), so nobody gets any;
    /// the owner, when the home has one (recorded all the same, so a Share made while its home
    /// is closed still ends if the home changes hands).
    Closed(String, Option<Owner>),
    /// A home whose owner has access; the limits in force there, and the owner.
    Open(Limits, Owner),
}

/// The owner of an open home, as a decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// `metadata.name` of the owner's User.
    pub name: String,
    /// Its `metadata.uid`.
    pub uid: Option<String>,
    /// Its `spec.identity.username`.
    pub username: String,
}

impl Owner {
    /// A workspace as the owner of its home: named `workspace:<name>` (never a User's name),
    /// with its uid and no identity of its own, so no grantee is taken for it.
    pub fn workspace(workspace: &homestead_api::Workspace) -> Self {
        Self {
            name: format!(
                "workspace:{}",
                workspace.metadata.name.as_deref().unwrap_or_default()
            ),
            uid: workspace.metadata.uid.clone(),
            username: String::new(),
        }
    }

    /// The owner `user`.
    pub fn of(user: &User) -> Self {
        Self {
            name: user.metadata.name.clone().unwrap_or_default(),
            uid: user.metadata.uid.clone(),
            username: user.spec.identity.username.clone(),
        }
    }

    /// Whether `user` is this owner, or another User naming the owner's identity.
    fn is(&self, user: &User) -> bool {
        self.is_named(
            user.metadata.name.as_deref().unwrap_or_default(),
            &user.spec.identity.username,
        )
    }

    /// Whether the User `name` with the identity `username` is this owner, or another User
    /// naming the owner's identity.
    fn is_named(&self, name: &str, username: &str) -> bool {
        name == self.name
            || !self.username.is_empty() && username.eq_ignore_ascii_case(&self.username)
    }
}

/// What a Share's decision reads of one member of a group grantee, in place of the whole User:
/// a reconcile of a Share naming a group of 1,000 held 1,000 decoded Users (about 1 MB) while
/// it waited on its writes (docs/performance.md, "A restart's peak").
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The User's name.
    name: String,
    /// Its identity's username: the RoleBinding's subject.
    username: String,
    /// Whether it is being offboarded (`metadata.deletionTimestamp` set).
    offboarding: bool,
    /// `spec.validUntil`: no access from then on.
    valid_until: Option<Timestamp>,
    /// Whether it is suspended.
    suspended: bool,
}

impl Member {
    /// The member `user`.
    pub fn of(user: &User) -> Self {
        Self {
            name: user.metadata.name.clone().unwrap_or_default(),
            username: user.spec.identity.username.clone(),
            offboarding: user.metadata.deletion_timestamp.is_some(),
            valid_until: user.spec.valid_until.as_ref().map(|t| t.0),
            suspended: user.spec.suspension().is_some(),
        }
    }

    /// [`inactive`] of the User it was made of.
    fn inactive(&self, now: Timestamp) -> Option<&'static str> {
        why_inactive(
            self.offboarding,
            self.valid_until,
            self.suspended,
            &self.username,
            now,
        )
    }
}

/// What the caches know of one grantee, looked up by the caller.
pub enum Found<'a> {
    /// A User grantee: the User, if it exists (and holds its identity).
    User(&'a str, Option<&'a User>),
    /// A User grantee that exists but is refused as `DuplicateIdentity`: another User holds its
    /// identity, so it has no access through any Share.
    Duplicate(&'a str, &'a User),
    /// A group grantee: the group, if it exists, and those of its members that count
    /// ([`DirectoryGroup::counts_member`]), exist and hold their identity.
    Group(&'a str, Option<&'a DirectoryGroup>, &'a [Member]),
}

/// Why `user` has no access as a grantee at `now`, or `None` when it has.
pub fn inactive(user: &User, now: Timestamp) -> Option<&'static str> {
    why_inactive(
        user.metadata.deletion_timestamp.is_some(),
        user.spec.valid_until.as_ref().map(|t| t.0),
        user.spec.suspension().is_some(),
        &user.spec.identity.username,
        now,
    )
}

/// [`inactive`] from what it reads of a User: whether it is offboarding, its `validUntil`,
/// whether it is suspended, and its identity's `username`.
fn why_inactive(
    offboarding: bool,
    valid_until: Option<Timestamp>,
    suspended: bool,
    username: &str,
    now: Timestamp,
) -> Option<&'static str> {
    if offboarding {
        Some("offboarding")
    } else if valid_until.is_some_and(|t| t <= now) {
        Some("expired")
    } else if suspended {
        Some("suspended")
    } else if username.starts_with("system:") {
        // Rule 5: subjects named system:* are never bound; admission refuses such Users too.
        Some("a system: identity")
    } else {
        None
    }
}

/// What a Share should be now.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The `Ready` reason (`Active` is `Ready=True`).
    pub reason: ShareReason,
    /// The rule broken, for `Refused`.
    pub rule: Option<ShareRule>,
    /// The `Ready` message.
    pub message: String,
    /// The identities (user names) the RoleBinding binds; empty unless `Active`.
    pub subjects: Vec<String>,
    /// The grantees as resolved, for `status.grantees`.
    pub grantees: Vec<GranteeStatus>,
    /// The grantees in one line, for `status.to`.
    pub to: String,
    /// When the spec in force was made (`status.renewedAt`).
    pub renewed_at: Timestamp,
    /// When to look again: at `expiresAt` while it is ahead.
    pub recheck: Option<Duration>,
    /// The uid of the owner the Share was made under, for `status.ownerUid`.
    pub owner_uid: Option<String>,
}

impl Decision {
    /// Whether the Share grants access.
    pub fn grants(&self) -> bool {
        self.reason == ShareReason::Active
    }
}

/// When the spec of `share` in force was made, as the operator sees it at `now`: the recorded
/// `status.renewedAt` while the status describes this generation; the creation for a Share
/// never updated; else now (the operator sees an update within moments of it).
pub fn renewed_at(share: ShareRef<'_>, now: Timestamp) -> Timestamp {
    let described = share.observed_generation == share.meta.generation;
    match share.renewed_at {
        Some(at) if described => at.0,
        _ if share.meta.generation == Some(1) => {
            share.meta.creation_timestamp.as_ref().map_or(now, |t| t.0)
        }
        _ => now,
    }
}

/// The limits and owner of `home` when it is open to the Share that `recorded` describes; else
/// the reason, rule and message of a decision that grants nothing: not a home (refused), a
/// closed home (suspended), or a home that changed hands since the Share was made.
fn open_to<'h>(
    home: &'h Home,
    recorded: &Recorded,
) -> Result<(&'h Limits, &'h Owner), (ShareReason, Option<ShareRule>, String)> {
    let (limits, owner) = match home {
        Home::NotAHome => {
            let message = "this namespace is not a person's home (not Homestead's, or retained): \
                           only a home is shared"
                .to_owned();
            let rule = ShareRule::NotAHome;
            let name: &str = rule.into();
            let message = format!("refused ({name}): {message}");
            return Err((ShareReason::Refused, Some(rule), message));
        }
        Home::Closed(why, _) => {
            let message = format!("no access while the home is {why}");
            return Err((ShareReason::Suspended, None, message));
        }
        Home::Open(limits, owner) => (limits, owner),
    };
    if let (Some(made_under), Some(now_owned_by)) = (&recorded.owner_uid, &owner.uid)
        && made_under != now_owned_by
    {
        let message = format!(
            "the home changed hands since this Share was made (then owned by the User with \
             uid {made_under}, now by {} with uid {now_owned_by}): a Share ends with its \
             owner's hold on the home; the new owner shares anew",
            owner.name
        );
        return Err((ShareReason::HandedOver, None, message));
    }
    Ok((limits, owner))
}

/// Decides `share` at `now` in `home`, with the operator's `allowed_roles`, its grantees as
/// `found` (in `spec.to` order) and what its status `recorded`. See the module docs for the
/// order of the rules.
pub fn decide(
    share: ShareRef<'_>,
    home: &Home,
    allowed_roles: &BTreeSet<String>,
    found: &[Found<'_>],
    recorded: &Recorded,
    now: Timestamp,
) -> Decision {
    let renewed = renewed_at(share, now);
    let owner = match home {
        Home::Open(_, owner) | Home::Closed(_, Some(owner)) => Some(owner),
        _ => None,
    };
    let (grantees, subjects) = resolve(found, owner, recorded, now);
    let to = one_line(found);
    let until = share.spec.expires_at.0;
    // The owner the Share was made under stays recorded once known; the first decision that
    // knows the home's owner (open or closed) records it.
    let owner_uid = recorded
        .owner_uid
        .clone()
        .or_else(|| owner.and_then(|o| o.uid.clone()));
    let decision = |reason, rule: Option<ShareRule>, message: String| Decision {
        reason,
        rule,
        message,
        subjects: Vec::new(),
        grantees: grantees.clone(),
        to: to.clone(),
        renewed_at: renewed,
        recheck: None,
        owner_uid: owner_uid.clone(),
    };
    if until <= now {
        return decision(
            ShareReason::Expired,
            None,
            format!("expired at {until}: the access is removed"),
        );
    }
    let (limits, owner) = match open_to(home, recorded) {
        Ok(open) => open,
        Err((reason, rule, message)) => return decision(reason, rule, message),
    };
    if let Some((rule, message)) = breaks(share, limits, allowed_roles, renewed)
        .or_else(|| breaks_grantees(found, owner, recorded))
    {
        return refused(decision, rule, message);
    }
    let left = Duration::try_from(until.duration_since(now)).unwrap_or_default();
    if subjects.is_empty() {
        return Decision {
            recheck: Some(left),
            ..decision(
                ShareReason::Suspended,
                None,
                format!("no grantee has access now: {}", inactive_summary(&grantees)),
            )
        };
    }
    Decision {
        subjects,
        recheck: Some(left),
        ..decision(
            ShareReason::Active,
            None,
            format!(
                "{} {} role {:?} here until {until}",
                to,
                if found.len() == 1 { "has" } else { "have" },
                share.spec.role
            ),
        )
    }
}

/// The first rule the grantees break, with its message: a grantee that is the home's `owner`
/// (`SelfShare`), or a User grantee whose name now belongs to another User than the one
/// `recorded` (`GranteeReplaced`).
fn breaks_grantees(
    found: &[Found<'_>],
    owner: &Owner,
    recorded: &Recorded,
) -> Option<(ShareRule, String)> {
    found.iter().find_map(|grantee| {
        let (name, user) = match grantee {
            Found::User(name, Some(user)) | Found::Duplicate(name, user) => (*name, *user),
            Found::User(name, None) if *name == owner.name => {
                return Some(self_share(name));
            }
            _ => return None,
        };
        if owner.is(user) {
            return Some(self_share(name));
        }
        let made_for = recorded.grantees.get(name)?;
        let now_is = user.metadata.uid.as_deref()?;
        (made_for != now_is).then(|| {
            (
                ShareRule::GranteeReplaced,
                format!(
                    "grantee {name} is now another User (uid {now_is}) than the one this Share \
                     was made for (uid {made_for}); to share with the new {name}, remove them \
                     from spec.to and add them again"
                ),
            )
        })
    })
}

fn self_share(name: &str) -> (ShareRule, String) {
    (
        ShareRule::SelfShare,
        format!(
            "grantee {name} is the home's own owner, who has it already; a Share to oneself \
             would outlast a change of the owner's own role"
        ),
    )
}

/// A `Refused` decision for `rule`.
fn refused(
    decision: impl Fn(ShareReason, Option<ShareRule>, String) -> Decision,
    rule: ShareRule,
    message: String,
) -> Decision {
    let name: &str = rule.into();
    decision(
        ShareReason::Refused,
        Some(rule),
        format!("refused ({name}): {message}"),
    )
}

/// The first limit `share` breaks, with its message, if any.
fn breaks(
    share: ShareRef<'_>,
    limits: &Limits,
    allowed_roles: &BTreeSet<String>,
    renewed: Timestamp,
) -> Option<(ShareRule, String)> {
    let role = &share.spec.role;
    let source = &limits.source;
    let max = limits.max_duration;
    let latest = renewed.checked_add(max).unwrap_or(Timestamp::MAX);
    let name_len = share.name().len();
    if !limits.enabled {
        Some((
            ShareRule::SharingDisabled,
            format!("sharing is disabled by {source}"),
        ))
    } else if !allowed_roles.contains(role) || role == "cluster-admin" {
        Some((
            ShareRule::RoleNotAllowed,
            format!("role {role:?} is not one the operator allows"),
        ))
    } else if !role_within(role, &limits.max_role) {
        Some((
            ShareRule::RoleAboveLimit,
            format!(
                "role {role:?} grants more than {:?}, the highest {source} allows",
                limits.max_role
            ),
        ))
    } else if share.spec.expires_at.0 > latest {
        Some((
            ShareRule::TooLong,
            format!(
                "expiresAt {} is more than {}s after the share was made or renewed ({renewed}); \
                 {source} allows at most {}s (until {latest})",
                share.spec.expires_at.0,
                max.as_secs(),
                max.as_secs()
            ),
        ))
    } else if !limits.groups && share.spec.to.iter().any(|g| g.group.is_some()) {
        Some((
            ShareRule::GroupsNotAllowed,
            format!("{source} does not allow directory groups as grantees"),
        ))
    } else if name_len > MAX_SHARE_NAME_LEN {
        Some((
            ShareRule::NameTooLong,
            format!(
                "the name has {name_len} characters; at most {MAX_SHARE_NAME_LEN}, the most its \
                 RoleBinding's label homestead.dev/share holds"
            ),
        ))
    } else if role == SHARE_ROLE_NEVER {
        Some((
            ShareRule::RoleGrantsBinding,
            format!(
                "role {role:?} lets a grantee create RoleBindings, so access given through the \
                 Share could outlive it; a Share grants at most \"edit\""
            ),
        ))
    } else {
        None
    }
}

/// The grantees' statuses and the identities of those with access (sorted, each once), never
/// the home's `owner`: a User grantee's uid is the one `recorded` for it, else its own.
fn resolve(
    found: &[Found<'_>],
    owner: Option<&Owner>,
    recorded: &Recorded,
    now: Timestamp,
) -> (Vec<GranteeStatus>, Vec<String>) {
    let mut subjects = BTreeSet::new();
    // Whether the grantee `name` with the identity `username`, inactive for `why` (if any),
    // has access; it is then a subject.
    let mut active = |name: &str, username: &str, why: Option<&'static str>| {
        let yes = why.is_none() && owner.is_none_or(|o| !o.is_named(name, username));
        if yes {
            subjects.insert(username.to_owned());
        }
        yes
    };
    let uid = |name: &str, user: Option<&User>| {
        recorded
            .grantees
            .get(name)
            .cloned()
            .or_else(|| user.and_then(|u| u.metadata.uid.clone()))
    };
    let statuses = found
        .iter()
        .map(|grantee| match grantee {
            Found::User(name, user) => GranteeStatus {
                user: Some((*name).to_owned()),
                username: user.map(|u| u.spec.identity.username.clone()),
                active: Some(i64::from(user.is_some_and(|u| {
                    let name = u.metadata.name.as_deref().unwrap_or_default();
                    active(name, &u.spec.identity.username, inactive(u, now))
                }))),
                uid: uid(name, *user),
                ..GranteeStatus::default()
            },
            Found::Duplicate(name, user) => GranteeStatus {
                user: Some((*name).to_owned()),
                username: Some(user.spec.identity.username.clone()),
                active: Some(0),
                uid: uid(name, Some(user)),
                ..GranteeStatus::default()
            },
            Found::Group(name, _, members) => GranteeStatus {
                group: Some((*name).to_owned()),
                members: Some(count(members.len())),
                active: Some(count(
                    members
                        .iter()
                        .filter(|m| active(&m.name, &m.username, m.inactive(now)))
                        .count(),
                )),
                ..GranteeStatus::default()
            },
        })
        .collect();
    (statuses, subjects.into_iter().collect())
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The grantees in one line: `bob, group analysts`.
fn one_line(found: &[Found<'_>]) -> String {
    found
        .iter()
        .map(|grantee| match grantee {
            Found::User(name, _) | Found::Duplicate(name, _) => (*name).to_owned(),
            Found::Group(name, ..) => format!("group {name}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why no grantee has access, for the message: `bob (none active), group analysts (0 of 3)`.
fn inactive_summary(grantees: &[GranteeStatus]) -> String {
    grantees
        .iter()
        .map(|g| match (&g.user, &g.group) {
            (Some(user), _) if g.username.is_none() => format!("{user} is no Homestead User"),
            (Some(user), _) => format!(
                "{user} is suspended, expired, offboarding, refused as a duplicate identity or \
                 the home's owner"
            ),
            (_, Some(group)) => format!(
                "group {group} has {} of {} members active",
                g.active.unwrap_or(0),
                g.members.unwrap_or(0)
            ),
            _ => String::new(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The RoleBinding of `share` (in the home of `holder`: the label naming it and its name, as
/// `homestead.dev/user=<User>` or `homestead.dev/workspace=<Workspace>`) binding `subjects`
/// (user names, kind User) to `spec.role` as a ClusterRole: labelled as Homestead's and the
/// holder's, with `homestead.dev/share`, and owned by the Share as its controller (so garbage
/// collection removes it with the Share, even while the operator is down; no
/// `blockOwnerDeletion`, which would need the right to update `shares/finalizers`).
pub fn desired_binding(
    share: ShareRef<'_>,
    (holder_label, holder): (&str, &str),
    subjects: &[String],
) -> RoleBinding {
    let name = share.name();
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(binding_name(name)),
            namespace: share.meta.namespace.clone(),
            labels: Some(
                [
                    (LABEL_MANAGED_BY, MANAGED_BY),
                    (holder_label, holder),
                    (LABEL_SHARE, name),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: Share::api_version(&()).into_owned(),
                kind: Share::kind(&()).into_owned(),
                name: name.to_owned(),
                uid: share.meta.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: share.spec.role.clone(),
        },
        subjects: Some(
            subjects
                .iter()
                .map(|name| Subject {
                    api_group: Some("rbac.authorization.k8s.io".to_owned()),
                    kind: "User".to_owned(),
                    name: name.clone(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Grantee, LABEL_USER, ShareSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn share(to: Vec<Grantee>, role: &str, expires: &str) -> Share {
        let mut share = Share::new(
            "review",
            ShareSpec {
                to,
                role: role.to_owned(),
                expires_at: Time(at(expires)),
                reason: "review".to_owned(),
            },
        );
        share.metadata.namespace = Some("user-alice".to_owned());
        share.metadata.uid = Some("uid-share".to_owned());
        share.metadata.generation = Some(1);
        share.metadata.creation_timestamp = Some(Time(at("2026-11-01T00:00:00Z")));
        share
    }

    fn user(name: &str) -> Grantee {
        Grantee {
            user: Some(name.to_owned()),
            group: None,
        }
    }

    fn open() -> Home {
        Home::Open(Limits::of(None, &SharingDefaults::default()), alice())
    }

    /// The owner of the tests' home, `user-alice`.
    fn alice() -> Owner {
        let mut alice = User::test("alice");
        alice.metadata.uid = Some(ALICE_UID.to_owned());
        Owner::of(&alice)
    }

    const ALICE_UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

    fn roles() -> BTreeSet<String> {
        ["admin", "edit", "view"].map(String::from).into()
    }

    const NOW: &str = "2026-11-02T00:00:00Z";

    /// [`decide`] at [`NOW`] with the operator's default allowed roles.
    fn decide_now(
        share: &Share,
        home: &Home,
        found: &[Found<'_>],
        recorded: &Recorded,
    ) -> Decision {
        decide(
            ShareRef::of(share),
            home,
            &roles(),
            found,
            recorded,
            at(NOW),
        )
    }

    #[test]
    fn an_active_grantee_is_bound_by_identity_until_expiry() {
        let bob = User::test("bob");
        let share = share(vec![user("bob")], "view", "2026-11-09T00:00:00Z");
        let found = [Found::User("bob", Some(&bob))];
        let decision = decide_now(&share, &open(), &found, &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Active);
        assert_eq!(decision.subjects, ["bob@example.com"]);
        assert_eq!(decision.recheck, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(decision.renewed_at, at("2026-11-01T00:00:00Z"));
        let binding = desired_binding(
            ShareRef::of(&share),
            (LABEL_USER, "alice"),
            &decision.subjects,
        );
        assert_eq!(
            binding.metadata.name.as_deref(),
            Some("homestead-share-review")
        );
        assert_eq!(binding.role_ref.name, "view");
    }

    #[test]
    fn expiry_wins_over_everything_else() {
        let share = share(vec![user("bob")], "cluster-admin", "2026-11-01T12:00:00Z");
        let decision = decide_now(&share, &Home::NotAHome, &[], &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Expired);
        assert!(decision.subjects.is_empty());
    }

    #[test]
    fn each_limit_is_a_refusal_that_names_its_rule() {
        let bob = User::test("bob");
        let found = [Found::User("bob", Some(&bob))];
        let cases = [
            (
                share(vec![user("bob")], "admin", "2026-11-09T00:00:00Z"),
                ShareRule::RoleAboveLimit,
            ),
            (
                share(vec![user("bob")], "custom", "2026-11-09T00:00:00Z"),
                ShareRule::RoleNotAllowed,
            ),
            (
                share(vec![user("bob")], "view", "2027-03-01T00:00:00Z"),
                ShareRule::TooLong,
            ),
        ];
        for (share, rule) in cases {
            let decision = decide_now(&share, &open(), &found, &Recorded::default());
            assert_eq!(decision.reason, ShareReason::Refused);
            assert_eq!(decision.rule, Some(rule));
            assert!(
                decision.message.contains(<&str>::from(rule)),
                "{}",
                decision.message
            );
            assert!(decision.subjects.is_empty());
        }
        let closed: SharingLimits =
            serde_json::from_value(json!({ "enabled": true, "groups": false, "maxRole": "admin" }))
                .unwrap();
        let limits = Limits::of(Some(("strict", Some(&closed))), &SharingDefaults::default());
        let to_group = share(
            vec![Grantee {
                user: None,
                group: Some("analysts".to_owned()),
            }],
            "admin",
            "2026-11-09T00:00:00Z",
        );
        let decision = decide(
            ShareRef::of(&to_group),
            &Home::Open(limits, alice()),
            &roles(),
            &[],
            &Recorded::default(),
            at(NOW),
        );
        assert_eq!(decision.rule, Some(ShareRule::GroupsNotAllowed));
        assert!(
            decision.message.contains("Profile \"strict\""),
            "{}",
            decision.message
        );
    }

    #[test]
    fn admin_is_never_shared_whatever_the_limit() {
        let generous: SharingLimits =
            serde_json::from_value(json!({ "enabled": true, "maxRole": "admin" })).unwrap();
        let limits = Limits::of(
            Some(("generous", Some(&generous))),
            &SharingDefaults::default(),
        );
        let bob = User::test("bob");
        let found = [Found::User("bob", Some(&bob))];
        let to_bob = share(vec![user("bob")], "admin", "2026-11-09T00:00:00Z");
        let decision = decide(
            ShareRef::of(&to_bob),
            &Home::Open(limits, alice()),
            &roles(),
            &found,
            &Recorded::default(),
            at(NOW),
        );
        assert_eq!(
            decision.rule,
            Some(ShareRule::RoleGrantsBinding),
            "{}",
            decision.message
        );
        assert!(decision.subjects.is_empty());
    }

    #[test]
    fn a_renewal_is_bounded_from_when_it_was_made() {
        let mut renewed = share(vec![user("bob")], "view", "2027-03-01T00:00:00Z");
        renewed.metadata.generation = Some(2);
        renewed.status = Some(homestead_api::ShareStatus {
            observed_generation: Some(2),
            renewed_at: Some(Time(at("2026-12-15T00:00:00Z"))),
            ..Default::default()
        });
        let bob = User::test("bob");
        let found = [Found::User("bob", Some(&bob))];
        let decision = decide(
            ShareRef::of(&renewed),
            &open(),
            &roles(),
            &found,
            &Recorded::default(),
            at("2026-12-16T00:00:00Z"),
        );
        assert_eq!(decision.reason, ShareReason::Active, "{}", decision.message);
        // An update not yet described by the status is bounded from now.
        renewed.metadata.generation = Some(3);
        assert_eq!(renewed_at(ShareRef::of(&renewed), at(NOW)), at(NOW));
    }

    #[test]
    fn a_member_is_inactive_exactly_when_its_user_is() {
        let mut leaving = User::test("erin");
        leaving.metadata.deletion_timestamp = Some(Time("2026-11-01T00:00:00Z".parse().unwrap()));
        let users = [
            User::test("bob"),
            User::test("bob").suspended(),
            User::test("dave").with_spec(json!({ "validUntil": "2026-11-01T00:00:00Z" })),
            User::test("dave").with_spec(json!({ "validUntil": "2026-12-01T00:00:00Z" })),
            User::test("dave")
                .with_spec(json!({ "validUntil": "2026-11-01T00:00:00Z" }))
                .suspended(),
            User::test("sys").with_spec(json!({ "identity": { "username": "system:admin" } })),
            leaving,
        ];
        let now: Timestamp = "2026-11-09T00:00:00Z".parse().unwrap();
        let whys: Vec<_> = users.iter().map(|u| inactive(u, now)).collect();
        assert_eq!(
            whys,
            [
                None,
                Some("suspended"),
                Some("expired"),
                None,
                Some("expired"),
                Some("a system: identity"),
                Some("offboarding")
            ]
        );
        for user in &users {
            assert_eq!(
                Member::of(user).inactive(now),
                inactive(user, now),
                "{user:?}"
            );
        }
    }

    #[test]
    fn grantees_who_lost_their_access_lose_the_share_alone() {
        let bob = User::test("bob").suspended();
        let carol = User::test("carol");
        let dave = User::test("dave").with_spec(json!({ "validUntil": "2026-11-01T00:00:00Z" }));
        let analysts = DirectoryGroup::test("analysts", "Analysts");
        let share = share(
            vec![
                user("bob"),
                user("carol"),
                Grantee {
                    user: None,
                    group: Some("analysts".into()),
                },
            ],
            "view",
            "2026-11-09T00:00:00Z",
        );
        let found = [
            Found::User("bob", Some(&bob)),
            Found::User("carol", Some(&carol)),
            Found::Group(
                "analysts",
                Some(&analysts),
                &[Member::of(&dave), Member::of(&carol)],
            ),
        ];
        let decision = decide_now(&share, &open(), &found, &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Active);
        assert_eq!(decision.subjects, ["carol@example.com"]);
        assert_eq!(decision.grantees[0].active, Some(0));
        assert_eq!(decision.grantees[2].members, Some(2));
        assert_eq!(decision.grantees[2].active, Some(1));
        assert_eq!(decision.to, "bob, carol, group analysts");

        let only_bob = [Found::User("bob", Some(&bob))];
        let decision = decide_now(&share, &open(), &only_bob, &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Suspended);
        assert!(decision.subjects.is_empty());
    }

    #[test]
    fn a_closed_home_grants_nothing_and_says_why() {
        let bob = User::test("bob");
        let share = share(vec![user("bob")], "view", "2026-11-09T00:00:00Z");
        let found = [Found::User("bob", Some(&bob))];
        let home = Home::Closed("suspended".to_owned(), Some(alice()));
        let decision = decide_now(&share, &home, &found, &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Suspended);
        assert!(decision.message.contains("suspended"));
        assert_eq!(
            decision.owner_uid.as_deref(),
            Some(ALICE_UID),
            "a closed home's owner is recorded too"
        );
        assert!(decision.subjects.is_empty());
    }

    fn with_uid(mut user: User, uid: &str) -> User {
        user.metadata.uid = Some(uid.to_owned());
        user
    }

    const BOB_UID: &str = "11111111-2222-3333-4444-555555555555";
    const NEW_BOB_UID: &str = "99999999-8888-7777-6666-555555555555";

    #[test]
    fn a_share_to_the_owner_is_refused_and_the_owner_is_never_a_subject() {
        let to_self = share(vec![user("alice")], "edit", "2026-11-09T00:00:00Z");
        let alice = User::test("alice");
        let found = [Found::User("alice", Some(&alice))];
        let decision = decide_now(&to_self, &open(), &found, &Recorded::default());
        assert_eq!(
            decision.rule,
            Some(ShareRule::SelfShare),
            "{}",
            decision.message
        );
        assert!(decision.subjects.is_empty());
        // Another User naming the owner's identity is the owner too.
        let alias = User::test("alias")
            .with_spec(json!({ "identity": { "username": "alice@example.com" } }));
        let found = [Found::Duplicate("alias", &alias)];
        let to_alias = share(vec![user("alias")], "edit", "2026-11-09T00:00:00Z");
        let decision = decide_now(&to_alias, &open(), &found, &Recorded::default());
        assert_eq!(decision.rule, Some(ShareRule::SelfShare));
        // Through a group she is a member of: the others get it, she does not.
        let team = DirectoryGroup::test("team", "Team");
        let carol = User::test("carol");
        let to_team = share(
            vec![Grantee {
                user: None,
                group: Some("team".into()),
            }],
            "edit",
            "2026-11-09T00:00:00Z",
        );
        let members = [Member::of(&alice), Member::of(&carol)];
        let found = [Found::Group("team", Some(&team), &members)];
        let decision = decide_now(&to_team, &open(), &found, &Recorded::default());
        assert_eq!(decision.reason, ShareReason::Active);
        assert_eq!(decision.subjects, ["carol@example.com"]);
    }

    #[test]
    fn a_duplicate_identity_gets_nothing_through_a_share() {
        let frank = User::test("frank-two")
            .with_spec(json!({ "identity": { "username": "frank@example.com" } }));
        let share = share(vec![user("frank-two")], "edit", "2026-11-09T00:00:00Z");
        let found = [Found::Duplicate("frank-two", &frank)];
        let decision = decide_now(&share, &open(), &found, &Recorded::default());
        assert_eq!(
            decision.reason,
            ShareReason::Suspended,
            "{}",
            decision.message
        );
        assert!(decision.subjects.is_empty());
        assert_eq!(decision.grantees[0].active, Some(0));
    }

    #[test]
    fn a_grantee_is_the_user_it_was_made_for_not_a_later_one_of_that_name() {
        let share = share(vec![user("bob")], "view", "2026-11-09T00:00:00Z");
        let bob = with_uid(User::test("bob"), BOB_UID);
        let found = [Found::User("bob", Some(&bob))];
        let first = decide_now(&share, &open(), &found, &Recorded::default());
        assert_eq!(first.reason, ShareReason::Active);
        assert_eq!(first.grantees[0].uid.as_deref(), Some(BOB_UID));
        assert_eq!(first.owner_uid.as_deref(), Some(ALICE_UID));
        let mut status = ShareStatus {
            grantees: first.grantees.clone(),
            owner_uid: first.owner_uid.clone(),
            ..ShareStatus::default()
        };
        let recorded = Recorded::of(Some(&status));
        let again = decide_now(&share, &open(), &found, &recorded);
        assert_eq!(again.reason, ShareReason::Active);

        let new_bob = with_uid(User::test("bob"), NEW_BOB_UID);
        let found = [Found::User("bob", Some(&new_bob))];
        let replaced = decide_now(&share, &open(), &found, &recorded);
        assert_eq!(
            replaced.rule,
            Some(ShareRule::GranteeReplaced),
            "{}",
            replaced.message
        );
        assert!(replaced.subjects.is_empty());
        assert_eq!(
            replaced.grantees[0].uid.as_deref(),
            Some(BOB_UID),
            "the uid it was made for stays recorded"
        );
        // Removed from spec.to and added again: made for the new bob.
        status.grantees.clear();
        let recorded = Recorded::of(Some(&status));
        let renewed = decide_now(&share, &open(), &found, &recorded);
        assert_eq!(renewed.reason, ShareReason::Active);
        assert_eq!(renewed.grantees[0].uid.as_deref(), Some(NEW_BOB_UID));
    }

    #[test]
    fn a_home_that_changed_hands_ends_the_shares_made_under_its_previous_owner() {
        let share = share(vec![user("bob")], "view", "2026-11-09T00:00:00Z");
        let bob = User::test("bob");
        let found = [Found::User("bob", Some(&bob))];
        let recorded = Recorded {
            owner_uid: Some("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee".to_owned()),
            ..Recorded::default()
        };
        let decision = decide_now(&share, &open(), &found, &recorded);
        assert_eq!(
            decision.reason,
            ShareReason::HandedOver,
            "{}",
            decision.message
        );
        assert!(decision.subjects.is_empty());
        assert_eq!(
            decision.owner_uid, recorded.owner_uid,
            "still the one it was made under"
        );
    }

    #[test]
    fn uids_compact_to_16_bytes_and_back() {
        assert_eq!(
            compact_uid(BOB_UID).map(uid_string).as_deref(),
            Some(BOB_UID)
        );
        assert_eq!(compact_uid("not-a-uid"), None);
        assert_eq!(compact_uid("11111111x2222-3333-4444-555555555555"), None);
    }
}
