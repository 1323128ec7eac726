//! The seeded workload: what each actor does ([`Op`], every random choice inside it so a log
//! replays exactly), how the next operation is drawn from the seed and the model
//! ([`generate`]), and how one is carried out against the cluster and recorded in the model
//! when the API server (or the SCIM service) accepted it ([`Actors::execute`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homestead_api::{LABEL_ADOPT_FOR, Profile, Share, User};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::{ScimService, TENANT_GROUP, TENANTS, https_request};
use crate::faults::{Fault, Faults};
use crate::model::{Clock, Model, ModelUser, Offboarded, Writer};

/// The Profile the SCIM group selects for its members.
pub const DIRECTORY_PROFILE: &str = "soak-directory";
/// The SCIM group's display name, which [`DIRECTORY_PROFILE`] names.
pub const GROUP_NAME: &str = "Soak Team";
/// Profiles HR may name: role overrides allowed, one open and one isolated.
pub const HR_PROFILES: [&str; 2] = ["soak-open", "soak-isolated"];
/// The allow-listed roles.
const ROLES: [&str; 3] = ["view", "edit", "admin"];
/// People HR onboards: the tenants with tokens first (they act), then people without one.
const PEOPLE: [&str; 9] = [
    TENANTS[0],
    TENANTS[1],
    TENANTS[2],
    TENANTS[3],
    TENANTS[4],
    TENANTS[5],
    "soak-pat@example.com",
    "soak-quinn@example.com",
    "soak-rae@example.com",
];
/// How many User names HR and SCIM draw from (`hr-NN`, `idp-N`): few, so names and namespaces
/// are reused after offboarding.
const HR_NAMES: u32 = 14;
const IDP_NAMES: u32 = 7;
/// Namespaces the platform may make by hand (`user-squat-N`).
const SQUATS: u32 = 3;

/// One operation of one actor, with every random choice made.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    HrCreate {
        name: String,
        username: String,
        role: Option<String>,
        profile: Option<String>,
        retain: bool,
        namespace: Option<String>,
    },
    HrSuspend {
        name: String,
        suspended: bool,
    },
    /// `validUntil` this many whole seconds ahead.
    HrExpire {
        name: String,
        seconds: u64,
    },
    HrRenew {
        name: String,
    },
    HrRole {
        name: String,
        role: Option<String>,
    },
    HrProfile {
        name: String,
        profile: Option<String>,
    },
    HrDelete {
        name: String,
    },
    /// HR sets `deletionPolicy: Handover` and `successor` on User `name`, then deletes it: its
    /// homes go to the successor (docs/handover.md).
    HrHandover {
        name: String,
        successor: String,
    },
    /// `homestead import` of a roster (source `soak-roster`) with these rows, pruning with
    /// `--prune delete` the source's Users left out, `--allow-mass-prune` the number expected.
    HrImport {
        rows: Vec<RosterRow>,
        allow_mass_prune: usize,
    },
    ScimCreate {
        name: String,
        user_name: String,
    },
    /// PATCH `active`, sent `times` times (an identity provider's retries).
    ScimActive {
        name: String,
        active: bool,
        times: u32,
    },
    /// PUT of the whole User without `active`, as several identity providers send.
    ScimPutWithoutActive {
        name: String,
    },
    ScimRename {
        name: String,
        user_name: String,
    },
    ScimDelete {
        name: String,
    },
    /// PUT of the group with these members.
    ScimGroup {
        members: Vec<String>,
    },
    /// DELETE of the group (its team workspaces are suspended; a later `ScimGroup` makes it
    /// again).
    ScimGroupDelete,
    /// A tenant creates workspace `index` of their own (`soak-ws-<tenant>-<index>`, labelled
    /// self-service), owned by `owner` (their own User, or sometimes another's: refused), or
    /// deletes it when it exists.
    TenantWorkspace {
        tenant: usize,
        index: u32,
        owner: String,
    },
    /// A tenant creates `count` Pods at once in their home `home` (own, personal workspace,
    /// team workspace: `totals::HOMES`), or deletes every Pod there (`delete`).
    TenantPods {
        tenant: usize,
        home: u32,
        count: u32,
        delete: bool,
    },
    /// The platform creates team workspace `index` (`soak-team-<index>`) owned by the SCIM
    /// group, with `admins`; when it exists, deletes it (`delete`) or sets its admins.
    PlatformWorkspace {
        index: u32,
        admins: Vec<String>,
        delete: bool,
    },
    /// A tenant creates `count` RoleBindings to `subject` (`self`, a username, `group` or
    /// `serviceaccount`) in their namespace, as fast as they can.
    TenantBindings {
        tenant: usize,
        subject: String,
        role: String,
        count: u32,
    },
    /// A tenant adds a subject to Homestead's own RoleBinding.
    TenantRewriteHomestead {
        tenant: usize,
        subject: String,
    },
    /// A tenant shares their home with the live User whose identity is `grantee` (a person of
    /// [`PEOPLE`]), with `role`, for `seconds` (docs/sharing.md).
    TenantShare {
        tenant: usize,
        grantee: String,
        role: String,
        seconds: u64,
    },
    /// A tenant tries to share another tenant's home (`other`), and to mint a token of its
    /// `default` ServiceAccount: refused whatever a Share gave them there (RBAC, or the
    /// admission policies homestead-share-owner and homestead-home-grants).
    TenantReshare {
        tenant: usize,
        other: usize,
    },
    /// A tenant adds `subject` to one of the Share RoleBindings in their home (undone by the
    /// operator).
    TenantRewriteShare {
        tenant: usize,
        subject: String,
    },
    /// A tenant tries an allow-all NetworkPolicy (refused in an isolated namespace).
    TenantOpenIsolation {
        tenant: usize,
    },
    /// A tenant tries a Service with `externalIPs` (always refused).
    TenantExternalIp {
        tenant: usize,
    },
    PlatformProfileRole {
        profile: String,
        role: String,
    },
    PlatformSquat {
        namespace: String,
    },
    /// The platform hands a namespace it made by hand to `user` (the label
    /// `homestead.dev/adopt-for`): adopted if that User names it, untouched otherwise.
    PlatformAdopt {
        namespace: String,
        user: String,
    },
    /// The platform deletes a namespace retained from an offboarded User.
    PlatformPurge {
        namespace: String,
    },
    /// The platform binds someone to `view` in a retained namespace without removing its label
    /// first (the standing rule removes it).
    PlatformGrantRetained {
        namespace: String,
        subject: String,
    },
    /// Operations at the same time.
    Race {
        ops: Vec<Op>,
    },
    Fault {
        fault: Fault,
    },
}

impl Op {
    /// The User names this operation changes.
    pub fn targets(&self) -> Vec<String> {
        match self {
            Op::HrCreate { name, .. }
            | Op::HrSuspend { name, .. }
            | Op::HrExpire { name, .. }
            | Op::HrRenew { name }
            | Op::HrRole { name, .. }
            | Op::HrProfile { name, .. }
            | Op::HrDelete { name }
            | Op::HrHandover { name, .. }
            | Op::ScimCreate { name, .. }
            | Op::ScimActive { name, .. }
            | Op::ScimPutWithoutActive { name }
            | Op::ScimRename { name, .. }
            | Op::ScimDelete { name } => vec![name.clone()],
            Op::HrImport { .. } => (0..ROSTER_NAMES).map(|i| format!("roster-{i}")).collect(),
            Op::Race { ops } => ops.iter().flat_map(Op::targets).collect(),
            _ => Vec::new(),
        }
    }

    /// The actor, for the summary: hr, scim, tenant, platform, race or fault.
    pub fn actor(&self) -> &'static str {
        match self {
            Op::HrCreate { .. }
            | Op::HrSuspend { .. }
            | Op::HrExpire { .. }
            | Op::HrRenew { .. }
            | Op::HrRole { .. }
            | Op::HrProfile { .. }
            | Op::HrDelete { .. }
            | Op::HrHandover { .. }
            | Op::HrImport { .. } => "hr",
            Op::ScimCreate { .. }
            | Op::ScimActive { .. }
            | Op::ScimPutWithoutActive { .. }
            | Op::ScimRename { .. }
            | Op::ScimDelete { .. }
            | Op::ScimGroup { .. }
            | Op::ScimGroupDelete => "scim",
            Op::TenantBindings { .. }
            | Op::TenantRewriteHomestead { .. }
            | Op::TenantShare { .. }
            | Op::TenantReshare { .. }
            | Op::TenantRewriteShare { .. }
            | Op::TenantOpenIsolation { .. }
            | Op::TenantExternalIp { .. }
            | Op::TenantWorkspace { .. }
            | Op::TenantPods { .. } => "tenant",
            Op::PlatformProfileRole { .. }
            | Op::PlatformSquat { .. }
            | Op::PlatformAdopt { .. }
            | Op::PlatformPurge { .. }
            | Op::PlatformGrantRetained { .. }
            | Op::PlatformWorkspace { .. } => "platform",
            Op::Race { .. } => "race",
            Op::Fault { .. } => "fault",
        }
    }
}

fn pick<'a, T>(rng: &mut fastrand::Rng, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.usize(..items.len())])
}

fn maybe_role(rng: &mut fastrand::Rng) -> Option<String> {
    rng.bool()
        .then(|| ROLES[rng.usize(..ROLES.len())].to_owned())
}

/// The next operation, drawn from `rng` given what the model holds at `now`; `fault_ok` says
/// whether a fault may start (one at a time, a few seconds apart).
pub fn generate(rng: &mut fastrand::Rng, model: &Model, fault_ok: bool) -> Op {
    let live = |writer: Writer| -> Vec<String> {
        model
            .users
            .iter()
            .filter(|(_, u)| u.writer == writer && u.deleting_at.is_none())
            .map(|(n, _)| n.clone())
            .collect()
    };
    // People from the roster are the roster's: HR does not also edit them by hand.
    let mut hr = live(Writer::Hr);
    hr.retain(|n| !n.starts_with("roster-"));
    let idp = live(Writer::Scim);
    let roll = rng.u32(..100);
    match roll {
        _ if roll < 33 || hr.len() < 3 => hr_op(rng, model, &hr),
        33..55 => scim_op(rng, model, &idp),
        55..75 => tenant_op(rng, model).unwrap_or_else(|| hr_op(rng, model, &hr)),
        75..83 => platform_op(rng, model),
        83..91 => race(rng, model, &hr).unwrap_or_else(|| hr_op(rng, model, &hr)),
        _ if fault_ok => Op::Fault {
            fault: Fault::draw(rng),
        },
        _ => hr_op(rng, model, &hr),
    }
}

fn hr_op(rng: &mut fastrand::Rng, model: &Model, live: &[String]) -> Op {
    // A roster import only while no fault runs: a half-applied roster is not what the model
    // could record.
    if !model.faulty() && rng.u32(..100) < 6 {
        return roster(rng, model);
    }
    let free: Vec<String> = (0..HR_NAMES)
        .map(|i| format!("hr-{i:02}"))
        .filter(|n| !model.users.contains_key(n))
        .collect();
    if (live.len() < 3 || rng.u32(..100) < 22)
        && let Some(name) = pick(rng, &free)
    {
        return hr_create(rng, model, name.clone());
    }
    let Some(name) = pick(rng, live).cloned() else {
        return hr_create(rng, model, "hr-00".to_owned());
    };
    let user = &model.users[&name];
    match rng.u32(..100) {
        0..25 => Op::HrSuspend {
            name,
            suspended: user.suspended_at.is_none(),
        },
        25..35 => Op::HrExpire {
            name,
            seconds: rng.u64(2..9),
        },
        35..50 => Op::HrRenew { name },
        50..65 => Op::HrRole {
            name,
            role: maybe_role(rng),
        },
        65..78 => Op::HrProfile {
            name,
            profile: rng.bool().then(|| HR_PROFILES[rng.usize(..2)].to_owned()),
        },
        // A roster's import sets `deletionPolicy` again: only HR's own Users are handed over.
        78..90 => Op::HrDelete { name },
        _ if !name.starts_with("hr-") => Op::HrDelete { name },
        _ => {
            let others: Vec<String> = live.iter().filter(|n| **n != name).cloned().collect();
            match pick(rng, &others) {
                Some(successor) => Op::HrHandover {
                    successor: successor.clone(),
                    name,
                },
                None => Op::HrDelete { name },
            }
        }
    }
}

fn hr_create(rng: &mut fastrand::Rng, model: &Model, name: String) -> Op {
    let taken = |p: &&str| {
        model
            .users
            .values()
            .any(|u| u.username.eq_ignore_ascii_case(p))
    };
    let unclaimed: Vec<&str> = PEOPLE.iter().copied().filter(|p| !taken(p)).collect();
    // Mostly a person without a User; sometimes a second User for someone who has one (HR's
    // mistake, or an attempt to give a suspended person access again).
    let username = match pick(rng, &unclaimed) {
        Some(p) if rng.u32(..100) < 85 => (*p).to_owned(),
        _ => PEOPLE[rng.usize(..PEOPLE.len())].to_owned(),
    };
    let squats: Vec<&String> = model.squatted.iter().collect();
    let namespace = (rng.u32(..100) < 8)
        .then(|| pick(rng, &squats).map(|s| (*s).clone()))
        .flatten();
    Op::HrCreate {
        name,
        username,
        role: maybe_role(rng),
        profile: (rng.u32(..100) < 60).then(|| HR_PROFILES[rng.usize(..2)].to_owned()),
        retain: rng.bool(),
        namespace,
    }
}

fn scim_op(rng: &mut fastrand::Rng, model: &Model, live: &[String]) -> Op {
    let free: Vec<u32> = (0..IDP_NAMES)
        .filter(|i| !model.users.contains_key(&format!("idp-{i}")))
        .collect();
    if (live.len() < 2 || rng.u32(..100) < 20)
        && let Some(i) = pick(rng, &free)
    {
        return Op::ScimCreate {
            name: format!("idp-{i}"),
            user_name: format!("idp-{i}@example.com"),
        };
    }
    let Some(name) = pick(rng, live).cloned() else {
        return Op::ScimCreate {
            name: "idp-0".to_owned(),
            user_name: "idp-0@example.com".to_owned(),
        };
    };
    match rng.u32(..100) {
        0..30 => Op::ScimActive {
            active: model.users[&name].deactivated_at.is_some(),
            name,
            times: rng.u32(1..3),
        },
        30..45 => Op::ScimPutWithoutActive { name },
        45..55 => Op::ScimRename {
            user_name: format!("{name}.r{}@example.com", rng.u32(..1000)),
            name,
        },
        55..70 => Op::ScimDelete { name },
        70..96 => Op::ScimGroup {
            members: live.iter().filter(|_| rng.bool()).cloned().collect(),
        },
        _ => Op::ScimGroupDelete,
    }
}

/// The tenants (indexes into [`TENANTS`]) that have a User.
fn tenants_with_users(model: &Model) -> Vec<usize> {
    (0..TENANTS.len())
        .filter(|&i| {
            model
                .users
                .values()
                .any(|u| u.username == TENANTS[i] && u.deleting_at.is_none())
        })
        .collect()
}

/// The tenants whose User has `admin` (they may share their home), and the identities of the
/// live Users (who may be grantees).
fn sharers_and_grantees(model: &Model) -> (Vec<usize>, Vec<String>) {
    let live: Vec<(&String, &ModelUser)> = model
        .users
        .iter()
        .filter(|(_, u)| u.deleting_at.is_none())
        .collect();
    let sharers = (0..TENANTS.len())
        .filter(|&i| {
            live.iter().any(|(name, u)| {
                u.username == TENANTS[i] && u.expected_role(name, model) == "admin"
            })
        })
        .collect();
    let grantees = live.iter().map(|(_, u)| u.username.clone()).collect();
    (sharers, grantees)
}

fn tenant_op(rng: &mut fastrand::Rng, model: &Model) -> Option<Op> {
    let tenant = *pick(rng, &tenants_with_users(model))?;
    let (sharers, grantees) = sharers_and_grantees(model);
    Some(match rng.u32(..100) {
        0..40 => tenant_bindings(rng, tenant),
        40..52 => Op::TenantShare {
            // One whose role lets them share, if any.
            tenant: pick(rng, &sharers).copied().unwrap_or(tenant),
            grantee: pick(rng, &grantees)
                .cloned()
                .unwrap_or_else(|| PEOPLE[0].to_owned()),
            // admin is above the default limit (edit): refused, nothing granted.
            role: ROLES[rng.usize(..ROLES.len())].to_owned(),
            seconds: rng.u64(2..60),
        },
        52..57 => Op::TenantReshare {
            tenant,
            other: rng.usize(..TENANTS.len()),
        },
        57..62 => Op::TenantRewriteShare {
            tenant: pick(rng, &sharers).copied().unwrap_or(tenant),
            subject: PEOPLE[rng.usize(..PEOPLE.len())].to_owned(),
        },
        62..74 => Op::TenantRewriteHomestead {
            tenant,
            subject: PEOPLE[rng.usize(..PEOPLE.len())].to_owned(),
        },
        74..84 => Op::TenantOpenIsolation { tenant },
        84..89 => tenant_workspace(rng, model, tenant),
        89..97 => Op::TenantPods {
            tenant,
            home: rng.u32(..crate::totals::HOMES),
            count: rng.u32(1..5),
            delete: rng.u32(..100) < 30,
        },
        _ => Op::TenantExternalIp { tenant },
    })
}

/// A tenant's workspace of their own, owned by their User (the oldest live one of their
/// identity), or one time in five by another live User (which must grant nothing).
fn tenant_workspace(rng: &mut fastrand::Rng, model: &Model, tenant: usize) -> Op {
    let live: Vec<(&String, &ModelUser)> = model
        .users
        .iter()
        .filter(|(_, u)| u.deleting_at.is_none())
        .collect();
    let own = live
        .iter()
        .filter(|(_, u)| u.username == TENANTS[tenant])
        .min_by(|a, b| a.1.created_at.total_cmp(&b.1.created_at))
        .map(|(n, _)| (*n).clone());
    let other = pick(rng, &live).map(|(n, _)| (*n).clone());
    let owner = match (own, other) {
        (Some(_), Some(other)) if rng.u32(..100) < 20 => other,
        (Some(own), _) => own,
        (None, other) => other.unwrap_or_default(),
    };
    Op::TenantWorkspace {
        tenant,
        index: rng.u32(..crate::workspaces::PERSONAL_NAMES),
        owner,
    }
}

fn tenant_bindings(rng: &mut fastrand::Rng, tenant: usize) -> Op {
    let subject = match rng.u32(..4) {
        0 => "self".to_owned(),
        1 => "group".to_owned(),
        2 => "serviceaccount".to_owned(),
        _ => PEOPLE[rng.usize(..PEOPLE.len())].to_owned(),
    };
    Op::TenantBindings {
        tenant,
        subject,
        role: ROLES[rng.usize(..ROLES.len())].to_owned(),
        count: rng.u32(2..16),
    }
}

fn platform_op(rng: &mut fastrand::Rng, model: &Model) -> Op {
    let retained: Vec<String> = model
        .offboarded
        .iter()
        .filter(|o| o.retain)
        .map(|o| o.namespace.clone())
        .collect();
    match rng.u32(..100) {
        0..12 => {
            let live: Vec<&String> = model
                .users
                .iter()
                .filter(|(_, u)| u.deleting_at.is_none())
                .map(|(n, _)| n)
                .collect();
            Op::PlatformWorkspace {
                index: rng.u32(..crate::workspaces::TEAM_NAMES),
                admins: pick(rng, &live)
                    .map(|n| vec![(*n).clone()])
                    .unwrap_or_default(),
                delete: rng.u32(..100) < 25,
            }
        }
        12..55 => {
            let profiles = [HR_PROFILES[0], HR_PROFILES[1], DIRECTORY_PROFILE];
            Op::PlatformProfileRole {
                profile: profiles[rng.usize(..3)].to_owned(),
                role: ROLES[rng.usize(..ROLES.len())].to_owned(),
            }
        }
        55..65 if !retained.is_empty() => Op::PlatformPurge {
            namespace: pick(rng, &retained).unwrap().clone(),
        },
        65..80 if !retained.is_empty() => Op::PlatformGrantRetained {
            namespace: pick(rng, &retained).unwrap().clone(),
            subject: PEOPLE[rng.usize(..PEOPLE.len())].to_owned(),
        },
        80..90 if !model.squatted.is_empty() => {
            // Mostly to a User that asks for it; else to a name no User has (a mistake, which
            // leaves the namespace the platform's).
            let askers: Vec<(&String, &String)> = model
                .users
                .iter()
                .filter(|(_, u)| model.squatted.contains(&u.namespace) && u.deleting_at.is_none())
                .map(|(n, u)| (n, &u.namespace))
                .collect();
            match pick(rng, &askers) {
                Some((user, namespace)) if rng.u32(..100) < 80 => Op::PlatformAdopt {
                    namespace: (*namespace).clone(),
                    user: (*user).clone(),
                },
                _ => {
                    let squats: Vec<&String> = model.squatted.iter().collect();
                    Op::PlatformAdopt {
                        namespace: (*pick(rng, &squats).unwrap()).clone(),
                        user: "nobody-asked".to_owned(),
                    }
                }
            }
        }
        _ => Op::PlatformSquat {
            namespace: format!("user-squat-{}", rng.u32(..SQUATS)),
        },
    }
}

/// A change of a person's state at the same moment as that person fills their namespace with
/// RoleBindings: the races reviews found holes in.
fn race(rng: &mut fastrand::Rng, model: &Model, live: &[String]) -> Option<Op> {
    let tenant = *pick(rng, &tenants_with_users(model))?;
    let name = live
        .iter()
        .find(|n| model.users[*n].username == TENANTS[tenant])?
        .clone();
    let change = match rng.u32(..4) {
        0 => Op::HrSuspend {
            suspended: model.users[&name].suspended_at.is_none(),
            name,
        },
        1 => Op::HrRole {
            name,
            role: Some("view".to_owned()),
        },
        2 => Op::HrExpire { name, seconds: 1 },
        _ => Op::HrDelete { name },
    };
    Some(Op::Race {
        ops: vec![tenant_bindings(rng, tenant), change],
    })
}

/// A roster row: User name, username, role.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RosterRow {
    pub name: String,
    pub username: String,
    pub role: Option<String>,
}

/// The roster's source label value.
const ROSTER_SOURCE: &str = "soak-roster";
/// How many User names the roster draws from (`roster-N`).
const ROSTER_NAMES: usize = 6;

/// A roster of some of the `roster-N` people (none being offboarded), pruning the rest.
fn roster(rng: &mut fastrand::Rng, model: &Model) -> Op {
    let offboarding = |name: &str| {
        model
            .users
            .get(name)
            .is_some_and(|u| u.deleting_at.is_some())
    };
    let mut rows = Vec::new();
    for name in (0..ROSTER_NAMES).map(|i| format!("roster-{i}")) {
        if !offboarding(&name) && rng.u32(..3) > 0 {
            rows.push(RosterRow {
                username: format!("{name}@example.com"),
                role: maybe_role(rng),
                name,
            });
        }
    }
    let pruned = model
        .users
        .iter()
        .filter(|(n, u)| n.starts_with("roster-") && u.deleting_at.is_none())
        .filter(|(n, _)| !rows.iter().any(|r| &r.name == *n))
        .count();
    Op::HrImport {
        rows,
        allow_mass_prune: pruned,
    }
}

/// What one operation came to: whether it was accepted, and what happened, in a few words.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub ok: bool,
    pub detail: String,
}

impl Outcome {
    pub(crate) fn from<T>(result: Result<T, kube::Error>) -> Self {
        match result {
            Ok(_) => Self::ok("accepted"),
            Err(e) => Self::refused(e),
        }
    }

    pub(crate) fn ok(detail: impl Into<String>) -> Self {
        Self {
            ok: true,
            detail: detail.into(),
        }
    }

    pub(crate) fn refused(why: impl std::fmt::Display) -> Self {
        Self {
            ok: false,
            detail: why.to_string(),
        }
    }
}

/// The actors' credentials and what they need to act: the admin (the platform), HR (bound to
/// `homestead-hr`), each tenant's own token, the SCIM service; and the model they write.
pub struct Actors {
    pub admin: Client,
    pub hr: Client,
    pub tenants: Vec<Client>,
    pub scim: &'static ScimService,
    pub model: Arc<Mutex<Model>>,
    pub clock: Clock,
    pub faults: Arc<Faults>,
    /// SCIM ids of the service's Users, by User name, and the group's id.
    scim_ids: Mutex<BTreeMap<String, String>>,
    group_id: Mutex<Option<String>>,
    /// Promises the workload itself saw broken: a write that had to be refused was accepted.
    pub broken: Mutex<Vec<String>>,
}

impl Actors {
    pub fn new(
        admin: Client,
        hr: Client,
        tenants: Vec<Client>,
        scim: &'static ScimService,
        model: Arc<Mutex<Model>>,
        clock: Clock,
        faults: Arc<Faults>,
    ) -> Self {
        Self {
            admin,
            hr,
            tenants,
            scim,
            model,
            clock,
            faults,
            scim_ids: Mutex::default(),
            group_id: Mutex::default(),
            broken: Mutex::default(),
        }
    }

    /// Carries out `op` and records in the model what was accepted; its target Users are in
    /// flight meanwhile.
    pub async fn execute(&self, op: &Op) -> Outcome {
        let targets = op.targets();
        {
            let mut model = self.model.lock().unwrap();
            for t in &targets {
                *model.in_flight.entry(t.clone()).or_default() += 1;
            }
        }
        let outcome = self.execute_one(op).await;
        let now = self.clock.now();
        let mut model = self.model.lock().unwrap();
        for t in targets {
            if let Some(n) = model.in_flight.get_mut(&t) {
                *n -= 1;
                if *n == 0 {
                    model.in_flight.remove(&t);
                }
            }
            model.settled_at.insert(t, now);
        }
        outcome
    }

    fn execute_one<'a>(
        &'a self,
        op: &'a Op,
    ) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(async move {
            match op {
                Op::Race { ops } => {
                    let outcomes =
                        futures::future::join_all(ops.iter().map(|o| self.execute(o))).await;
                    let detail: Vec<String> = outcomes.iter().map(|o| o.detail.clone()).collect();
                    Outcome {
                        ok: outcomes.iter().any(|o| o.ok),
                        detail: detail.join(" | "),
                    }
                }
                Op::Fault { fault } => self.faults.inject(fault.clone(), &self.model, self.clock),
                Op::HrImport {
                    rows,
                    allow_mass_prune,
                } => self.import(rows, *allow_mass_prune).await,
                Op::TenantWorkspace { .. } | Op::PlatformWorkspace { .. } => {
                    self.workspace_op(op).await
                }
                Op::TenantPods { .. } => self.pods_op(op).await,
                _ => match op.actor() {
                    "hr" => self.hr(op).await,
                    "scim" => self.scim(op).await,
                    "tenant" => self.tenant(op).await,
                    _ => self.platform(op).await,
                },
            }
        })
    }

    /// Records a change of User `name` accepted now.
    fn changed(&self, name: &str, change: impl FnOnce(&mut ModelUser, f64)) {
        let now = self.clock.now();
        if let Some(user) = self.model.lock().unwrap().user(name) {
            change(user, now);
            user.changed_at = now;
        }
    }

    async fn merge(&self, name: &str, spec: Value) -> Result<User, kube::Error> {
        Api::<User>::all(self.hr.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
    }

    async fn hr(&self, op: &Op) -> Outcome {
        match op {
            Op::HrCreate { .. } => self.hr_create(op).await,
            Op::HrSuspend { name, suspended } => {
                let result = self.merge(name, json!({ "suspended": suspended })).await;
                if result.is_ok() {
                    self.changed(name, |u, now| {
                        u.suspended_at = match (suspended, u.suspended_at) {
                            (true, Some(at)) => Some(at),
                            (true, None) => Some(now),
                            (false, _) => None,
                        };
                    });
                }
                Outcome::from(result)
            }
            Op::HrExpire { name, seconds } => self.hr_expire(name, *seconds).await,
            Op::HrRenew { name } => {
                let result = self.merge(name, json!({ "validUntil": null })).await;
                if result.is_ok() {
                    self.changed(name, |u, _| u.valid_until = None);
                }
                Outcome::from(result)
            }
            Op::HrRole { name, role } => {
                let result = self.merge(name, json!({ "role": role })).await;
                if result.is_ok() {
                    self.changed(name, |u, _| u.role.clone_from(role));
                }
                Outcome::from(result)
            }
            Op::HrProfile { name, profile } => {
                let result = self.merge(name, json!({ "profile": profile })).await;
                if result.is_ok() {
                    self.changed(name, |u, _| u.profile.clone_from(profile));
                }
                Outcome::from(result)
            }
            Op::HrDelete { name } => {
                let result = Api::<User>::all(self.hr.clone())
                    .delete(name, &DeleteParams::default())
                    .await;
                if result.is_ok() {
                    self.offboarding(name, None).await;
                }
                Outcome::from(result)
            }
            Op::HrHandover { name, successor } => {
                let policy = json!({ "deletionPolicy": "Handover", "successor": successor });
                if let Err(e) = self.merge(name, policy).await {
                    return Outcome::from(Err::<(), _>(e));
                }
                // Set even if the delete fails: a later delete hands over too.
                self.changed(name, |u, _| u.successor = Some(successor.clone()));
                let result = Api::<User>::all(self.hr.clone())
                    .delete(name, &DeleteParams::default())
                    .await;
                if result.is_ok() {
                    self.offboarding(name, Some(successor.clone())).await;
                }
                Outcome::from(result)
            }
            _ => unreachable!("not HR's"),
        }
    }

    /// `HrCreate`: creates the User as HR; the model learns it (with its uid) when the API
    /// server accepts it.
    async fn hr_create(&self, op: &Op) -> Outcome {
        let Op::HrCreate {
            name,
            username,
            role,
            profile,
            retain,
            namespace,
        } = op
        else {
            unreachable!("an HrCreate");
        };
        let mut spec = json!({
            "identity": { "username": username },
            "deletionPolicy": if *retain { "Retain" } else { "Delete" },
        });
        if let Some(role) = role {
            spec["role"] = json!(role);
        }
        if let Some(profile) = profile {
            spec["profile"] = json!(profile);
        }
        if let Some(namespace) = namespace {
            spec["namespace"] = json!({ "name": namespace });
        }
        let user = User::test(name).with_spec(spec);
        let result = Api::<User>::all(self.hr.clone())
            .create(&PostParams::default(), &user)
            .await;
        if let Ok(created) = &result {
            let now = self.clock.now();
            let mut model = self.model.lock().unwrap();
            model.usernames.insert(username.clone());
            model.users.insert(
                name.clone(),
                ModelUser::new(
                    username.clone(),
                    created.uid(),
                    Writer::Hr,
                    role.clone(),
                    profile.clone(),
                    *retain,
                    namespace.clone().unwrap_or_else(|| format!("user-{name}")),
                    now,
                ),
            );
        }
        Outcome::from(result)
    }

    /// `HrExpire`: sets `validUntil` `seconds` ahead (whole seconds, as the API server keeps it).
    async fn hr_expire(&self, name: &str, seconds: u64) -> Outcome {
        // Whole seconds: the API server keeps validUntil to the second.
        let now = self.clock.now();
        let whole = self
            .clock
            .wall(now + seconds as f64)
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a time after 1970")
            .as_secs();
        let stamp = k8s_openapi::jiff::Timestamp::from_second(whole as i64)
            .expect("a time jiff represents")
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let at = self
            .clock
            .at(std::time::UNIX_EPOCH + Duration::from_secs(whole));
        let result = self.merge(name, json!({ "validUntil": stamp })).await;
        if result.is_ok() {
            self.changed(name, |u, _| u.valid_until = Some(at));
        }
        Outcome::from(result)
    }

    /// Runs `homestead import` as HR with `rows` and `--prune delete`; records the rows and the
    /// pruned Users in the model when it succeeds (it writes nothing when it fails on a bound).
    async fn import(&self, rows: &[RosterRow], allow_mass_prune: usize) -> Outcome {
        let report = match self.run_import(rows, allow_mass_prune).await {
            Ok(report) => report,
            Err(refused) => return refused,
        };
        let now = self.clock.now();
        let pruned: Vec<String> = {
            let model = self.model.lock().unwrap();
            model
                .users
                .iter()
                .filter(|(n, u)| n.starts_with("roster-") && u.deleting_at.is_none())
                .filter(|(n, _)| !rows.iter().any(|r| &r.name == *n))
                .map(|(n, _)| n.clone())
                .collect()
        };
        for name in &pruned {
            self.offboarding(name, None).await;
        }
        let mut created = Vec::new();
        for row in rows {
            let known = self
                .model
                .lock()
                .unwrap()
                .users
                .get(&row.name)
                .is_some_and(|u| u.deleting_at.is_none());
            if known {
                self.changed(&row.name, |u, _| u.role.clone_from(&row.role));
                continue;
            }
            created.push(row.name.clone());
            let uid = Api::<User>::all(self.admin.clone())
                .get_opt(&row.name)
                .await
                .ok()
                .flatten()
                .and_then(|u| u.uid());
            let mut model = self.model.lock().unwrap();
            model.usernames.insert(row.username.clone());
            model.users.insert(
                row.name.clone(),
                ModelUser::new(
                    row.username.clone(),
                    uid,
                    Writer::Hr,
                    row.role.clone(),
                    None,
                    false,
                    format!("user-{}", row.name),
                    now,
                ),
            );
        }
        Outcome::ok(format!("{report}; created {created:?}, pruned {pruned:?}"))
    }

    /// Writes `rows` as a roster and runs `homestead import --prune delete` on it as HR
    /// (`--allow-mass-prune` when `allow_mass_prune` is not 0). Returns its last line, or the
    /// refusal when it fails.
    async fn run_import(
        &self,
        rows: &[RosterRow],
        allow_mass_prune: usize,
    ) -> Result<String, Outcome> {
        let dir = self.faults.plane.dir();
        let path = dir.join("soak-roster.csv");
        let mut csv = String::from("name,username,role\n");
        for row in rows {
            csv += &format!(
                "{},{},{}\n",
                row.name,
                row.username,
                row.role.as_deref().unwrap_or("")
            );
        }
        std::fs::write(&path, csv).expect("writing the roster");
        let kubeconfig = self
            .faults
            .plane
            .write_kubeconfig(crate::common::HR, &dir.join("soak-hr.kubeconfig"))
            .expect("HR's kubeconfig");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_homestead"));
        command
            .arg("import")
            .arg(&path)
            .args(["--source", ROSTER_SOURCE, "--prune", "delete"])
            .env("KUBECONFIG", kubeconfig);
        if allow_mass_prune > 0 {
            command.arg(format!("--allow-mass-prune={allow_mass_prune}"));
        }
        let out = match command.output().await {
            Ok(out) => out,
            Err(e) => return Err(Outcome::refused(e)),
        };
        let report = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(Outcome::refused(format!("{report} {stderr}")));
        }
        Ok(report)
    }

    /// Records that User `name`'s deletion was accepted now: its namespace, if it has one (the
    /// Namespace of that name annotated with the User's uid), grants nothing from here on, or,
    /// handed over to `successor`, nothing to the leaver.
    async fn offboarding(&self, name: &str, successor: Option<String>) {
        let now = self.clock.now();
        let Some(user) = self.model.lock().unwrap().users.get(name).cloned() else {
            return;
        };
        let successor = successor.or(user.successor.clone());
        let uid = Api::<Namespace>::all(self.admin.clone())
            .get_opt(&user.namespace)
            .await
            .ok()
            .flatten()
            .filter(|n| {
                user.uid.is_some()
                    && n.annotations().get("homestead.dev/user-uid") == user.uid.as_ref()
            })
            .and_then(|n| n.uid());
        let mut model = self.model.lock().unwrap();
        // A namespace that is not the User's (made by hand, another User's, none yet) is not
        // offboarded with it.
        if uid.is_some() {
            model.offboarded.push(Offboarded {
                namespace: user.namespace.clone(),
                user: name.to_owned(),
                uid,
                owner: user.username.clone(),
                since: now,
                retain: user.retain || successor.is_some(),
                successor: successor.clone(),
            });
        }
        model.group.remove(name);
        if let Some(u) = model.user(name) {
            u.deleting_at = Some(now);
            u.successor = successor;
        }
    }

    /// A SCIM request: status and JSON body (`Null` if none), or the error if it failed.
    async fn call(&self, method: &'static str, path: String, body: Option<Value>) -> (u16, Value) {
        let scim = self.scim;
        tokio::task::spawn_blocking(move || {
            match https_request(
                &scim.address,
                &scim.ca,
                method,
                &format!("/scim/v2{path}"),
                &scim.token,
                body.as_ref(),
            ) {
                Ok((code, text)) => (code, serde_json::from_str(&text).unwrap_or(Value::Null)),
                Err(e) => (0, Value::String(e)),
            }
        })
        .await
        .expect("the SCIM request's thread")
    }

    fn scim_id(&self, name: &str) -> Option<String> {
        self.scim_ids.lock().unwrap().get(name).cloned()
    }

    async fn scim(&self, op: &Op) -> Outcome {
        let outcome = http_outcome;
        let user_path = |name: &str| self.scim_id(name).map(|id| format!("/Users/{id}"));
        match op {
            Op::ScimCreate { name, user_name } => self.scim_create(name, user_name).await,
            Op::ScimActive {
                name,
                active,
                times,
            } => self.scim_active(name, *active, *times).await,
            Op::ScimPutWithoutActive { name } => {
                let Some(path) = user_path(name) else {
                    return Outcome::refused("no SCIM id");
                };
                let username = self
                    .model
                    .lock()
                    .unwrap()
                    .users
                    .get(name)
                    .map(|u| u.username.clone());
                let body = json!({
                    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                    "userName": username, "displayName": format!("{name} (updated)"),
                });
                let (code, body) = self.call("PUT", path, Some(body)).await;
                if (200..300).contains(&code) {
                    // An absent active changes nothing (docs/security.md).
                    self.changed(name, |_, _| {});
                }
                outcome(code, &body)
            }
            Op::ScimRename { name, user_name } => {
                let Some(path) = user_path(name) else {
                    return Outcome::refused("no SCIM id");
                };
                let body = json!({
                    "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
                    "Operations": [{ "op": "replace", "path": "userName", "value": user_name }],
                });
                let (code, body) = self.call("PATCH", path, Some(body)).await;
                if (200..300).contains(&code) {
                    self.model
                        .lock()
                        .unwrap()
                        .usernames
                        .insert(user_name.clone());
                    self.changed(name, |u, _| u.username.clone_from(user_name));
                }
                outcome(code, &body)
            }
            Op::ScimDelete { name } => {
                let Some(path) = user_path(name) else {
                    return Outcome::refused("no SCIM id");
                };
                let (code, body) = self.call("DELETE", path, None).await;
                if (200..300).contains(&code) {
                    self.offboarding(name, None).await;
                }
                outcome(code, &body)
            }
            Op::ScimGroup { members } => self.scim_group(members).await,
            Op::ScimGroupDelete => self.scim_group_delete().await,
            _ => unreachable!("not SCIM's"),
        }
    }

    /// `ScimCreate`: POSTs a SCIM User for `user_name`; the model learns the User the service
    /// made (its name and uid) when it answers 201.
    async fn scim_create(&self, name: &str, user_name: &str) -> Outcome {
        let body = json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
            "userName": user_name, "active": true,
        });
        let (code, created) = self.call("POST", "/Users".into(), Some(body)).await;
        if code == 201 {
            // The SCIM id is the User's uid; its name is the userName's local part, or
            // that with a suffix while a User of that name is still being offboarded.
            let id = created["id"].as_str().unwrap_or_default().to_owned();
            let made = Api::<User>::all(self.admin.clone())
                .list(&Default::default())
                .await
                .ok()
                .and_then(|l| {
                    l.items
                        .into_iter()
                        .find(|u| u.uid().as_deref() == Some(&id))
                });
            let name = made
                .as_ref()
                .map_or_else(|| name.to_owned(), ResourceExt::name_any);
            let uid = made.and_then(|u| u.uid());
            self.scim_ids.lock().unwrap().insert(name.clone(), id);
            let now = self.clock.now();
            let mut model = self.model.lock().unwrap();
            model.usernames.insert(user_name.to_owned());
            model.users.insert(
                name.clone(),
                ModelUser::new(
                    user_name.to_owned(),
                    uid,
                    Writer::Scim,
                    None,
                    None,
                    false,
                    format!("user-{name}"),
                    now,
                ),
            );
        }
        http_outcome(code, &created)
    }

    /// `ScimActive`: PATCHes `active` of the User `name` `times` times (an identity provider's
    /// retries); the model records when it was deactivated.
    async fn scim_active(&self, name: &str, active: bool, times: u32) -> Outcome {
        let Some(path) = self.scim_id(name).map(|id| format!("/Users/{id}")) else {
            return Outcome::refused("no SCIM id");
        };
        let body = json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{ "op": "replace", "path": "active", "value": active }],
        });
        let mut last = (0, Value::Null);
        for _ in 0..times {
            last = self.call("PATCH", path.clone(), Some(body.clone())).await;
            if (200..300).contains(&last.0) {
                self.changed(name, |u, now| {
                    u.deactivated_at = match (active, u.deactivated_at) {
                        (false, Some(at)) => Some(at),
                        (false, None) => Some(now),
                        (true, _) => None,
                    };
                });
            }
        }
        http_outcome(last.0, &last.1)
    }

    /// `ScimGroupDelete`: deletes the directory group, if the service made it; the model marks
    /// its members as changed.
    async fn scim_group_delete(&self) -> Outcome {
        let Some(id) = self.group_id.lock().unwrap().clone() else {
            return Outcome::refused("no group yet");
        };
        let (code, answer) = self.call("DELETE", format!("/Groups/{id}"), None).await;
        if (200..300).contains(&code) {
            *self.group_id.lock().unwrap() = None;
            let now = self.clock.now();
            let mut model = self.model.lock().unwrap();
            for name in std::mem::take(&mut model.group) {
                if let Some(u) = model.user(&name) {
                    u.changed_at = now;
                }
            }
        }
        http_outcome(code, &answer)
    }

    /// `ScimGroup`: creates the directory group, or replaces its members with `members`; the
    /// model marks every User who joined or left it as changed.
    async fn scim_group(&self, members: &[String]) -> Outcome {
        let ids: Vec<Value> = members
            .iter()
            .filter_map(|m| self.scim_id(m))
            .map(|id| json!({ "value": id }))
            .collect();
        let body = json!({
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": GROUP_NAME, "members": ids,
        });
        let id = self.group_id.lock().unwrap().clone();
        let (code, answer) = match id {
            Some(id) => self.call("PUT", format!("/Groups/{id}"), Some(body)).await,
            None => self.call("POST", "/Groups".into(), Some(body)).await,
        };
        if (200..300).contains(&code) {
            if let Some(id) = answer["id"].as_str() {
                *self.group_id.lock().unwrap() = Some(id.to_owned());
            }
            let now = self.clock.now();
            let mut model = self.model.lock().unwrap();
            let old = std::mem::replace(&mut model.group, members.iter().cloned().collect());
            for name in old.symmetric_difference(&model.group.clone()) {
                if let Some(u) = model.user(name) {
                    u.changed_at = now;
                }
            }
        }
        http_outcome(code, &answer)
    }

    /// The namespace of tenant `i`'s oldest live User (the one that holds their identity).
    pub(crate) fn tenant_namespace(&self, tenant: usize) -> Option<String> {
        let model = self.model.lock().unwrap();
        model
            .users
            .values()
            .filter(|u| u.username == TENANTS[tenant] && u.deleting_at.is_none())
            .min_by(|a, b| a.created_at.total_cmp(&b.created_at))
            .map(|u| u.namespace.clone())
    }

    async fn tenant(&self, op: &Op) -> Outcome {
        let tenant = match op {
            Op::TenantBindings { tenant, .. }
            | Op::TenantRewriteHomestead { tenant, .. }
            | Op::TenantShare { tenant, .. }
            | Op::TenantReshare { tenant, .. }
            | Op::TenantRewriteShare { tenant, .. }
            | Op::TenantOpenIsolation { tenant }
            | Op::TenantExternalIp { tenant } => *tenant,
            _ => unreachable!("not a tenant's"),
        };
        let Some(ns) = self.tenant_namespace(tenant) else {
            return Outcome::refused("no namespace");
        };
        let client = self.tenants[tenant].clone();
        match op {
            Op::TenantBindings {
                subject,
                role,
                count,
                ..
            } => {
                let to = (subject.as_str(), role.as_str(), *count);
                self.tenant_bindings(tenant, client, &ns, to).await
            }
            Op::TenantRewriteHomestead { subject, .. } => {
                let api: Api<RoleBinding> = Api::namespaced(client, &ns);
                let patch = json!({ "subjects": [
                    { "kind": "User", "name": TENANTS[tenant], "apiGroup": "rbac.authorization.k8s.io" },
                    { "kind": "User", "name": subject, "apiGroup": "rbac.authorization.k8s.io" },
                ]});
                Outcome::from(
                    api.patch(
                        "homestead-user",
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await,
                )
            }
            Op::TenantShare {
                grantee,
                role,
                seconds,
                ..
            } => {
                let share = (grantee.as_str(), role.as_str(), *seconds);
                self.tenant_share(tenant, client, &ns, share).await
            }
            Op::TenantReshare { other, .. } => self.tenant_reshare(tenant, *other, client).await,
            Op::TenantRewriteShare { subject, .. } => {
                let api: Api<RoleBinding> = Api::namespaced(client, &ns);
                let Ok(bindings) = api
                    .list(&ListParams::default().labels("homestead.dev/share"))
                    .await
                else {
                    return Outcome::refused("no list");
                };
                let Some(binding) = bindings.items.first() else {
                    return Outcome::refused("no share binding");
                };
                let patch = json!({ "subjects": [
                    { "kind": "User", "name": subject, "apiGroup": "rbac.authorization.k8s.io" },
                ]});
                Outcome::from(
                    api.patch(
                        &binding.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await,
                )
            }
            Op::TenantOpenIsolation { .. } => self.tenant_open_isolation(tenant, client, &ns).await,
            Op::TenantExternalIp { .. } => {
                let service: Service = serde_json::from_value(json!({
                    "metadata": { "generateName": "steal-" },
                    "spec": { "ports": [{ "port": 80 }], "externalIPs": ["10.244.0.9"] },
                }))
                .expect("a valid Service");
                let result = Api::<Service>::namespaced(client, &ns)
                    .create(&PostParams::default(), &service)
                    .await;
                if result.is_ok() {
                    self.broken.lock().unwrap().push(format!(
                        "tenant-services-bounded: {} created a Service with externalIPs in {ns}",
                        TENANTS[tenant]
                    ));
                }
                Outcome::from(result)
            }
            _ => unreachable!("not a tenant's"),
        }
    }

    /// `TenantShare`: the tenant shares `ns` with the live User whose identity is `grantee`
    /// (`homestead.dev/created-by` names the tenant, as the admission policy requires).
    async fn tenant_share(
        &self,
        tenant: usize,
        client: Client,
        ns: &str,
        (grantee, role, seconds): (&str, &str, u64),
    ) -> Outcome {
        let name = {
            let model = self.model.lock().unwrap();
            model
                .users
                .iter()
                .find(|(_, u)| u.username == grantee && u.deleting_at.is_none())
                .map(|(name, _)| name.clone())
        };
        let Some(name) = name else {
            return Outcome::refused("no such grantee");
        };
        let until = (k8s_openapi::jiff::Timestamp::now()
            + k8s_openapi::jiff::SignedDuration::from_secs(seconds.cast_signed()))
        .round(k8s_openapi::jiff::Unit::Second)
        .expect("a time");
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "generateName": "share-",
                "annotations": { "homestead.dev/created-by": TENANTS[tenant] } },
            "spec": { "to": [{ "user": name }], "role": role,
                "expiresAt": until.to_string(), "reason": "soak" },
        }))
        .expect("a valid Share");
        Outcome::from(
            Api::<Share>::namespaced(client, ns)
                .create(&PostParams::default(), &share)
                .await,
        )
    }

    /// `TenantReshare`: the tenant tries to share `other`'s home; accepted, it breaks the
    /// promise that only a home's owner shares it.
    async fn tenant_reshare(&self, tenant: usize, other: usize, client: Client) -> Outcome {
        let Some(ns) = self.tenant_namespace(other) else {
            return Outcome::refused("no namespace");
        };
        if TENANTS[tenant] == TENANTS[other] {
            return Outcome::refused("their own home");
        }
        let until =
            k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(60);
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "generateName": "reshare-",
                "annotations": { "homestead.dev/created-by": TENANTS[tenant] } },
            "spec": { "to": [{ "user": "hr-0" }], "role": "view",
                "expiresAt": until.round(k8s_openapi::jiff::Unit::Second).expect("a time").to_string(),
                "reason": "soak: not theirs to share" },
        }))
        .expect("a valid Share");
        let result = Api::<Share>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &share)
            .await;
        if result.is_ok() {
            self.broken.lock().unwrap().push(format!(
                "only-the-owner-shares: {} created a Share in {ns}",
                TENANTS[tenant]
            ));
        }
        // A token would outlive whatever access a Share gave them (docs/sharing.md, "What a
        // Share gave ends with it").
        let request = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                expiration_seconds: Some(600),
                ..Default::default()
            },
            ..Default::default()
        };
        let minted = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client, &ns)
            .create_token_request("default", &PostParams::default(), &request)
            .await;
        if minted.is_ok() {
            self.broken.lock().unwrap().push(format!(
                "what-a-share-gave-ends: {} minted a token of {ns}'s default ServiceAccount",
                TENANTS[tenant]
            ));
        }
        Outcome::from(result)
    }

    /// `TenantBindings`: the tenant makes `count` RoleBindings of `role` in its namespace `ns`
    /// to `subject` (`self`, `group`, `serviceaccount` or a person).
    async fn tenant_bindings(
        &self,
        tenant: usize,
        client: Client,
        ns: &str,
        (subject, role, count): (&str, &str, u32),
    ) -> Outcome {
        let subject = match subject {
            "self" => {
                json!({ "kind": "User", "name": TENANTS[tenant], "apiGroup": "rbac.authorization.k8s.io" })
            }
            "group" => {
                json!({ "kind": "Group", "name": TENANT_GROUP, "apiGroup": "rbac.authorization.k8s.io" })
            }
            "serviceaccount" => {
                json!({ "kind": "ServiceAccount", "name": "default", "namespace": ns })
            }
            person => {
                json!({ "kind": "User", "name": person, "apiGroup": "rbac.authorization.k8s.io" })
            }
        };
        let api: Api<RoleBinding> = Api::namespaced(client, ns);
        let mut made = 0;
        for _ in 0..count {
            let binding: RoleBinding = serde_json::from_value(json!({
                "metadata": { "generateName": "tenant-" },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
                "subjects": [subject],
            }))
            .expect("a valid RoleBinding");
            if api.create(&PostParams::default(), &binding).await.is_ok() {
                made += 1;
            }
        }
        Outcome {
            ok: made > 0,
            detail: format!("{made} of {count} created in {ns}"),
        }
    }

    /// `TenantOpenIsolation`: the tenant adds an allow-all NetworkPolicy to its namespace `ns`;
    /// one the API server accepts in an isolated namespace breaks a promise.
    async fn tenant_open_isolation(&self, tenant: usize, client: Client, ns: &str) -> Outcome {
        let isolated = Api::<Namespace>::all(self.admin.clone())
            .get_opt(ns)
            .await
            .ok()
            .flatten()
            .is_some_and(|n| {
                n.labels()
                    .get("homestead.dev/isolation")
                    .map(String::as_str)
                    == Some("Isolated")
            });
        let policy: NetworkPolicy = serde_json::from_value(json!({
            "metadata": { "generateName": "open-" },
            "spec": { "podSelector": {}, "ingress": [{}], "egress": [{}] },
        }))
        .expect("a valid NetworkPolicy");
        let result = Api::<NetworkPolicy>::namespaced(client, ns)
            .create(&PostParams::default(), &policy)
            .await;
        if isolated && result.is_ok() {
            self.broken.lock().unwrap().push(format!(
                "isolation-holds: {} opened the isolated namespace {ns} with an allow-all NetworkPolicy",
                TENANTS[tenant]
            ));
        }
        Outcome::from(result)
    }

    async fn platform(&self, op: &Op) -> Outcome {
        match op {
            Op::PlatformProfileRole { profile, role } => {
                let result = Api::<Profile>::all(self.admin.clone())
                    .patch(
                        profile,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "role": role } })),
                    )
                    .await;
                if result.is_ok() {
                    let now = self.clock.now();
                    let mut model = self.model.lock().unwrap();
                    model.profiles.insert(profile.clone(), role.clone());
                    // Its Users get a new RoleBinding: each is due a current Ready again.
                    for user in model.users.values_mut() {
                        user.changed_at = now;
                    }
                }
                Outcome::from(result)
            }
            Op::PlatformSquat { namespace } => {
                let object: Namespace =
                    serde_json::from_value(json!({ "metadata": { "name": namespace } }))
                        .expect("a valid Namespace");
                let result = Api::<Namespace>::all(self.admin.clone())
                    .create(&PostParams::default(), &object)
                    .await;
                if result.is_ok() {
                    self.model
                        .lock()
                        .unwrap()
                        .squatted
                        .insert(namespace.clone());
                }
                Outcome::from(result)
            }
            Op::PlatformAdopt { namespace, user } => {
                let label = json!({ "metadata": { "labels": { LABEL_ADOPT_FOR: user } } });
                let result = Api::<Namespace>::all(self.admin.clone())
                    .patch(namespace, &PatchParams::default(), &Patch::Merge(&label))
                    .await;
                let mut model = self.model.lock().unwrap();
                // Handed to the User that names it: from now on Homestead's to write (the
                // operator adopts it, or once the User may have it: another User with its
                // username may hold it up).
                let asks = model
                    .users
                    .get(user)
                    .is_some_and(|u| &u.namespace == namespace && u.deleting_at.is_none());
                if result.is_ok() && asks {
                    model.squatted.remove(namespace);
                    model.adopted.insert(namespace.clone(), user.clone());
                }
                Outcome::from(result)
            }
            Op::PlatformGrantRetained { namespace, subject } => {
                let binding: RoleBinding = serde_json::from_value(json!({
                    "metadata": { "generateName": "platform-" },
                    "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
                    "subjects": [{ "kind": "User", "name": subject, "apiGroup": "rbac.authorization.k8s.io" }],
                }))
                .expect("a valid RoleBinding");
                Outcome::from(
                    Api::<RoleBinding>::namespaced(self.admin.clone(), namespace)
                        .create(&PostParams::default(), &binding)
                        .await,
                )
            }
            Op::PlatformPurge { namespace } => {
                let result = Api::<Namespace>::all(self.admin.clone())
                    .delete(namespace, &DeleteParams::default())
                    .await;
                Outcome::from(result)
            }
            _ => unreachable!("not the platform's"),
        }
    }

    /// Waits `ms` milliseconds (the pace between operations).
    pub async fn pause(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// The outcome of an HTTP answer `code` with `body`: success for a 2xx status.
fn http_outcome(code: u16, body: &Value) -> Outcome {
    let ok = (200..300).contains(&code);
    Outcome {
        ok,
        detail: if ok {
            format!("{code}")
        } else {
            format!("{code} {body}")
        },
    }
}
