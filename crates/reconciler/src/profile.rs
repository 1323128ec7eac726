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
//! [`ProfileIndex`] maps each Profile to its Users (from the User watch), and
//! [`Context::write_profile_statuses`] keeps each Profile's status counting them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use homestead_api::{
    AppliedProfile, CONDITION_READY, DIRECTORY_FLOOR_PROFILE, DirectoryGroup, DirectoryGroupStatus,
    FIELD_MANAGER, LABEL_WRITER, NetworkIsolation, PodSecurityLevels, Profile, ProfileSpec,
    ProfileStatus, User, UserOverride, WRITER_SCIM,
};
use k8s_openapi::api::core::v1::LimitRangeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::context::{Config, Context, PodSecurity};
use crate::error::{Error, Verb};
use crate::status::set_condition;
use crate::validate::Refusal;

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

/// Which Users use which Profile (by `spec.profile` or the operator's default), kept up to date
/// from the User watch: a Profile change reconciles exactly its Users, and its status counts
/// them, without a scan of every User. Cheap to clone (a shared handle).
#[derive(Clone, Debug, Default)]
pub struct ProfileIndex(Arc<Mutex<Index>>);

/// Profile name to the names of its Users. A User's old Profile is found by looking in each
/// set (there are few Profiles), so each User name is stored once, not twice: at 10,000 Users
/// that is about 1.5 MiB less.
#[derive(Debug, Default)]
struct Index {
    users: HashMap<Arc<str>, HashSet<Box<str>>>,
}

impl ProfileIndex {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that the User `user` uses `profile` (`None`: no Profile, or the User is gone).
    /// Returns the Profiles `user` used before and no longer does (none, or one).
    pub fn set(&self, user: &str, profile: Option<&str>) -> Vec<Arc<str>> {
        let mut index = self.index();
        if let Some(profile) = profile
            && index.users.get(profile).is_some_and(|u| u.contains(user))
        {
            return Vec::new();
        }
        let mut left = Vec::new();
        index.users.retain(|name, users| {
            if Some(&**name) != profile && users.remove(user) {
                left.push(name.clone());
            }
            !users.is_empty()
        });
        if let Some(profile) = profile {
            index
                .users
                .entry(Arc::from(profile))
                .or_default()
                .insert(Box::from(user));
        }
        left
    }

    /// Keeps the index in step with a User watch `event`: the Profile a User uses is its
    /// `spec.profile`, else the one its status says it was last reconciled with (which its
    /// directory groups may have chosen), else `default_profile`; a deleted User uses none.
    /// Returns the Profiles whose status the event may change: the one the User uses, and one
    /// it left.
    pub fn observe(
        &self,
        default_profile: Option<&str>,
        event: &watcher::Event<User>,
    ) -> Vec<ObjectRef<Profile>> {
        let (user, profile) = match event {
            watcher::Event::Apply(user) | watcher::Event::InitApply(user) => {
                let applied = user.status.as_ref().and_then(|s| s.profile.as_ref());
                let profile = user
                    .spec
                    .profile
                    .as_deref()
                    .or(applied.map(|a| a.name.as_str()))
                    .or(default_profile);
                (user, profile)
            }
            watcher::Event::Delete(user) => (user, None),
            watcher::Event::Init | watcher::Event::InitDone => return Vec::new(),
        };
        let left = self.set(&user.name_any(), profile);
        left.iter()
            .map(|name| ObjectRef::new(name))
            .chain(profile.map(ObjectRef::new))
            .collect()
    }

    /// The names of the Users that use `profile`, in no particular order.
    pub fn users_of(&self, profile: &str) -> Vec<String> {
        self.index()
            .users
            .get(profile)
            .map(|users| users.iter().map(|u| u.to_string()).collect())
            .unwrap_or_default()
    }
}

/// The reasons of a Profile's `Ready` condition (the variant's name as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub enum ProfileReason {
    /// Every User of the Profile reflects its current generation (`Ready=True`).
    RolledOut,
    /// Some Users still reflect an earlier generation, or none yet (`Ready=False`).
    RollingOut,
}

/// The status of `profile` given its Users `users`: how many there are, how many were last
/// reconciled with this generation of it (their `status.profile`), and `Ready` (`True`, reason
/// `RolledOut`, once all are; else `False`, reason `RollingOut`). `lastTransitionTime` is
/// `previous`'s while `Ready`'s status stays the same, else `now`.
pub fn profile_status<'a>(
    profile: &Profile,
    users: impl IntoIterator<Item = &'a User>,
    now: Time,
) -> ProfileStatus {
    let generation = profile.metadata.generation;
    let name = profile.name_any();
    let (mut count, mut up_to_date) = (0, 0);
    for user in users {
        count += 1;
        let applied = user.status.as_ref().and_then(|s| s.profile.as_ref());
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
    }
}

impl Context {
    /// `user` with its Profile applied: the Profile [`choose`] picks from the cached Profiles
    /// and DirectoryGroups, then [`resolve`]d.
    ///
    /// # Errors
    /// The [`Refusal`]s of [`resolve`].
    pub fn resolve(&self, user: &User) -> Result<Resolved, Refusal> {
        let profiles = self.caches.profiles.state();
        let groups = self.caches.groups.state();
        let choice = choose(user, &self.config, &profiles, &groups);
        resolve(user, choice.as_ref(), &self.config, |name| {
            self.caches
                .profiles
                .get(&ObjectRef::new(name))
                .or_else(|| (name == DIRECTORY_FLOOR_PROFILE).then(|| Arc::new(directory_floor())))
        })
    }

    /// Sets the status of the cluster-scoped `K` named `name` to `status`, by server-side apply
    /// on its status subresource (field manager `homestead`), if this replica may write.
    ///
    /// # Errors
    /// [`Error::NotLeader`] when it may not; [`Error::Kube`] with
    /// [`Verb::PatchStatus`] when the API server refuses.
    pub(crate) async fn apply_status<K>(
        &self,
        name: &str,
        status: &impl serde::Serialize,
    ) -> crate::Result<()>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        Api::<K>::all(self.client.clone())
            .patch_status(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|source| Error::kube(Verb::PatchStatus, K::kind(&()), name, source))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::PodSecurityLevel;
    use crate::test_fixtures::user;
    use homestead_api::LABEL_WRITER;
    use serde_json::json;

    #[test]
    fn the_index_follows_user_events_and_names_the_profiles_whose_status_may_change() {
        let index = ProfileIndex::default();
        let names = |refs: Vec<ObjectRef<Profile>>| -> Vec<String> {
            refs.into_iter().map(|r| r.name).collect()
        };
        let ann = user("ann", json!({ "profile": "engineer" }));
        let applied = watcher::Event::Apply(ann.clone());
        assert_eq!(names(index.observe(None, &applied)), ["engineer"]);
        assert_eq!(index.users_of("engineer"), ["ann"]);
        let moved = watcher::Event::Apply(user("ann", json!({ "profile": "intern" })));
        assert_eq!(names(index.observe(None, &moved)), ["engineer", "intern"]);
        assert!(index.users_of("engineer").is_empty());
        let plain = watcher::Event::Apply(user("ann", json!({})));
        assert_eq!(
            names(index.observe(Some("default"), &plain)),
            ["intern", "default"],
            "no spec.profile: the operator's default"
        );
        let gone = watcher::Event::Delete(ann);
        assert_eq!(names(index.observe(Some("default"), &gone)), ["default"]);
        assert!(index.users_of("default").is_empty());
        assert!(index.observe(None, &watcher::Event::InitDone).is_empty());
    }

    fn profile(spec: serde_json::Value) -> Profile {
        let mut p: Profile = serde_json::from_value(json!({
            "apiVersion": "homestead.dev/v1alpha1", "kind": "Profile",
            "metadata": { "name": "engineer", "generation": 3 }, "spec": spec,
        }))
        .unwrap();
        p.metadata.generation = Some(3);
        p
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
        let u = user(
            "alice",
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
        let own_role = user("bob", json!({ "profile": "engineer", "role": "edit" }));
        assert_eq!(
            resolve_with(&own_role, &strict),
            Err(Refusal::OverrideNotAllowed {
                profile: "engineer".into(),
                field: "role"
            })
        );
        let own_quota = user(
            "bob",
            json!({ "profile": "engineer", "quota": { "hard": { "pods": "50" } } }),
        );
        assert!(matches!(
            resolve_with(&own_quota, &strict),
            Err(Refusal::OverrideNotAllowed { field: "quota", .. })
        ));
        let same_role = user("bob", json!({ "profile": "engineer", "role": "view" }));
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
        let other_tier = user(
            "bob",
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
        let u = user("carol", json!({ "profile": "ghost" }));
        let config = Config::default();
        assert_eq!(
            resolve(&u, chosen(&u, &config).as_ref(), &config, none),
            Err(Refusal::ProfileNotFound("ghost".into()))
        );
        let plain = user("carol", json!({}));
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
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "homestead.dev/v1alpha1", "kind": "Profile",
                "metadata": { "name": name }, "spec": { "directory": directory },
            }))
            .unwrap(),
        )
    }

    fn group(name: &str, display_name: &str, members: &[&str]) -> Arc<DirectoryGroup> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "homestead.dev/v1alpha1", "kind": "DirectoryGroup",
                "metadata": { "name": name, "generation": 2 },
                "spec": { "displayName": display_name, "members": members },
            }))
            .unwrap(),
        )
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
            let chosen = choose(&user(name, spec), &config, &profiles, &groups).unwrap();
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
            choose(
                &user("zed", json!({})),
                &Config::default(),
                &profiles,
                &groups
            ),
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
        let mut by_scim = user("newhire", json!({}));
        by_scim.metadata.labels = Some([(LABEL_WRITER.to_owned(), "scim".to_owned())].into());
        let by_hr = user("walter", json!({}));
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
        let mut by_scim = user("sam", json!({}));
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
            choose(&user("hank", json!({})), &Config::default(), &[], &[]),
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
            }
        );
        let unnamed = group_status(&group("ops", "Ops", &[]), &profiles);
        assert_eq!((unnamed.members, unnamed.profile), (0, None));
    }

    #[test]
    fn the_index_follows_users_from_profile_to_profile() {
        let index = ProfileIndex::default();
        index.set("alice", Some("engineer"));
        index.set("bob", Some("engineer"));
        index.set("carol", None);
        let mut engineers = index.users_of("engineer");
        engineers.sort();
        assert_eq!(engineers, ["alice", "bob"]);
        index.set("alice", Some("intern"));
        assert_eq!(index.users_of("engineer"), ["bob"]);
        assert_eq!(index.users_of("intern"), ["alice"]);
        index.set("bob", None);
        assert!(index.users_of("engineer").is_empty());
    }

    #[test]
    fn a_profile_status_counts_its_users_and_those_up_to_date() {
        let mut p = profile(json!({}));
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let with = |generation: Option<i64>| {
            let mut u = user("u", json!({ "profile": "engineer" }));
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
