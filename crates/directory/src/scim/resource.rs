//! How a person in SCIM (RFC 7643 §4.1, the core `User` schema) maps onto a Homestead `User`.
//!
//! | SCIM | `User` |
//! |---|---|
//! | `id` | `metadata.uid` (stable across restarts, never reused) |
//! | `userName` | `spec.identity.username` (the RBAC subject) |
//! | `displayName` | `spec.displayName` |
//! | `name.givenName`, `name.familyName` | `spec.givenName`, `spec.familyName` (and, with the rest of `name`, the annotation) |
//! | `emails` (the primary one, else the first) | `spec.email` |
//! | `active` | `spec.directory.active` (an absent `active` changes nothing; see below) |
//! | enterprise `manager.value` (a SCIM id) | `spec.directory.manager` (that User's name, when the service knows it; the id in the annotation) |
//! | `externalId`, `name`, the whole `emails` list | annotation [`ANNOTATION_ATTRIBUTES`] (JSON) |
//! | `meta.created`, `meta.version` | `metadata.creationTimestamp`, `metadata.resourceVersion` |
//!
//! Other SCIM attributes are not kept, and the published schema ([`super::discovery`]) does
//! not offer them. A new User's `metadata.name` comes from the local part of `userName`
//! ([`object_name`]), and it carries the label `homestead.dev/writer=scim`: the SCIM service
//! sees and changes only Users labelled so.
//!
//! Suspension has an author: `active` is the identity provider's own switch,
//! `spec.directory.active`, and never `spec.suspended`, which HR owns. So `active: true` lifts
//! only a deactivation the provider made, never a suspension HR set, and `active` reflects the
//! provider's switch alone. Only `active: true` lifts a deactivation: an absent `active` in a
//! PUT and a PATCH `remove` of `active` leave the switch as it is (the attribute is then
//! unassigned in responses, as RFC 7644 §3.5.2.2 says of a removal), where RFC 7644 §3.5.1's
//! replace semantics would reset it to the default: several providers omit `active` from
//! routine updates, and neither may give a deactivated person their access back.

use homestead_api::{LABEL_WRITER, User, UserSpec, WRITER_SCIM};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use scim_v2::models::enterprise_user::{EnterpriseUser, Manager};
use scim_v2::models::scim_schema::Meta;
use scim_v2::models::user::{Email, Name, User as ScimUser};
use scim_v2::{Asserted, ScimDateTime, schema_urns};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::ScimError;

/// The annotation on a User holding the SCIM attributes that have no field in its spec
/// (`externalId`, `name`, and the `emails` list with types and primary flags), as JSON.
pub const ANNOTATION_ATTRIBUTES: &str = "scim.homestead.dev/attributes";

/// The field manager of every write the SCIM service makes.
pub const FIELD_MANAGER: &str = "homestead-scim";

/// The largest annotation [`ANNOTATION_ATTRIBUTES`] the service writes, in bytes (the admission
/// policy `homestead-scim-bounds` holds the SCIM identity to the same bound).
pub const MAX_ATTRIBUTES_BYTES: usize = 8 * 1024;

/// The longest `metadata.name` the service derives from a `userName`, in characters; it leaves
/// room for a namespace prefix (`user-`) and a uniqueness suffix within a DNS-1123 label.
const NAME_MAX_LEN: usize = 40;

/// The SCIM attributes of one person that Homestead keeps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Person {
    /// `userName`: the identity the cluster's authenticator reports.
    pub user_name: String,
    /// `externalId`: the identity provider's own identifier.
    pub external_id: Option<String>,
    /// `name`: the components of the person's name.
    pub name: Option<Name>,
    /// `displayName`.
    pub display_name: Option<String>,
    /// `emails`.
    pub emails: Vec<Email>,
    /// `active`: `Some(false)` deactivates the person (`spec.directory.active: false`),
    /// `Some(true)` lifts that deactivation; `None` (never asserted, or removed by a PATCH)
    /// leaves it as it is.
    pub active: Option<bool>,
    /// The enterprise extension's `manager.value`: the SCIM id of the person's manager, who
    /// becomes `spec.directory.manager` (by name) when the service knows them.
    pub manager: Option<String>,
}

/// What the annotation [`ANNOTATION_ATTRIBUTES`] holds.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct Kept {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<Name>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    emails: Vec<Email>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    active: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    manager: Option<String>,
}

impl Person {
    /// The person a validated SCIM `User` (a POST or PUT body, or the result of a PATCH)
    /// describes. An absent `active` does not suspend (RFC 7643 §4.1.1 leaves its meaning to
    /// the provider) and stays absent in responses.
    ///
    /// # Errors
    /// A 400 `invalidValue` when `userName` is blank or an e-mail has no value.
    pub fn from_scim(user: ScimUser) -> Result<Self, ScimError> {
        let user_name = user.user_name.trim().to_owned();
        if user_name.is_empty() {
            return Err(ScimError::invalid_value("userName is required"));
        }
        let emails: Vec<Email> = user.emails.into_option().unwrap_or_default();
        if emails
            .iter()
            .any(|e| e.value.as_deref().is_none_or(str::is_empty))
        {
            return Err(ScimError::invalid_value("every emails entry needs a value"));
        }
        let name = user.name.into_option().filter(|n| *n != Name::default());
        Ok(Self {
            user_name,
            external_id: user.external_id.into_option().filter(|s| !s.is_empty()),
            name,
            display_name: user.display_name.into_option().filter(|s| !s.is_empty()),
            emails,
            active: user.active.into_option(),
            manager: user
                .enterprise_user
                .into_option()
                .and_then(|e| e.manager.into_option())
                .and_then(|m| m.value.into_option())
                .filter(|id| !id.is_empty()),
        })
    }

    /// The person a User describes. The `emails` list comes from the annotation while its
    /// primary value still equals `spec.email`; if someone changed `spec.email` since (or HR
    /// wrote it), it is that one address, as the primary `work` e-mail: what identity providers
    /// match and replace (Entra ID's `emails[type eq "work"].value`). `active` is
    /// `spec.directory.active` (false: deactivated by the provider) when the provider last
    /// asserted it or the User is not from SCIM, and absent when the provider's last write left
    /// it unassigned (a PUT without it, a PATCH `remove`), which changes nothing. HR's
    /// `spec.suspended` is not the provider's to see or change.
    pub fn from_user(user: &User) -> Self {
        let annotation = user.annotations().get(ANNOTATION_ATTRIBUTES);
        let kept: Kept = annotation
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        let spec = &user.spec;
        let emails = match spec.email.as_deref() {
            None => Vec::new(),
            Some(email) if primary(&kept.emails) == Some(email) => kept.emails,
            Some(email) => vec![Email {
                value: Some(email.to_owned()),
                r#type: Some(WORK.to_owned()),
                primary: Some(true),
                ..Email::default()
            }],
        };
        Self {
            user_name: spec.identity.username.clone(),
            external_id: kept.external_id,
            name: kept.name.or_else(|| {
                (spec.given_name.is_some() || spec.family_name.is_some()).then(|| Name {
                    given_name: spec
                        .given_name
                        .clone()
                        .map_or(Asserted::absent(), Asserted::set),
                    family_name: spec
                        .family_name
                        .clone()
                        .map_or(Asserted::absent(), Asserted::set),
                    ..Name::default()
                })
            }),
            display_name: spec.display_name.clone(),
            emails,
            manager: kept.manager,
            active: {
                let deactivated = spec.directory.as_ref().is_some_and(|d| !d.active);
                // What the provider last asserted, shown as the switch in force; absent when it
                // asserted nothing (a PUT without `active`, a PATCH `remove`), though a
                // deactivation it made stands until it sends `active: true`.
                match annotation {
                    Some(_) => kept.active.map(|_| !deactivated),
                    None => Some(!deactivated),
                }
            },
        }
    }

    /// A part of `name` (`givenName`, `familyName`), for `spec.givenName`/`spec.familyName`.
    fn name_part(&self, part: impl Fn(&Name) -> &Asserted<String>) -> Option<&str> {
        self.name.as_ref().and_then(|n| part(n).as_deref())
    }

    /// The e-mail address that becomes `spec.email`: the primary one, else the first.
    pub fn email(&self) -> Option<&str> {
        primary(&self.emails)
    }

    /// The JSON of the annotation [`ANNOTATION_ATTRIBUTES`] for this person.
    ///
    /// # Errors
    /// A 400 `invalidValue` when it would be larger than [`MAX_ATTRIBUTES_BYTES`].
    pub fn attributes(&self) -> Result<String, ScimError> {
        let kept = self.kept();
        if kept.len() > MAX_ATTRIBUTES_BYTES {
            return Err(ScimError::invalid_value(format!(
                "externalId, name and emails take {} bytes; at most {MAX_ATTRIBUTES_BYTES} are kept",
                kept.len()
            )));
        }
        Ok(kept)
    }

    fn kept(&self) -> String {
        serde_json::to_string(&Kept {
            external_id: self.external_id.clone(),
            name: self.name.clone(),
            emails: self.emails.clone(),
            active: self.active,
            manager: self.manager.clone(),
        })
        .unwrap_or_default()
    }

    /// A new User named `name` for this person, with `profile` as its `spec.profile`,
    /// labelled `homestead.dev/writer=scim`; deactivated from the start if `active` is false.
    pub fn new_user(&self, name: &str, profile: Option<&str>, manager: Option<&str>) -> User {
        let directory = (self.active == Some(false) || manager.is_some())
            .then(|| json!({ "active": self.active != Some(false), "manager": manager }));
        let spec: UserSpec = serde_json::from_value(json!({
            "displayName": self.display_name,
            "givenName": self.name_part(|n| &n.given_name),
            "familyName": self.name_part(|n| &n.family_name),
            "email": self.email(),
            "identity": { "username": self.user_name },
            "profile": profile,
            "directory": directory,
        }))
        .expect("a UserSpec from its own field names");
        let mut user = User::new(name, spec);
        user.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(LABEL_WRITER.to_owned(), WRITER_SCIM.to_owned())].into()),
            annotations: Some([(ANNOTATION_ATTRIBUTES.to_owned(), self.kept())].into()),
            ..ObjectMeta::default()
        };
        user
    }

    /// A JSON merge patch (RFC 7386) that makes a User describe this person and nothing
    /// else of what SCIM owns: `spec.identity.username`, `spec.displayName`, `spec.email`,
    /// `spec.directory.active` (only when `active` is asserted) and the annotation. With
    /// `resource_version`, the API server refuses it (409 Conflict) if the User changed since
    /// that version was read.
    pub fn merge_patch(&self, resource_version: Option<&str>, manager: Option<&str>) -> Value {
        let mut metadata = json!({ "annotations": { ANNOTATION_ATTRIBUTES: self.kept() } });
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        let mut spec = json!({
            "identity": { "username": self.user_name },
            "displayName": self.display_name,
            "givenName": self.name_part(|n| &n.given_name),
            "familyName": self.name_part(|n| &n.family_name),
            "email": self.email(),
        });
        spec["directory"] = json!({ "manager": manager });
        if let Some(active) = self.active {
            spec["directory"]["active"] = json!(active);
        }
        json!({ "metadata": metadata, "spec": spec })
    }

    /// The SCIM representation of this person as User `user`, with `meta.location` under
    /// `base` (for example `https://scim.example.com/scim/v2`).
    pub fn to_scim(&self, user: &User, base: &str) -> ScimUser {
        let id = user.uid().unwrap_or_default();
        let created = user
            .creation_timestamp()
            .and_then(|t| t.0.to_string().parse::<ScimDateTime>().ok());
        let last_modified = user
            .managed_fields()
            .iter()
            .filter_map(|f| f.time.as_ref())
            .max_by_key(|t| t.0)
            .and_then(|t| t.0.to_string().parse::<ScimDateTime>().ok())
            .or_else(|| created.clone());
        let mut schemas = vec![schema_urns::USER.to_owned()];
        if self.manager.is_some() {
            schemas.push(super::patch::ENTERPRISE_USER.to_owned());
        }
        ScimUser {
            schemas,
            id: Some(id.clone()),
            external_id: self
                .external_id
                .clone()
                .map_or(Asserted::absent(), Asserted::set),
            user_name: self.user_name.clone(),
            name: self.name.clone().map_or(Asserted::absent(), Asserted::set),
            display_name: self
                .display_name
                .clone()
                .map_or(Asserted::absent(), Asserted::set),
            active: self.active.map_or(Asserted::absent(), Asserted::set),
            emails: if self.emails.is_empty() {
                Asserted::absent()
            } else {
                Asserted::set(self.emails.clone())
            },
            enterprise_user: self.manager.clone().map_or(Asserted::absent(), |id| {
                Asserted::set(EnterpriseUser {
                    manager: Asserted::set(Manager {
                        value: Asserted::set(id),
                        ..Manager::default()
                    }),
                    ..EnterpriseUser::default()
                })
            }),
            meta: Some(Meta {
                resource_type: Some("User".to_owned()),
                created,
                last_modified,
                version: user.resource_version().map(|rv| format!("W/\"{rv}\"")),
                location: Some(format!("{base}/Users/{id}")),
            }),
            ..ScimUser::default()
        }
    }
}

/// The type of the e-mail address a User's `spec.email` is served as when SCIM did not write it.
const WORK: &str = "work";

/// The primary e-mail value of `emails`, else the first.
fn primary(emails: &[Email]) -> Option<&str> {
    emails
        .iter()
        .find(|e| e.primary == Some(true))
        .or_else(|| emails.first())
        .and_then(|e| e.value.as_deref())
}

/// The `metadata.name` for a new User with `user_name`: the part before `@`, lower-cased, with
/// every run of characters outside `[a-z0-9]` turned into one `-`, at most 40 characters
/// (`Ada.Lovelace@example.com` becomes `ada-lovelace`); `person` if nothing is left. With
/// `disambiguate`, a `-` and 8 hex digits of the SHA-256 of `user_name` are appended, for when
/// another person already has the plain name.
pub fn object_name(user_name: &str, disambiguate: bool) -> String {
    let local = user_name.split('@').next().unwrap_or_default();
    slug(local, user_name, "person", NAME_MAX_LEN, disambiguate)
}

/// `text` lower-cased, with every run of characters outside `[a-z0-9]` turned into one `-`,
/// trimmed of `-`, at most `max_len` characters; `fallback` if nothing is left. With
/// `disambiguate`, a `-` and 8 hex digits of the SHA-256 of `source` are appended.
pub(crate) fn slug(
    text: &str,
    source: &str,
    fallback: &str,
    max_len: usize,
    disambiguate: bool,
) -> String {
    let mut name = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let mut name: String = name.trim_matches('-').chars().take(max_len).collect();
    name = name.trim_end_matches('-').to_owned();
    if name.is_empty() {
        fallback.clone_into(&mut name);
    }
    if disambiguate {
        let digest = ring::digest::digest(&ring::digest::SHA256, source.as_bytes());
        let hex: String = digest.as_ref()[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        name = format!("{name}-{hex}");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_local_part() {
        assert_eq!(
            object_name("Ada.Lovelace@example.com", false),
            "ada-lovelace"
        );
        assert_eq!(object_name("bob", false), "bob");
        assert_eq!(object_name("__@x", false), "person");
        let long = "a".repeat(80);
        assert_eq!(object_name(&long, false).len(), NAME_MAX_LEN);
        let disambiguated = object_name("ada@example.com", true);
        assert!(disambiguated.starts_with("ada-") && disambiguated.len() == 12);
        assert_ne!(disambiguated, object_name("ada@example.org", true));
        assert!(homestead_api::is_dns1123_label(&disambiguated));
    }

    #[test]
    fn a_person_survives_the_trip_through_a_user() {
        let person = Person {
            user_name: "ada@example.com".into(),
            external_id: Some("00u1".into()),
            name: Some(Name {
                given_name: Asserted::set("Ada".into()),
                ..Name::default()
            }),
            display_name: Some("Ada Lovelace".into()),
            emails: vec![
                Email {
                    value: Some("ada@home.example".into()),
                    r#type: Some("home".into()),
                    ..Email::default()
                },
                Email {
                    value: Some("ada@example.com".into()),
                    r#type: Some("work".into()),
                    primary: Some(true),
                    ..Email::default()
                },
            ],
            active: Some(false),
            manager: Some("uid-of-mona".into()),
        };
        let user = person.new_user("ada", None, Some("mona"));
        assert_eq!(user.spec.email.as_deref(), Some("ada@example.com"));
        let directory = user.spec.directory.as_ref().unwrap();
        assert_eq!(directory.manager.as_deref(), Some("mona"));
        assert!(!directory.active);
        let scim = person.to_scim(&user, "https://scim.example");
        let manager = scim.enterprise_user.into_option().unwrap().manager;
        let id = manager.into_option().unwrap().value.into_option();
        assert_eq!(id.as_deref(), Some("uid-of-mona"));
        assert_eq!(user.spec.given_name.as_deref(), Some("Ada"));
        assert_eq!(user.spec.family_name, None);
        assert!(!user.spec.suspended, "SCIM never sets HR's switch");
        assert_eq!(
            user.spec.suspension(),
            Some(homestead_api::Suspension::Directory)
        );
        assert_eq!(
            user.labels().get(LABEL_WRITER).map(String::as_str),
            Some(WRITER_SCIM)
        );
        assert_eq!(Person::from_user(&user), person);

        // HR's suspension is not the provider's: it neither shows as nor is lifted by `active`.
        let mut by_hr = Person {
            active: Some(true),
            ..person.clone()
        }
        .new_user("ada", None, None);
        by_hr.spec.suspended = true;
        assert_eq!(Person::from_user(&by_hr).active, Some(true));

        // spec.email changed by hand: that address is the person's e-mail now.
        let mut edited = user.clone();
        edited.spec.email = Some("ada@new.example".into());
        let emails = Person::from_user(&edited).emails;
        assert_eq!(emails.len(), 1);
        assert_eq!(emails[0].value.as_deref(), Some("ada@new.example"));

        // A User HR made (no SCIM annotation) serves the names HR gave it (Okta's test reads
        // name.givenName and name.familyName of the first User listed).
        let mut from_hr = User::new("grace", user.spec.clone());
        from_hr.spec.given_name = Some("Grace".into());
        from_hr.spec.family_name = Some("Hopper".into());
        let name = Person::from_user(&from_hr).name.unwrap();
        assert_eq!(
            (name.given_name.as_deref(), name.family_name.as_deref()),
            (Some("Grace"), Some("Hopper"))
        );
    }

    #[test]
    fn the_merge_patch_clears_what_scim_no_longer_says() {
        let person = Person {
            user_name: "ada".into(),
            active: None,
            ..Person::default()
        };
        let patch = person.merge_patch(Some("42"), None);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["spec"]["displayName"], Value::Null);
        assert_eq!(patch["spec"]["email"], Value::Null);
        assert!(
            patch["spec"]["directory"].get("active").is_none()
                && patch["spec"].get("suspended").is_none(),
            "an absent active neither suspends nor lifts a suspension: {patch}"
        );
        assert_eq!(
            patch["spec"]["directory"]["manager"],
            Value::Null,
            "a manager no longer sent is cleared"
        );
        let deactivated = Person {
            active: Some(false),
            ..person.clone()
        };
        assert_eq!(
            deactivated.merge_patch(None, None)["spec"]["directory"]["active"],
            false
        );
        let user = person.new_user("ada", None, None);
        assert_eq!(Person::from_user(&user).active, None, "and stays absent");
        // Deactivated, then `active` removed (or a PUT without it): the deactivation stands
        // and the attribute is unassigned.
        let mut left = deactivated.new_user("ada", None, None);
        assert_eq!(Person::from_user(&left).active, Some(false));
        left.metadata.annotations = user.metadata.annotations.clone();
        assert_eq!(left.spec.directory.as_ref().map(|d| d.active), Some(false));
        assert_eq!(Person::from_user(&left).active, None);
        let mut by_hand = user.clone();
        by_hand.metadata.annotations = None;
        assert_eq!(
            Person::from_user(&by_hand).active,
            Some(true),
            "a User not from SCIM is active"
        );
    }
}
