//! The SCIM service's core, below its handlers: the service state ([`Scim`]: the clients, the
//! watch-fed caches, the tokens, the settings, the metrics), the bearer [`Tokens`], and what
//! every handler shares (the JSON reply, the base URL, request bodies, list pages and
//! projections, PatchOp bodies).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use homestead_api::{DirectoryGroup, LABEL_WRITER, User, WRITER_SCIM};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use scim_v2::filter::Filter;
use scim_v2::models::errors::ScimType;
use scim_v2::models::others::PatchOp;
use scim_v2::{Validate as _, schema_urns};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use super::error::{SCIM_JSON, ScimError};
use super::metrics;
use super::query;

/// How long a write's response waits for the cache to see the write.
pub(super) const CACHE_WAIT: Duration = Duration::from_secs(5);
/// How often a PATCH re-reads and retries when the User changed between its read and write.
pub(super) const PATCH_ATTEMPTS: usize = 5;
/// The most operations one PATCH request may carry; identity providers send a handful.
pub const MAX_PATCH_OPERATIONS: usize = 100;
/// The annotation `kubectl apply` stores; never needed here, so not cached.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

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

pub(super) fn digest(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The service: the Users and DirectoryGroups APIs, their caches, the tokens and the settings.
#[derive(Clone)]
pub struct Scim {
    pub(super) api: Api<User>,
    pub(super) store: Store<User>,
    /// Every User of every writer, cut down to its name, uid, deletion timestamp and
    /// `spec.identity.username`: what a `userName` is checked against.
    pub(super) identities: Store<User>,
    pub(super) groups_api: Api<DirectoryGroup>,
    pub(super) groups: Store<DirectoryGroup>,
    pub(super) ready: Arc<AtomicBool>,
    pub(super) tokens: Arc<Tokens>,
    pub(super) settings: Arc<Settings>,
    pub(super) metrics: metrics::Metrics,
}

impl Scim {
    /// A service writing through `client` and reading from `users` (from [`watch_users`]) and
    /// `groups` (from [`groups::watch_groups`]).
    pub fn new(
        client: Client,
        users: UserCaches,
        groups: Store<DirectoryGroup>,
        tokens: Arc<Tokens>,
        settings: Settings,
    ) -> Self {
        Self {
            api: Api::all(client.clone()),
            store: users.owned,
            identities: users.identities,
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

    /// The gauge of the serving certificate's expiry in the service's registry, for whoever
    /// loads the certificate (`homestead scim`; see [`metrics::Metrics::certificate_expiry`]).
    pub fn certificate_expiry_metric(&self) -> prometheus::IntGauge {
        self.metrics.certificate_expiry()
    }

    /// Waits until the caches hold every User and DirectoryGroup (the initial lists are done);
    /// `/readyz` answers 200 from then on.
    pub async fn wait_until_ready(&self) {
        if self.store.wait_until_ready().await.is_ok()
            && self.identities.wait_until_ready().await.is_ok()
            && self.groups.wait_until_ready().await.is_ok()
        {
            self.ready.store(true, Ordering::Relaxed);
        }
    }
}

/// The label selector of the Users the service owns: `homestead.dev/writer=scim`.
pub(super) fn owned() -> String {
    format!("{LABEL_WRITER}={WRITER_SCIM}")
}

/// The service's two caches of Users, from [`watch_users`].
#[derive(Clone)]
pub struct UserCaches {
    /// The Users the service owns (labelled `homestead.dev/writer=scim`), whole but for
    /// `managedFields` (the latest change time only, for `meta.lastModified`) and the
    /// last-applied annotation.
    pub owned: Store<User>,
    /// Every User, whoever wrote it, with nothing but its name, uid, creation and deletion
    /// timestamps and `spec.identity.username` (about 150 bytes a User): a `userName` is unique
    /// among all of them, not only among the service's own (docs/security.md, "One person, one
    /// User").
    pub identities: Store<User>,
}

/// The service's caches of Users ([`UserCaches`]), fed by two watches, and the future that
/// keeps both (run it until shutdown).
pub fn watch_users(client: Client) -> (UserCaches, impl Future<Output = ()> + Send + 'static) {
    let (owned, keep_owned) = watch_owned(client.clone(), "Users");
    let (identities, writer) = reflector::store();
    let stream = watcher(Api::<User>::all(client), watcher::Config::default())
        .default_backoff()
        .modify(|user: &mut User| {
            let meta = &mut user.metadata;
            *meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: meta.name.take(),
                uid: meta.uid.take(),
                resource_version: meta.resource_version.take(),
                creation_timestamp: meta.creation_timestamp.take(),
                deletion_timestamp: meta.deletion_timestamp.take(),
                ..Default::default()
            };
            let username = std::mem::take(&mut user.spec.identity.username);
            // The smallest spec there is: the identity alone (every other field has a default).
            if let Ok(spec) =
                serde_json::from_value(json!({ "identity": { "username": username } }))
            {
                user.spec = spec;
            } else {
                user.spec.identity.username = username;
            }
            user.status = None;
        });
    let keep_identities = reflector::reflector(writer, stream).for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "watching every User's identity failed; retrying");
        }
    });
    let caches = UserCaches { owned, identities };
    (caches, async move {
        futures::join!(keep_owned, keep_identities);
    })
}

/// A cache of the objects of kind `K` labelled `homestead.dev/writer=scim`, trimmed as
/// [`watch_users`] says, and the future that keeps it; `kind` names them in logs.
pub(super) fn watch_owned<K>(
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

/// A SCIM JSON response.
pub(super) fn reply(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, serde_json::to_vec(body).unwrap_or_default()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(SCIM_JSON));
    response
}

/// The base URL of this service as the client sees it (`https://scim.example.com/scim/v2`),
/// put into each authenticated request's extensions.
#[derive(Clone, Debug)]
pub(super) struct Base(pub(super) String);

impl Base {
    /// `--base-url` if set, else from the request's authority (HTTP/2) or `Host` header.
    pub(super) fn of(scim: &Scim, request: &Request) -> Self {
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
pub(super) fn body(bytes: Result<Bytes, BytesRejection>) -> Result<Bytes, ScimError> {
    bytes.map_err(|rejection| ScimError {
        status: rejection.status(),
        scim_type: None,
        detail: rejection.body_text(),
    })
}

/// What a list or search asks for.
pub(super) struct Search {
    pub(super) filter: Option<Filter>,
    pub(super) start_index: usize,
    pub(super) count: usize,
    pub(super) attributes: Vec<String>,
    pub(super) excluded: Vec<String>,
}

/// The objects in `store` that are not being deleted, ordered by name.
pub(super) fn live<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> Vec<Arc<K>> {
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
pub(super) async fn caught_up<K: kube::Resource<DynamicType = ()> + Clone>(
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
pub(super) fn list_response(search: &Search, resources: impl Iterator<Item = Value>) -> Value {
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

/// Parses a `filter` string; a malformed one is a 400 `invalidFilter`. Accepts the value path
/// with a sub-attribute that Entra ID sends, `emails[type eq "work"].value eq "x"`, as the
/// RFC 7644 §3.4.2.2 filter it means, `emails[type eq "work" and value eq "x"]`.
pub(super) fn parse_filter(raw: &str) -> Result<Filter, ScimError> {
    query::hoist_sub_attributes(raw)
        .parse::<Filter>()
        .map_err(|e| ScimError::bad_request(ScimType::InvalidFilter, format!("{raw}: {e}")))
}

/// `startIndex` (1-based, at least 1) and `count` (0 to [`super::discovery::MAX_RESULTS`]; absent
/// means the maximum), per RFC 7644 §3.4.2.4.
pub(super) fn page(start_index: Option<i64>, count: Option<i64>) -> (usize, usize) {
    let start = usize::try_from(start_index.unwrap_or(1).max(1)).unwrap_or(1);
    let count = count.map_or(super::discovery::MAX_RESULTS, |c| {
        usize::try_from(c.max(0))
            .unwrap_or(0)
            .min(super::discovery::MAX_RESULTS)
    });
    (start, count)
}

pub(super) fn number(
    params: &HashMap<String, String>,
    name: &str,
) -> Result<Option<i64>, ScimError> {
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
    pub(super) fn from_query(params: &HashMap<String, String>) -> Result<Self, ScimError> {
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
pub(super) fn projected(resource: Value, params: &HashMap<String, String>) -> Value {
    query::project(
        resource,
        &query::attribute_list(params.get("attributes").map(String::as_str)),
        &query::attribute_list(params.get("excludedAttributes").map(String::as_str)),
    )
}

/// A SCIM message from a request body, attribute names matched case-insensitively; a body
/// that is not JSON of that shape is a 400 `invalidSyntax`.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ScimError> {
    serde_json::from_slice::<Value>(bytes)
        .and_then(scim_v2::case_insensitive::from_value)
        .map_err(|e| ScimError::bad_request(ScimType::InvalidSyntax, e.to_string()))
}

/// A PatchOp request body (RFC 7644 §3.5.2).
///
/// # Errors
/// 400 `invalidSyntax` for a body that is not one, `invalidValue` for one that breaks its rules
/// or carries more than [`MAX_PATCH_OPERATIONS`] operations.
pub(super) fn parse_patch(bytes: &[u8]) -> Result<PatchOp, ScimError> {
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
