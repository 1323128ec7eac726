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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt as _;
use homestead_api::{DirectoryGroup, LABEL_WRITER, User, WRITER_SCIM};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use scim_v2::filter::Filter;
use scim_v2::models::errors::ScimType;
use scim_v2::models::others::{PatchOp, TolerantSearchRequest};
use scim_v2::models::user::User as ScimUser;
use scim_v2::{CreateRequest, ReplaceRequest, Valid, Validate as _, schema_urns};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use error::{SCIM_JSON, ScimError};
use resource::{FIELD_MANAGER, Person, object_name};

/// How long a write's response waits for the cache to see the write.
const CACHE_WAIT: Duration = Duration::from_secs(5);
/// How often a PATCH re-reads and retries when the User changed between its read and write.
const PATCH_ATTEMPTS: usize = 5;
/// The most operations one PATCH request may carry; identity providers send a handful.
pub const MAX_PATCH_OPERATIONS: usize = 100;
/// The annotation `kubectl apply` stores; never needed here, so not cached.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What an operator of the service chooses (flags of `homestead scim`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// `spec.profile` of every User the service creates; `None` leaves it unset (the
    /// operator's `--default-profile` then applies).
    pub profile: Option<String>,
    /// The largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// The service's external base URL up to and including `/scim/v2` (for `meta.location`);
    /// `None` derives it from the request's `Host` header as `https://<host>/scim/v2`.
    pub base_url: Option<String>,
}

/// The bearer tokens the service accepts, kept only as SHA-256 digests. A presented token is
/// hashed and compared with each digest in constant time, so neither its content nor its
/// length leaks through timing.
#[derive(Debug, Default)]
pub struct Tokens {
    digests: RwLock<Vec<[u8; 32]>>,
}

impl Tokens {
    /// Replaces the accepted tokens with those in `text`: one per line, surrounding whitespace
    /// ignored, blank lines and lines starting with `#` skipped (several lines let a token be
    /// rotated without downtime). Returns how many tokens are now accepted, or `None`, with the
    /// accepted tokens unchanged, if `text` holds none (as a Secret being rewritten may).
    pub fn set_from(&self, text: &str) -> Option<usize> {
        let digests: Vec<[u8; 32]> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(digest)
            .collect();
        let count = digests.len();
        if count == 0 {
            return None;
        }
        *self.digests.write().unwrap_or_else(|e| e.into_inner()) = digests;
        Some(count)
    }

    /// Whether `presented` is one of the accepted tokens.
    pub fn accepts(&self, presented: &str) -> bool {
        let presented = digest(presented);
        let digests = self.digests.read().unwrap_or_else(|e| e.into_inner());
        // Fold over all of them, so the time does not depend on which one matched.
        digests
            .iter()
            .fold(subtle::Choice::from(0), |found, d| {
                found | d.ct_eq(&presented)
            })
            .into()
    }
}

fn digest(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The service: the Users and DirectoryGroups APIs, their caches, the tokens and the settings.
#[derive(Clone)]
pub struct Scim {
    api: Api<User>,
    store: Store<User>,
    groups_api: Api<DirectoryGroup>,
    groups: Store<DirectoryGroup>,
    ready: Arc<AtomicBool>,
    tokens: Arc<Tokens>,
    settings: Arc<Settings>,
    metrics: metrics::Metrics,
}

impl Scim {
    /// A service writing through `client` and reading from `store` (from [`watch_users`]) and
    /// `groups` (from [`groups::watch_groups`]).
    pub fn new(
        client: Client,
        store: Store<User>,
        groups: Store<DirectoryGroup>,
        tokens: Arc<Tokens>,
        settings: Settings,
    ) -> Self {
        Self {
            api: Api::all(client.clone()),
            store,
            groups_api: Api::all(client),
            groups,
            ready: Arc::default(),
            tokens,
            settings: Arc::new(settings),
            metrics: metrics::Metrics::new(),
        }
    }

    /// The connection metrics of the service's registry, for the server that accepts its
    /// connections (`homestead scim`).
    pub fn connection_metrics(&self) -> metrics::Connections {
        self.metrics.connections()
    }

    /// Waits until the caches hold every User and DirectoryGroup (the initial lists are done);
    /// `/readyz` answers 200 from then on.
    pub async fn wait_until_ready(&self) {
        if self.store.wait_until_ready().await.is_ok()
            && self.groups.wait_until_ready().await.is_ok()
        {
            self.ready.store(true, Ordering::Relaxed);
        }
    }
}

/// The label selector of the Users the service owns: `homestead.dev/writer=scim`.
fn owned() -> String {
    format!("{LABEL_WRITER}={WRITER_SCIM}")
}

/// A cache of the Users the service owns (labelled `homestead.dev/writer=scim`) fed by a watch,
/// and the future that keeps it (run it until shutdown). Cached Users carry no `managedFields`
/// beyond the latest change time (for `meta.lastModified`) and no last-applied annotation.
pub fn watch_users(client: Client) -> (Store<User>, impl Future<Output = ()> + Send + 'static) {
    watch_owned(client, "Users")
}

/// A cache of the objects of kind `K` labelled `homestead.dev/writer=scim`, trimmed as
/// [`watch_users`] says, and the future that keeps it; `kind` names them in logs.
fn watch_owned<K>(
    client: Client,
    kind: &'static str,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(
        Api::<K>::all(client),
        watcher::Config::default().labels(&owned()),
    )
    .default_backoff()
    .modify(|object: &mut K| {
        let latest = object
            .managed_fields()
            .iter()
            .filter_map(|f| f.time.clone())
            .max_by_key(|t| t.0);
        object.meta_mut().managed_fields = latest.map(|time| {
            vec![ManagedFieldsEntry {
                time: Some(time),
                ..ManagedFieldsEntry::default()
            }]
        });
        object.annotations_mut().remove(LAST_APPLIED);
    });
    let keep = reflector::reflector(writer, stream).for_each(move |event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "watching {kind} failed; retrying");
        }
    });
    (store, keep)
}

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
        .route("/metrics", get(metrics::serve))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            scim.clone(),
            metrics::observe,
        ))
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

/// A SCIM JSON response.
fn reply(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, serde_json::to_vec(body).unwrap_or_default()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(SCIM_JSON));
    response
}

/// The base URL of this service as the client sees it (`https://scim.example.com/scim/v2`),
/// put into each authenticated request's extensions.
#[derive(Clone, Debug)]
struct Base(String);

impl Base {
    /// `--base-url` if set, else from the request's authority (HTTP/2) or `Host` header.
    fn of(scim: &Scim, request: &Request) -> Self {
        if let Some(base) = &scim.settings.base_url {
            return Self(base.trim_end_matches('/').to_owned());
        }
        let host = request
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                request
                    .headers()
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "localhost".to_owned());
        Self(format!("https://{host}/scim/v2"))
    }
}

/// The body as bytes, or the SCIM error for a body over the size limit.
fn body(bytes: Result<Bytes, BytesRejection>) -> Result<Bytes, ScimError> {
    bytes.map_err(|rejection| ScimError {
        status: rejection.status(),
        scim_type: None,
        detail: rejection.body_text(),
    })
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
    } else {
        Err(ScimError::not_found(format!("no schema {id}")))
    }
}

/// What a list or search asks for.
struct Search {
    filter: Option<Filter>,
    start_index: usize,
    count: usize,
    attributes: Vec<String>,
    excluded: Vec<String>,
}

impl Scim {
    /// The live (not being deleted) User with `metadata.uid` `id`, from the cache.
    fn find(&self, id: &str) -> Result<Arc<User>, ScimError> {
        self.store
            .find(|u| u.uid().as_deref() == Some(id) && u.metadata.deletion_timestamp.is_none())
            .ok_or_else(|| ScimError::not_found(format!("no User with id {id}")))
    }

    /// Refuses (409 `uniqueness`) a `userName` another live User of the service's (other than
    /// `except`, a uid) already has; `userName` compares case-insensitively (RFC 7643 §4.1.1).
    fn check_unique(&self, user_name: &str, except: Option<&str>) -> Result<(), ScimError> {
        let taken = self.store.find(|u| {
            u.metadata.deletion_timestamp.is_none()
                && u.uid().as_deref() != except
                && u.spec.identity.username.eq_ignore_ascii_case(user_name)
        });
        match taken {
            Some(other) => Err(ScimError::uniqueness(format!(
                "User {} already has userName {user_name}",
                other.name_any()
            ))),
            None => Ok(()),
        }
    }

    /// Waits until the User cache holds User `name` with `uid` at `resource_version` or later
    /// (or, when `gone`, no longer holds it live), at most [`CACHE_WAIT`] ([`caught_up`]).
    async fn caught_up(&self, name: &str, uid: &str, resource_version: &str, gone: bool) {
        caught_up(&self.store, name, uid, resource_version, gone).await;
    }

    /// A ListResponse of the live Users matching `search`, ordered by name.
    fn search(&self, search: &Search, base: &str) -> Value {
        let users = live(&self.store);
        list_response(search, users.iter().map(|u| representation(u, base)))
    }
}

/// The objects in `store` that are not being deleted, ordered by name.
fn live<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> Vec<Arc<K>> {
    let mut objects: Vec<Arc<K>> = store
        .state()
        .into_iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .collect();
    objects.sort_unstable_by(|a, b| a.meta().name.cmp(&b.meta().name));
    objects
}

/// Waits until `store` holds the object `name` with `uid` at `resource_version` or later (or,
/// when `gone`, no longer holds it live), at most [`CACHE_WAIT`]. Resource versions are
/// compared as the integers etcd issues; where one does not parse, equality is required.
async fn caught_up<K: kube::Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    name: &str,
    uid: &str,
    resource_version: &str,
    gone: bool,
) {
    let wanted = resource_version.parse::<u64>().ok();
    let key = ObjectRef::new(name);
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    loop {
        let cached = store.get(&key);
        let done = match cached.as_deref().map(kube::Resource::meta) {
            None => gone,
            Some(m) if m.uid.as_deref() != Some(uid) => gone,
            Some(m) if gone => m.deletion_timestamp.is_some(),
            Some(m) => {
                let rv = m.resource_version.as_deref().unwrap_or_default();
                match (rv.parse::<u64>().ok(), wanted) {
                    (Some(have), Some(want)) => have >= want,
                    _ => rv == resource_version,
                }
            }
        };
        if done || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A ListResponse (RFC 7644 §3.4.2) of the `resources` (SCIM JSON, in order) that match
/// `search`'s filter, paged and projected as it asks.
fn list_response(search: &Search, resources: impl Iterator<Item = Value>) -> Value {
    let matching: Vec<Value> = resources
        .filter(|r| search.filter.as_ref().is_none_or(|f| query::matches(f, r)))
        .collect();
    let total = matching.len();
    let page: Vec<Value> = matching
        .into_iter()
        .skip(search.start_index - 1)
        .take(search.count)
        .map(|r| query::project(r, &search.attributes, &search.excluded))
        .collect();
    json!({
        "schemas": [schema_urns::LIST_RESPONSE],
        "totalResults": total,
        "startIndex": search.start_index,
        "itemsPerPage": page.len(),
        "Resources": page,
    })
}

/// The SCIM JSON of User `user`.
fn representation(user: &User, base: &str) -> Value {
    let mut value =
        serde_json::to_value(Person::from_user(user).to_scim(user, base)).unwrap_or_default();
    // Not kept, and not in the published schema (see the module docs on Groups).
    if let Some(map) = value.as_object_mut() {
        map.remove("groups");
    }
    value
}

/// Parses a `filter` string; a malformed one is a 400 `invalidFilter`. Accepts the value path
/// with a sub-attribute that Entra ID sends, `emails[type eq "work"].value eq "x"`, as the
/// RFC 7644 §3.4.2.2 filter it means, `emails[type eq "work" and value eq "x"]`.
fn parse_filter(raw: &str) -> Result<Filter, ScimError> {
    query::hoist_sub_attributes(raw)
        .parse::<Filter>()
        .map_err(|e| ScimError::bad_request(ScimType::InvalidFilter, format!("{raw}: {e}")))
}

/// `startIndex` (1-based, at least 1) and `count` (0 to [`discovery::MAX_RESULTS`]; absent
/// means the maximum), per RFC 7644 §3.4.2.4.
fn page(start_index: Option<i64>, count: Option<i64>) -> (usize, usize) {
    let start = usize::try_from(start_index.unwrap_or(1).max(1)).unwrap_or(1);
    let count = count.map_or(discovery::MAX_RESULTS, |c| {
        usize::try_from(c.max(0))
            .unwrap_or(0)
            .min(discovery::MAX_RESULTS)
    });
    (start, count)
}

fn number(params: &HashMap<String, String>, name: &str) -> Result<Option<i64>, ScimError> {
    params
        .get(name)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ScimError::invalid_value(format!("{name} must be an integer, not {v}"))
            })
        })
        .transpose()
}

impl Search {
    /// The search a list request's query parameters ask for (`filter`, `startIndex`, `count`,
    /// `attributes`, `excludedAttributes`).
    ///
    /// # Errors
    /// 400 `invalidFilter` for a malformed filter, `invalidValue` for a non-integer number.
    fn from_query(params: &HashMap<String, String>) -> Result<Self, ScimError> {
        let (start_index, count) = page(number(params, "startIndex")?, number(params, "count")?);
        Ok(Self {
            filter: params.get("filter").map(|f| parse_filter(f)).transpose()?,
            start_index,
            count,
            attributes: query::attribute_list(params.get("attributes").map(String::as_str)),
            excluded: query::attribute_list(params.get("excludedAttributes").map(String::as_str)),
        })
    }
}

/// `resource` with only the attributes the request's `attributes` / `excludedAttributes` ask
/// for.
fn projected(resource: Value, params: &HashMap<String, String>) -> Value {
    query::project(
        resource,
        &query::attribute_list(params.get("attributes").map(String::as_str)),
        &query::attribute_list(params.get("excludedAttributes").map(String::as_str)),
    )
}

async fn list_users(
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
    fn from_body(bytes: Result<Bytes, BytesRejection>) -> Result<Self, ScimError> {
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

async fn search_users(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let search = Search::from_body(bytes)?;
    Ok(reply(StatusCode::OK, &scim.search(&search, &base)))
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

async fn get_user(
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

/// A SCIM message from a request body, attribute names matched case-insensitively; a body
/// that is not JSON of that shape is a 400 `invalidSyntax`.
fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ScimError> {
    serde_json::from_slice::<Value>(bytes)
        .and_then(scim_v2::case_insensitive::from_value)
        .map_err(|e| ScimError::bad_request(ScimType::InvalidSyntax, e.to_string()))
}

/// A SCIM User from a request body, attribute names matched case-insensitively; a body that
/// is not one is a 400 `invalidSyntax` (not JSON, wrong types) or `invalidValue` (fails
/// RFC 7643's rules for the request's direction).
fn parse_user<M: scim_v2::ContextMarker>(bytes: &[u8]) -> Result<ScimUser, ScimError> {
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
fn lenient_active(value: &mut Value) {
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

async fn create_user(
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
    let plain = object_name(&person.user_name, false);
    let created = match scim
        .api
        .create(&params, &person.new_user(&plain, profile))
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
                    error::RETRY_AFTER_SECONDS
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
                .create(&params, &person.new_user(&name, profile))
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
async fn write(
    scim: &Scim,
    current: &User,
    person: &Person,
    resource_version: Option<&str>,
) -> Result<User, kube::Error> {
    let mut patch = person.merge_patch(resource_version);
    patch["metadata"]["uid"] = json!(current.uid());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    scim.api
        .patch(&current.name_any(), &params, &Patch::Merge(&patch))
        .await
}

async fn replace_user(
    State(scim): State<Scim>,
    Extension(Base(base)): Extension<Base>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ScimError> {
    let current = scim.find(&id)?;
    let person = Person::from_scim(parse_user::<ReplaceRequest>(&body(bytes)?)?)?;
    person.attributes()?;
    scim.check_unique(&person.user_name, Some(&id))?;
    let updated = write(&scim, &current, &person, None)
        .await
        .map_err(ScimError::from_kube)?;
    finish(&scim, &base, &updated).await
}

/// A PatchOp request body (RFC 7644 §3.5.2).
///
/// # Errors
/// 400 `invalidSyntax` for a body that is not one, `invalidValue` for one that breaks its rules
/// or carries more than [`MAX_PATCH_OPERATIONS`] operations.
fn parse_patch(bytes: &[u8]) -> Result<PatchOp, ScimError> {
    let patch: PatchOp = parse_json(bytes)?;
    patch
        .validate()
        .map_err(|e| ScimError::invalid_value(e.to_string()))?;
    if patch.operations.len() > MAX_PATCH_OPERATIONS {
        return Err(ScimError::invalid_value(format!(
            "{} operations in one PATCH; at most {MAX_PATCH_OPERATIONS} are accepted",
            patch.operations.len()
        )));
    }
    Ok(patch)
}

async fn patch_user(
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
        scim.check_unique(&person.user_name, Some(&id))?;
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
async fn finish(scim: &Scim, base: &str, updated: &User) -> Result<Response, ScimError> {
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

async fn delete_user(
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
