//! The homes API (docs/homes.md) on the real control plane with the operator running:
//! `homestead homes-api` as its own identity under `manifests/homes-api/rbac.yaml`, straight on
//! its port, as kube-apiserver's front proxy reaches
//! it (its client certificate, the caller in `X-Remote-User`), and as an attacker who reaches the
//! port directly with forged headers (no certificate, or one from another CA).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use homestead_api::User;
use homestead_testenv::{HOMES_API, Supervised};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};

struct HomesApi {
    address: String,
    ca: PathBuf,
    /// Where it serves `/metrics` (plain HTTP).
    metrics: String,
    _process: Supervised,
}

/// Starts `homestead homes-api` on a free loopback port with a serving certificate of its own,
/// as its own identity under the RBAC the chart gives it (`manifests/homes-api/rbac.yaml`: read
/// Users, Shares, DirectoryGroups and the front-proxy settings), and waits until it serves.
fn spawn_homes_api() -> HomesApi {
    spawn_homes_api_with("homes-api", &[])
}

/// [`spawn_homes_api`] with `extra` flags, logging as `name`.
fn spawn_homes_api_with(name: &'static str, extra: &[&str]) -> HomesApi {
    let plane = env().plane;
    let dir = plane.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let serving = homestead_testenv::scim_credentials(&dir).unwrap();
    let address = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let metrics = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let rbac = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/homes-api/rbac.yaml"
    );
    let (ok, out) = kubectl(&["apply", "-f", rbac], "");
    assert!(ok, "{out}");
    let kubeconfig = plane
        .write_kubeconfig(HOMES_API, &dir.join("homes.kubeconfig"))
        .unwrap();
    let args: Vec<String> = [
        "--log-format=text".to_owned(),
        "homes-api".to_owned(),
        format!("--address={address}"),
        format!("--metrics-address={metrics}"),
        format!("--tls-cert={}", serving.cert.display()),
        format!("--tls-key={}", serving.key.display()),
    ]
    .into_iter()
    .chain(extra.iter().map(|flag| (*flag).to_owned()))
    .collect();
    let process = plane
        .spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_homestead")),
            &args,
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("RUST_LOG", "info".to_owned()),
            ],
        )
        .unwrap();
    wait_until_ready(&process, || {
        process
            .log_tail(usize::MAX)
            .contains("serving homes.homestead.dev")
    });
    HomesApi {
        address,
        ca: serving.ca,
        metrics,
        _process: process,
    }
}

/// A GET of `path` on the homes API naming `user` in `X-Remote-User`, over TLS with the client
/// certificate and key `client` (PEM files), or none: the HTTP status and the body as JSON, or
/// the TLS error.
fn get(
    api: &HomesApi,
    path: &str,
    client: Option<(&Path, &Path)>,
    user: &str,
) -> Result<(u16, Value), String> {
    let mut tls = connect(api, client, &[])?;
    write!(
        tls,
        "GET {path} HTTP/1.0\r\nHost: {}\r\nX-Remote-User: {user}\r\nX-Remote-Group: system:authenticated\r\n\r\n",
        api.address
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tls.read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let (code, body) = status_and_body(&response)?;
    Ok((code, serde_json::from_str(&body).unwrap_or(Value::Null)))
}

/// A TLS connection to the homes API trusting its CA, with `client`'s certificate and key if
/// any, offering `alpn` (none when empty).
fn connect(
    api: &HomesApi,
    client: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&api.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connection =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1").unwrap())
            .unwrap();
    let socket = TcpStream::connect(&api.address).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    Ok(rustls::StreamOwned::new(connection, socket))
}

/// Connects offering ALPN `h2` then `http/1.1` (with `client`'s certificate, if any) and sends
/// one HTTP/2 request for the list of homes ([`common::http2_request`]): the protocol ALPN
/// chose, what the server sent until it closed the connection or `secs` seconds passed, and
/// whether it closed it.
fn http2_list(
    api: &HomesApi,
    client: Option<(&Path, &Path)>,
    secs: u64,
) -> (Option<Vec<u8>>, Vec<u8>, bool) {
    let mut tls = connect(api, client, &[b"h2", b"http/1.1"]).unwrap();
    tls.write_all(&common::http2_request(HOMES)).unwrap();
    tls.sock
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let alpn = tls.conn.alpn_protocol().map(<[u8]>::to_vec);
    let (answer, closed) = common::read_until_closed(&mut tls, secs);
    (alpn, answer, closed)
}

/// The first byte of the first HTTP/2 HEADERS frame (type 1) in `frames`: for a `:status` in
/// HPACK's static table (200 is index 8, so `0x88`) the whole status, else the start of a
/// literal.
fn http2_status(frames: &[u8]) -> Option<u8> {
    let mut at = 0;
    while at + 9 <= frames.len() {
        let length = usize::from(frames[at]) << 16
            | usize::from(frames[at + 1]) << 8
            | usize::from(frames[at + 2]);
        if frames[at + 3] == 1 {
            return frames.get(at + 9).copied();
        }
        at += 9 + length;
    }
    None
}

/// kube-apiserver keeps at most 25 idle HTTP/1.1 connections to an aggregated API, so under
/// 50 people at once it opened and closed hundreds, each with a TLS handshake (docs/homes.md,
/// "Load"). The homes API offers HTTP/2 by ALPN, and speaks it only to the front proxy
/// (a certificate its CA signed, with an allowed name): HTTP/2 has no header read timeout,
/// so any other connection speaks HTTP/1.1 alone and lives at most `--header-read-timeout`
/// (the_homes_api_bounds_what_unauthenticated_clients_hold). The front proxy's connection
/// stays open while it keeps it.
#[tokio::test]
async fn the_front_proxy_speaks_http2_on_a_connection_that_stays() {
    let api = spawn_homes_api_with("homes-api-http2", &["--header-read-timeout=2s"]);
    let dir = env().plane.dir();
    let proxy = (
        dir.join("front-proxy-client.crt"),
        dir.join("front-proxy-client.key"),
    );
    let (alpn, answer, closed) = http2_list(&api, Some((&proxy.0, &proxy.1)), 5);
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN chose HTTP/2");
    // No X-Remote-User header: the front proxy names nobody, and gets 401 as a literal.
    assert!(
        http2_status(&answer).is_some(),
        "no answer in HTTP/2: {answer:?}"
    );
    assert!(
        !closed,
        "the front proxy's connection was closed within 5 s"
    );

    // Without the certificate: ALPN still says h2 (the server chooses before the client's
    // certificate arrives), but the preface closes the connection unanswered.
    let (alpn, answer, closed) = http2_list(&api, None, 5);
    assert_eq!(
        alpn.as_deref(),
        Some(&b"h2"[..]),
        "ALPN's choice is the server's alone"
    );
    assert_eq!(http2_status(&answer), None, "HTTP/2 was spoken: {answer:?}");
    assert!(closed, "a connection without a certificate stayed open");
    // HTTP/1.1 still serves both.
    let (code, _) = get(
        &api,
        HOMES,
        Some((&proxy.0, &proxy.1)),
        "nobody@example.com",
    )
    .unwrap();
    assert_eq!(code, 200);
    let (code, _) = get(&api, HOMES, None, "nobody@example.com").unwrap();
    assert_eq!(code, 401);
}

/// Creates the User `name` (identity `<name>@example.com`), replacing one left by an earlier
/// run, and waits until it is `Provisioned`.
async fn person(client: &Client, name: &str) {
    let api: Api<User> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_some() {
        let _ = api.delete(name, &DeleteParams::default()).await;
        wait_gone(&api, name, 60).await;
    }
    let user: User = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "metadata": { "name": name },
        "spec": { "identity": { "username": format!("{name}@example.com") } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &user).await.unwrap();
    wait_reason(client, name, "Provisioned").await;
}

const HOMES: &str = "/apis/homes.homestead.dev/v1alpha1/homes";

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    i["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn each_person_sees_their_homes_and_forged_headers_get_nothing() {
    let client = admin().await;
    person(&client, "ho-alice").await;
    person(&client, "ho-bob").await;
    let until = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(24))
    .round(k8s_openapi::jiff::Unit::Second)
    .unwrap();
    let doc = format!(
        "apiVersion: {api}\nkind: Share\nmetadata:\n  name: review\n  namespace: user-ho-alice\n  annotations:\n    homestead.dev/created-by: \"ho-alice@example.com\"\nspec:\n  to: [{{user: ho-bob}}]\n  role: view\n  expiresAt: \"{until}\"\n  reason: review\n",
        api = homestead_api::API_VERSION
    );
    let (ok, out) = kubectl(&["--as=ho-alice@example.com", "create", "-f", "-"], &doc);
    assert!(ok, "alice shares her home with bob: {out}");
    let api = spawn_homes_api();
    let dir = env().plane.dir();
    let proxy = (
        dir.join("front-proxy-client.crt"),
        dir.join("front-proxy-client.key"),
    );
    let proxy = Some((proxy.0.as_path(), proxy.1.as_path()));

    let bob = eventually("bob's homes to show alice's share", 60, || async {
        let (code, list) = get(&api, HOMES, proxy, "ho-bob@example.com").ok()?;
        (code == 200 && names(&list).len() == 2).then_some(list)
    })
    .await;
    assert_eq!(names(&bob), ["user-ho-alice", "user-ho-bob"]);
    assert_eq!(bob["items"][0]["role"], "view");
    assert_eq!(bob["items"][0]["via"], "share review");
    let (code, alice) = get(&api, HOMES, proxy, "ho-alice@example.com").unwrap();
    assert_eq!(
        (code, names(&alice)),
        (200, vec!["user-ho-alice".to_owned()])
    );
    let (code, _) = get(
        &api,
        &format!("{HOMES}/user-ho-bob"),
        proxy,
        "ho-alice@example.com",
    )
    .unwrap();
    assert_eq!(code, 404, "another's home is not found, not forbidden");
    let (_, nobody) = get(&api, HOMES, proxy, "nobody@example.com").unwrap();
    assert_eq!(nobody["items"], json!([]));

    // A team's workspace: bob, a member of its group, sees it with his role and the team as
    // the way in; alice, its admin, as admin; nobody else.
    let groups: Api<homestead_api::DirectoryGroup> = Api::all(client.clone());
    let _ = groups.delete("ho-team", &DeleteParams::default()).await;
    wait_gone(&groups, "ho-team", 30).await;
    let group: homestead_api::DirectoryGroup = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
        "metadata": { "name": "ho-team" },
        "spec": { "displayName": "ho-team", "members": ["ho-bob"] },
    }))
    .unwrap();
    groups.create(&PostParams::default(), &group).await.unwrap();
    let doc = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "metadata": { "name": "ho-team", "annotations": { "homestead.dev/created-by": homestead_testenv::ADMIN } },
        "spec": { "owner": { "group": "ho-team" }, "admins": ["ho-alice"], "reason": "the team" },
    });
    let (ok, out) = kubectl(&["apply", "-f", "-"], &doc.to_string());
    assert!(ok, "{out}");
    let bob = eventually("bob's homes to show the team's workspace", 60, || async {
        let (code, list) = get(&api, HOMES, proxy, "ho-bob@example.com").ok()?;
        (code == 200 && names(&list).contains(&"ws-ho-team".to_owned())).then_some(list)
    })
    .await;
    let item = |list: &Value, name: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == name)
            .cloned()
            .unwrap()
    };
    let team = item(&bob, "ws-ho-team");
    assert_eq!(
        (team["role"].as_str(), team["via"].as_str()),
        (Some("edit"), Some("team ho-team"))
    );
    let (_, alice) = get(&api, HOMES, proxy, "ho-alice@example.com").unwrap();
    let team = item(&alice, "ws-ho-team");
    assert_eq!(
        (team["role"].as_str(), team["via"].as_str()),
        (Some("admin"), Some("team ho-team (admin)"))
    );
    let (_, nobody) = get(&api, HOMES, proxy, "nobody@example.com").unwrap();
    assert_eq!(nobody["items"], json!([]));

    // The attacker on the port: forged headers without a certificate get 401 ...
    let (code, status) = get(&api, HOMES, None, "ho-bob@example.com").unwrap();
    assert_eq!(
        (code, status["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
    // ... and a certificate from another CA does not get through the TLS handshake.
    let elsewhere = env().plane.dir().join("homes-api").join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let forged = homestead_testenv::scim_credentials(&elsewhere).unwrap();
    let forged = (forged.cert, forged.key);
    let refused = get(
        &api,
        HOMES,
        Some((&forged.0, &forged.1)),
        "ho-bob@example.com",
    );
    assert!(
        refused.is_err(),
        "a certificate from another CA is refused in the handshake: {refused:?}"
    );

    // Its identity reads what it serves from and the front-proxy settings, and nothing else.
    let can_i = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--as", HOMES_API];
        all.extend_from_slice(args);
        // The answer, without kubectl's warnings (a cluster-scoped kind asked with -A).
        let (_, out) = kubectl(&all, "");
        out.lines().next().unwrap_or_default().trim().to_owned()
    };
    for (args, want) in [
        (&["watch", "users.homestead.dev"][..], "yes"),
        (&["list", "shares.homestead.dev", "-A"], "yes"),
        (&["list", "directorygroups.homestead.dev"], "yes"),
        (
            &[
                "get",
                "configmap/extension-apiserver-authentication",
                "-n",
                "kube-system",
            ],
            "yes",
        ),
        (
            &["get", "configmap/kube-root-ca.crt", "-n", "kube-system"],
            "no",
        ),
        (&["list", "secrets", "-A"], "no"),
        (&["list", "namespaces"], "no"),
        (&["patch", "users.homestead.dev"], "no"),
        (&["create", "rolebindings", "-n", "user-ho-alice"], "no"),
    ] {
        assert_eq!(can_i(args), want, "can-i {args:?} as the homes API");
    }

    // Every answer above is counted by verb and code, and the lists are timed.
    let (code, metrics) = http_get(&api.metrics, "/metrics").expect("the metrics port serves");
    assert_eq!(code, 200);
    let count = |labels: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!("homestead_homes_api_requests_total{{{labels}}} "))
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    assert_eq!(count(r#"code="404",verb="get""#), Some(1.0), "{metrics}");
    assert_eq!(count(r#"code="401",verb="list""#), Some(1.0), "{metrics}");
    assert!(count(r#"code="200",verb="list""#) >= Some(2.0), "{metrics}");
    assert!(
        metrics.contains(r#"homestead_homes_api_request_duration_seconds_count{verb="list"}"#),
        "{metrics}"
    );
}

/// Issue 61, B8: 120 clients trickling TLS held the homes API for 40 s, and 300 raised its memory
/// from 42 to 80 MiB, before any of them showed the API server's certificate. Now the homes API
/// has the SCIM service's bounds: `--max-connections` open at once (one more closed before
/// TLS), `--header-read-timeout` for the handshake, the headers and an idle connection, and
/// `--max-header-bytes` of headers, counted in its metrics.
#[tokio::test]
async fn the_homes_api_bounds_what_unauthenticated_clients_hold() {
    let api = spawn_homes_api_with(
        "homes-api-limits",
        &["--max-connections=6", "--header-read-timeout=2s"],
    );
    let served = || {
        get(&api, "/apis", None, "nobody")
            .ok()
            .map(|(code, _)| code)
    };
    // Without the front proxy's certificate every answer is 401.
    // The metrics listener is not bounded, so it sees every connection of the API's port.
    let quiet = || {
        http_get(&api.metrics, "/metrics")
            .is_some_and(|(_, m)| open_connections(&m, "homestead_homes_api") == Some(0))
    };
    assert_bounded(&api.address, &api.ca, "/apis", served, 401, quiet);
    let (code, metrics) = http_get(&api.metrics, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        counts_refused_connections(&metrics, "homestead_homes_api"),
        "{metrics}"
    );
}
