//! `homestead homes-api`: the aggregated API `homes.homestead.dev/v1alpha1`, which tells every
//! person the homes they can use (docs/homes.md; in progress: no watch, OpenAPI, metrics or
//! chart yet).

pub mod auth;
pub mod resource;
pub mod routes;

use std::sync::Arc;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use homestead_api::{DirectoryGroup, Share, User};
use homestead_reconciler::runtime::watches::Watched;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::cli::HomesApiArgs;

/// A reflector cache of every `K`, kept by a task of its own; the store is ready once listed.
fn cache<K: Watched>(client: &Client) -> reflector::Store<K> {
    let (reader, writer) = reflector::store();
    let stream = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

/// Serves the homes API until the process is stopped.
///
/// # Errors
/// No reachable API server, front-proxy settings missing from
/// `kube-system/extension-apiserver-authentication` or unusable, an unreadable certificate or
/// key, or an address that cannot be bound.
pub async fn run(args: HomesApiArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    let homes = Arc::new(routes::Homes {
        auth,
        users: cache::<User>(&client),
        shares: cache::<Share>(&client),
        groups: cache::<DirectoryGroup>(&client),
    });
    for ready in [
        homes.users.wait_until_ready().await.is_ok(),
        homes.shares.wait_until_ready().await.is_ok(),
        homes.groups.wait_until_ready().await.is_ok(),
    ] {
        anyhow::ensure!(ready, "a cache stopped before its first list");
    }
    tracing::info!(address = %args.address, "serving homes.homestead.dev/v1alpha1");
    axum_server::bind_rustls(args.address, RustlsConfig::from_config(Arc::new(config)))
        .serve(routes::router(homes).into_make_service())
        .await
        .context("serving the homes API")
}
