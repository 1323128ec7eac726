//! `homestead scim`: the SCIM 2.0 service of `homestead-directory`, served over HTTPS with
//! the certificate and bearer tokens from mounted files (re-read periodically, so rotating
//! the Secrets needs no restart), until SIGTERM or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use homestead_directory::scim::{self, Scim, Settings, Tokens};

use crate::cli::ScimArgs;

/// How often the token file is re-read.
const TOKEN_RELOAD: Duration = Duration::from_secs(30);
/// How often the certificate and key are re-read.
const TLS_RELOAD: Duration = Duration::from_secs(300);
/// How long in-flight requests may take to finish after SIGTERM.
const GRACE: Duration = Duration::from_secs(10);

/// Runs the service `args` describe against the cluster of the current kubeconfig (or the
/// in-cluster configuration).
///
/// # Errors
/// An unreadable token file or one without tokens, an unreadable or invalid certificate or
/// key, no reachable API server, or an address that cannot be bound.
pub async fn run(args: ScimArgs) -> anyhow::Result<()> {
    // kube and axum-server share rustls; it needs one process-wide crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tokens = Arc::new(Tokens::default());
    let count = tokens.set_from(&read(&args.token_file)?);
    anyhow::ensure!(count > 0, "{} holds no token", args.token_file.display());
    let tls = RustlsConfig::from_pem_file(&args.tls_cert, &args.tls_key)
        .await
        .with_context(|| {
            format!(
                "loading the TLS certificate {} and key {}",
                args.tls_cert.display(),
                args.tls_key.display()
            )
        })?;

    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API server")?;
    let (store, keep_cache) = scim::watch_users(client.clone());
    let service = Scim::new(
        client,
        store,
        tokens.clone(),
        Settings {
            profile: args.profile.clone(),
            max_body_bytes: args.max_body_bytes,
            base_url: args.base_url.clone(),
        },
    );
    tokio::spawn(keep_cache);
    tokio::spawn(reload_tokens(tokens, args.token_file.clone()));
    tokio::spawn(reload_tls(
        tls.clone(),
        args.tls_cert.clone(),
        args.tls_key.clone(),
    ));
    let ready = service.clone();
    tokio::spawn(async move { ready.wait_until_ready().await });

    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("stopping the SCIM service");
        shutdown.graceful_shutdown(Some(GRACE));
    });
    tracing::info!(address = %args.address, tokens = count, "serving SCIM 2.0 at https://{}/scim/v2", args.address);
    axum_server::bind_rustls(args.address, tls)
        .handle(handle)
        .serve(scim::router(service).into_make_service())
        .await
        .with_context(|| format!("serving on {}", args.address))
}

fn read(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

async fn reload_tokens(tokens: Arc<Tokens>, path: std::path::PathBuf) {
    let mut tick = tokio::time::interval(TOKEN_RELOAD);
    tick.tick().await;
    loop {
        tick.tick().await;
        match read(&path) {
            // An empty file (a Secret being rewritten) keeps the tokens accepted so far.
            Ok(text)
                if text
                    .lines()
                    .any(|l| !l.trim().is_empty() && !l.trim().starts_with('#')) =>
            {
                tokens.set_from(&text);
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "the token file holds no token; keeping the previous tokens")
            }
            Err(error) => tracing::warn!(%error, "keeping the previous tokens"),
        }
    }
}

async fn reload_tls(tls: RustlsConfig, cert: std::path::PathBuf, key: std::path::PathBuf) {
    let mut tick = tokio::time::interval(TLS_RELOAD);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(error) = tls.reload_from_pem_file(&cert, &key).await {
            tracing::warn!(%error, "keeping the previous TLS certificate");
        }
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
