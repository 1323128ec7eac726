//! `homestead homes-api`: the aggregated API `homes.homestead.dev/v1alpha1`, which tells every
//! person the homes they can use (docs/homes.md).

pub mod auth;
pub mod index;
pub mod metrics;
pub mod openapi;
pub mod resource;
pub mod routes;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use homestead_api::{DirectoryGroup, Share, User};
use homestead_reconciler::runtime::watches::Watched;
use homestead_reconciler::state::trim::{trim, trim_user};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use prometheus::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli::HomesApiArgs;
use crate::server::{Health, Server};

/// Keeps the reflector cache `writer` of every `K` from a watch, each object cut down by `trim`
/// first (what the homes API never reads: `managedFields` above all), in a task of its own that
/// gives each event, once the cache took it in, to `observe`, and bumps `changes`.
fn keep<K: Watched>(
    client: &Client,
    writer: reflector::store::Writer<K>,
    trim: fn(&mut K),
    changes: Arc<watch::Sender<u64>>,
    observe: impl Fn(&watcher::Event<K>) + Send + 'static,
) {
    let stream = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .modify(trim)
        .default_backoff()
        .reflect(writer);
    tokio::spawn(stream.for_each(move |event| {
        if let Ok(event) = &event {
            observe(event);
        }
        changes.send_modify(|count| *count += 1);
        async {}
    }));
}

/// [`trim`] of an object's metadata.
fn trim_meta<K: kube::Resource>(object: &mut K) {
    trim(object.meta_mut());
}

/// Serves the homes API until the process is stopped.
///
/// # Errors
/// No reachable API server, front-proxy settings missing from
/// `kube-system/extension-apiserver-authentication` or unusable, an unreadable certificate or
/// key, or an address that cannot be bound.
pub async fn run(args: HomesApiArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let registry = Registry::new();
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    let requests = metrics::RequestMetrics::new(&registry)?;
    let connections = metrics::connections(&registry)?;
    let health = Health::serving(registry);
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::operator::cancel_on_signal(shutdown.clone()));
    let server = Server::bind(args.metrics_address).await?;
    let server = tokio::spawn(server.serve(health.clone(), shutdown.clone()));

    let client = Client::try_default()
        .await
        .context("loading the kubeconfig")?;
    let (namespace, name) = auth::AUTHENTICATION_CONFIG_MAP;
    let published = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading {namespace}/{name}"))?;
    let auth = auth::RequestHeaderAuth::from_config_map(&published.data.unwrap_or_default())?;
    let certs = CertificateDer::pem_file_iter(&args.tls_cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("reading {}", args.tls_cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&args.tls_key)
        .with_context(|| format!("reading {}", args.tls_key.display()))?;
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(auth.client_verifier()?)
        .with_single_cert(certs, key)
        .context("the serving certificate and key")?;
    let changes = Arc::new(watch::Sender::new(1));
    let (users, users_writer) = reflector::store::<User>();
    let (shares, shares_writer) = reflector::store::<Share>();
    let (groups, groups_writer) = reflector::store::<DirectoryGroup>();
    let homes = Arc::new(routes::Homes::new(
        auth,
        users,
        shares,
        groups,
        changes.clone(),
    ));
    let observer = homes.clone();
    keep(
        &client,
        users_writer,
        trim_user,
        changes.clone(),
        move |event| {
            observer.observe_user(event);
        },
    );
    let observer = homes.clone();
    keep(
        &client,
        shares_writer,
        trim_meta,
        changes.clone(),
        move |event| {
            observer.observe_share(event);
        },
    );
    keep(&client, groups_writer, trim_meta, changes, |_| {});
    for ready in [
        homes.users.wait_until_ready().await.is_ok(),
        homes.shares.wait_until_ready().await.is_ok(),
        homes.groups.wait_until_ready().await.is_ok(),
    ] {
        anyhow::ensure!(ready, "a cache stopped before its first list");
    }
    health.set_ready(true);
    tracing::info!(address = %args.address, "serving homes.homestead.dev/v1alpha1");
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    let stopped = shutdown.clone();
    tokio::spawn(async move {
        stopped.cancelled().await;
        // Watches end, so their clients (the API server, for people) list again elsewhere.
        stopping.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    let app = routes::router(homes).layer(axum::middleware::from_fn_with_state(
        requests,
        metrics::track,
    ));
    let tls = RustlsConfig::from_config(Arc::new(config));
    crate::connections::bind_bounded(args.address, tls, &args.bounds, connections, handle)
        .serve(app.into_make_service())
        .await
        .context("serving the homes API")?;
    shutdown.cancel();
    server.await?.context("serving /metrics")
}
