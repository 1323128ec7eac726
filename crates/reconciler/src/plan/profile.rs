//! Profiles: what a User gets once its [`Profile`] is applied. [`resolve`] is pure: it takes the
//! User, its Profile and the operator's [`Config`] and returns the User as the Profile completes
//! it (role, quota, Namespace labels and annotations), with what only a Profile sets (Pod
//! Security levels, a LimitRange, network isolation), or the [`Refusal`] that stops it.
//!
//! Precedence, field by field: the User's own value where the Profile's `userOverrides` allows
//! it (or the Profile sets none), else the Profile's, else the operator's flags. A User value
//! that differs from the Profile's where `userOverrides` does not allow it is refused
//! (`OverrideNotAllowed`), never silently dropped: HR should learn that the field has no effect.
//!
//! [`crate::state::index::ProfileIndex`] maps each Profile to its Users (from the User watch),
//! and [`crate::flows::statuses`] keeps each Profile's status counting them with
//! [`profile_status`].

use std::collections::BTreeMap;
use std::sync::Arc;

use homestead_api::{
    AppliedProfile, CONDITION_READY, DIRECTORY_FLOOR_PROFILE, DirectoryGroup, DirectoryGroupStatus,
    LABEL_WRITER, NetworkIsolation, PodSecurityLevels, Profile, ProfileReason, ProfileSpec,
    ProfileStatus, User, UserOverride, WRITER_SCIM,
};
use k8s_openapi::api::core::v1::LimitRangeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::plan::config::{Config, PodSecurity};
use crate::plan::status::set_condition;
use crate::plan::validate::Refusal;

/// A User with its Profile applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The User, its `spec.role`, `spec.quota` and `spec.namespace` labels and annotations
    /// completed by the Profile; metadata and status unchanged.
    pub user: User,
    /// The Pod Security levels of the Namespace: the operator's, each overridden by the
    /// Profile's.
    pub pod_security: PodSecurity,
    /// The LimitRange spec the Namespace gets, if the Profile has one.
    pub limit_range: Option<LimitRangeSpec>,
    /// `Some(namespaces)` when the Profile isolates the Namespace on the network: the names of
    /// the Namespaces allowed to reach it (and be reached); `None` when it does not.
    pub isolation: Option<Vec<String>>,
    /// The Profile applied and its generation, for `status.profile`.
    pub applied: Option<AppliedProfile>,
    /// The Profile's `sharing.tenantRoleBindings` (`Allow` without one).
    pub tenant_role_bindings: homestead_api::TenantRoleBindings,
    /// The Profile's `totalQuota.hard`: the most all of the person's homes use together
    /// (docs/quota.md), if it has one.
    pub total: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
}

impl Resolved {
    /// What the Profile adds to the Namespace that admission policies key on.
    pub fn traits(&self) -> crate::plan::desired::Traits {
        crate::plan::desired::Traits {
            isolated: self.isolation.is_some(),
            tenant_role_bindings: self.tenant_role_bindings,
        }
    }
}

/// Which Profile a User uses, and the DirectoryGroup whose membership chose it, if one did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The Profile's name.
    pub profile: String,
    /// The DirectoryGroup (`metadata.name`) that chose it; `None` for `spec.profile` or the
    /// operator's `--default-profile`.
    pub group: Option<String>,
}

/// The Profile `user` uses: its `spec.profile`; else, among `profiles` whose
/// `spec.directory.groups` name (by `spec.displayName`) one of `groups` that has `user` as a
/// member, the one of highest `priority` (on a tie, the first by name), chosen by the first
/// such group by name; else the operator's `--default-profile`; else none. Only Profiles the
/// platform marked with `spec.directory` can be chosen by the directory.
pub fn choose(
    user: &User,
    config: &Config,
    profiles: &[Arc<Profile>],
    groups: &[Arc<DirectoryGroup>],
) -> Option<Choice> {
    if let Some(profile) = &user.spec.profile {
        return Some(Choice {
            profile: profile.clone(),
            group: None,
        });
    }
    let mut best: Option<(&Profile, i32, &DirectoryGroup)> = None;
    for profile in profiles {
        let Some(directory) = &profile.spec.directory else {
            continue;
        };
        let outranks = best.is_none_or(|(chosen, priority, _)| {
            (
                directory.priority,
                std::cmp::Reverse(profile.metadata.name.as_ref()),
            ) > (priority, std::cmp::Reverse(chosen.metadata.name.as_ref()))
        });
        if !outranks {
            continue;
        }
        let group = groups
            .iter()
            .filter(|g| directory.groups.contains(&g.spec.display_name) && g.counts_member(user))
            .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if let Some(group) = group {
            best = Some((profile, directory.priority, group));
        }
    }
    match best {
        Some((profile, _, group)) => Some(Choice {
            profile: profile.name_any(),
            group: Some(group.name_any()),
        }),
        None if directory_managed(user) => Some(Choice {
            profile: config
                .default_profile
                .clone()
                .unwrap_or_else(|| DIRECTORY_FLOOR_PROFILE.to_owned()),
            group: None,
        }),
        None => config.default_profile.clone().map(|profile| Choice {
            profile,
            group: None,
        }),
    }
}

/// The Profile the directory chooses for the members of `group`: among `profiles` whose
/// `spec.directory.groups` name its `spec.displayName`, the one of highest `priority` (on a
/// tie, the first by name); a team workspace without `spec.profile` gets it.
pub fn group_profile<'a>(
    group: &DirectoryGroup,
    profiles: &'a [Arc<Profile>],
) -> Option<&'a Arc<Profile>> {
    profiles
        .iter()
        .filter_map(|p| {
            let directory = p.spec.directory.as_ref()?;
            directory
                .groups
                .contains(&group.spec.display_name)
                .then_some((directory.priority, std::cmp::Reverse(p.name_any()), p))
        })
        .max_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
        .map(|(_, _, p)| p)
}

/// Whether the directory (the SCIM service) manages `user`: it carries the label
/// `homestead.dev/writer=scim`. Such a person never falls back to the operator's open default
/// (role `admin`, no isolation): a stolen token that empties their groups leaves them at the
/// directory floor.
fn directory_managed(user: &User) -> bool {
    user.labels().get(LABEL_WRITER).map(String::as_str) == Some(WRITER_SCIM)
}

/// The built-in [`DIRECTORY_FLOOR_PROFILE`]: role `view`, network isolation `Isolated`, Pod
/// Security `restricted` for enforce, warn and audit; no quota (`view` runs no Pods), and no
/// User may override anything of it.
pub fn directory_floor() -> Profile {
    let restricted = Some(homestead_api::PodSecurityLevel::Restricted);
    Profile::new(
        DIRECTORY_FLOOR_PROFILE,
        ProfileSpec {
            role: Some("view".to_owned()),
            pod_security: Some(PodSecurityLevels {
                enforce: restricted,
                warn: restricted,
                audit: restricted,
            }),
            network_isolation: NetworkIsolation::Isolated,
            ..ProfileSpec::default()
        },
    )
}

/// Applies the Profile `choice` names (from [`choose`]; `None`: no Profile), found by `lookup`
/// (name to Profile, from a cache).
///
/// # Errors
/// [`Refusal::ProfileNotFound`] when `choice` names a Profile `lookup` does not know;
/// [`Refusal::OverrideNotAllowed`] when `user` sets a field differently from the Profile and
/// the Profile's `userOverrides` does not allow it.
pub fn resolve<P: AsRef<Profile>>(
    user: &User,
    choice: Option<&Choice>,
    config: &Config,
    lookup: impl FnOnce(&str) -> Option<P>,
) -> Result<Resolved, Refusal> {
    let mut resolved = Resolved {
        user: user.clone(),
        pod_security: config.pod_security,
        limit_range: None,
        isolation: None,
        applied: None,
        tenant_role_bindings: homestead_api::TenantRoleBindings::Allow,
        total: None,
    };
    let Some(Choice {
        profile: name,
        group,
    }) = choice
    else {
        return Ok(resolved);
    };
    let name = name.as_str();
    let profile = lookup(name).ok_or_else(|| Refusal::ProfileNotFound(name.to_owned()))?;
    let profile = profile.as_ref();
    let spec = &profile.spec;
    let refuse = |field: &'static str| Refusal::OverrideNotAllowed {
        profile: name.to_owned(),
        field,
    };
    let mine = &mut resolved.user.spec;

    match (&mine.role, &spec.role) {
        (Some(own), Some(theirs)) if own != theirs && !spec.allows(UserOverride::Role) => {
            return Err(refuse("role"));
        }
        (None, Some(theirs)) => mine.role = Some(theirs.clone()),
        _ => {}
    }
    match (&mine.quota, &spec.quota) {
        (Some(own), Some(theirs)) if own != theirs && !spec.allows(UserOverride::Quota) => {
            return Err(refuse("quota"));
        }
        (None, Some(theirs)) => mine.quota = Some(theirs.clone()),
        _ => {}
    }
    if let Some(theirs) = &spec.namespace {
        let own = mine.namespace.get_or_insert_default();
        let may_override = spec.allows(UserOverride::NamespaceMetadata);
        let merged = merge(&mut own.labels, &theirs.labels, may_override)
            && merge(&mut own.annotations, &theirs.annotations, may_override);
        if !merged {
            return Err(refuse("namespaceMetadata"));
        }
    }

    if let Some(levels) = spec.pod_security {
        let ps = &mut resolved.pod_security;
        ps.enforce = levels.enforce.unwrap_or(ps.enforce);
        ps.warn = levels.warn.unwrap_or(ps.warn);
        ps.audit = levels.audit.unwrap_or(ps.audit);
    }
    resolved.limit_range = spec.limit_range.clone();
    resolved.total = spec.total_quota.as_ref().map(|q| q.hard.clone());
    resolved.tenant_role_bindings = spec
        .sharing
        .as_ref()
        .map(|sharing| sharing.tenant_role_bindings)
        .unwrap_or_default();
    resolved.isolation = (spec.network_isolation == NetworkIsolation::Isolated)
        .then(|| spec.allow_ingress_from.clone());
    resolved.applied = Some(AppliedProfile {
        name: profile.name_any(),
        observed_generation: profile.metadata.generation,
        group: group.clone(),
    });
    Ok(resolved)
}

/// Adds the Profile's entries `theirs` to the User's `own`; a key both set to different values
/// keeps the User's if `may_override`, else the merge fails (returns false).
fn merge(
    own: &mut BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
    may_override: bool,
) -> bool {
    for (key, value) in theirs {
        match own.get(key) {
            Some(mine) if mine != value && !may_override => return false,
            Some(_) => {}
            None => {
                own.insert(key.clone(), value.clone());
            }
        }
    }
    true
}

/// The status of `profile` given its Users `users`: how many there are, how many were last
/// reconciled with this generation of it (their `status.profile`), and `Ready` (`True`, reason
/// `RolledOut`, once all are; else `False`, reason `RollingOut`). `lastTransitionTime` is
/// `previous`'s while `Ready`'s status stays the same, else `now`.
pub fn profile_status(
    profile: &Profile,
    users: impl IntoIterator<Item = impl std::borrow::Borrow<User>>,
    now: Time,
) -> ProfileStatus {
    let generation = profile.metadata.generation;
    let name = profile.name_any();
    let (mut count, mut up_to_date) = (0, 0);
    for user in users {
        count += 1;
        let applied = user
            .borrow()
            .status
            .as_ref()
            .and_then(|s| s.profile.as_ref());
        if applied.is_some_and(|a| a.name == name && a.observed_generation == generation) {
            up_to_date += 1;
        }
    }
    let rolled_out = count == up_to_date;
    let generation_shown = generation.unwrap_or_default();
    let (reason, message) = if rolled_out {
        (
            ProfileReason::RolledOut,
            format!("all {count} Users reflect generation {generation_shown}"),
        )
    } else {
        (
            ProfileReason::RollingOut,
            format!("{up_to_date} of {count} Users reflect generation {generation_shown}"),
        )
    };
    let previous = profile
        .status
        .as_ref()
        .map_or(&[][..], |s| s.conditions.as_slice());
    ProfileStatus {
        observed_generation: generation,
        users: count,
        users_up_to_date: up_to_date,
        conditions: vec![set_condition(
            previous,
            CONDITION_READY,
            rolled_out,
            reason.into(),
            message,
            generation,
            &now,
        )],
    }
}

/// Whether `current` already says what `desired` does (`lastTransitionTime` aside).
pub fn profile_status_matches(current: Option<&ProfileStatus>, desired: &ProfileStatus) -> bool {
    current.is_some_and(|current| {
        let ready = |s: &ProfileStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == CONDITION_READY)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        current.observed_generation == desired.observed_generation
            && current.users == desired.users
            && current.users_up_to_date == desired.users_up_to_date
            && ready(current) == ready(desired)
    })
}

/// The status of `group`: its member count and the Profile of highest priority (on a tie, the
/// first by name) among `profiles` that names its `spec.displayName` in `spec.directory.groups`.
pub fn group_status(group: &DirectoryGroup, profiles: &[Arc<Profile>]) -> DirectoryGroupStatus {
    let display_name = &group.spec.display_name;
    let profile = profiles
        .iter()
        .filter_map(|p| Some((p, p.spec.directory.as_ref()?)))
        .filter(|(_, d)| d.groups.contains(display_name))
        .max_by(|(a, da), (b, db)| {
            (da.priority, std::cmp::Reverse(&a.metadata.name))
                .cmp(&(db.priority, std::cmp::Reverse(&b.metadata.name)))
        })
        .map(|(p, _)| p.name_any());
    DirectoryGroupStatus {
        observed_generation: group.metadata.generation,
        members: i64::try_from(group.spec.members.len()).unwrap_or(i64::MAX),
        profile,
        // Written apart, under its own field manager (docs/quota.md).
        total: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::config::PodSecurityLevel;
    use homestead_api::LABEL_WRITER;
    use homestead_api::User;
    use serde_json::json;

    fn profile(spec: serde_json::Value) -> Profile {
        Profile::test("engineer").with_generation(3).with_spec(spec)
    }

    fn resolve_with(u: &User, p: &Profile) -> Result<Resolved, Refusal> {
        let choice = choose(u, &Config::default(), &[], &[]);
        resolve(u, choice.as_ref(), &Config::default(), |name| {
            (name == "engineer").then(|| std::sync::Arc::new(p.clone()))
        })
    }

    #[test]
    fn the_profile_fills_what_the_user_leaves_out() {
        let p = profile(json!({
            "role": "edit",
            "quota": { "hard": { "pods": "20" } },
            "limitRange": { "limits": [{ "type": "Container", "default": { "cpu": "500m" } }] },
            "podSecurity": { "enforce": "restricted" },
            "networkIsolation": "Isolated",
            "allowIngressFrom": ["ingress"],
            "namespace": { "labels": { "tier": "eng" }, "annotations": { "cost-center": "7" } },
        }));
        let u = User::test("alice").with_spec(
            json!({ "profile": "engineer", "namespace": { "labels": { "team": "a" } } }),
        );
        let r = resolve_with(&u, &p).unwrap();
        assert_eq!(r.user.spec.role(), "edit");
        assert_eq!(r.user.spec.quota, p.spec.quota);
        let ns = r.user.spec.namespace.unwrap();
        assert_eq!(ns.labels.get("tier").map(String::as_str), Some("eng"));
        assert_eq!(ns.labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            ns.annotations.get("cost-center").map(String::as_str),
            Some("7")
        );
        assert_eq!(r.pod_security.enforce, PodSecurityLevel::Restricted);
        assert_eq!(
            r.pod_security.warn,
            PodSecurity::default().warn,
            "a level the Profile leaves out is the operator's"
        );
        assert!(r.limit_range.is_some());
        assert_eq!(r.isolation, Some(vec!["ingress".to_owned()]));
        assert_eq!(
            r.applied,
            Some(AppliedProfile {
                name: "engineer".into(),
                observed_generation: Some(3),
                group: None,
            })
        );
    }

    #[test]
    fn a_user_overrides_only_what_the_profile_allows() {
        let strict = profile(json!({ "role": "view", "quota": { "hard": { "pods": "5" } } }));
        let own_role =
            User::test("bob").with_spec(json!({ "profile": "engineer", "role": "edit" }));
        assert_eq!(
            resolve_with(&own_role, &strict),
            Err(Refusal::OverrideNotAllowed {
                profile: "engineer".into(),
                field: "role"
            })
        );
        let own_quota = User::test("bob")
            .with_spec(json!({ "profile": "engineer", "quota": { "hard": { "pods": "50" } } }));
        assert!(matches!(
            resolve_with(&own_quota, &strict),
            Err(Refusal::OverrideNotAllowed { field: "quota", .. })
        ));
        let same_role =
            User::test("bob").with_spec(json!({ "profile": "engineer", "role": "view" }));
        assert!(
            resolve_with(&same_role, &strict).is_ok(),
            "repeating the Profile's value is no override"
        );

        let lenient = profile(json!({ "role": "view", "userOverrides": ["role", "quota"] }));
        let r = resolve_with(&own_role, &lenient).unwrap();
        assert_eq!(r.user.spec.role(), "edit");
        let r = resolve_with(&own_quota, &lenient).unwrap();
        assert_eq!(r.user.spec.quota, own_quota.spec.quota);

        let labelled = profile(json!({ "namespace": { "labels": { "tier": "eng" } } }));
        let other_tier = User::test("bob").with_spec(
            json!({ "profile": "engineer", "namespace": { "labels": { "tier": "ops" } } }),
        );
        assert!(matches!(
            resolve_with(&other_tier, &labelled),
            Err(Refusal::OverrideNotAllowed {
                field: "namespaceMetadata",
                ..
            })
        ));
    }

    #[test]
    fn a_missing_profile_is_refused_and_no_profile_changes_nothing() {
        let none = |_: &str| None::<std::sync::Arc<Profile>>;
        let chosen = |u: &User, config: &Config| choose(u, config, &[], &[]);
        let u = User::test("carol").with_spec(json!({ "profile": "ghost" }));
        let config = Config::default();
        assert_eq!(
            resolve(&u, chosen(&u, &config).as_ref(), &config, none),
            Err(Refusal::ProfileNotFound("ghost".into()))
        );
        let plain = User::test("carol");
        let r = resolve(&plain, chosen(&plain, &config).as_ref(), &config, none).unwrap();
        assert_eq!(r.user, plain);
        assert_eq!(r.applied, None);
        let defaulted = Config {
            default_profile: Some("engineer".into()),
            ..Config::default()
        };
        assert_eq!(
            resolve(
                &plain,
                chosen(&plain, &defaulted).as_ref(),
                &defaulted,
                none
            ),
            Err(Refusal::ProfileNotFound("engineer".into())),
            "the operator's default Profile applies to a User that names none"
        );
    }

    fn named_profile(name: &str, directory: serde_json::Value) -> Arc<Profile> {
        Arc::new(Profile::test(name).with_spec(json!({ "directory": directory })))
    }

    fn group(name: &str, display_name: &str, members: &[&str]) -> Arc<DirectoryGroup> {
        let group = DirectoryGroup::test(name, display_name).with_members(members);
        Arc::new(group.with_generation(2))
    }

    #[test]
    fn directory_groups_choose_among_the_profiles_that_name_them() {
        let profiles = [
            named_profile(
                "data-science",
                json!({ "groups": ["Data Science"], "priority": 10 }),
            ),
            named_profile("interns", json!({ "groups": ["Interns", "Summer"] })),
            named_profile("also-interns", json!({ "groups": ["Summer"] })),
            named_profile("platform", serde_json::Value::Null),
        ];
        let groups = [
            group("data-science", "Data Science", &["ada", "bob"]),
            group("interns", "Interns", &["ada", "cy"]),
            group("summer", "Summer", &["eve"]),
            group("platform", "platform", &["dee"]),
        ];
        let config = Config {
            default_profile: Some("engineer".into()),
            ..Config::default()
        };
        let choice = |name: &str, spec: serde_json::Value| {
            let chosen = choose(
                &User::test(name).with_spec(spec),
                &config,
                &profiles,
                &groups,
            )
            .unwrap();
            (chosen.profile, chosen.group)
        };
        let by_group = |p: &str, g: &str| (p.to_owned(), Some(g.to_owned()));
        assert_eq!(
            choice("ada", json!({})),
            by_group("data-science", "data-science"),
            "the highest priority wins"
        );
        assert_eq!(choice("cy", json!({})), by_group("interns", "interns"));
        assert_eq!(
            choice("eve", json!({})),
            by_group("also-interns", "summer"),
            "on a tie, the first Profile by name"
        );
        assert_eq!(
            choice("dee", json!({})),
            ("engineer".to_owned(), None),
            "a group no Profile names grants nothing, and a Profile without spec.directory is never chosen by the directory"
        );
        assert_eq!(
            choice("ada", json!({ "profile": "platform" })),
            ("platform".to_owned(), None),
            "spec.profile wins over every group"
        );
        assert_eq!(
            choose(&User::test("zed"), &Config::default(), &profiles, &groups),
            None
        );
    }

    #[test]
    fn a_group_its_writer_labels_counts_only_the_users_of_that_writer() {
        let profiles = [named_profile(
            "contractor",
            json!({ "groups": ["Vendors"] }),
        )];
        let mut scim_group = (*group("vendors", "Vendors", &["walter", "newhire"])).clone();
        scim_group.metadata.labels = Some([(LABEL_WRITER.to_owned(), "scim".to_owned())].into());
        let groups = [Arc::new(scim_group)];
        let mut by_scim = User::test("newhire");
        by_scim.metadata.labels = Some([(LABEL_WRITER.to_owned(), "scim".to_owned())].into());
        let by_hr = User::test("walter");
        let chosen = choose(&by_scim, &Config::default(), &profiles, &groups);
        assert_eq!(chosen.map(|c| c.profile).as_deref(), Some("contractor"));
        assert_eq!(
            choose(&by_hr, &Config::default(), &profiles, &groups),
            None,
            "a SCIM group listing a User HR made does not reach it"
        );
    }

    #[test]
    fn a_directory_managed_user_without_a_group_gets_the_floor_never_the_open_default() {
        let mut by_scim = User::test("sam");
        by_scim.metadata.labels = Some([(LABEL_WRITER.to_owned(), "scim".to_owned())].into());
        let chosen = choose(&by_scim, &Config::default(), &[], &[]).unwrap();
        assert_eq!(
            (chosen.profile.as_str(), chosen.group.as_deref()),
            (DIRECTORY_FLOOR_PROFILE, None)
        );
        let floor = Arc::new(directory_floor());
        let resolved = resolve(&by_scim, Some(&chosen), &Config::default(), |name| {
            (name == DIRECTORY_FLOOR_PROFILE).then(|| floor.clone())
        })
        .unwrap();
        assert_eq!(resolved.user.spec.role(), "view");
        assert_eq!(resolved.isolation, Some(Vec::new()));
        assert_eq!(resolved.pod_security.enforce, PodSecurityLevel::Restricted);
        let config = Config {
            default_profile: Some("engineer".into()),
            ..Config::default()
        };
        assert_eq!(
            choose(&by_scim, &config, &[], &[])
                .map(|c| c.profile)
                .as_deref(),
            Some("engineer"),
            "the platform's --default-profile comes first"
        );
        assert_eq!(
            choose(&User::test("hank"), &Config::default(), &[], &[]),
            None,
            "HR's people keep the operator's default"
        );
    }

    #[test]
    fn a_group_status_counts_members_and_names_the_profile_it_selects() {
        let profiles = [
            named_profile("low", json!({ "groups": ["Eng"], "priority": -1 })),
            named_profile("high", json!({ "groups": ["Eng"], "priority": 5 })),
        ];
        let status = group_status(&group("eng", "Eng", &["a", "b", "c"]), &profiles);
        assert_eq!(
            status,
            DirectoryGroupStatus {
                observed_generation: Some(2),
                members: 3,
                profile: Some("high".into()),
                total: None,
            }
        );
        let unnamed = group_status(&group("ops", "Ops", &[]), &profiles);
        assert_eq!((unnamed.members, unnamed.profile), (0, None));
    }

    #[test]
    fn a_profile_status_counts_its_users_and_those_up_to_date() {
        let mut p = profile(json!({}));
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let with = |generation: Option<i64>| {
            let mut u = User::test("u").with_spec(json!({ "profile": "engineer" }));
            u.status = Some(homestead_api::UserStatus {
                profile: generation.map(|g| AppliedProfile {
                    name: "engineer".into(),
                    observed_generation: Some(g),
                    group: None,
                }),
                ..Default::default()
            });
            u
        };
        let users = [with(Some(3)), with(Some(2)), with(None)];
        let status = profile_status(&p, &users, at(1));
        assert_eq!((status.users, status.users_up_to_date), (3, 1));
        assert_eq!(status.conditions[0].reason, "RollingOut");
        p.status = Some(status.clone());
        assert!(profile_status_matches(
            p.status.as_ref(),
            &profile_status(&p, &users, at(2))
        ));
        let done = profile_status(&p, &users[..1], at(3));
        assert_eq!(done.conditions[0].reason, "RolledOut");
        assert_eq!(
            done.conditions[0].last_transition_time,
            at(3),
            "a transition moves the time"
        );
        assert!(!profile_status_matches(p.status.as_ref(), &done));
    }
}
