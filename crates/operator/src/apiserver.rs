//! The client of the Kubernetes API the operator and the homes API connect with: kube's own
//! stack, built here so that each connection's read buffer is bounded ([`READ_BUFFER`]).

/// What a connection to the API server reads into its buffer at most, bytes: hyper's default
/// is about 400 KiB, which each watch's connection grew to while the API server streamed it a
/// list and kept for good (5.4 of the operator's 60 MiB live heap after a restart at 10,000
/// Users; docs/performance.md, "At scale"). A watch event larger than this still comes whole,
/// in several reads.
pub const READ_BUFFER: usize = 64 * 1024;

/// The HTTP stack of `kube::client::ClientBuilder::try_from(config)` (rustls with `config`'s
/// certificates, its connect, read and write timeouts, retries of 429, 503 and 504,
/// authentication, extra headers), with each connection's read buffer bounded by
/// [`READ_BUFFER`]: kube's builder takes no hyper settings. Without kube's tracing layer (debug
/// spans per request; `homestead_api_requests_total` counts them instead) and without a proxy
/// (the operator runs beside its API server; kube honours `config.proxy_url`, this does not).
///
/// # Errors
/// When `config`'s TLS settings or credentials cannot be loaded.
pub fn service(
    config: &kube::Config,
) -> kube::Result<
    tower::util::BoxService<
        http::Request<kube::client::Body>,
        http::Response<hyper::body::Incoming>,
        tower::BoxError,
    >,
> {
    use kube::client::ConfigExt as _;
    use tower::ServiceExt as _;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER)
        .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    Ok(tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(client)
        .boxed())
}

/// A client over [`service`] from `config`, in `config`'s default namespace.
///
/// # Errors
/// As [`service`].
pub fn client(config: &kube::Config) -> kube::Result<kube::Client> {
    Ok(
        kube::client::ClientBuilder::new(service(config)?, config.default_namespace.clone())
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response many times [`READ_BUFFER`] (a list, or one large watch event such as a
    /// DirectoryGroup of thousands) arrives whole through the bounded buffer, in order.
    #[tokio::test]
    async fn a_body_larger_than_the_read_buffer_arrives_whole() {
        let body: String = (0..READ_BUFFER * 8 / 16)
            .map(|i| format!("{i:015}\n"))
            .collect();
        let served = body.clone();
        let app = axum::Router::new().route(
            "/big",
            axum::routing::get(move || {
                let chunks: Vec<Result<String, std::io::Error>> = served
                    .as_bytes()
                    .chunks(100_000)
                    .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
                    .collect();
                async move { axum::body::Body::from_stream(futures::stream::iter(chunks)) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let client = kube::client::ClientBuilder::new(service(&config).unwrap(), "default")
            .build::<hyper::body::Incoming>();
        let request = http::Request::get("/big").body(Vec::new()).unwrap();
        let text = client.request_text(request).await.unwrap();
        assert_eq!(text.len(), body.len());
        assert!(text == body, "the body arrives in order");
    }
}
