//! A SCIM 2.0 service provider (RFC 7643, RFC 7644) for identity providers (Okta, Entra ID,
//! Google Workspace, Keycloak): people pushed over SCIM become Homestead `User` objects.
//!
//! It serves, under `/scim/v2`: `/ServiceProviderConfig`, `/ResourceTypes`, `/Schemas`;
//! `/Users` with GET (list, `filter`, `startIndex`/`count`, `attributes`/`excludedAttributes`),
//! POST, `/.search`, and GET, PUT, PATCH and DELETE by `id`; and `/Groups` alike, as
//! DirectoryGroups ([`groups`]), whose members the platform's Profiles may map to a Profile.
//! Every endpoint needs a bearer token ([`Tokens`]); `/healthz`, `/readyz` and `/metrics`
//! (outside `/scim/v2`) do not. SCIM Groups are not a User's `spec.identity.groups` (the RBAC
//! groups bound in that person's own Namespace), and never become them.
//!
//! Writers own what they wrote: the service sees and changes only the Users labelled
//! `homestead.dev/writer=scim` (those it created, or that the platform handed to it by adding
//! the label), and the admission policy `homestead-scim-bounds` holds the SCIM identity to the
//! same rule, so a stolen token cannot reach a User HR made. PATCH requests carry at most
//! [`MAX_PATCH_OPERATIONS`] operations.
//!
//! Reads come from a watch-fed cache of those Users (one list, then a watch); writes go to the
//! API server with field manager [`resource::FIELD_MANAGER`], and a write's response waits (at
//! most 5 seconds) until the cache has seen it, so a client that reads its own write gets it.
//! The mapping is in [`resource`]. This service knows no controller: the operator provisions,
//! suspends and offboards the Users it writes.

pub mod discovery;
pub mod error;
pub mod groups;
pub mod metrics;
pub mod patch;
pub mod query;
pub mod resource;
pub mod service;
pub mod users;

use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use homestead_api::{LABEL_WRITER, WRITER_SCIM};
use kube::ResourceExt;
use scim_v2::schema_urns;

use error::ScimError;

use service::{Base, Search, list_response, live, reply};
pub use service::{MAX_PATCH_OPERATIONS, Scim, Settings, Tokens, UserCaches, watch_users};
use users::{
    create_user, delete_user, get_user, list_users, patch_user, replace_user, representation,
    search_users,
};

/// The HTTP routes: `/scim/v2/...` (bearer token required) and `/healthz`, `/readyz`.
pub fn router(scim: Scim) -> Router {
    let max_body = scim.settings.max_body_bytes;
    let api = Router::new()
        .route("/ServiceProviderConfig", get(service_provider_config))
        .route("/ResourceTypes", get(resource_types))
        .route("/ResourceTypes/{id}", get(resource_type))
        .route("/Schemas", get(schemas))
        .route("/Schemas/{id}", get(schema))
        .route("/Users", get(list_users).post(create_user))
        .route("/Users/.search", axum::routing::post(search_users))
        .route("/.search", axum::routing::post(search_all))
        .route(
            "/Users/{id}",
            get(get_user)
                .put(replace_user)
                .patch(patch_user)
                .delete(delete_user),
        )
        .route("/Groups", get(groups::list).post(groups::create))
        .route("/Groups/.search", axum::routing::post(groups::search))
        .route(
            "/Groups/{id}",
            get(groups::get)
                .put(groups::replace)
                .patch(groups::patch)
                .delete(groups::delete),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(scim.clone(), authenticate));
    Router::new()
        .nest("/scim/v2", api)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(scim.clone(), observe))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(scim)
}

async fn readyz(State(scim): State<Scim>) -> Response {
    if scim.ready.load(Ordering::Relaxed) {
        "ok".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the User and DirectoryGroup caches are not synced yet",
        )
            .into_response()
    }
}

async fn not_found() -> ScimError {
    ScimError::not_found("no such endpoint")
}

/// Refuses (401) a request without `Authorization: Bearer <token>` naming an accepted token.
async fn authenticate(State(scim): State<Scim>, mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim())
        });
    match token {
        Some(token) if scim.tokens.accepts(token) => {
            let base = Base::of(&scim, &request);
            request.extensions_mut().insert(base);
            next.run(request).await
        }
        _ => ScimError::unauthorized().into_response(),
    }
}

async fn service_provider_config(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
) -> Response {
    reply(
        StatusCode::OK,
        &discovery::service_provider_config(&base, scim.settings.max_body_bytes),
    )
}

async fn resource_types(Extension(Base(base)): Extension<Base>) -> Response {
    reply(
        StatusCode::OK,
        &discovery::list_of(vec![
            discovery::user_resource_type(&base),
            discovery::group_resource_type(&base),
        ]),
    )
}

async fn resource_type(
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
) -> Result<Response, ScimError> {
    match id.as_str() {
        "User" => Ok(reply(StatusCode::OK, &discovery::user_resource_type(&base))),
        "Group" => Ok(reply(
            StatusCode::OK,
            &discovery::group_resource_type(&base),
        )),
        _ => Err(ScimError::not_found(format!("no resource type {id}"))),
    }
}

async fn schemas(Extension(Base(base)): Extension<Base>) -> Response {
    reply(
        StatusCode::OK,
        &discovery::list_of(vec![
            discovery::user_schema(&base),
            discovery::enterprise_schema(&base),
            discovery::group_schema(&base),
        ]),
    )
}

async fn schema(
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
) -> Result<Response, ScimError> {
    if id.eq_ignore_ascii_case(schema_urns::USER) {
        Ok(reply(StatusCode::OK, &discovery::user_schema(&base)))
    } else if id.eq_ignore_ascii_case(schema_urns::GROUP) {
        Ok(reply(StatusCode::OK, &discovery::group_schema(&base)))
    } else if id.eq_ignore_ascii_case(patch::ENTERPRISE_USER) {
        Ok(reply(StatusCode::OK, &discovery::enterprise_schema(&base)))
    } else {
        Err(ScimError::not_found(format!("no schema {id}")))
    }
}

/// `POST /.search` at the root: Users, then groups, matching the search (RFC 7644 §3.4.3).
async fn search_all(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let search = Search::from_body(bytes)?;
    let users = live(&scim.store);
    let groups = live(&scim.groups);
    let resources = users
        .iter()
        .map(|u| representation(u, &base))
        .chain(groups.iter().map(|g| scim.group_representation(g, &base)));
    Ok(reply(StatusCode::OK, &list_response(&search, resources)))
}

/// Middleware: counts and times every request (refused ones too), labelled with its route
/// template ([`metrics::Metrics::observe`]).
async fn observe(State(scim): State<Scim>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    scim.metrics
        .observe(&method, &path, response.status(), started.elapsed());
    response
}

/// `GET /metrics`: the Prometheus text exposition of the SCIM service's metrics, counting the
/// Users it manages (labelled `homestead.dev/writer=scim`, not being deleted) and its
/// DirectoryGroups from the caches first.
async fn serve_metrics(State(scim): State<Scim>) -> Response {
    let managed = scim
        .store
        .state()
        .iter()
        .filter(|u| {
            u.metadata.deletion_timestamp.is_none()
                && u.labels().get(LABEL_WRITER).map(String::as_str) == Some(WRITER_SCIM)
        })
        .count();
    scim.metrics.exposition(managed, scim.groups.state().len())
}
