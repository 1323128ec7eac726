//! `/Users`: the SCIM Users endpoints (list, search, get, create, replace, patch, delete),
//! each a `User` labelled `homestead.dev/writer=scim`; the mapping is in [`super::resource`].

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use homestead_api::{LABEL_WRITER, User, WRITER_SCIM};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use scim_v2::models::errors::ScimType;
use scim_v2::models::others::TolerantSearchRequest;
use scim_v2::models::user::User as ScimUser;
use scim_v2::{CreateRequest, ReplaceRequest, Valid, Validate as _};
use serde_json::{Value, json};

use super::error::ScimError;
use super::patch;
use super::resource::{FIELD_MANAGER, Person, object_name};
use super::service::{
    Base, PATCH_ATTEMPTS, Scim, Search, body, caught_up, list_response, live, page, parse_json,
    parse_patch, projected, reply,
};

impl Scim {
    /// The live (not being deleted) User with `metadata.uid` `id`, from the cache.
    pub(super) fn find(&self, id: &str) -> Result<Arc<User>, ScimError> {
        self.store
            .find(|u| u.uid().as_deref() == Some(id) && u.metadata.deletion_timestamp.is_none())
            .ok_or_else(|| ScimError::not_found(format!("no User with id {id}")))
    }

    /// The name of the User `person`'s manager is (the enterprise extension's `manager.value`,
    /// a SCIM id, looked up among the service's own live Users): the directory's manager, whom
    /// a `Handover` gives the person's homes when HR names no successor (docs/handover.md).
    /// `None` without one, or for an id the service does not know (a manager not provisioned
    /// yet: the next write names them).
    pub(super) fn manager_of(&self, person: &Person) -> Option<String> {
        let id = person.manager.as_deref()?;
        let found = self.find(id).ok().map(|u| u.name_any());
        if found.is_none() {
            tracing::info!(
                manager = id,
                "the manager's SCIM id names no User this service knows"
            );
        }
        found
    }

    /// Refuses (409 `uniqueness`) a `userName` another live User (other than `except`, a uid)
    /// already has, whoever wrote that User: HR's, the roster's and the platform's count as
    /// much as the service's own, so no write over SCIM (POST, PUT, or PATCH with or without a
    /// path) can take the identity of a person another writer suspended or provisioned
    /// (docs/security.md, "One person, one User"). `userName` compares case-insensitively
    /// (RFC 7643 §4.1.1), as the operator compares identities.
    pub(super) fn check_unique(
        &self,
        user_name: &str,
        except: Option<&str>,
    ) -> Result<(), ScimError> {
        let taken = self.identities.find(|u| {
            u.metadata.deletion_timestamp.is_none()
                && u.uid().as_deref() != except
                && u.spec.identity.username.eq_ignore_ascii_case(user_name)
        });
        // The message names no User: the service may not tell who holds an identity it does
        // not own (a token holder could otherwise map the cluster's people).
        match taken {
            Some(_) => Err(ScimError::uniqueness(format!(
                "userName {user_name} is taken by another User"
            ))),
            None => Ok(()),
        }
    }

    /// [`Scim::check_unique`] for a write of `user_name` onto `current`, when it changes the
    /// userName (compared case-insensitively): a write that keeps it (a deactivation, a new
    /// display name) is never refused for a younger duplicate someone else made, so the
    /// identity provider can always suspend its own person.
    pub(super) fn check_rename(&self, current: &User, user_name: &str) -> Result<(), ScimError> {
        if current
            .spec
            .identity
            .username
            .eq_ignore_ascii_case(user_name)
        {
            return Ok(());
        }
        self.check_unique(user_name, current.uid().as_deref())
    }

    /// Waits until both User caches, the service's own Users and every User's identity (which
    /// [`Scim::check_unique`] reads), hold User `name` with `uid` at `resource_version` or later
    /// (or, when `gone`, no longer hold it live), at most [`CACHE_WAIT`] ([`caught_up`]). So a
    /// request after a write sees it: a create right after a delete says the person is still
    /// being offboarded, not that their userName is taken.
    pub(super) async fn caught_up(
        &self,
        name: &str,
        uid: &str,
        resource_version: &str,
        gone: bool,
    ) {
        futures::join!(
            caught_up(&self.store, name, uid, resource_version, gone),
            caught_up(&self.identities, name, uid, resource_version, gone),
        );
    }

    /// A ListResponse of the live Users matching `search`, ordered by name.
    pub(super) fn search(&self, search: &Search, base: &str) -> Value {
        let users = live(&self.store);
        list_response(search, users.iter().map(|u| representation(u, base)))
    }
}

/// The SCIM JSON of User `user`.
pub(super) fn representation(user: &User, base: &str) -> Value {
    let mut value =
        serde_json::to_value(Person::from_user(user).to_scim(user, base)).unwrap_or_default();
    // Not kept, and not in the published schema (see the module docs on Groups).
    if let Some(map) = value.as_object_mut() {
        map.remove("groups");
    }
    value
}

pub(super) async fn list_users(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ScimError> {
    let search = Search::from_query(&params)?;
    Ok(reply(StatusCode::OK, &scim.search(&search, &base)))
}

impl Search {
    /// The search a `/.search` request body (RFC 7644 §3.4.3) asks for.
    ///
    /// # Errors
    /// 400 `invalidSyntax` for a body that is not a SearchRequest, `invalidFilter` for a
    /// malformed filter.
    pub(super) fn from_body(bytes: Result<Bytes, BytesRejection>) -> Result<Self, ScimError> {
        let request: TolerantSearchRequest = parse_json(&body(bytes)?)?;
        let request = request.into_strict().map_err(|e| {
            ScimError::bad_request(ScimType::InvalidFilter, format!("{}: {}", e.raw, e.error))
        })?;
        let (start_index, count) = page(request.start_index, request.count);
        Ok(Self {
            filter: request.filter,
            start_index,
            count,
            attributes: request.attributes,
            excluded: request.excluded_attributes,
        })
    }
}

pub(super) async fn search_users(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let search = Search::from_body(bytes)?;
    Ok(reply(StatusCode::OK, &scim.search(&search, &base)))
}

pub(super) async fn get_user(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ScimError> {
    let user = scim.find(&id)?;
    Ok(reply(
        StatusCode::OK,
        &projected(representation(&user, &base), &params),
    ))
}

/// A SCIM User from a request body, attribute names matched case-insensitively; a body that
/// is not one is a 400 `invalidSyntax` (not JSON, wrong types) or `invalidValue` (fails
/// RFC 7643's rules for the request's direction).
pub(super) fn parse_user<M: scim_v2::ContextMarker>(bytes: &[u8]) -> Result<ScimUser, ScimError> {
    let mut value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ScimError::bad_request(ScimType::InvalidSyntax, e.to_string()))?;
    lenient_active(&mut value);
    let user: ScimUser = scim_v2::case_insensitive::from_value(value)
        .map_err(|e| ScimError::bad_request(ScimType::InvalidSyntax, e.to_string()))?;
    Valid::new(user, M::CONTEXT)
        .map(Valid::into_inner)
        .map_err(|e| ScimError::invalid_value(e.to_string()))
}

/// Turns an `active` sent as the string `"True"` or `"False"` (Entra ID does) into a boolean.
pub(super) fn lenient_active(value: &mut Value) {
    if let Some(map) = value.as_object_mut() {
        for (key, v) in map.iter_mut() {
            if key.eq_ignore_ascii_case("active")
                && let Some(parsed) = v
                    .as_str()
                    .and_then(|s| s.to_ascii_lowercase().parse::<bool>().ok())
            {
                *v = Value::Bool(parsed);
            }
        }
    }
}

pub(super) async fn create_user(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let person = Person::from_scim(parse_user::<CreateRequest>(&body(bytes)?)?)?;
    person.attributes()?;
    scim.check_unique(&person.user_name, None)?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let profile = scim.settings.profile.as_deref();
    let manager = scim.manager_of(&person);
    let plain = object_name(&person.user_name, false);
    let created = match scim
        .api
        .create(
            &params,
            &person.new_user(&plain, profile, manager.as_deref()),
        )
        .await
    {
        Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
            // Someone else has the plain name. If it is this very person (a concurrent
            // create, not yet cached), that is a uniqueness conflict, unless that User is
            // still being offboarded: then the create will succeed once it is gone (a lookup
            // already says the person does not exist). Otherwise disambiguate.
            let existing = scim.api.get(&plain).await.map_err(ScimError::from_kube)?;
            let same_person = existing
                .spec
                .identity
                .username
                .eq_ignore_ascii_case(&person.user_name);
            if same_person && existing.metadata.deletion_timestamp.is_some() {
                return Err(ScimError::retry_later(format!(
                    "User {plain}, the previous User with userName {}, is still being offboarded; \
                     retry after {} s",
                    person.user_name,
                    super::error::RETRY_AFTER_SECONDS
                )));
            }
            if same_person {
                return Err(ScimError::uniqueness(format!(
                    "User {plain} already has userName {}",
                    person.user_name
                )));
            }
            let name = object_name(&person.user_name, true);
            scim.api
                .create(
                    &params,
                    &person.new_user(&name, profile, manager.as_deref()),
                )
                .await
                .map_err(ScimError::from_kube)?
        }
        other => other.map_err(ScimError::from_kube)?,
    };
    let (name, uid) = (created.name_any(), created.uid().unwrap_or_default());
    tracing::info!(user = %name, user_name = %person.user_name, "created a User over SCIM");
    scim.caught_up(
        &name,
        &uid,
        &created.resource_version().unwrap_or_default(),
        false,
    )
    .await;
    let mut response = reply(StatusCode::CREATED, &representation(&created, &base));
    if let Ok(location) = HeaderValue::from_str(&format!("{base}/Users/{uid}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Writes `person` onto User `current` with a merge patch guarded by its uid and, if given,
/// its resource version. An `active` that is absent (a PUT without it) or removed (a PATCH
/// `remove` of `active`) changes nothing: only `active: true` lifts a deactivation
/// (docs/security.md, "Suspension has an author").
pub(super) async fn write(
    scim: &Scim,
    current: &User,
    person: &Person,
    resource_version: Option<&str>,
) -> Result<User, kube::Error> {
    let manager = scim.manager_of(person);
    let mut patch = person.merge_patch(resource_version, manager.as_deref());
    patch["metadata"]["uid"] = json!(current.uid());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    scim.api
        .patch(&current.name_any(), &params, &Patch::Merge(&patch))
        .await
}

pub(super) async fn replace_user(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let current = scim.find(&id)?;
    let person = Person::from_scim(parse_user::<ReplaceRequest>(&body(bytes)?)?)?;
    person.attributes()?;
    scim.check_rename(&current, &person.user_name)?;
    let updated = write(&scim, &current, &person, None)
        .await
        .map_err(ScimError::from_kube)?;
    finish(&scim, &base, &updated).await
}

pub(super) async fn patch_user(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let name = scim.find(&id)?.name_any();
    let patch = parse_patch(&body(bytes)?)?;
    for _ in 0..PATCH_ATTEMPTS {
        // Read fresh, apply, write guarded by the version read: a concurrent change makes the
        // write fail with 409, and the PATCH is applied again to the newer User.
        let current = scim.api.get(&name).await.map_err(ScimError::from_kube)?;
        if current.uid().as_deref() != Some(id.as_str())
            || current.metadata.deletion_timestamp.is_some()
            || current.labels().get(LABEL_WRITER).map(String::as_str) != Some(WRITER_SCIM)
        {
            return Err(ScimError::not_found(format!("no User with id {id}")));
        }
        let mut resource = representation(&current, &base);
        patch::apply(&mut resource, &patch)?;
        lenient_active(&mut resource);
        let user: ScimUser = scim_v2::case_insensitive::from_value(resource)
            .map_err(|e| ScimError::invalid_value(e.to_string()))?;
        user.validate()
            .map_err(|e| ScimError::invalid_value(e.to_string()))?;
        let person = Person::from_scim(user)?;
        person.attributes()?;
        scim.check_rename(&current, &person.user_name)?;
        match write(
            &scim,
            &current,
            &person,
            current.resource_version().as_deref(),
        )
        .await
        {
            Ok(updated) => return finish(&scim, &base, &updated).await,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(ScimError::from_kube(error)),
        }
    }
    Err(ScimError {
        status: StatusCode::CONFLICT,
        scim_type: None,
        detail: format!("User {name} kept changing; try again"),
    })
}

/// Waits for the cache to see `updated` and answers 200 with its representation.
pub(super) async fn finish(scim: &Scim, base: &str, updated: &User) -> Result<Response, ScimError> {
    let (name, uid) = (updated.name_any(), updated.uid().unwrap_or_default());
    tracing::info!(user = %name, "updated a User over SCIM");
    scim.caught_up(
        &name,
        &uid,
        &updated.resource_version().unwrap_or_default(),
        false,
    )
    .await;
    Ok(reply(StatusCode::OK, &representation(updated, base)))
}

pub(super) async fn delete_user(
    State(scim): State<Scim>,
    Path(id): Path<String>,
) -> Result<Response, ScimError> {
    let user = scim.find(&id)?;
    let name = user.name_any();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(id.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    scim.api
        .delete(&name, &params)
        .await
        .map_err(ScimError::from_kube)?;
    tracing::info!(user = %name, "deleted a User over SCIM; the operator offboards per its deletionPolicy");
    scim.drop_member(&name).await;
    scim.caught_up(&name, &id, "", true).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
