//! The homes API's routes (docs/homes.md): discovery, OpenAPI, and `homes` read from the caches
//! for the caller alone (list, get, watch; JSON or a server-side Table). Every route first
//! authenticates the front proxy ([`crate::auth`]); a request that is not the API server's gets
//! 401 with a `Status`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use axum_server::tls::TlsInfo;
use futures::StreamExt;
use homestead_api::{DirectoryGroup, Share, TotalQuotaStatus, User, Workspace};
use homestead_model::homes::homes_of;
use homestead_model::via::Via;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::auth::{Caller, RequestHeaderAuth, Unauthenticated};
use crate::openapi;
use crate::places::{WatchLimits, WatchPlace, WatchPlaces};
use crate::resource::{self, Merged, Person};
use homestead_model::identity::Identities;
use homestead_model::names::NameIndex;
use homestead_model::store::CompactStore;

/// How long a watch runs when the client names no `timeoutSeconds` (kube-apiserver's default
/// `--min-request-timeout`), and the longest it may ask for.
const WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// What the routes read: the front-proxy settings and the caches.
pub struct Homes {
    /// The front-proxy settings.
    pub auth: RequestHeaderAuth,
    /// Every User, packed ([`homestead_model::packed`]).
    pub users: CompactStore<User>,
    /// Every Share, packed.
    pub shares: CompactStore<Share>,
    /// Every DirectoryGroup.
    pub groups: Store<DirectoryGroup>,
    /// Every Workspace.
    pub workspaces: Store<Workspace>,
    /// A count of the caches' changes, bumped on every watch event any of them takes in:
    /// what a `watch` waits on, and the lists' `resourceVersion`.
    pub changes: Arc<watch::Sender<u64>>,
    /// Which User holds each identity (the oldest naming it, as the operator decides).
    identities: Identities,
    /// Shares by grantee.
    shares_by_grantee: NameIndex<Share>,
    /// DirectoryGroups by member.
    groups_by_member: NameIndex<DirectoryGroup>,
    /// Workspaces by owner (a User or a DirectoryGroup) and by admin.
    workspaces_by_name: NameIndex<Workspace>,
    /// The watches open, by holder, within their bounds.
    watches: Arc<WatchPlaces>,
    /// Shares decoded from `shares`, while no Share changed ([`Decoded`]).
    decoded: Mutex<Decoded>,
    /// Writes to `shares` begun and ended ([`Homes::writing_shares`]).
    share_writes: (AtomicU64, AtomicU64),
}

/// At most how many decoded Shares [`Decoded`] holds: about 1 KB each with its key (a `Share`
/// is 608 bytes before its strings), so about 2 MiB.
const DECODED_SHARES: usize = 2048;

/// Shares decoded from the packed cache, shared by every request while no Share changes: a
/// Share that names a group is read by each of its members, and decoding one (LZ4, then JSON)
/// was half of a list's CPU (docs/performance.md, "The homes API's CPU per list"). The entries
/// are the Shares as they were after `at` writes to the cache ([`Homes::writing_shares`]); a
/// request reads them only when as many writes have ended as begun and that count is `at`, and
/// adds what it decoded only if no write began meanwhile. So what a request gets from here is
/// what the cache holds when it asks, never an older Share.
#[derive(Default)]
struct Decoded {
    /// How many writes to the Shares' cache had ended when these Shares were decoded.
    at: u64,
    /// The Shares decoded since, at most [`DECODED_SHARES`].
    shares: HashMap<ObjectRef<Share>, Arc<Share>>,
}

/// A JSON response of `value` with `code`.
fn json(code: StatusCode, value: &impl serde::Serialize) -> Response {
    json_sized(code, value, 1024)
}

/// About how many bytes of JSON a `Home` takes (a hundred took 26 KB in `just bench-homes`).
const HOME_BYTES: usize = 320;

/// [`json`] into a buffer of `capacity` bytes to start with: the size it will likely take, so
/// that the body is not copied again and again as it grows.
fn json_sized(code: StatusCode, value: &impl serde::Serialize, capacity: usize) -> Response {
    let mut body = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut body, value) {
        Ok(()) => (code, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The 401 for a request that is not the API server's.
fn unauthorized(refused: Unauthenticated) -> Response {
    status(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        &refused.to_string(),
    )
}

/// A `Status` (`v1`) response: `code`, its `reason` and a `message`, as the API server sends.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    json(code, &body)
}

impl Homes {
    /// The routes' state over the caches, and the count their tasks bump (start it at 1: a
    /// list's `resourceVersion` is never empty or `0`, which mean "from the start" to a watch).
    pub fn new(
        auth: RequestHeaderAuth,
        users: CompactStore<User>,
        shares: CompactStore<Share>,
        groups: Store<DirectoryGroup>,
        workspaces: Store<Workspace>,
        changes: Arc<watch::Sender<u64>>,
    ) -> Self {
        Self {
            auth,
            users,
            shares,
            groups,
            workspaces,
            changes,
            identities: Identities::default(),
            shares_by_grantee: NameIndex::default(),
            groups_by_member: NameIndex::default(),
            workspaces_by_name: NameIndex::default(),
            watches: WatchPlaces::new(WatchLimits::default()),
            decoded: Mutex::default(),
            share_writes: (AtomicU64::new(0), AtomicU64::new(0)),
        }
    }

    /// Runs `write`, a change to the Shares' cache (`shares`), as the one write the decoded
    /// Shares know of ([`Decoded`]): counted as begun before it, and as ended after it.
    pub fn writing_shares(&self, write: impl FnOnce()) {
        self.share_writes.0.fetch_add(1, Ordering::SeqCst);
        write();
        self.share_writes.1.fetch_add(1, Ordering::SeqCst);
    }

    /// How many writes to the Shares' cache have ended, if no other has begun since: the
    /// cache then holds what it held after that many.
    fn shares_settled(&self) -> Option<u64> {
        let ended = self.share_writes.1.load(Ordering::SeqCst);
        (self.share_writes.0.load(Ordering::SeqCst) == ended).then_some(ended)
    }

    /// The Shares of `refs` still in the cache, as it holds them now, each decoded once for
    /// every request while no Share changes ([`Decoded`]).
    fn shares(&self, refs: &HashSet<ObjectRef<Share>>) -> Vec<Arc<Share>> {
        let mut found = Vec::with_capacity(refs.len());
        let mut missing = Vec::new();
        let settled = self.shares_settled();
        let stale = {
            let mut decoded = self.decoded.lock().unwrap_or_else(PoisonError::into_inner);
            let stale = match settled {
                Some(at) if decoded.at < at => {
                    decoded.at = at;
                    std::mem::take(&mut decoded.shares)
                }
                _ => HashMap::new(),
            };
            for share in refs {
                match decoded.shares.get(share) {
                    Some(cached) if settled == Some(decoded.at) => found.push(cached.clone()),
                    _ => missing.push(share),
                }
            }
            stale
        };
        // Freed outside the lock.
        drop(stale);
        if missing.is_empty() {
            return found;
        }
        let read: Vec<(ObjectRef<Share>, Arc<Share>)> = missing
            .into_iter()
            .filter_map(|r| {
                let share = self.shares.get(r.namespace.as_deref(), &r.name)?;
                Some((r.clone(), Arc::new(share)))
            })
            .collect();
        let mut decoded = self.decoded.lock().unwrap_or_else(PoisonError::into_inner);
        // Only what was read with no write begun since the count: the cache as of `at`.
        let keep = settled.is_some_and(|at| decoded.at == at && self.shares_settled() == settled);
        for (r, share) in read {
            if keep && decoded.shares.len() < DECODED_SHARES {
                decoded.shares.insert(r, share.clone());
            }
            found.push(share);
        }
        found
    }

    /// Takes a watch event of the Users' cache into the index of Users (after the cache took
    /// it in).
    pub fn observe_user(&self, event: &watcher::Event<User>) {
        self.identities.observe(event);
    }

    /// Takes a watch event of the Shares' cache into the index of Shares.
    pub fn observe_share(&self, event: &watcher::Event<Share>) {
        self.shares_by_grantee.observe(event);
    }

    /// Takes a watch event of the DirectoryGroups' cache into the index of groups by member.
    pub fn observe_group(&self, event: &watcher::Event<DirectoryGroup>) {
        self.groups_by_member.observe(event);
    }

    /// Takes a watch event of the Workspaces' cache into the index of Workspaces by owner and
    /// admin.
    pub fn observe_workspace(&self, event: &watcher::Event<Workspace>) {
        self.workspaces_by_name.observe(event);
    }

    /// The caller of a request.
    fn caller(
        &self,
        tls: Option<&TlsInfo>,
        headers: &HeaderMap,
    ) -> Result<Caller, Unauthenticated> {
        let peer = tls
            .map(|t| t.peer_certificates.as_slice())
            .unwrap_or_default();
        self.auth.caller(peer, headers)
    }

    /// The User that holds the caller's identity (the oldest of those that name it without
    /// regard to case, as the operator decides who holds it), only when its username is exactly
    /// the caller's, as RBAC compares subjects; `None` for anyone else.
    fn user_of(&self, caller: &Caller) -> Option<User> {
        self.identities
            .holder(&caller.username)
            .and_then(|holder| self.users.get(None, &holder.name))
            .filter(|holder| holder.spec.identity.username == caller.username)
    }

    /// The caller's homes at `now`, merged by namespace, and who they are: through the User
    /// that holds their identity (the oldest of those that name it without regard to case, as
    /// the operator decides who holds it), and only when that User's username is exactly the
    /// caller's, as RBAC compares subjects: `BOB@EXAMPLE.COM` is not bob, and sees nothing;
    /// the DirectoryGroups that count that User, the Shares naming either and the Workspaces
    /// either owns or the User administers, each found by the indexes (no scan of every User,
    /// Share, group or Workspace, nor of a group's members). Nobody's: an empty list.
    fn homes_of(&self, caller: &Caller, now: Timestamp) -> (Person, Vec<Merged>) {
        let Some(user) = self.user_of(caller) else {
            return (Person::default(), Vec::new());
        };
        let name = user.name_any();
        // The groups that count the caller (docs/security.md, "Membership by identity"): among
        // those the index says name them, each as cached counts them, members and writer read
        // from one object. During a re-list the index runs ahead of the cache, which swaps in
        // the listed objects at the end: a group the cache does not yet show naming the caller
        // does not count them yet.
        let groups: Vec<Arc<DirectoryGroup>> = self
            .groups_by_member
            .of_user(&name, None)
            .iter()
            .filter_map(|group| self.groups.get(group))
            .filter(|group| group.counts_member(&user))
            .collect();
        let index = &self.shares_by_grantee;
        let refs: HashSet<ObjectRef<Share>> = index
            .of_user(&name, None)
            .into_iter()
            .chain(groups.iter().flat_map(|g| index.of_group(&g.name_any())))
            .collect();
        let shares = self.shares(&refs);
        // The workspaces the caller owns or administers, and those their groups own.
        let index = &self.workspaces_by_name;
        let refs: HashSet<ObjectRef<Workspace>> = index
            .of_user(&name, None)
            .into_iter()
            .chain(groups.iter().flat_map(|g| index.of_group(&g.name_any())))
            .collect();
        let workspaces: Vec<Arc<Workspace>> =
            refs.iter().filter_map(|r| self.workspaces.get(r)).collect();
        let groups: Vec<&DirectoryGroup> = groups.iter().map(AsRef::as_ref).collect();
        let shares: Vec<&Share> = shares.iter().map(AsRef::as_ref).collect();
        let workspaces: Vec<&Workspace> = workspaces.iter().map(AsRef::as_ref).collect();
        let person = Person {
            profile: user
                .status
                .as_ref()
                .and_then(|s| s.profile.as_ref())
                .map(|p| p.name.clone()),
            user: name,
        };
        let homes = homes_of(&user, &groups, &shares, &workspaces, now);
        let mut totals: BTreeMap<&str, TotalQuotaStatus> = homes
            .iter()
            .filter_map(|h| Some((h.namespace.as_str(), self.total_of(&user, &h.via)?)))
            .collect();
        let mut merged = resource::merged(&homes);
        for home in &mut merged {
            home.total = totals.remove(home.namespace.as_str());
        }
        (person, merged)
    }

    /// The total quota of the owner of a home `user` reaches `via`, from the owner's status
    /// (docs/quota.md): `user`'s own for their own home, the Workspace's owner's (a User or a
    /// DirectoryGroup) for a workspace; `None` through a Share, or without a total.
    fn total_of(&self, user: &User, via: &Via) -> Option<TotalQuotaStatus> {
        let workspace = match via {
            Via::OwnHome => return user.status.as_ref()?.total.clone(),
            Via::Workspace(name)
            | Via::Team {
                workspace: name, ..
            } => name,
            Via::Share(_) | Via::Group { .. } => return None,
        };
        let owner = self
            .workspaces
            .get(&ObjectRef::new(workspace))?
            .spec
            .owner
            .clone();
        match (owner.user, owner.group) {
            (Some(person), _) => self.users.get(None, &person)?.status.clone()?.total,
            (None, Some(group)) => {
                self.groups
                    .get(&ObjectRef::new(&group))?
                    .status
                    .clone()?
                    .total
            }
            (None, None) => None,
        }
    }
}

/// Whether the client asked for a server-side Table (`Accept: application/json;as=Table;...`).
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

/// The query parameters of list and watch that the homes API honours (a subset of
/// `meta/v1.ListOptions`); others are ignored.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListOptions {
    /// `true` or `1`: a watch.
    #[serde(default)]
    watch: Option<String>,
    /// Where a watch starts: empty or `0` sends every home first as `ADDED`; any other value
    /// (a list's) starts from now.
    #[serde(default)]
    resource_version: Option<String>,
    /// How long a watch runs, in seconds (at most 1800).
    #[serde(default)]
    timeout_seconds: Option<u64>,
    /// Only `metadata.name=<name>` (what `kubectl get home <name> -w` sends).
    #[serde(default)]
    field_selector: Option<String>,
}

impl ListOptions {
    fn is_watch(&self) -> bool {
        matches!(self.watch.as_deref(), Some("true" | "1"))
    }

    /// The one name a field selector asks for, if it asks (`Err` for a selector other than
    /// `metadata.name=` or `metadata.name==`).
    fn name(&self) -> Result<Option<&str>, String> {
        match self.field_selector.as_deref() {
            None | Some("") => Ok(None),
            Some(selector) => selector
                .strip_prefix("metadata.name==")
                .or_else(|| selector.strip_prefix("metadata.name="))
                .filter(|name| !name.contains(','))
                .map(Some)
                .ok_or_else(|| {
                    format!("field selector {selector:?}: only metadata.name= is supported")
                }),
        }
    }
}

/// The homes of the caller that `name` (if any) selects.
fn selected(homes: Vec<Merged>, name: Option<&str>) -> Vec<Merged> {
    homes
        .into_iter()
        .filter(|home| name.is_none_or(|name| home.namespace == name))
        .collect()
}

/// `list` and `watch`: the caller is authenticated first, so a request that is not the API
/// server's gets 401 whatever its query says; a query that does not parse is then a 400.
async fn list(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    query: Result<Query<ListOptions>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let caller = match homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        Ok(caller) => caller,
        Err(refused) => return unauthorized(refused),
    };
    let options = match query {
        Ok(Query(options)) => options,
        Err(rejection) => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &rejection.body_text(),
            );
        }
    };
    let name = match options.name() {
        Ok(name) => name.map(str::to_owned),
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message),
    };
    if options.is_watch() {
        return watch_homes(homes, caller, &options, name, wants_table(&headers));
    }
    // The count before reading: a change after it is one a watch from here will see.
    let version = *homes.changes.borrow();
    let now = Timestamp::now();
    let (person, mine) = homes.homes_of(&caller, now);
    let mine = selected(mine, name.as_deref());
    if wants_table(&headers) {
        let mut body = resource::table(&mine, now);
        body["metadata"]["resourceVersion"] = json!(version.to_string());
        json(StatusCode::OK, &body)
    } else {
        json_sized(
            StatusCode::OK,
            &resource::list(&mine, &person, version.to_string()),
            HOME_BYTES * (mine.len() + 1),
        )
    }
}

/// One watch event, a line of JSON: `{"type": ..., "object": ...}`.
fn event(kind: &str, home: &Merged, person: &Person, table: bool, now: Timestamp) -> Vec<u8> {
    let line = if table {
        let object = resource::table(std::slice::from_ref(home), now);
        serde_json::to_vec(&json!({ "type": kind, "object": object }))
    } else {
        let object = resource::object(home, person);
        serde_json::to_vec(&json!({ "type": kind, "object": object }))
    };
    let mut line = line.unwrap_or_default();
    line.push(b'\n');
    line
}

/// What a watch holds between events: the homes the client has been told of.
struct Watching {
    homes: Arc<Homes>,
    caller: Caller,
    name: Option<String>,
    table: bool,
    changes: watch::Receiver<u64>,
    told: BTreeMap<String, Merged>,
    deadline: tokio::time::Instant,
    /// This watch's place within [`WatchLimits`], given back when it ends.
    _place: WatchPlace,
}

impl Watching {
    /// The events that bring the client from what it was told to the homes at `now`.
    fn catch_up(&mut self, now: Timestamp) -> Vec<u8> {
        let (person, mine) = self.homes.homes_of(&self.caller, now);
        let mut current: BTreeMap<String, Merged> = selected(mine, self.name.as_deref())
            .into_iter()
            .map(|home| (home.namespace.clone(), home))
            .collect();
        let mut out = Vec::new();
        for (namespace, home) in &current {
            match self.told.remove(namespace) {
                None => out.extend(event("ADDED", home, &person, self.table, now)),
                Some(before) if before != *home => {
                    out.extend(event("MODIFIED", home, &person, self.table, now));
                }
                Some(_) => {}
            }
        }
        for gone in self.told.values() {
            out.extend(event("DELETED", gone, &person, self.table, now));
        }
        std::mem::swap(&mut self.told, &mut current);
        out
    }

    /// When the next way in the client was told of ends, as a tokio instant.
    fn next_end(&self) -> Option<tokio::time::Instant> {
        let now = Timestamp::now();
        self.told
            .values()
            .filter_map(|home| home.until.as_ref())
            .map(|until| until.0.duration_since(now).as_secs_f64().max(0.0))
            .reduce(f64::min)
            // A little after the end, so that the end has passed when the homes are read.
            .map(|seconds| tokio::time::Instant::now() + Duration::from_secs_f64(seconds + 0.05))
    }

    /// Waits for a cache change, the next end, or the deadline; `None` at the deadline or when
    /// the caches stop.
    async fn next(mut self) -> Option<(Result<Vec<u8>, Infallible>, Self)> {
        loop {
            let end = self.next_end().unwrap_or(self.deadline).min(self.deadline);
            tokio::select! {
                changed = self.changes.changed() => changed.ok()?,
                () = tokio::time::sleep_until(end) => {
                    if end >= self.deadline {
                        return None;
                    }
                }
            }
            let events = self.catch_up(Timestamp::now());
            if !events.is_empty() {
                return Some((Ok(events), self));
            }
        }
    }
}

/// A watch of the caller's homes (`?watch=true`): an event whenever a cache change or the end
/// of a way in changes what they see, until `timeoutSeconds`.
fn watch_homes(
    homes: Arc<Homes>,
    caller: Caller,
    options: &ListOptions,
    name: Option<String>,
    table: bool,
) -> Response {
    let person = homes.user_of(&caller).is_some();
    let place = match homes.watches.take(&caller.username, person) {
        Ok(place) => place,
        Err(full) => {
            let mut refused = status(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                &full.to_string(),
            );
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("10"));
            return refused;
        }
    };
    let changes = homes.changes.subscribe();
    let timeout = options
        .timeout_seconds
        .map_or(WATCH_TIMEOUT, Duration::from_secs)
        .min(WATCH_TIMEOUT);
    let mut watching = Watching {
        homes,
        caller,
        name,
        table,
        changes,
        told: BTreeMap::new(),
        deadline: tokio::time::Instant::now() + timeout,
        _place: place,
    };
    let from_start = matches!(options.resource_version.as_deref(), None | Some("" | "0"));
    let first = watching.catch_up(Timestamp::now());
    let first = if from_start { first } else { Vec::new() };
    let events = futures::stream::once(async move { Ok::<_, Infallible>(first) })
        .chain(futures::stream::unfold(watching, Watching::next))
        .filter(|chunk| std::future::ready(!matches!(chunk, Ok(c) if c.is_empty())));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(events),
    )
        .into_response()
}

async fn get_one(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let now = Timestamp::now();
    let (person, mine) = match homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        Ok(caller) => homes.homes_of(&caller, now),
        Err(refused) => return unauthorized(refused),
    };
    match mine.into_iter().find(|home| home.namespace == name) {
        Some(home) if wants_table(&headers) => json(
            StatusCode::OK,
            &resource::table(std::slice::from_ref(&home), now),
        ),
        Some(home) => json(StatusCode::OK, &resource::object(&home, &person)),
        // Not 403: that would confirm someone else's home exists.
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("homes.homestead.dev \"{name}\" not found"),
        ),
    }
}

/// Discovery and OpenAPI documents; they need the front proxy too: nothing is served to anyone
/// else.
async fn document(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    if let Err(refused) = homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        return unauthorized(refused);
    }
    let v3 = format!("openapi/v3/{}", openapi::V3_PATH);
    let body: Value = match path.trim_matches('/') {
        "apis" => json!(resource::group_list()),
        p if p == format!("apis/{}", resource::GROUP) => json!(resource::group()),
        p if p == format!("apis/{}", resource::GROUP_VERSION) => json!(resource::resource_list()),
        "openapi/v2" => openapi::v2(),
        "openapi/v3" => openapi::v3_index(),
        p if p == v3 => openapi::v3(),
        _ => return status(StatusCode::NOT_FOUND, "NotFound", "not found"),
    };
    json(StatusCode::OK, &body)
}

/// The routes: discovery and OpenAPI documents, and the `homes` collection and its members.
pub fn router(homes: Arc<Homes>) -> Router {
    Router::new()
        .route(
            "/apis",
            get(|state, tls, headers| document(state, tls, headers, Path("apis".to_owned()))),
        )
        .route("/apis/{*path}", get(api))
        .route(
            "/openapi/{*path}",
            get(|state, tls, headers, Path(path): Path<String>| {
                document(state, tls, headers, Path(format!("openapi/{path}")))
            }),
        )
        .with_state(homes)
}

/// `/apis/...`: discovery documents, and the `homes` collection and its members.
async fn api(
    state: State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    Path(path): Path<String>,
    query: Result<Query<ListOptions>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let prefix = format!("{}/homes", resource::GROUP_VERSION);
    match path.trim_end_matches('/').strip_prefix(&prefix) {
        Some("") => list(state, tls, query, headers).await,
        Some(rest) if rest.starts_with('/') && !rest[1..].contains('/') => {
            get_one(state, tls, Path(rest[1..].to_owned()), headers).await
        }
        _ => document(state, tls, headers, Path(format!("apis/{path}"))).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use homestead_api::{Grantee, ShareSpec, ShareStatus, UserStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use kube::runtime::reflector;
    use tower::ServiceExt;

    fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store();
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::Apply(object));
        }
        reader
    }

    fn packed<K: homestead_model::store::Compact + Clone>(objects: Vec<K>) -> CompactStore<K> {
        let (reader, mut writer) = homestead_model::store::compact_store();
        for object in objects {
            writer.insert(object);
        }
        reader
    }

    fn user(name: &str) -> User {
        let mut user = User::test(name)
            .with_username(&format!("{name}@example.com"))
            .with_ready(true, "Provisioned");
        user.status
            .get_or_insert_with(UserStatus::default)
            .namespace = Some(format!("user-{name}"));
        user
    }

    fn share_to_bob() -> Share {
        let mut share = Share::new(
            "review",
            ShareSpec {
                to: vec![Grantee {
                    user: Some("bob".into()),
                    group: None,
                }],
                role: "view".into(),
                expires_at: Time(
                    Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24),
                ),
                reason: "review".into(),
            },
        );
        share.metadata.namespace = Some("user-alice".into());
        share.metadata.generation = Some(1);
        share.status = Some(ShareStatus {
            observed_generation: Some(1),
            conditions: vec![Condition {
                type_: homestead_api::CONDITION_READY.into(),
                status: "True".into(),
                reason: "Active".into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::now()),
                observed_generation: Some(1),
            }],
            ..ShareStatus::default()
        });
        share
    }

    /// Two groups naming dan, the platform's `team` and the SCIM service's `scim-team` (dan is
    /// HR's User, so only `team` counts him), and a provisioned workspace owned by each.
    fn teams() -> (Vec<DirectoryGroup>, Vec<Workspace>) {
        let team = DirectoryGroup::test("team", "Team").with_members(&["dan"]);
        let scim_team = DirectoryGroup::test("scim-team", "SCIM")
            .with_members(&["dan"])
            .written_by_scim();
        let workspace = |name: &str, group: &str| -> Workspace {
            serde_json::from_value(serde_json::json!({
                "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
                "metadata": { "name": name, "generation": 1 },
                "spec": { "owner": { "group": group }, "reason": "a team's" },
                "status": { "namespace": format!("ws-{name}"), "observedGeneration": 1,
                    "conditions": [{ "type": "Ready", "status": "True", "reason": "Provisioned",
                        "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z" }] },
            }))
            .unwrap()
        };
        (
            vec![team, scim_team],
            vec![workspace("lab", "team"), workspace("scim-lab", "scim-team")],
        )
    }

    /// The routes, the front-proxy CA's client certificate for `name`, and the CA's PEM.
    fn serve(name: &str) -> (Router, Vec<u8>) {
        serve_with(name, teams().0)
    }

    /// [`serve`] with `cached` as the cache of groups (the index still sees [`teams`]).
    fn serve_with(name: &str, cached: Vec<DirectoryGroup>) -> (Router, Vec<u8>) {
        let (auth, cert) = front_proxy(name);
        let (users, shares) = (
            vec![user("alice"), user("bob"), user("dan")],
            vec![share_to_bob()],
        );
        let (groups, workspaces) = teams();
        let trimmed = cached.into_iter().map(|mut group| {
            crate::trim::group(&mut group);
            group
        });
        let homes = Homes::new(
            auth,
            packed(users.clone()),
            packed(shares.clone()),
            store(trimmed.collect()),
            store(workspaces.clone()),
            Arc::new(watch::Sender::new(1)),
        );
        for user in users {
            homes.observe_user(&watcher::Event::Apply(user));
        }
        for share in shares {
            homes.observe_share(&watcher::Event::Apply(share));
        }
        for group in groups {
            homes.observe_group(&watcher::Event::Apply(group));
        }
        for workspace in workspaces {
            homes.observe_workspace(&watcher::Event::Apply(workspace));
        }
        (router(Arc::new(homes)), cert)
    }

    /// The front-proxy settings of a new CA that allow `front-proxy-client`, and a client
    /// certificate (DER) the CA signed for `name`.
    fn front_proxy(name: &str) -> (RequestHeaderAuth, Vec<u8>) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params
            .signed_by(&rcgen::KeyPair::generate().unwrap(), &ca)
            .unwrap();
        let data = [
            ("requestheader-client-ca-file", ca.pem()),
            (
                "requestheader-allowed-names",
                r#"["front-proxy-client"]"#.into(),
            ),
            (
                "requestheader-username-headers",
                r#"["X-Remote-User"]"#.into(),
            ),
            (
                "requestheader-group-headers",
                r#"["X-Remote-Group"]"#.into(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        (
            RequestHeaderAuth::from_config_map(&data).unwrap(),
            cert.der().to_vec(),
        )
    }

    async fn ask(
        app: &Router,
        path: &str,
        peer: Option<&[u8]>,
        user: &str,
        table: bool,
    ) -> (StatusCode, serde_json::Value) {
        let mut request = Request::get(path).header("X-Remote-User", user);
        if table {
            request = request.header(
                header::ACCEPT,
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            );
        }
        let mut request = request.body(Body::empty()).unwrap();
        if let Some(peer) = peer {
            let mut info = TlsInfo::default();
            info.peer_certificates = vec![peer.to_vec()];
            request.extensions_mut().insert(Arc::new(info));
        }
        let response = app.clone().oneshot(request).await.unwrap();
        let code = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, serde_json::from_slice(&body).unwrap())
    }

    const HOMES: &str = "/apis/homes.homestead.dev/v1alpha1/homes";

    /// The names of the homes in a list.
    fn names(list: &serde_json::Value) -> Vec<&str> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    /// A Share decoded once serves every request while no Share changes; while a write to the
    /// Shares' cache is under way a request reads the cache itself and keeps nothing; after it,
    /// the new Share.
    #[test]
    fn a_decoded_share_serves_until_a_share_changes() {
        let (users, mut user_writer) = homestead_model::store::compact_store::<User>();
        let (shares, mut share_writer) = homestead_model::store::compact_store::<Share>();
        let (bob, review) = (user("bob"), share_to_bob());
        user_writer.insert(bob.clone());
        share_writer.insert(review.clone());
        let homes = Homes::new(
            front_proxy("front-proxy-client").0,
            users,
            shares,
            store(Vec::new()),
            store(Vec::new()),
            Arc::new(watch::Sender::new(1)),
        );
        homes.observe_user(&watcher::Event::Apply(bob));
        homes.observe_share(&watcher::Event::Apply(review.clone()));
        let caller = Caller {
            username: "bob@example.com".into(),
            groups: Vec::new(),
        };
        let roles = |homes: &Homes| -> Vec<String> {
            let (_, mine) = homes.homes_of(&caller, Timestamp::now());
            mine.into_iter()
                .map(|h| format!("{} {}", h.namespace, h.role))
                .collect()
        };
        let decoded_role = |homes: &Homes| -> Vec<String> {
            let decoded = homes.decoded.lock().unwrap();
            decoded
                .shares
                .values()
                .map(|s| s.spec.role.clone())
                .collect()
        };
        assert_eq!(roles(&homes), ["user-alice view", "user-bob admin"]);
        assert_eq!(decoded_role(&homes), ["view"]);
        let mut raised = review;
        raised.spec.role = "edit".into();
        // Written behind the decoded Shares' back (the watch task never does): still the
        // decoded Share, so it is what requests read.
        share_writer.insert(raised.clone());
        assert_eq!(roles(&homes), ["user-alice view", "user-bob admin"]);
        // Written as the watch task writes: during the write a request reads the cache and
        // keeps nothing of it; after it, the new Share, decoded once again.
        homes.writing_shares(|| {
            share_writer.insert(raised.clone());
            assert_eq!(roles(&homes), ["user-alice edit", "user-bob admin"]);
            assert_eq!(decoded_role(&homes), ["view"]);
        });
        assert_eq!(roles(&homes), ["user-alice edit", "user-bob admin"]);
        assert_eq!(decoded_role(&homes), ["edit"]);
    }

    #[tokio::test]
    async fn each_person_sees_their_own_homes_through_the_front_proxy_only() {
        let (app, proxy) = serve("front-proxy-client");
        let (code, bob) = ask(&app, HOMES, Some(&proxy), "bob@example.com", false).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(names(&bob), ["user-alice", "user-bob"]);
        let (_, alice) = ask(&app, HOMES, Some(&proxy), "alice@example.com", true).await;
        assert_eq!(alice["kind"], "Table");
        assert_eq!(alice["rows"].as_array().unwrap().len(), 1);
        // Another's home by name: 404, as for a home that does not exist.
        let (code, status) = ask(
            &app,
            &format!("{HOMES}/user-bob"),
            Some(&proxy),
            "alice@example.com",
            false,
        )
        .await;
        assert_eq!(
            (code, status["reason"].as_str()),
            (StatusCode::NOT_FOUND, Some("NotFound"))
        );
        let (code, _) = ask(
            &app,
            &format!("{HOMES}/user-alice"),
            Some(&proxy),
            "bob@example.com",
            false,
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        let (_, nobody) = ask(&app, HOMES, Some(&proxy), "carol@example.com", false).await;
        assert_eq!(nobody["items"], serde_json::json!([]));
        // RBAC compares usernames exactly: another case is another person, with bob's homes
        // neither in RBAC nor here.
        let (code, shouting) = ask(&app, HOMES, Some(&proxy), "Bob@Example.com", false).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(shouting["items"], serde_json::json!([]));
    }

    #[tokio::test]
    async fn a_person_past_their_watches_gets_429_and_others_still_watch() {
        let (app, proxy) = serve("front-proxy-client");
        let watch = |user: &str| {
            let mut request = Request::get(format!("{HOMES}?watch=true"))
                .header("X-Remote-User", user)
                .body(Body::empty())
                .unwrap();
            let mut info = TlsInfo::default();
            info.peer_certificates = vec![proxy.clone()];
            request.extensions_mut().insert(Arc::new(info));
            app.clone().oneshot(request)
        };
        let limits = WatchLimits::default();
        let mut open = Vec::new();
        for _ in 0..limits.per_person {
            let response = watch("bob@example.com").await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            open.push(response);
        }
        let refused = watch("bob@example.com").await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "10");
        // Bob's watches take nobody else's places.
        assert_eq!(
            watch("alice@example.com").await.unwrap().status(),
            StatusCode::OK
        );
        // Callers no User holds (carol, a ServiceAccount) share one bound, apart from people's.
        for i in 0..limits.nobody {
            let who = if i % 2 == 0 {
                "carol@example.com".to_owned()
            } else {
                format!("system:serviceaccount:user-bob:minted-{i}")
            };
            let response = watch(&who).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            open.push(response);
        }
        let refused = watch("system:serviceaccount:user-bob:one-more")
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            watch("dan@example.com").await.unwrap().status(),
            StatusCode::OK
        );
        // A watch that ends (its client gone: the response dropped) gives its place back.
        drop(open.swap_remove(0));
        assert_eq!(
            watch("bob@example.com").await.unwrap().status(),
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn a_team_workspace_is_found_through_the_groups_that_count_the_caller() {
        let (app, proxy) = serve("front-proxy-client");
        let (code, dan) = ask(&app, HOMES, Some(&proxy), "dan@example.com", false).await;
        assert_eq!(code, StatusCode::OK);
        // Not the SCIM team's workspace: its writer counts only the Users it owns.
        assert_eq!(names(&dan), ["user-dan", "ws-lab"]);

        // A re-list in progress: the index already names dan in `team`, the cache still holds
        // the group as it was, without him. Until the cache shows it, he is not in.
        let before = DirectoryGroup::test("team", "Team").with_members(&["eve"]);
        let (app, proxy) = serve_with("front-proxy-client", vec![before]);
        let (_, dan) = ask(&app, HOMES, Some(&proxy), "dan@example.com", false).await;
        assert_eq!(names(&dan), ["user-dan"]);
    }

    #[tokio::test]
    async fn forged_headers_without_the_front_proxy_certificate_get_401() {
        let (app, proxy) = serve("front-proxy-client");
        let bad_query = format!("{HOMES}?watch=true&timeoutSeconds=soon");
        for path in [
            HOMES,
            &bad_query,
            "/apis",
            "/apis/homes.homestead.dev/v1alpha1",
            "/openapi/v2",
        ] {
            let (code, status) = ask(&app, path, None, "bob@example.com", false).await;
            assert_eq!(
                (code, status["reason"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("Unauthorized")),
                "{path}"
            );
        }
        // A certificate from the front-proxy CA for another name. (One from another CA never
        // gets here: the TLS handshake refuses it.)
        let (other, not_the_proxy) = serve("not-the-proxy");
        let (code, _) = ask(
            &other,
            HOMES,
            Some(&not_the_proxy),
            "bob@example.com",
            false,
        )
        .await;
        assert_eq!(
            code,
            StatusCode::UNAUTHORIZED,
            "a certificate for another name"
        );
        let (code, discovery) = ask(
            &app,
            "/apis/homes.homestead.dev/v1alpha1",
            Some(&proxy),
            "bob@example.com",
            false,
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(discovery["resources"][0]["name"], "homes");
        // The API server's request with a query that does not parse: 400, after the 401s.
        let (code, status) = ask(&app, &bad_query, Some(&proxy), "bob@example.com", false).await;
        assert_eq!(
            (code, status["reason"].as_str()),
            (StatusCode::BAD_REQUEST, Some("BadRequest"))
        );
    }
}
