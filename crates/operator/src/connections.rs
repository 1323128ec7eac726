//! The bounds of every server that faces the network (the SCIM service, the homes API):
//! [`bind_bounded`] builds its HTTPS server with them ([`ConnectionBounds`]). Connections are
//! bounded as each TCP connection is accepted, before the TLS handshake and before any request
//! (so before a token or a client certificate is checked): at most `max` are open at once; one
//! more is closed at once and counted. Each open connection holds a permit of a [`Semaphore`]
//! until its stream is dropped, and the `*_connections_open` gauge follows. With the handshake
//! and first-request timeouts, hyper's header read timeout and its header size limit, this
//! bounds what clients that never authenticate can hold: connections, time and memory.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use homestead_directory::scim::metrics::Connections;
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cli::ConnectionBounds;

/// An HTTPS server on `address` serving `tls`, within `bounds`, its connections counted in
/// `metrics`, stopped through `handle`: at most `bounds.max_connections` open (one more is
/// closed before TLS); `bounds.header_read_timeout` for the TLS handshake, for the first
/// request, and for each request's headers (so also the keep-alive idle time);
/// `bounds.max_header_bytes` for a request line and headers (431 past it; also what a
/// connection buffers at once). Serve it with `.serve(app.into_make_service())`.
pub fn bind_bounded(
    address: std::net::SocketAddr,
    tls: RustlsConfig,
    bounds: &ConnectionBounds,
    metrics: Connections,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> axum_server::Server<std::net::SocketAddr, RustlsAcceptor<ConnectionLimit>> {
    let acceptor = RustlsAcceptor::new(tls)
        .handshake_timeout(bounds.header_read_timeout)
        .acceptor(ConnectionLimit::new(
            usize::from(bounds.max_connections),
            metrics,
        ));
    let mut server = axum_server::bind(address)
        .acceptor(acceptor)
        .handle(handle)
        .first_request_timeout(bounds.header_read_timeout)
        // HTTP/1.1 alone: these bounds are HTTP/1.1's (hyper's HTTP/2 has no header read
        // timeout, so a client that made one request could keep an idle connection), and
        // hyper-util's builder would otherwise serve HTTP/2 to any client that opens with its
        // preface, ALPN or not.
        .http1_only();
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout)
        // The read buffer bounds the request line and headers (hyper answers 431 past it) and
        // what a connection holds at once (hyper's default is about 400 KiB); bodies stream
        // through it, bounded by each handler as it reads them.
        .max_buf_size(bounds.max_header_bytes as usize);
    server
}

/// An [`Accept`] that admits at most a fixed number of open connections (see the module docs).
#[derive(Clone)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
    metrics: Connections,
}

impl ConnectionLimit {
    /// Admits at most `max` connections at once (a count), keeping `metrics`.
    pub fn new(max: usize, metrics: Connections) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            metrics,
        }
    }
}

impl<I, S> Accept<I, S> for ConnectionLimit
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    type Stream = Counted<I>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Self::Stream, S)>>;

    /// Takes a permit for `stream`, or refuses it (an error: the server drops the TCP
    /// connection) when none is left.
    fn accept(&self, stream: I, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            self.metrics.refused.inc();
            return std::future::ready(Err(io::Error::other(
                "too many open connections (--max-connections)",
            )));
        };
        self.metrics.open.inc();
        std::future::ready(Ok((
            Counted {
                inner: stream,
                _permit: permit,
                open: self.metrics.open.clone(),
            },
            service,
        )))
    }
}

/// A stream that holds one of [`ConnectionLimit`]'s permits while it lives.
pub struct Counted<I> {
    inner: I,
    _permit: OwnedSemaphorePermit,
    open: prometheus::IntGauge,
}

impl<I> Drop for Counted<I> {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_connection_over_the_limit_is_refused_and_a_closed_one_frees_its_place() {
        let metrics = homestead_directory::scim::metrics::Metrics::new().connections();
        let limit = ConnectionLimit::new(2, metrics.clone());
        let stream = || tokio::io::duplex(64).0;
        let first = limit.accept(stream(), ()).await.unwrap();
        let second = limit.accept(stream(), ()).await.unwrap();
        assert!(limit.accept(stream(), ()).await.is_err());
        assert_eq!((metrics.open.get(), metrics.refused.get()), (2, 1));
        drop(first);
        assert_eq!(metrics.open.get(), 1);
        assert!(limit.accept(stream(), ()).await.is_ok());
        drop(second);
    }
}
