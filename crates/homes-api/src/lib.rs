//! The aggregated API `homes.homestead.dev/v1alpha1` (docs/homes.md): tells every person, through
//! the Kubernetes API server, the homes they can use. The binary (`homestead homes-api`) binds
//! the listener, its connection bounds, health and metrics; this crate authenticates the API
//! server ([`auth`]), keeps the caches of Users, Shares, DirectoryGroups and Workspaces
//! ([`start`]), and
//! answers ([`routes`], [`resource`], [`openapi`], [`metrics`]).
//!
//! Who a person is and what they may use is read from [`homestead_model`]: the holder of an
//! identity as the reconciler decides it, the ways in as `homestead access` names them.

pub mod auth;
pub mod metrics;
pub mod openapi;
pub mod places;
pub mod resource;
pub mod routes;
pub mod trim;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use homestead_api::{DirectoryGroup, Share, User, Workspace};
use homestead_model::store::compact_store;
use homestead_model::watched::Watched;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use prometheus::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

pub use routes::Homes;

/// Keeps a cache of every `K` from a watch (`cache` takes in each event: a reflector's writer,
/// or a compact cache's), each object cut down by `trim` first (what the homes API never reads:
/// `managedFields` above all), in a task of its own that gives each event, once the cache took
/// it in, to `observe`, and bumps `changes`.
fn keep<K: Watched>(
    (client, initial): (&Client, &watcher::Config),
    mut cache: impl FnMut(&watcher::Event<K>) + Send + 'static,
    trim: fn(&mut K),
    changes: Arc<watch::Sender<u64>>,
    observe: impl Fn(&watcher::Event<K>) + Send + 'static,
) {
    let stream = watcher(Api::<K>::all(client.clone()), initial.clone())
        .modify(trim)
        .default_backoff();
    tokio::spawn(stream.for_each(move |event| {
        if let Ok(event) = &event {
            cache(event);
            observe(event);
        }
        changes.send_modify(|count| *count += 1);
        async {}
    }));
}

/// The front-proxy settings the API server publishes in
/// `kube-system/extension-apiserver-authentication`, read once through `client`.
///
/// # Errors
/// The ConfigMap cannot be read, or its settings are missing or unusable.
pub async fn authentication(client: &Client) -> anyhow::Result<auth::RequestHeaderAuth> {
    let (namespace, name) = auth::AUTHENTICATION_CONFIG_MAP;
    let published = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading {namespace}/{name}"))?;
    Ok(auth::RequestHeaderAuth::from_config_map(
        &published.data.unwrap_or_default(),
    )?)
}

/// The TLS settings of the homes API: the serving certificate chain `cert` and its key `key`
/// (PEM files), client certificates checked against the front proxy's CA of `auth` (a client
/// without one may connect, and is refused as unauthenticated by every route), and ALPN's
/// `h2` before `http/1.1` (RFC 7301).
///
/// # Errors
/// An unreadable file, or a certificate and key that do not go together.
pub fn tls_config(
    auth: &auth::RequestHeaderAuth,
    cert: &Path,
    key: &Path,
) -> anyhow::Result<rustls::ServerConfig> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("reading {}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(auth.client_verifier()?)
        .with_single_cert(certs, key)
        .context("the serving certificate and key")?;
    // HTTP/2 first: kube-apiserver then sends every request over one connection
    // (docs/homes.md, "Load").
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Starts the watches of Users, Shares, DirectoryGroups and Workspaces through `client`, each
/// configured as `initial` (how its initial state arrives: streamed or paged), behind a
/// [`Homes`] that answers with `auth`, and waits until each has listed once (the server's
/// readiness).
///
/// # Errors
/// A watch stopped before its first list.
pub async fn start(
    (client, initial): (&Client, watcher::Config),
    auth: auth::RequestHeaderAuth,
) -> anyhow::Result<Arc<Homes>> {
    let watches = (client, &initial);
    let changes = Arc::new(watch::Sender::new(1));
    // Users and Shares packed (`homestead_model::packed`): a re-list updates them in place, and
    // the indexes drop what it no longer lists themselves.
    let (users, mut users_writer) = compact_store::<User>();
    let (shares, mut shares_writer) = compact_store::<Share>();
    let (groups, mut groups_writer) = reflector::store::<DirectoryGroup>();
    let (workspaces, mut workspaces_writer) = reflector::store::<Workspace>();
    let homes = Arc::new(Homes::new(
        auth,
        users,
        shares,
        groups,
        workspaces,
        changes.clone(),
    ));
    let observer = homes.clone();
    keep(
        watches,
        move |e| {
            users_writer.apply(e);
        },
        trim::user,
        changes.clone(),
        move |e| {
            observer.observe_user(e);
        },
    );
    let observer = homes.clone();
    let writer = homes.clone();
    keep(
        watches,
        move |e| {
            writer.writing_shares(|| {
                shares_writer.apply(e);
            });
        },
        trim::share,
        changes.clone(),
        move |e| {
            observer.observe_share(e);
        },
    );
    let observer = homes.clone();
    keep(
        watches,
        move |e| groups_writer.apply_watcher_event(e),
        trim::group,
        changes.clone(),
        move |e| observer.observe_group(e),
    );
    let observer = homes.clone();
    keep(
        watches,
        move |e| workspaces_writer.apply_watcher_event(e),
        trim::workspace,
        changes,
        move |e| observer.observe_workspace(e),
    );
    for ready in [
        homes.users.wait_until_ready().await.is_ok(),
        homes.shares.wait_until_ready().await.is_ok(),
        homes.groups.wait_until_ready().await.is_ok(),
        homes.workspaces.wait_until_ready().await.is_ok(),
    ] {
        anyhow::ensure!(ready, "a cache stopped before its first list");
    }
    Ok(homes)
}

/// The routes of the homes API over `homes`, each request counted in metrics registered in
/// `registry`.
///
/// # Errors
/// When `registry` already holds metrics of the homes API's names.
pub fn app(homes: Arc<Homes>, registry: &Registry) -> prometheus::Result<axum::Router> {
    let requests = metrics::RequestMetrics::new(registry)?;
    Ok(
        routes::router(homes).layer(axum::middleware::from_fn_with_state(
            requests,
            metrics::track,
        )),
    )
}
