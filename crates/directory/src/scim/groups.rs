//! SCIM Groups (RFC 7643 §4.2) as [`DirectoryGroup`]s.
//!
//! | SCIM | `DirectoryGroup` |
//! |---|---|
//! | `id` | `metadata.uid` |
//! | `displayName` | `spec.displayName` (unique among the service's groups) |
//! | `externalId` | `spec.externalId` |
//! | `members[].value` (a SCIM User `id`) | `spec.members[]` (that User's `metadata.name`) |
//! | `meta.created`, `meta.version` | `metadata.creationTimestamp`, `metadata.resourceVersion` |
//!
//! A member must be one of the service's own Users; an `id` it does not know is dropped (and
//! logged), so one stale member does not lose a whole request. Members are served with
//! `value`, `type` `User` and `$ref` (the sub-attributes of RFC 7643 §8.7.1; a `display` sent
//! is not kept). A new group's
//! `metadata.name` comes from its `displayName` ([`group_name`]), and it carries the label
//! `homestead.dev/writer=scim`; the admission policy `homestead-scim-groups` keeps the SCIM
//! identity to the groups labelled so.
//!
//! A group grants nothing by itself. Which Profile its members get is the platform team's
//! choice, in the Profiles' `spec.directory.groups`; the operator moves each member within
//! seconds of a change and records the group in the User's `status.profile.group`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use homestead_api::{DirectoryGroup, LABEL_WRITER, MAX_GROUP_MEMBERS, WRITER_SCIM};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use scim_v2::schema_urns;
use serde_json::{Value, json};

use super::error::ScimError;
use super::patch;
use super::query::get as attribute;
use super::resource::{FIELD_MANAGER, slug};
use super::service::{
    Base, PATCH_ATTEMPTS, Scim, Search, body, caught_up, list_response, live, parse_json,
    parse_patch, projected, reply, watch_owned,
};

/// The longest `metadata.name` derived from a `displayName`, in characters (room for the
/// uniqueness suffix within a DNS-1123 label).
const NAME_MAX_LEN: usize = 54;

/// A cache of the DirectoryGroups the service owns (labelled `homestead.dev/writer=scim`), fed
/// by a watch, and the future that keeps it (run it until shutdown).
pub fn watch_groups(
    client: Client,
) -> (
    Store<DirectoryGroup>,
    impl Future<Output = ()> + Send + 'static,
) {
    watch_owned(client, "DirectoryGroups")
}

/// The `metadata.name` for a new group called `display_name`: lower-cased, every run of
/// characters outside `[a-z0-9]` one `-`, at most 54 characters (`Data Science (EU)` becomes
/// `data-science-eu`), `group` if nothing is left; with `disambiguate`, a `-` and 8 hex digits
/// of the SHA-256 of `display_name` appended.
pub fn group_name(display_name: &str, disambiguate: bool) -> String {
    slug(
        display_name,
        display_name,
        "group",
        NAME_MAX_LEN,
        disambiguate,
    )
}

/// What a SCIM Group says that Homestead keeps; `members` are SCIM User ids.
#[derive(Clone, Debug, Default, PartialEq)]
struct Team {
    display_name: String,
    external_id: Option<String>,
    members: Vec<String>,
}

impl Team {
    /// The group a SCIM Group's JSON describes (a POST or PUT body, or a PATCH's result),
    /// attribute names matched case-insensitively.
    ///
    /// # Errors
    /// 400 `invalidValue` without a non-empty `displayName`, for a member without a string
    /// `value`, or for more than [`MAX_GROUP_MEMBERS`] members.
    fn from_scim(value: &Value) -> Result<Self, ScimError> {
        let display_name = attribute(value, "displayName")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| ScimError::invalid_value("a Group needs a displayName"))?
            .to_owned();
        let external_id = attribute(value, "externalId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        let listed = match attribute(value, "members") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => return Err(ScimError::invalid_value("members must be a list")),
        };
        for member in listed {
            let id = attribute(member, "value")
                .and_then(Value::as_str)
                .ok_or_else(|| ScimError::invalid_value("every member needs a string value"))?;
            if seen.insert(id) {
                members.push(id.to_owned());
            }
        }
        if members.len() > MAX_GROUP_MEMBERS {
            return Err(ScimError::invalid_value(format!(
                "{} members; a group holds at most {MAX_GROUP_MEMBERS}",
                members.len()
            )));
        }
        Ok(Self {
            display_name,
            external_id,
            members,
        })
    }
}

impl Scim {
    /// The live DirectoryGroup with `metadata.uid` `id`, from the cache.
    fn find_group(&self, id: &str) -> Result<Arc<DirectoryGroup>, ScimError> {
        self.groups
            .find(|g| g.uid().as_deref() == Some(id) && g.metadata.deletion_timestamp.is_none())
            .ok_or_else(|| ScimError::not_found(format!("no Group with id {id}")))
    }

    /// Refuses (409 `uniqueness`) a `displayName` another live group of the service's (other
    /// than `except`, a uid) already has.
    fn check_group_unique(
        &self,
        display_name: &str,
        except: Option<&str>,
    ) -> Result<(), ScimError> {
        match self.groups.find(|g| {
            g.metadata.deletion_timestamp.is_none()
                && g.uid().as_deref() != except
                && g.spec.display_name == display_name
        }) {
            Some(other) => Err(ScimError::uniqueness(format!(
                "DirectoryGroup {} already has displayName {display_name:?}",
                other.name_any()
            ))),
            None => Ok(()),
        }
    }

    /// The User names of the SCIM User ids `ids`, in order; ids of no User of the service's
    /// are dropped.
    fn member_names(&self, ids: &[String]) -> Vec<String> {
        if ids.is_empty() {
            return Vec::new();
        }
        let by_uid: HashMap<String, String> = self
            .store
            .state()
            .iter()
            .filter(|u| u.metadata.deletion_timestamp.is_none())
            .filter_map(|u| Some((u.uid()?, u.name_any())))
            .collect();
        ids.iter()
            .filter_map(|id| {
                let name = by_uid.get(id).cloned();
                if name.is_none() {
                    tracing::info!(member = %id, "no User of the SCIM service has this id; not a member");
                }
                name
            })
            .collect()
    }

    /// Removes the User `name` (just deleted) from every group of the service's that lists it,
    /// so a later User of the same name, HR's or the service's, joins none of them by name
    /// (docs/security.md, "Membership by identity"). Each write is a merge patch guarded by
    /// the group's resourceVersion, retried on a conflict. Best effort: a failure is logged,
    /// and the operator counts a membership only where the User's writer is the group's.
    pub(super) async fn drop_member(&self, name: &str) {
        for group in live(&self.groups) {
            if !group.spec.has_member(name) {
                continue;
            }
            let group_name = group.name_any();
            let mut current = (*group).clone();
            for _ in 0..PATCH_ATTEMPTS {
                let members: Vec<&String> =
                    current.spec.members.iter().filter(|m| *m != name).collect();
                let patch = json!({
                    "metadata": { "uid": current.uid(), "resourceVersion": current.resource_version() },
                    "spec": { "members": members },
                });
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                };
                match self
                    .groups_api
                    .patch(&group_name, &params, &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(group = %group_name, user = %name, "removed a deleted User from a DirectoryGroup");
                        break;
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        match self.groups_api.get_opt(&group_name).await {
                            Ok(Some(fresh)) if fresh.spec.has_member(name) => current = fresh,
                            _ => break,
                        }
                    }
                    Err(error) => {
                        tracing::warn!(group = %group_name, user = %name, %error, "could not remove a deleted User from a DirectoryGroup");
                        break;
                    }
                }
            }
        }
    }

    /// The SCIM JSON of `group`, with `meta.location` under `base`. Members that are no User of
    /// the service's (any more) are left out.
    pub(super) fn group_representation(&self, group: &DirectoryGroup, base: &str) -> Value {
        let id = group.uid().unwrap_or_default();
        let members: Vec<Value> = group
            .spec
            .members
            .iter()
            .filter_map(|name| {
                let user = self
                    .store
                    .get(&kube::runtime::reflector::ObjectRef::new(name))?;
                let uid = user.uid()?;
                Some(json!({
                    "value": uid,
                    "type": "User",
                    "$ref": format!("{base}/Users/{uid}"),
                }))
            })
            .collect();
        let created = group.creation_timestamp().map(|t| t.0.to_string());
        let modified = group
            .managed_fields()
            .iter()
            .filter_map(|f| f.time.as_ref())
            .max_by_key(|t| t.0)
            .map(|t| t.0.to_string())
            .or_else(|| created.clone());
        let mut value = json!({
            "schemas": [schema_urns::GROUP],
            "id": id,
            "displayName": group.spec.display_name,
            "members": members,
            "meta": {
                "resourceType": "Group",
                "created": created,
                "lastModified": modified,
                "version": group.resource_version().map(|rv| format!("W/\"{rv}\"")),
                "location": format!("{base}/Groups/{id}"),
            },
        });
        if let Some(external_id) = &group.spec.external_id {
            value["externalId"] = json!(external_id);
        }
        value
    }

    /// A ListResponse of the live groups matching `search`, ordered by name.
    fn search_groups(&self, search: &Search, base: &str) -> Value {
        let groups = live(&self.groups);
        list_response(
            search,
            groups.iter().map(|g| self.group_representation(g, base)),
        )
    }

    /// The merge patch (RFC 7386) that makes a DirectoryGroup say what `team` says, guarded by
    /// `uid` and, if given, `resource_version`.
    fn group_patch(&self, team: &Team, uid: &str, resource_version: Option<&str>) -> Value {
        let mut metadata = json!({ "uid": uid });
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        json!({
            "metadata": metadata,
            "spec": {
                "displayName": team.display_name,
                "externalId": team.external_id,
                "members": self.member_names(&team.members),
            },
        })
    }

    /// Writes `team` onto the group `name` (uid `uid`) and answers 200 with its representation
    /// once the cache has it.
    async fn write_group(
        &self,
        base: &str,
        name: &str,
        patch: &Value,
        params: &HashMap<String, String>,
    ) -> Result<Response, kube::Error> {
        let written = self
            .groups_api
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(patch),
            )
            .await?;
        tracing::info!(group = %name, members = written.spec.members.len(), "updated a DirectoryGroup over SCIM");
        caught_up(
            &self.groups,
            name,
            &written.uid().unwrap_or_default(),
            &written.resource_version().unwrap_or_default(),
            false,
        )
        .await;
        Ok(reply(
            StatusCode::OK,
            &projected(self.group_representation(&written, base), params),
        ))
    }
}

/// `GET /Groups`: the service's live groups matching the query, ordered by name.
pub(super) async fn list(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ScimError> {
    let search = Search::from_query(&params)?;
    Ok(reply(StatusCode::OK, &scim.search_groups(&search, &base)))
}

/// `POST /Groups/.search`: as [`list`], with the search in the body.
pub(super) async fn search(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let search = Search::from_body(bytes)?;
    Ok(reply(StatusCode::OK, &scim.search_groups(&search, &base)))
}

/// `GET /Groups/{id}`.
pub(super) async fn get(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ScimError> {
    let group = scim.find_group(&id)?;
    Ok(reply(
        StatusCode::OK,
        &projected(scim.group_representation(&group, &base), &params),
    ))
}

/// `POST /Groups`: a new DirectoryGroup labelled `homestead.dev/writer=scim`.
pub(super) async fn create(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let team = Team::from_scim(&parse_json::<Value>(&body(bytes)?)?)?;
    scim.check_group_unique(&team.display_name, None)?;
    let new = |name: String| -> Result<DirectoryGroup, ScimError> {
        serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION,
            "kind": "DirectoryGroup",
            "metadata": { "name": name, "labels": { LABEL_WRITER: WRITER_SCIM } },
            "spec": {
                "displayName": team.display_name,
                "externalId": team.external_id,
                "members": scim.member_names(&team.members),
            },
        }))
        .map_err(|e| ScimError::internal(e.to_string()))
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let plain = group_name(&team.display_name, false);
    let created = match scim.groups_api.create(&params, &new(plain)?).await {
        // Another group (of another writer, or renamed since) has the plain name.
        Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => scim
            .groups_api
            .create(&params, &new(group_name(&team.display_name, true))?)
            .await
            .map_err(ScimError::from_kube)?,
        other => other.map_err(ScimError::from_kube)?,
    };
    let (name, uid) = (created.name_any(), created.uid().unwrap_or_default());
    tracing::info!(group = %name, display_name = %team.display_name, "created a DirectoryGroup over SCIM");
    caught_up(
        &scim.groups,
        &name,
        &uid,
        &created.resource_version().unwrap_or_default(),
        false,
    )
    .await;
    let mut response = reply(
        StatusCode::CREATED,
        &scim.group_representation(&created, &base),
    );
    if let Ok(location) = HeaderValue::from_str(&format!("{base}/Groups/{uid}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `PUT /Groups/{id}`: replaces `displayName`, `externalId` and `members`.
pub(super) async fn replace(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let current = scim.find_group(&id)?;
    let team = Team::from_scim(&parse_json::<Value>(&body(bytes)?)?)?;
    scim.check_group_unique(&team.display_name, Some(&id))?;
    let patch = scim.group_patch(&team, &id, None);
    scim.write_group(&base, &current.name_any(), &patch, &params)
        .await
        .map_err(ScimError::from_kube)
}

/// `PATCH /Groups/{id}`: the operations applied to the group's representation (members `add`,
/// `remove` by filter or by value, `replace`; `displayName`; `externalId`), then written,
/// guarded by the version read; retried when the group changed in between.
pub(super) async fn patch(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let name = scim.find_group(&id)?.name_any();
    let operations = parse_patch(&body(bytes)?)?;
    for _ in 0..PATCH_ATTEMPTS {
        let current = scim
            .groups_api
            .get(&name)
            .await
            .map_err(ScimError::from_kube)?;
        if current.uid().as_deref() != Some(id.as_str())
            || current.metadata.deletion_timestamp.is_some()
            || current.labels().get(LABEL_WRITER).map(String::as_str) != Some(WRITER_SCIM)
        {
            return Err(ScimError::not_found(format!("no Group with id {id}")));
        }
        let mut resource = scim.group_representation(&current, &base);
        patch::apply(&mut resource, &operations)?;
        let team = Team::from_scim(&resource)?;
        scim.check_group_unique(&team.display_name, Some(&id))?;
        let body = scim.group_patch(&team, &id, current.resource_version().as_deref());
        match scim.write_group(&base, &name, &body, &params).await {
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            other => return other.map_err(ScimError::from_kube),
        }
    }
    Err(ScimError {
        status: StatusCode::CONFLICT,
        scim_type: None,
        detail: format!("Group {name} kept changing; try again"),
    })
}

/// `DELETE /Groups/{id}`: deletes the DirectoryGroup; its members fall back to the Profile
/// they get without it.
pub(super) async fn delete(
    State(scim): State<Scim>,
    Path(id): Path<String>,
) -> Result<Response, ScimError> {
    let group = scim.find_group(&id)?;
    let name = group.name_any();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(id.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    scim.groups_api
        .delete(&name, &params)
        .await
        .map_err(ScimError::from_kube)?;
    tracing::info!(group = %name, "deleted a DirectoryGroup over SCIM");
    caught_up(&scim.groups, &name, &id, "", true).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use scim_v2::models::errors::ScimType;

    /// A `members` list of SCIM Users with `value`s `ids`.
    fn members(ids: &[&str]) -> Value {
        Value::Array(ids.iter().map(|id| json!({ "value": id })).collect())
    }

    #[test]
    fn names_come_from_the_display_name() {
        assert_eq!(group_name("Data Science (EU)", false), "data-science-eu");
        assert_eq!(group_name("!!!", false), "group");
        let long = "x".repeat(100);
        assert_eq!(group_name(&long, false).len(), NAME_MAX_LEN);
        let disambiguated = group_name("Data Science", true);
        assert!(disambiguated.starts_with("data-science-") && disambiguated.len() == 21);
    }

    #[test]
    fn a_group_needs_a_display_name_and_string_member_values() {
        let team = Team::from_scim(&json!({
            "DisplayName": " Interns ", "externalId": "e-1",
            "members": members(&["u1", "u2", "u1"]),
        }))
        .unwrap();
        assert_eq!(
            team,
            Team {
                display_name: "Interns".into(),
                external_id: Some("e-1".into()),
                members: vec!["u1".into(), "u2".into()],
            },
            "names match case-insensitively and a member listed twice is one member"
        );
        for bad in [
            json!({"members": []}),
            json!({"displayName": ""}),
            json!({"displayName": "x", "members": [{"display": "no value"}]}),
            json!({"displayName": "x", "members": "u1"}),
        ] {
            let error = Team::from_scim(&bad).unwrap_err();
            assert_eq!(error.scim_type, Some(ScimType::InvalidValue), "{bad}");
        }
    }
}
