//! Test fixtures: typed, chainable builders of [`User`], [`Profile`] and [`DirectoryGroup`] for
//! unit tests, integration tests and benches (feature `fixtures`; controller-rs's
//! `Document::test().finalized()` is the model). Each starts from the smallest valid object and
//! adds what a test says:
//!
//! ```
//! # use homestead_api::User;
//! let alice = User::test("alice").with_role("edit").suspended();
//! assert_eq!(alice.spec.identity.username, "alice@example.com");
//! ```
//!
//! `with_spec` takes JSON for what has no method of its own: its top-level fields replace the
//! object's (so `{"identity": {...}}` replaces the whole identity).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    CONDITION_READY, DirectoryGroup, DirectoryGroupSpec, LABEL_WRITER, Profile, ProfileSpec,
    Suspension, User, UserSpec, UserStatus, WRITER_SCIM,
};

/// `spec` with the top-level fields of `overrides` put in.
///
/// # Panics
/// When the result is not a valid spec of its type (a test's mistake).
fn merged<S: Serialize + DeserializeOwned>(spec: &S, overrides: Value) -> S {
    let mut value = serde_json::to_value(spec).expect("a spec serializes");
    let (Value::Object(into), Value::Object(from)) = (&mut value, overrides) else {
        panic!("a spec and its overrides are JSON objects");
    };
    into.extend(from);
    serde_json::from_value(value).unwrap_or_else(|e| panic!("not a valid spec: {e}"))
}

/// Sets the label `key=value` in `meta`.
fn label(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.labels
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
}

impl User {
    /// A User named `name`, for the person `<name>@example.com`, as stored (uid `uid-<name>`,
    /// generation 1), with nothing else set. The API server replaces uid and generation when
    /// such a User is created.
    pub fn test(name: &str) -> Self {
        let spec: UserSpec = serde_json::from_value(
            json!({ "identity": { "username": format!("{name}@example.com") } }),
        )
        .expect("a valid UserSpec");
        let mut user = Self::new(name, spec);
        user.metadata.uid = Some(format!("uid-{name}"));
        user.metadata.generation = Some(1);
        user
    }

    /// This User with the top-level fields of `spec` (JSON, as in a manifest) put in its spec.
    ///
    /// # Panics
    /// When the result is not a valid `UserSpec`.
    #[must_use]
    pub fn with_spec(mut self, spec: Value) -> Self {
        self.spec = merged(&self.spec, spec);
        self
    }

    /// This User for the person `username`.
    #[must_use]
    pub fn with_username(mut self, username: &str) -> Self {
        self.spec.identity.username = username.to_owned();
        self
    }

    /// This User with the extra RBAC groups `groups`.
    #[must_use]
    pub fn with_groups(mut self, groups: &[&str]) -> Self {
        self.spec.identity.groups = groups.iter().map(|g| (*g).to_owned()).collect();
        self
    }

    /// This User asking for the ClusterRole `role`.
    #[must_use]
    pub fn with_role(mut self, role: &str) -> Self {
        self.spec.role = Some(role.to_owned());
        self
    }

    /// This User naming the Profile `profile`.
    #[must_use]
    pub fn with_profile(mut self, profile: &str) -> Self {
        self.spec.profile = Some(profile.to_owned());
        self
    }

    /// This User suspended by HR (`spec.suspended`).
    #[must_use]
    pub fn suspended(mut self) -> Self {
        self.spec.suspended = true;
        debug_assert_eq!(self.spec.suspension(), Some(Suspension::Spec));
        self
    }

    /// This User with uid `uid`.
    #[must_use]
    pub fn with_uid(mut self, uid: &str) -> Self {
        self.metadata.uid = Some(uid.to_owned());
        self
    }

    /// This User at `metadata.generation` `generation`.
    #[must_use]
    pub fn with_generation(mut self, generation: i64) -> Self {
        self.metadata.generation = Some(generation);
        self
    }

    /// This User created `seconds` after the Unix epoch.
    ///
    /// # Panics
    /// For a time `jiff` cannot represent.
    #[must_use]
    pub fn created_at(mut self, seconds: i64) -> Self {
        let at = Timestamp::from_second(seconds).expect("a representable time");
        self.metadata.creation_timestamp = Some(Time(at));
        self
    }

    /// This User with the label `key=value`.
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        label(&mut self.metadata, key, value);
        self
    }

    /// This User labelled as written by the SCIM service (`homestead.dev/writer=scim`).
    #[must_use]
    pub fn written_by_scim(self) -> Self {
        self.with_label(LABEL_WRITER, WRITER_SCIM)
    }

    /// This User with the `Ready` condition `status` (`True`/`False`) for `reason`.
    #[must_use]
    pub fn with_ready(mut self, status: bool, reason: &str) -> Self {
        let status = if status { "True" } else { "False" };
        let conditions = &mut self
            .status
            .get_or_insert_with(UserStatus::default)
            .conditions;
        conditions.retain(|c| c.type_ != CONDITION_READY);
        conditions.push(Condition {
            type_: CONDITION_READY.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
            observed_generation: self.metadata.generation,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        });
        self
    }
}

impl Profile {
    /// A Profile named `name` at generation 1 that sets nothing.
    pub fn test(name: &str) -> Self {
        let mut profile = Self::new(name, ProfileSpec::default());
        profile.metadata.generation = Some(1);
        profile
    }

    /// This Profile with the top-level fields of `spec` (JSON) put in its spec.
    ///
    /// # Panics
    /// When the result is not a valid `ProfileSpec`.
    #[must_use]
    pub fn with_spec(mut self, spec: Value) -> Self {
        self.spec = merged(&self.spec, spec);
        self
    }

    /// This Profile at `metadata.generation` `generation`.
    #[must_use]
    pub fn with_generation(mut self, generation: i64) -> Self {
        self.metadata.generation = Some(generation);
        self
    }

    /// This Profile choosable by the directory groups named `groups` (by display name), at
    /// `priority`.
    #[must_use]
    pub fn for_directory_groups(self, groups: &[&str], priority: i32) -> Self {
        self.with_spec(json!({ "directory": { "groups": groups, "priority": priority } }))
    }
}

impl DirectoryGroup {
    /// A DirectoryGroup named `name` with display name `display_name` and no member.
    pub fn test(name: &str, display_name: &str) -> Self {
        Self::new(
            name,
            DirectoryGroupSpec {
                display_name: display_name.to_owned(),
                ..DirectoryGroupSpec::default()
            },
        )
    }

    /// This group at `metadata.generation` `generation`.
    #[must_use]
    pub fn with_generation(mut self, generation: i64) -> Self {
        self.metadata.generation = Some(generation);
        self
    }

    /// This group with the Users named `members`.
    #[must_use]
    pub fn with_members(mut self, members: &[&str]) -> Self {
        self.spec.members = members.iter().map(|m| (*m).to_owned()).collect();
        self
    }

    /// This group labelled as written by the SCIM service (`homestead.dev/writer=scim`).
    #[must_use]
    pub fn written_by_scim(mut self) -> Self {
        label(&mut self.metadata, LABEL_WRITER, WRITER_SCIM);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_start_small_and_add_what_they_are_told() {
        let alice = User::test("alice");
        assert_eq!(alice.spec.identity.username, "alice@example.com");
        assert_eq!(alice.metadata.uid.as_deref(), Some("uid-alice"));
        assert!(alice.spec.role.is_none() && !alice.spec.suspended);
        let edited = alice
            .clone()
            .with_spec(json!({ "quota": { "hard": { "pods": "3" } } }))
            .with_role("edit")
            .suspended()
            .with_ready(true, "Suspended");
        assert_eq!(edited.spec.role(), "edit");
        assert!(edited.spec.quota.is_some() && edited.spec.suspended);
        assert_eq!(
            edited.ready_condition().map(|c| c.reason.as_str()),
            Some("Suspended")
        );
        let renamed = alice.with_spec(json!({ "identity": { "username": "a@corp.example" } }));
        assert_eq!(renamed.spec.identity.username, "a@corp.example");
        let profile = Profile::test("engineer").for_directory_groups(&["Eng"], 10);
        assert_eq!(profile.spec.directory.map(|d| d.priority), Some(10));
        let group = DirectoryGroup::test("eng", "Eng").with_members(&["alice"]);
        assert_eq!(group.spec.members, ["alice"]);
    }
}
