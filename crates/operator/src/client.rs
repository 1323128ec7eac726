//! The Kubernetes client of every long-running command (the operator, the SCIM service, the
//! homes API): kube's own stack (`kube::client::ClientBuilder::try_from`: rustls, the
//! connect, read and write timeouts, the base URI, authentication, the configured headers, the
//! retry of 429, 503 and 504), over a hyper client whose HTTP/1 read buffer is bounded by
//! [`READ_BUFFER_BYTES`] and which keeps at most [`MAX_IDLE_CONNECTIONS`] idle connections.
//!
//! Why: hyper grows each connection's read buffer while a read fills it, up to about 400 KiB,
//! and a buffer keeps its capacity for as long as its connection lives. Every watch is a
//! connection of its own, open for minutes; the initial lists (500 objects a page, or the
//! watch's own initial events) grow the buffers of the connections they pass through, which
//! then serve the watches. At 10,000 Users, 10,000 Shares and 1,000 Workspaces the operator's
//! heap held 4.0 MiB of such buffers once steady after a restart (docs/performance.md, "The
//! client's connections").

use anyhow::Context as _;
use axum::http::{Request, Response};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Config;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt as _};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// The most idle connections the client keeps open for reuse (a count), as client-go's
/// transport keeps (`MaxIdleConnsPerHost`, 25). hyper keeps every one by default, each holding
/// its buffers, TLS state and channel (about 37 KB): after a burst of 64 reconciles and the
/// watches' lists, about 80 idle connections held 3 MB. With the pool's timer set, hyper also
/// closes a connection idle for 90 seconds (kube-apiserver closes them at 90 seconds too).
pub const MAX_IDLE_CONNECTIONS: usize = 25;

/// The most a connection's read buffer holds (bytes): two TLS records of plaintext; hyper
/// bounds its write buffer by it too. A list's page or a large object streams through it in
/// pieces; only a response's head must fit (kube-apiserver's are about 1 KiB, a few more with
/// `Warning` headers). hyper's minimum is 8 KiB, its default about 400 KiB.
pub const READ_BUFFER_BYTES: usize = 32 * 1024;

/// A [`ClientBuilder`] for `config`, as kube builds it (see the module docs) but with each
/// connection's read buffer bounded by [`READ_BUFFER_BYTES`], at most [`MAX_IDLE_CONNECTIONS`]
/// kept idle (closed after 90 seconds idle), and without two things of kube's: its tracing
/// layer (debug spans, and an error-level log line for each 5xx answer or transport error,
/// below the retry: an attempt the retry repeats is no longer logged; what reaches the caller
/// is logged and counted there), and `Client::valid_until` for an exec plugin's client
/// certificate (read by nothing here; kube keeps how to find it to itself). Add layers with
/// [`ClientBuilder::with_layer`], then `build()`.
///
/// # Errors
/// When the configuration names a proxy (kube refuses one without its proxy features); when
/// its TLS settings (certificates, keys) or its authentication cannot be loaded; or when a
/// configured or impersonation header is not valid.
pub fn builder(
    config: &Config,
) -> anyhow::Result<
    ClientBuilder<
        impl tower::Service<
            Request<Body>,
            Response = Response<hyper::body::Incoming>,
            Error = BoxError,
            Future: Send + 'static,
        > + Send
        + 'static,
    >,
> {
    // kube builds this crate's features without proxy support, and refuses a proxy then.
    if let Some(proxy) = &config.proxy_url {
        anyhow::bail!("the configuration names the proxy {proxy}, which Homestead cannot use");
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = config
        .rustls_https_connector_with_connector(http)
        .context("the client's TLS settings")?;
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .http1_max_buf_size(READ_BUFFER_BYTES)
            .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
            .pool_timer(TokioTimer::new())
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().context("the client's authentication")?)
        .layer(
            config
                .extra_headers_layer()
                .context("the client's headers")?,
        )
        .map_err(BoxError::from)
        .service(hyper);
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}

/// [`builder`] for the in-cluster or kubeconfig configuration (`kube::Config::infer`), built.
///
/// # Errors
/// When no configuration is found, or as [`builder`].
pub async fn infer() -> anyhow::Result<kube::Client> {
    let config = Config::infer()
        .await
        .context("loading the Kubernetes client configuration")?;
    Ok(builder(&config)?.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::time::Duration;

    /// How long the test waits for the response.
    const TIMEOUT: Duration = Duration::from_secs(10);

    /// A list of `items` objects of about 1 KiB each, as kube-apiserver sends it (chunked).
    fn serve_once(listener: std::net::TcpListener, items: usize) {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).unwrap();
        let filler = "x".repeat(1000);
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"NamespaceList","metadata":{{"resourceVersion":"1"}},"items":[{}]}}"#,
            (0..items)
                .map(|i| format!(
                    r#"{{"metadata":{{"name":"ns-{i}","annotations":{{"a":"{filler}"}}}}}}"#
                ))
                .collect::<Vec<_>>()
                .join(",")
        );
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .unwrap();
        for chunk in body.as_bytes().chunks(100_000) {
            write!(stream, "{:x}\r\n", chunk.len()).unwrap();
            stream.write_all(chunk).unwrap();
            write!(stream, "\r\n").unwrap();
        }
        write!(stream, "0\r\n\r\n").unwrap();
    }

    /// A proxy in the configuration is refused, as kube refuses it without its proxy
    /// features, rather than ignored.
    #[test]
    fn a_proxy_is_refused() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://127.0.0.1:3128".parse().unwrap());
        let error = builder(&config).err().expect("refused").to_string();
        assert!(error.contains("proxy"), "{error}");
    }

    /// A response many times the read buffer (a 2 MB list in 100 KB chunks) still arrives
    /// whole: the bound is on what a connection holds at once, not on what it receives.
    #[tokio::test]
    async fn a_list_larger_than_the_read_buffer_arrives_whole() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || serve_once(listener, 2000));
        let config = Config::new(format!("http://{address}").parse().unwrap());
        let client = builder(&config).unwrap().build();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let list = tokio::time::timeout(TIMEOUT, namespaces.list(&Default::default()))
            .await
            .expect("answered in time")
            .unwrap();
        server.join().unwrap();
        assert_eq!(list.items.len(), 2000);
        assert_eq!(list.items[1999].metadata.name.as_deref(), Some("ns-1999"));
    }
}
