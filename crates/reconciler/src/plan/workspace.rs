//! What a [`Workspace`] should be (docs/workspaces.md): pure decisions over the Workspace, its
//! owner and what the caches hold, and the desired objects that follow. A workspace is a home
//! (docs/design.md, rule 25): its Namespace, guards and bindings are built here as a User's are
//! in [`crate::plan::desired`], with the Workspace as their [`Holder`](super::ownership::Holder).
//!
//! [`decide`] answers, in this order: is the namespace one Homestead may make (prefix, valid,
//! not reserved); is the owner there and may its people have access (a User live, a group
//! existing); for a self-service workspace, did its owner create it, does the owner's Profile
//! allow it, is it within `max` (the youngest beyond it are refused), may it name its Profile;
//! does its Profile exist; are its roles allow-listed. Then who gets which role
//! ([`homestead_model::workspace::grants`]).

use std::collections::BTreeMap;

use homestead_api::{
    ANNOTATION_APPLIED, ANNOTATION_CREATED_BY, ANNOTATION_OWNER, ANNOTATION_WORKSPACE_UID,
    DeletionPolicy, DirectoryGroup, LABEL_HANDED_OVER_FROM, LABEL_ISOLATION, LABEL_MANAGED_BY,
    LABEL_RETAINED_FROM, LABEL_SELF_SERVICE, LABEL_TENANT_ROLE_BINDINGS, LABEL_WORKSPACE,
    NetworkIsolation, Profile, TenantRoleBindings, User, WORKSPACE_ADMINS_BINDING,
    WORKSPACE_MEMBERS_BINDING, Workspace, is_dns1123_label,
};
use homestead_model::workspace::{ADMIN_ROLE, Grant, Owner, grants, member_role};
use k8s_openapi::api::core::v1::{LimitRangeSpec, Namespace};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::plan::config::{Config, PodSecurity};
use crate::plan::desired::{ISOLATED, applied_print};
use crate::plan::ownership::{managed_labels, owner_reference};
use crate::plan::share::inactive;

/// What a workspace's Profile adds to its namespace: the guards that exist before access.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Guards {
    /// The Profile applied (by name), if any.
    pub profile: Option<String>,
    /// Pod Security levels: the operator's, each overridden by the Profile's.
    pub pod_security: PodSecurity,
    /// The ResourceQuota's `spec.hard` (resource names to quantities), if the Profile has one.
    pub quota: Option<BTreeMap<String, Quantity>>,
    /// The LimitRange's spec, if the Profile has one.
    pub limit_range: Option<LimitRangeSpec>,
    /// `Some(namespaces allowed in)` when the Profile isolates the namespace.
    pub isolation: Option<Vec<String>>,
    /// The Profile's `sharing.tenantRoleBindings` (`Allow` without one).
    pub tenant_role_bindings: TenantRoleBindings,
    /// The Profile's extra namespace labels and annotations.
    pub labels: BTreeMap<String, String>,
    /// See `labels`.
    pub annotations: BTreeMap<String, String>,
}

impl Guards {
    /// The guards of `profile` (none: the operator's Pod Security levels alone), under `config`.
    pub fn of(profile: Option<&Profile>, config: &Config) -> Self {
        let mut guards = Self {
            pod_security: config.pod_security,
            ..Self::default()
        };
        let Some(profile) = profile else {
            return guards;
        };
        let spec = &profile.spec;
        guards.profile = Some(profile.name_any());
        if let Some(levels) = spec.pod_security {
            let ps = &mut guards.pod_security;
            ps.enforce = levels.enforce.unwrap_or(ps.enforce);
            ps.warn = levels.warn.unwrap_or(ps.warn);
            ps.audit = levels.audit.unwrap_or(ps.audit);
        }
        guards.quota = spec.quota.as_ref().map(|q| q.hard.clone());
        guards.limit_range = spec.limit_range.clone();
        guards.isolation = (spec.network_isolation == NetworkIsolation::Isolated)
            .then(|| spec.allow_ingress_from.clone());
        guards.tenant_role_bindings = spec
            .sharing
            .as_ref()
            .map(|s| s.tenant_role_bindings)
            .unwrap_or_default();
        if let Some(meta) = &spec.namespace {
            guards.labels = meta.labels.clone();
            guards.annotations = meta.annotations.clone();
        }
        guards
    }
}

/// Why a workspace grants nothing and is not `Ready`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The namespace does not start with the workspace prefix, or is not a valid name.
    NamespaceNotAllowed(String),
    /// The namespace is reserved.
    ReservedNamespace(String),
    /// The namespace exists and is not this Workspace's.
    NamespaceConflict(String),
    /// The owner User does not exist (yet).
    OwnerNotFound(String),
    /// A self-service workspace created by someone else than its owner.
    NotOwner {
        /// Who created it (`homestead.dev/created-by`).
        creator: String,
    },
    /// The owner's Profile does not let its people create workspaces.
    SelfServiceNotAllowed(Option<String>),
    /// Beyond the owner's Profile's `max`: the youngest are refused.
    OverLimit {
        /// The limit.
        max: u32,
    },
    /// A self-service workspace names a Profile its owner's Profile does not list.
    ProfileNotAllowed(String),
    /// `spec.profile` names no Profile.
    ProfileNotFound(String),
    /// A role not in the operator's allow-list.
    RoleNotAllowed(String),
}

impl Refusal {
    /// The `Ready` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NamespaceNotAllowed(_) => "NamespaceNotAllowed",
            Self::ReservedNamespace(_) => "ReservedNamespace",
            Self::NamespaceConflict(_) => "NamespaceConflict",
            Self::OwnerNotFound(_) => "OwnerNotFound",
            Self::NotOwner { .. } => "NotOwner",
            Self::SelfServiceNotAllowed(_) => "SelfServiceNotAllowed",
            Self::OverLimit { .. } => "OverLimit",
            Self::ProfileNotAllowed(_) => "ProfileNotAllowed",
            Self::ProfileNotFound(_) => "ProfileNotFound",
            Self::RoleNotAllowed(_) => "RoleNotAllowed",
        }
    }

    /// The `Ready` message: what is wrong and what to do.
    pub fn message(&self, config: &Config) -> String {
        match self {
            Self::NamespaceNotAllowed(ns) => format!(
                "namespace {ns:?} is not allowed: a workspace's namespace is a valid name that starts with {:?} (--workspace-prefix)",
                config.workspace_prefix
            ),
            Self::ReservedNamespace(ns) => format!("namespace {ns:?} is reserved"),
            Self::NamespaceConflict(ns) => format!(
                "namespace {ns:?} already exists and is not this workspace's; Homestead never takes over a namespace it did not create for it"
            ),
            Self::OwnerNotFound(user) => {
                format!("the owner User {user:?} does not exist; nobody has access until it does")
            }
            Self::NotOwner { creator } => format!(
                "created by {creator:?}, who is not its owner: a person creates workspaces only for themselves; the platform creates them for others"
            ),
            Self::SelfServiceNotAllowed(profile) => format!(
                "the owner's Profile ({}) does not let its people create workspaces (spec.workspaces.selfService)",
                profile.as_deref().unwrap_or("none")
            ),
            Self::OverLimit { max } => format!(
                "the owner already has {max} workspaces of their own, the most their Profile allows (spec.workspaces.max); the youngest beyond it are refused: delete one, or ask for a higher limit"
            ),
            Self::ProfileNotAllowed(profile) => format!(
                "Profile {profile:?} is not one the owner's Profile lets them choose (spec.workspaces.profiles)"
            ),
            Self::ProfileNotFound(profile) => format!("Profile {profile:?} does not exist"),
            Self::RoleNotAllowed(role) => {
                format!("role {role:?} is not in the operator's allow-list (--allowed-role)")
            }
        }
    }
}

/// What a workspace should be now.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Access as the owner says: the grants (sorted by User), and the guards.
    Open(Vec<Grant>, Guards),
    /// Its people have no access, its data stays: the owner is suspended, expired or a
    /// duplicate, or (a team's) its group is gone. The message says which.
    Suspended(String, Guards),
    /// Refused: nothing granted.
    Refused(Refusal),
}

/// What [`decide`] reads, looked up by the caller from the caches.
pub struct Looked<'a> {
    /// The owner User (a personal workspace), if cached.
    pub owner_user: Option<&'a User>,
    /// Whether the owner User is a duplicate of another User's identity.
    pub owner_duplicate: bool,
    /// The owner group (a team workspace), if cached.
    pub owner_group: Option<&'a DirectoryGroup>,
    /// The owner's Profile (a person's applied Profile, or the one the directory chooses for a
    /// team's group), if any.
    pub owner_profile: Option<&'a Profile>,
    /// The Profile `spec.profile` names, if it does and it exists.
    pub chosen_profile: Option<&'a Profile>,
    /// The owner's other self-service workspaces (any order).
    pub siblings: Vec<&'a Workspace>,
    /// The User named `name` when it may have access now (exists, live, not a duplicate).
    pub live: &'a dyn Fn(&str) -> Option<&'a User>,
}

/// The namespace of `workspace`: `spec.namespace.name`, else `<workspace prefix><name>`.
pub fn namespace_of(workspace: &Workspace, config: &Config) -> String {
    workspace
        .spec
        .namespace
        .as_ref()
        .and_then(|n| n.name.clone())
        .unwrap_or_else(|| format!("{}{}", config.workspace_prefix, workspace.name_any()))
}

/// Whether a person made `workspace` for themselves (label `homestead.dev/self-service=true`,
/// which the admission policy `homestead-workspace-creator` demands of everyone but the
/// platform, and keeps).
pub fn is_self_service(workspace: &Workspace) -> bool {
    workspace
        .labels()
        .get(LABEL_SELF_SERVICE)
        .map(String::as_str)
        == Some("true")
}

/// What `workspace` should be at `now` (see the module docs).
pub fn decide(
    workspace: &Workspace,
    looked: &Looked<'_>,
    config: &Config,
    now: Timestamp,
) -> Verdict {
    let namespace = namespace_of(workspace, config);
    // A leaver's home handed over keeps its namespace, which has a person's name.
    let handed_over = !is_self_service(workspace)
        && workspace.labels().contains_key(LABEL_HANDED_OVER_FROM)
        && config.allows_namespace(&namespace);
    if !(namespace.starts_with(&config.workspace_prefix) || handed_over)
        || !is_dns1123_label(&namespace)
    {
        return Verdict::Refused(Refusal::NamespaceNotAllowed(namespace));
    }
    if config.is_reserved(&namespace) {
        return Verdict::Refused(Refusal::ReservedNamespace(namespace));
    }
    let Some(owner) = Owner::of(workspace) else {
        return Verdict::Refused(Refusal::OwnerNotFound(String::new()));
    };
    if let Owner::User(name) = &owner {
        let Some(user) = looked.owner_user else {
            return Verdict::Refused(Refusal::OwnerNotFound(name.clone()));
        };
        if is_self_service(workspace)
            && let Some(refusal) = self_service_refusal(workspace, user, looked)
        {
            return Verdict::Refused(refusal);
        }
    }
    let profile = match &workspace.spec.profile {
        Some(name) => match looked.chosen_profile {
            Some(profile) => Some(profile),
            None => return Verdict::Refused(Refusal::ProfileNotFound(name.clone())),
        },
        None => looked.owner_profile,
    };
    for role in [ADMIN_ROLE, member_role(workspace)] {
        if !config.allowed_roles.contains(role) || role == "cluster-admin" {
            return Verdict::Refused(Refusal::RoleNotAllowed(role.to_owned()));
        }
    }
    let guards = Guards::of(profile, config);
    match (&owner, looked.owner_user, looked.owner_group) {
        (Owner::User(name), Some(user), _) => {
            let why =
                inactive(user, now).or(looked.owner_duplicate.then_some("a duplicate identity"));
            if let Some(why) = why {
                return Verdict::Suspended(format!("its owner {name} is {why}"), guards);
            }
        }
        (Owner::Group(name), _, None) => {
            return Verdict::Suspended(
                format!("its owner group {name} is gone: access revoked, data kept"),
                guards,
            );
        }
        _ => {}
    }
    Verdict::Open(grants(workspace, looked.owner_group, looked.live), guards)
}

/// Why the self-service `workspace` of `owner` is refused, if it is: not created by its owner,
/// not allowed by the owner's Profile, beyond its `max` (counting the owner's older
/// self-service workspaces, by creation time then name), or naming a Profile not listed.
fn self_service_refusal(
    workspace: &Workspace,
    owner: &User,
    looked: &Looked<'_>,
) -> Option<Refusal> {
    let creator = workspace
        .annotations()
        .get(ANNOTATION_CREATED_BY)
        .cloned()
        .unwrap_or_default();
    if creator != owner.spec.identity.username {
        return Some(Refusal::NotOwner { creator });
    }
    let limits = looked
        .owner_profile
        .and_then(|p| p.spec.workspaces.clone())
        .unwrap_or_default();
    if !limits.self_service {
        return Some(Refusal::SelfServiceNotAllowed(
            looked.owner_profile.map(ResourceExt::name_any),
        ));
    }
    let age = |w: &Workspace| {
        (
            w.metadata.creation_timestamp.clone().map(|t| t.0),
            w.name_any(),
        )
    };
    // Only those the owner made count: one someone else made in their name is refused
    // (NotOwner) and must not take their place.
    let made_by_owner = |w: &Workspace| {
        w.annotations().get(ANNOTATION_CREATED_BY) == Some(&owner.spec.identity.username)
    };
    let older = looked
        .siblings
        .iter()
        .filter(|w| w.name_any() != workspace.name_any() && made_by_owner(w))
        .filter(|w| age(w) < age(workspace))
        .count();
    if older >= limits.max as usize {
        return Some(Refusal::OverLimit { max: limits.max });
    }
    match &workspace.spec.profile {
        Some(profile) if !limits.profiles.contains(profile) => {
            Some(Refusal::ProfileNotAllowed(profile.clone()))
        }
        _ => None,
    }
}

/// The identities that may write Shares in the workspace and bind people there (the admission
/// policies `homestead-share-owner` and `homestead-home-grants` read the namespace's
/// `homestead.dev/owner` annotation): its admins with access now, one per line. An identity
/// with a line break is left out (it could name two).
pub fn owners_annotation(grants: &[Grant]) -> String {
    let mut owners: Vec<&str> = grants
        .iter()
        .filter(|g| g.role == ADMIN_ROLE && is_admin(g))
        .map(|g| g.username.as_str())
        .filter(|u| !u.contains('\n'))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    owners.join("\n")
}

/// Whether `grant` is the owner's or an admin's (not a member's role that happens to be admin).
fn is_admin(grant: &Grant) -> bool {
    use homestead_model::via::Via;
    match &grant.via {
        Via::Workspace(_) => true,
        Via::Team { admin, .. } => *admin,
        _ => false,
    }
}

/// The desired Namespace `name` of `workspace`: the managed labels (`homestead.dev/workspace`),
/// Pod Security, isolation and governance labels from `guards`, the uid annotation, the
/// owners' annotation ([`owners_annotation`]; empty while nobody has access), and under
/// `deletionPolicy: Delete` an owner reference to the Workspace.
pub fn desired_namespace(
    workspace: &Workspace,
    name: &str,
    guards: &Guards,
    owners: &str,
) -> Namespace {
    let mut labels = guards.labels.clone();
    labels.extend(managed_labels(workspace));
    // The record of a handover stays on the namespace as on the Workspace.
    if let Some(leaver) = workspace.labels().get(LABEL_HANDED_OVER_FROM) {
        labels.insert(LABEL_HANDED_OVER_FROM.to_owned(), leaver.clone());
    }
    if guards.isolation.is_some() {
        labels.insert(LABEL_ISOLATION.to_owned(), ISOLATED.to_owned());
    }
    match guards.tenant_role_bindings {
        TenantRoleBindings::Allow => {}
        TenantRoleBindings::ServiceAccountsOnly => {
            labels.insert(
                LABEL_TENANT_ROLE_BINDINGS.to_owned(),
                "ServiceAccountsOnly".to_owned(),
            );
        }
        TenantRoleBindings::Forbid => {
            labels.insert(LABEL_TENANT_ROLE_BINDINGS.to_owned(), "Forbid".to_owned());
        }
    }
    let ps = guards.pod_security;
    for (mode, level) in [
        ("enforce", ps.enforce),
        ("warn", ps.warn),
        ("audit", ps.audit),
    ] {
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            level.as_str().to_owned(),
        );
    }
    let mut annotations = guards.annotations.clone();
    annotations.insert(
        ANNOTATION_WORKSPACE_UID.to_owned(),
        workspace.uid().unwrap_or_default(),
    );
    annotations.insert(ANNOTATION_OWNER.to_owned(), owners.to_owned());
    let owner_references = (workspace.spec.deletion_policy == DeletionPolicy::Delete)
        .then(|| vec![owner_reference(workspace)]);
    let print = applied_print(&labels, &annotations, owner_references.as_deref());
    annotations.insert(ANNOTATION_APPLIED.to_owned(), print);
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references,
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The namespace as a retained workspace leaves it: not Homestead's (no managed-by or
/// workspace label, no owner reference, no owners), labelled
/// `homestead.dev/retained-from=<workspace>` so the standing rule keeps every RoleBinding out.
pub fn retained_namespace(workspace: &Workspace, name: &str, guards: &Guards) -> Namespace {
    let mut ns = desired_namespace(workspace, name, guards, "");
    let labels = ns.metadata.labels.get_or_insert_default();
    labels.remove(LABEL_MANAGED_BY);
    labels.remove(LABEL_WORKSPACE);
    labels.remove(LABEL_TENANT_ROLE_BINDINGS);
    labels.insert(LABEL_RETAINED_FROM.to_owned(), workspace.name_any());
    ns.metadata.owner_references = None;
    if let Some(annotations) = ns.metadata.annotations.as_mut() {
        annotations.remove(ANNOTATION_APPLIED);
        annotations.remove(ANNOTATION_OWNER);
    }
    ns
}

/// The two RoleBindings of a workspace, each with its desired object or `None` (no subjects:
/// removed): `homestead-workspace-admins` binds `admin` to the owner or the admins;
/// `homestead-workspace-members` binds `members.role` to the members that are not admins.
/// Subjects are the Users' identities (kind User), sorted.
pub fn desired_bindings(
    workspace: &Workspace,
    namespace: &str,
    grants: &[Grant],
) -> [(&'static str, Option<RoleBinding>); 2] {
    let (admins, members): (Vec<&Grant>, Vec<&Grant>) = grants.iter().partition(|g| is_admin(g));
    let binding = |name: &str, role: &str, who: &[&Grant]| {
        (!who.is_empty()).then(|| {
            let mut subjects: Vec<Subject> = who
                .iter()
                .map(|g| Subject {
                    kind: "User".to_owned(),
                    name: g.username.clone(),
                    api_group: Some("rbac.authorization.k8s.io".to_owned()),
                    namespace: None,
                })
                .collect();
            subjects.sort_by(|a, b| a.name.cmp(&b.name));
            subjects.dedup_by(|a, b| a.name == b.name);
            RoleBinding {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    labels: Some(managed_labels(workspace)),
                    owner_references: Some(vec![owner_reference(workspace)]),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".to_owned(),
                    kind: "ClusterRole".to_owned(),
                    name: role.to_owned(),
                },
                subjects: Some(subjects),
            }
        })
    };
    [
        (
            WORKSPACE_ADMINS_BINDING,
            binding(WORKSPACE_ADMINS_BINDING, ADMIN_ROLE, &admins),
        ),
        (
            WORKSPACE_MEMBERS_BINDING,
            binding(WORKSPACE_MEMBERS_BINDING, member_role(workspace), &members),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::WorkspaceLimits;
    use serde_json::json;

    fn workspace(value: serde_json::Value) -> Workspace {
        let mut ws: Workspace = serde_json::from_value(value).unwrap();
        ws.metadata.uid = Some(format!("uid-{}", ws.name_any()));
        ws
    }

    fn personal(name: &str, owner: &str, created_by: &str, at: &str) -> Workspace {
        workspace(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
            "metadata": { "name": name, "creationTimestamp": at,
                "labels": { LABEL_SELF_SERVICE: "true" },
                "annotations": { ANNOTATION_CREATED_BY: created_by } },
            "spec": { "owner": { "user": owner }, "reason": "a project" },
        }))
    }

    fn team(name: &str, group: &str, admins: &[&str]) -> Workspace {
        workspace(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
            "metadata": { "name": name },
            "spec": { "owner": { "group": group }, "admins": admins, "reason": "a team" },
        }))
    }

    fn self_service(max: u32) -> Profile {
        let mut profile = Profile::test("engineer");
        profile.spec.workspaces = Some(WorkspaceLimits {
            self_service: true,
            max,
            profiles: vec!["big".to_owned()],
        });
        profile
    }

    fn none<'a>(_: &str) -> Option<&'a User> {
        None
    }

    fn looked<'a>(
        user: Option<&'a User>,
        group: Option<&'a DirectoryGroup>,
        profile: Option<&'a Profile>,
        siblings: Vec<&'a Workspace>,
        live: &'a dyn Fn(&str) -> Option<&'a User>,
    ) -> Looked<'a> {
        Looked {
            owner_user: user,
            owner_duplicate: false,
            owner_group: group,
            owner_profile: profile,
            chosen_profile: None,
            siblings,
            live,
        }
    }

    fn reason(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Open(..) => "Open",
            Verdict::Suspended(..) => "Suspended",
            Verdict::Refused(refusal) => refusal.reason(),
        }
    }

    #[test]
    fn a_person_holds_up_to_max_workspaces_and_the_youngest_beyond_it_are_refused() {
        let alice = User::test("alice");
        let live = |name: &str| (name == "alice").then_some(&alice);
        let profile = self_service(2);
        let config = Config::default();
        let now = Timestamp::now();
        let a = personal("a", "alice", "alice@example.com", "2026-01-01T00:00:00Z");
        let b = personal("b", "alice", "alice@example.com", "2026-01-02T00:00:00Z");
        let c = personal("c", "alice", "alice@example.com", "2026-01-03T00:00:00Z");
        let all = vec![&a, &b, &c];
        let verdict = |w: &Workspace| {
            decide(
                w,
                &looked(Some(&alice), None, Some(&profile), all.clone(), &live),
                &config,
                now,
            )
        };
        assert_eq!(reason(&verdict(&a)), "Open");
        assert_eq!(reason(&verdict(&b)), "Open");
        assert_eq!(reason(&verdict(&c)), "OverLimit");
        // One someone else made in alice's name is refused and takes no place of hers.
        let squat = personal("s", "alice", "bob@example.com", "2025-01-01T00:00:00Z");
        let with_squat = vec![&squat, &a, &b];
        let l = looked(Some(&alice), None, Some(&profile), with_squat, &live);
        assert_eq!(reason(&decide(&b, &l, &config, now)), "Open");
        let Verdict::Open(grants, _) = verdict(&a) else {
            unreachable!()
        };
        assert_eq!(grants.len(), 1);
        assert_eq!(
            (grants[0].user.as_str(), grants[0].role.as_str()),
            ("alice", "admin")
        );
    }

    #[test]
    fn a_person_never_creates_one_for_someone_else_nor_without_self_service() {
        let alice = User::test("alice");
        let config = Config::default();
        let now = Timestamp::now();
        let by_bob = personal("a", "alice", "bob@example.com", "2026-01-01T00:00:00Z");
        let profile = self_service(5);
        let v = decide(
            &by_bob,
            &looked(Some(&alice), None, Some(&profile), vec![], &none),
            &config,
            now,
        );
        assert_eq!(reason(&v), "NotOwner");
        let own = personal("a", "alice", "alice@example.com", "2026-01-01T00:00:00Z");
        let plain = Profile::test("engineer");
        let v = decide(
            &own,
            &looked(Some(&alice), None, Some(&plain), vec![], &none),
            &config,
            now,
        );
        assert_eq!(reason(&v), "SelfServiceNotAllowed");
        let v = decide(
            &own,
            &looked(None, None, Some(&profile), vec![], &none),
            &config,
            now,
        );
        assert_eq!(reason(&v), "OwnerNotFound");
        let mut other_profile = own.clone();
        other_profile.spec.profile = Some("huge".to_owned());
        let mut l = looked(Some(&alice), None, Some(&profile), vec![], &none);
        let huge = Profile::test("huge");
        l.chosen_profile = Some(&huge);
        assert_eq!(
            reason(&decide(&other_profile, &l, &config, now)),
            "ProfileNotAllowed"
        );
    }

    #[test]
    fn a_team_grants_members_their_role_admins_admin_and_a_gone_group_suspends() {
        let users = ["alice", "bob", "carol"].map(User::test);
        let live = |name: &str| users.iter().find(|u| u.name_any() == name);
        let group = DirectoryGroup::test("ml-team", "ML").with_members(&["bob", "carol"]);
        let ws = team("ml", "ml-team", &["alice"]);
        let config = Config::default();
        let now = Timestamp::now();
        let v = decide(
            &ws,
            &looked(None, Some(&group), None, vec![], &live),
            &config,
            now,
        );
        let Verdict::Open(grants, _) = &v else {
            panic!("{v:?}")
        };
        let roles: Vec<(&str, &str)> = grants
            .iter()
            .map(|g| (g.user.as_str(), g.role.as_str()))
            .collect();
        assert_eq!(
            roles,
            [("alice", "admin"), ("bob", "edit"), ("carol", "edit")]
        );
        assert_eq!(owners_annotation(grants), "alice@example.com");
        let [(_, admins), (_, members)] = desired_bindings(&ws, "ws-ml", grants);
        assert_eq!(admins.unwrap().subjects.unwrap().len(), 1);
        let members = members.unwrap();
        assert_eq!(members.role_ref.name, "edit");
        assert_eq!(members.subjects.unwrap().len(), 2);
        let gone = decide(&ws, &looked(None, None, None, vec![], &live), &config, now);
        assert_eq!(reason(&gone), "Suspended");
    }

    #[test]
    fn a_workspace_namespace_starts_with_the_workspace_prefix() {
        let config = Config::default();
        let mut ws = team("ml", "ml-team", &["alice"]);
        assert_eq!(namespace_of(&ws, &config), "ws-ml");
        ws.spec.namespace = Some(homestead_api::WorkspaceNamespace {
            name: Some("user-carol".to_owned()),
        });
        let group = DirectoryGroup::test("ml-team", "ML");
        let v = decide(
            &ws,
            &looked(None, Some(&group), None, vec![], &none),
            &config,
            Timestamp::now(),
        );
        assert_eq!(reason(&v), "NamespaceNotAllowed");
    }
}
