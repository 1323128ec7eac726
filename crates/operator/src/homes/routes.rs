//! The homes API's routes (docs/homes.md): discovery, and `homes` read from the caches for the
//! caller alone. Every route but the probes first authenticates the front proxy
//! ([`super::auth`]); a request that is not the API server's gets 401 with a `Status`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use axum_server::tls::TlsInfo;
use homestead_api::{DirectoryGroup, Share, User};
use homestead_reconciler::plan::homes::homes_of;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use serde_json::json;

use super::auth::{Caller, RequestHeaderAuth, Unauthenticated};
use super::resource;

/// What the routes read: the front-proxy settings and the caches.
pub struct Homes {
    /// The front-proxy settings.
    pub auth: RequestHeaderAuth,
    /// Every User.
    pub users: Store<User>,
    /// Every Share.
    pub shares: Store<Share>,
    /// Every DirectoryGroup.
    pub groups: Store<DirectoryGroup>,
}

/// A JSON response of `value` with `code`.
fn json(code: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (code, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
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

    /// The caller's homes, merged by namespace: through the User that holds their identity
    /// (compared without case; the oldest, as the operator decides), the DirectoryGroups that
    /// count that User, and the Shares naming either.
    fn homes_of(&self, caller: &Caller) -> Vec<resource::Merged> {
        let wanted = caller.username.to_lowercase();
        let Some(user) = self
            .users
            .state()
            .into_iter()
            .filter(|u| u.spec.identity.username.to_lowercase() == wanted)
            .min_by_key(|u| (u.creation_timestamp().map(|t| t.0), u.name_any()))
        else {
            return Vec::new();
        };
        let groups: Vec<Arc<DirectoryGroup>> = self
            .groups
            .state()
            .into_iter()
            .filter(|g| g.counts_member(&user))
            .collect();
        let groups: Vec<&DirectoryGroup> = groups.iter().map(AsRef::as_ref).collect();
        let name = user.name_any();
        let shares: Vec<Arc<Share>> = self
            .shares
            .state()
            .into_iter()
            .filter(|s| {
                s.spec.to.iter().any(|g| {
                    g.user.as_deref() == Some(&name)
                        || g.group
                            .as_deref()
                            .is_some_and(|group| groups.iter().any(|d| d.name_any() == group))
                })
            })
            .collect();
        let shares: Vec<&Share> = shares.iter().map(AsRef::as_ref).collect();
        let homes = homes_of(&user, user.spec.role(), &groups, &shares, Timestamp::now());
        resource::merged(&homes)
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

async fn list(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    headers: HeaderMap,
) -> Response {
    let mine = match homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        Ok(caller) => homes.homes_of(&caller),
        Err(refused) => return unauthorized(refused),
    };
    if wants_table(&headers) {
        json(StatusCode::OK, &resource::table(&mine))
    } else {
        json(StatusCode::OK, &resource::list(&mine))
    }
}

async fn get_one(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mine = match homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        Ok(caller) => homes.homes_of(&caller),
        Err(refused) => return unauthorized(refused),
    };
    match mine.into_iter().find(|home| home.namespace == name) {
        Some(home) if wants_table(&headers) => json(
            StatusCode::OK,
            &resource::table(std::slice::from_ref(&home)),
        ),
        Some(home) => json(StatusCode::OK, &resource::object(&home)),
        // Not 403: that would confirm someone else's home exists.
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("homes.homestead.dev \"{name}\" not found"),
        ),
    }
}

/// Discovery needs the front proxy too: nothing is served to anyone else.
async fn discovery(
    State(homes): State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    if let Err(refused) = homes.caller(tls.as_deref().map(AsRef::as_ref), &headers) {
        return unauthorized(refused);
    }
    match path.trim_end_matches('/') {
        "" => json(StatusCode::OK, &resource::group_list()),
        resource::GROUP => json(StatusCode::OK, &resource::group()),
        resource::GROUP_VERSION => json(StatusCode::OK, &resource::resource_list()),
        _ => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
    }
}

/// The routes over `homes`.
pub fn router(homes: Arc<Homes>) -> Router {
    Router::new()
        .route(
            "/apis",
            get(|state, tls, headers| discovery(state, tls, headers, Path(String::new()))),
        )
        .route("/apis/{*path}", get(api))
        .with_state(homes)
}

/// `/apis/...`: discovery documents, and the `homes` collection and its members.
async fn api(
    state: State<Arc<Homes>>,
    tls: Option<Extension<Arc<TlsInfo>>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let prefix = format!("{}/homes", resource::GROUP_VERSION);
    match path.trim_end_matches('/').strip_prefix(&prefix) {
        Some("") => list(state, tls, headers).await,
        Some(rest) if rest.starts_with('/') && !rest[1..].contains('/') => {
            get_one(state, tls, Path(rest[1..].to_owned()), headers).await
        }
        _ => discovery(state, tls, headers, Path(path)).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use homestead_api::{Grantee, ShareSpec, ShareStatus, UserStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use kube::runtime::{reflector, watcher};
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

    /// The routes, the front-proxy CA's client certificate for `name`, and the CA's PEM.
    fn serve(name: &str) -> (Router, Vec<u8>) {
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
        let homes = Homes {
            auth: RequestHeaderAuth::from_config_map(&data).unwrap(),
            users: store(vec![user("alice"), user("bob")]),
            shares: store(vec![share_to_bob()]),
            groups: store(Vec::new()),
        };
        (router(Arc::new(homes)), cert.der().to_vec())
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

    #[tokio::test]
    async fn each_person_sees_their_own_homes_through_the_front_proxy_only() {
        let (app, proxy) = serve("front-proxy-client");
        let (code, bob) = ask(&app, HOMES, Some(&proxy), "Bob@Example.com", false).await;
        assert_eq!(code, StatusCode::OK);
        let names: Vec<&str> = bob["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["user-alice", "user-bob"]);
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
    }

    #[tokio::test]
    async fn forged_headers_without_the_front_proxy_certificate_get_401() {
        let (app, proxy) = serve("front-proxy-client");
        for path in [HOMES, "/apis", "/apis/homes.homestead.dev/v1alpha1"] {
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
    }
}
