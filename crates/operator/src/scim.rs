//! `homestead scim`: the SCIM 2.0 service of `homestead-directory`, served over HTTPS with
//! the certificate and bearer tokens from mounted files (re-read every `--reload-interval`, so
//! rotating the Secrets needs no restart), until SIGTERM or Ctrl-C. What a client that never
//! authenticates can hold is bounded before any request is read (docs/security.md, "The SCIM
//! service's limits"): `--max-connections` open at once, `--header-read-timeout` for the TLS
//! handshake, each request's headers and an idle kept-alive connection, `--max-header-bytes`
//! of headers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use homestead_directory::scim::{self, Scim, Settings, Tokens};

use crate::cli::ScimArgs;
use crate::connections::bind_bounded;

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
    let token_text = read(&args.token_file)?;
    let count = tokens
        .set_from(&token_text)
        .with_context(|| format!("{} holds no token", args.token_file.display()))?;
    let pem = (read_bytes(&args.tls_cert)?, read_bytes(&args.tls_key)?);
    let tls = server_config(&pem)
        .map(|config| RustlsConfig::from_config(Arc::new(config)))
        .with_context(|| {
            format!(
                "loading the TLS certificate {} and key {}",
                args.tls_cert.display(),
                args.tls_key.display()
            )
        })?;

    let service = service(&args, tokens.clone()).await?;
    let expiry = service.certificate_expiry_metric();
    expiry.set(not_after(&pem.0)?);
    let files = Files {
        tokens: args.token_file.clone(),
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
    };
    tokio::spawn(reload(
        files,
        Loaded {
            tokens: token_text,
            pem,
        },
        tokens,
        (tls.clone(), expiry),
        args.reload_interval,
    ));
    let connections = service.connection_metrics();
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
    let server = bind_bounded(args.address, tls, &args.bounds, connections, handle);
    server
        .serve(scim::router(service).into_make_service())
        .await
        .with_context(|| format!("serving on {}", args.address))
}

/// The SCIM service for `args`, accepting `tokens`, with its caches of Users and DirectoryGroups
/// kept by tasks of their own.
///
/// # Errors
/// When no Kubernetes client configuration is found.
async fn service(args: &ScimArgs, tokens: Arc<Tokens>) -> anyhow::Result<Scim> {
    let client = crate::client::infer()
        .await
        .context("connecting to the Kubernetes API server")?;
    let (store, keep_cache) = scim::watch_users(client.clone());
    let (groups, keep_groups) = scim::groups::watch_groups(client.clone());
    let settings = Settings {
        profile: args.profile.clone(),
        max_body_bytes: args.max_body_bytes,
        base_url: args.base_url.clone(),
    };
    let service = Scim::new(client, store, groups, tokens, settings);
    tokio::spawn(keep_cache);
    tokio::spawn(keep_groups);
    Ok(service)
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn read_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// The mounted files the service re-reads.
struct Files {
    tokens: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// What the service last loaded from [`Files`], to tell a change from a re-read.
struct Loaded {
    tokens: String,
    pem: (Vec<u8>, Vec<u8>),
}

/// The end of the validity (`notAfter`, Unix seconds) of the first certificate in the PEM
/// `chain` (the serving certificate; what follows it are its issuers).
///
/// # Errors
/// When `chain` does not start with a PEM certificate that parses as X.509.
fn not_after(chain: &[u8]) -> anyhow::Result<i64> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(chain).context("the certificate is not PEM")?;
    let certificate = pem
        .parse_x509()
        .context("the certificate does not parse as X.509")?;
    Ok(certificate.validity().not_after.timestamp())
}

/// Every `every`, re-reads the token file and the certificate and key, and puts in force those
/// that changed, with the certificate's `notAfter` in `expiry`
/// (`homestead_scim_certificate_expiry_timestamp_seconds`). A token file without a token (a
/// Secret being rewritten), an unreadable file or a certificate that does not load keeps what is
/// in force, with a warning; the next read tries again.
async fn reload(
    files: Files,
    mut loaded: Loaded,
    tokens: Arc<Tokens>,
    (tls, expiry): (RustlsConfig, prometheus::IntGauge),
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match read(&files.tokens) {
            Ok(text) if text == loaded.tokens => {}
            Ok(text) => match tokens.set_from(&text) {
                Some(count) => {
                    tracing::info!(file = %files.tokens.display(), tokens = count, "the token file changed; its tokens are now the accepted ones");
                    loaded.tokens = text;
                }
                None => {
                    tracing::warn!(file = %files.tokens.display(), "the token file holds no token; keeping the previous tokens")
                }
            },
            Err(error) => {
                tracing::warn!(error = format!("{error:#}"), "keeping the previous tokens")
            }
        }
        let pem = match read_bytes(&files.cert).and_then(|c| Ok((c, read_bytes(&files.key)?))) {
            Ok(pem) if pem == loaded.pem => continue,
            Ok(pem) => pem,
            Err(error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "keeping the previous TLS certificate"
                );
                continue;
            }
        };
        let valid_until = match not_after(&pem.0) {
            Ok(valid_until) => valid_until,
            Err(error) => {
                tracing::warn!(error = format!("{error:#}"), cert = %files.cert.display(), "the new TLS certificate does not load; keeping the previous one");
                continue;
            }
        };
        match server_config(&pem) {
            Ok(config) => {
                tls.reload_from_config(Arc::new(config));
                expiry.set(valid_until);
                tracing::info!(cert = %files.cert.display(), "the TLS certificate or key changed; serving the new one");
                loaded.pem = pem;
            }
            Err(error) => {
                tracing::warn!(error = format!("{error:#}"), cert = %files.cert.display(), "the new TLS certificate or key does not load; keeping the previous one")
            }
        }
    }
}

/// The TLS settings of the SCIM service for the certificate chain and key `pem` (PEM): no
/// client certificate, and ALPN's `http/1.1` alone (RFC 7301), the one protocol the service
/// speaks ([`bind_bounded`]); offered `h2`, a client such as the kubelet's prober would open
/// with HTTP/2 and be closed.
///
/// # Errors
/// A chain or key that does not parse, or that do not go together.
fn server_config(pem: &(Vec<u8>, Vec<u8>)) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(&pem.0)
        .collect::<Result<Vec<_>, _>>()
        .context("reading the certificate chain")?;
    let key = PrivateKeyDer::from_pem_slice(&pem.1).context("reading the private key")?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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
