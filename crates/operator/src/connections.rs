//! The bounds of every server that faces the network (the SCIM service, the homes API):
//! [`bind_bounded`] builds its HTTPS server with them ([`ConnectionBounds`]). Connections are
//! bounded as each TCP connection is accepted, before the TLS handshake and before any request
//! (so before a token or a client certificate is checked): at most `max` are open at once; one
//! more is closed at once and counted. Each open connection holds a permit of a [`Semaphore`]
//! until its stream is dropped, and the `*_connections_open` gauge follows; an admitted one gets
//! `TCP_NODELAY`, as Go's and axum's own servers set it. With the handshake
//! and first-request timeouts, hyper's header read timeout and its header size limit, this
//! bounds what clients that never authenticate can hold: connections, time and memory. Those
//! are HTTP/1.1's bounds: the SCIM service speaks HTTP/1.1 alone; the homes API
//! ([`bind_bounded_http2`]) speaks HTTP/2 only to its front proxy, with bounds of its own, and
//! gives every other connection a lifetime and HTTP/1.1 alone ([`Uncertified`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use homestead_directory::scim::metrics::Connections;
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cli::ConnectionBounds;

/// An HTTPS server on `address` serving `tls`, within `bounds`, its connections counted in
/// `metrics`, stopped through `handle`: at most `bounds.max_connections` open (one more is
/// closed before TLS); `bounds.header_read_timeout` for the TLS handshake, for the first
/// request, and for each request's headers (so also the keep-alive idle time);
/// `bounds.max_header_bytes` for a request line and headers (431 past it; also what a
/// connection buffers at once). HTTP/1.1 alone: these bounds are HTTP/1.1's (hyper's HTTP/2
/// has no header read timeout, so a client that made one request could keep an idle
/// connection), and hyper-util's builder would otherwise serve HTTP/2 to any client that opens
/// with its preface, ALPN or not. Serve it with `.serve(app.into_make_service())`.
pub fn bind_bounded(
    address: std::net::SocketAddr,
    tls: RustlsConfig,
    bounds: &ConnectionBounds,
    metrics: Connections,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> axum_server::Server<std::net::SocketAddr, RustlsAcceptor<ConnectionLimit>> {
    let mut server = axum_server::bind(address)
        .acceptor(bounded_tls(tls, bounds, metrics))
        .handle(handle)
        .first_request_timeout(bounds.header_read_timeout)
        .http1_only();
    http1_bounds(&mut server, bounds);
    server
}

/// [`bind_bounded`], speaking HTTP/2 as well to the front proxy (`tls` should offer `h2` by
/// ALPN): for the homes API, whose front proxy, kube-apiserver, keeps at most 25 idle HTTP/1.1
/// connections and so opened and closed hundreds, each with a TLS handshake, under 50 people
/// at once (docs/homes.md, "Load"); over HTTP/2 it sends up to [`HTTP2_STREAMS`] requests at
/// once on each connection. The front proxy is a connection whose verified client certificate
/// `front_proxy` accepts (its leaf, DER). Any other connection ([`Uncertified`]; all it can be
/// answered is 401) speaks HTTP/1.1 alone, within [`bind_bounded`]'s bounds, is closed if it
/// opens with HTTP/2's preface, and lives at most `bounds.header_read_timeout` from its
/// handshake. HTTP/2's bounds for the front proxy: [`HTTP2_STREAMS`] requests at once on a
/// connection, `bounds.max_header_bytes` of headers, [`HTTP2_WINDOW`] bytes of request bodies
/// buffered for a connection, [`HTTP2_SEND_BUFFER`] for each response, and a ping after
/// [`HTTP2_PING`] without a frame from it, answered within [`HTTP2_PING_TIMEOUT`].
pub fn bind_bounded_http2(
    address: std::net::SocketAddr,
    (tls, front_proxy): (RustlsConfig, FrontProxy),
    bounds: &ConnectionBounds,
    metrics: Connections,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> axum_server::Server<std::net::SocketAddr, Uncertified<RustlsAcceptor<ConnectionLimit>>> {
    let uncertified = Uncertified {
        inner: bounded_tls(tls, bounds, metrics),
        front_proxy,
        lifetime: bounds.header_read_timeout,
    };
    let mut server = axum_server::bind(address)
        .acceptor(uncertified)
        .handle(handle)
        .first_request_timeout(bounds.header_read_timeout);
    http1_bounds(&mut server, bounds);
    server
        .http_builder()
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(HTTP2_STREAMS)
        .max_header_list_size(bounds.max_header_bytes)
        .initial_stream_window_size(HTTP2_WINDOW)
        .initial_connection_window_size(HTTP2_WINDOW)
        .max_send_buf_size(HTTP2_SEND_BUFFER)
        .keep_alive_interval(HTTP2_PING)
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    server
}

/// Whether a verified client certificate (its leaf, DER) is the front proxy's.
pub type FrontProxy = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// How long the front proxy has to answer a ping before its HTTP/2 connection is closed:
/// fixed, not `--header-read-timeout`, as that one connection carries every person's requests.
pub const HTTP2_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The flow-control window of an HTTP/2 connection and of each of its streams, in bytes: what
/// a client may send of request bodies before the server reads them (hyper's default is 1 MiB
/// each; the homes API reads no body).
pub const HTTP2_WINDOW: u32 = 64 * 1024;

/// The most requests at once on one HTTP/2 connection (a count): Go's HTTP/2 server's default.
pub const HTTP2_STREAMS: u32 = 250;

/// The most bytes an HTTP/2 response buffers before its handler waits (hyper's default is
/// about 400 KiB).
pub const HTTP2_SEND_BUFFER: usize = 64 * 1024;

/// How long an HTTP/2 connection may be without a frame from its client before it is pinged,
/// so one whose peer is gone is closed.
pub const HTTP2_PING: std::time::Duration = std::time::Duration::from_secs(30);

/// The TLS acceptor over the connection limit: `bounds.max_connections` at once, each counted
/// in `metrics`, and `bounds.header_read_timeout` for the handshake.
fn bounded_tls(
    tls: RustlsConfig,
    bounds: &ConnectionBounds,
    metrics: Connections,
) -> RustlsAcceptor<ConnectionLimit> {
    RustlsAcceptor::new(tls)
        .handshake_timeout(bounds.header_read_timeout)
        .acceptor(ConnectionLimit::new(
            usize::from(bounds.max_connections),
            metrics,
        ))
}

/// HTTP/1.1's bounds (see [`bind_bounded`]) on `server`.
fn http1_bounds<A>(
    server: &mut axum_server::Server<std::net::SocketAddr, A>,
    bounds: &ConnectionBounds,
) {
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout)
        // The read buffer bounds the request line and headers (hyper answers 431 past it) and
        // what a connection holds at once (hyper's default is about 400 KiB); bodies stream
        // through it, bounded by each handler as it reads them.
        .max_buf_size(bounds.max_header_bytes as usize);
}

/// An [`Accept`] over a TLS acceptor that tells the front proxy's connections from the others
/// (see [`bind_bounded_http2`]): any other one lives at most `lifetime` from its handshake and
/// may not speak HTTP/2 ([`Lifetime`]).
#[derive(Clone)]
pub struct Uncertified<A> {
    inner: A,
    front_proxy: FrontProxy,
    lifetime: std::time::Duration,
}

impl<I, S, A, T> Accept<I, S> for Uncertified<A>
where
    A: Accept<I, S, Stream = tokio_rustls::server::TlsStream<T>>,
    A::Future: Send + 'static,
    A::Service: Send + 'static,
    T: Send + 'static,
{
    type Stream = Lifetime<tokio_rustls::server::TlsStream<T>>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let (front_proxy, lifetime) = (self.front_proxy.clone(), self.lifetime);
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            let proxy = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(<[_]>::first)
                .is_some_and(|leaf| front_proxy(leaf));
            let lifetime = (!proxy).then_some(lifetime);
            Ok((Lifetime::new(stream, lifetime), service))
        })
    }
}

/// A connection's stream that, when limited, fails every read and write once its lifetime is
/// over (and wakes a connection waiting on it then), and fails as soon as it has delivered the
/// first four bytes of HTTP/2's preface (`PRI `, which no HTTP/1.1 request starts with), so
/// hyper-util's server never sees the preface it would switch to HTTP/2 on: the server closes
/// it either way.
pub struct Lifetime<I> {
    inner: I,
    /// When the connection ends; `None` when it is not limited.
    end: Option<Pin<Box<tokio::time::Sleep>>>,
    /// How many bytes of `PRI ` the connection has opened with so far; [`PREFACE_START`]'s
    /// length once it is known not to, or when it is not limited.
    matched: usize,
}

/// The start of HTTP/2's preface (RFC 9113, section 3.4).
const PREFACE_START: &[u8] = b"PRI ";

impl<I> Lifetime<I> {
    /// `inner`, ending `lifetime` from now and speaking no HTTP/2; `None`: not limited.
    pub fn new(inner: I, lifetime: Option<std::time::Duration>) -> Self {
        let matched = if lifetime.is_some() {
            0
        } else {
            PREFACE_START.len()
        };
        Self {
            inner,
            end: lifetime.map(|l| Box::pin(tokio::time::sleep(l))),
            matched,
        }
    }

    /// An error once what was read so far, from `filled`'s index `from` on, completes the
    /// start of HTTP/2's preface.
    fn http2(&mut self, filled: &[u8], from: usize) -> Option<io::Error> {
        for &byte in filled.get(from..).unwrap_or_default() {
            if self.matched >= PREFACE_START.len() {
                return None;
            }
            if byte != PREFACE_START[self.matched] {
                self.matched = PREFACE_START.len();
                return None;
            }
            self.matched += 1;
            if self.matched == PREFACE_START.len() {
                return Some(io::Error::other(
                    "HTTP/2 is spoken only with the front proxy's client certificate",
                ));
            }
        }
        None
    }

    /// An error once the lifetime is over; registers `cx` to be woken then.
    fn over(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let end = self.end.as_mut()?;
        end.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "a connection without a client certificate lives at most --header-read-timeout",
            )
        })
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Lifetime<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(over) = self.over(cx) {
            return Poll::Ready(Err(over));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(())))
            && let Some(http2) = self.http2(buf.filled(), before)
        {
            return Poll::Ready(Err(http2));
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Lifetime<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(over) = self.over(cx) {
            return Poll::Ready(Err(over));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(over) = self.over(cx) {
            return Poll::Ready(Err(over));
        }
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
        if let Some(over) = self.over(cx) {
            return Poll::Ready(Err(over));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
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

impl<S> Accept<TcpStream, S> for ConnectionLimit {
    type Stream = Counted<TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Self::Stream, S)>>;

    /// Takes a permit for `stream`, or refuses it (an error: the server drops the TCP
    /// connection) when none is left. An admitted stream gets `TCP_NODELAY`, as Go's and
    /// axum's servers set it: without it, a response written in more than one segment (TLS
    /// records, HTTP/2 frames) waits for the client's delayed ACK, up to 40 ms on Linux.
    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            self.metrics.refused.inc();
            return std::future::ready(Err(io::Error::other(
                "too many open connections (--max-connections)",
            )));
        };
        if let Err(error) = stream.set_nodelay(true) {
            return std::future::ready(Err(error));
        }
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_limited_connection_fails_once_its_lifetime_is_over_and_wakes_its_reader() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut limited = Lifetime::new(server, Some(std::time::Duration::from_secs(2)));
        client.write_all(b"GET").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            limited.read(&mut buf).await.unwrap(),
            3,
            "read while it lives"
        );
        // Nothing more is sent: the pending read is woken and fails at the end.
        let started = tokio::time::Instant::now();
        let error = limited.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            started.elapsed(),
            std::time::Duration::from_secs(2),
            "at the end, not before"
        );
        assert!(limited.write_all(b"x").await.is_err(), "writes fail too");

        // Without a lifetime: it reads what comes, however late.
        let (mut client, server) = tokio::io::duplex(64);
        let mut unlimited = Lifetime::new(server, None);
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        client.write_all(b"GET").await.unwrap();
        assert_eq!(unlimited.read(&mut buf).await.unwrap(), 3);
    }

    /// What a server reads through a limited [`Lifetime`] from a client that sent `pieces`
    /// (three bytes a read at most): the bytes, or the error.
    async fn read_through(pieces: &[&[u8]], limited: bool) -> io::Result<Vec<u8>> {
        let (mut client, server) = tokio::io::duplex(1024);
        for piece in pieces {
            client.write_all(piece).await.unwrap();
        }
        drop(client);
        let lifetime = limited.then_some(std::time::Duration::from_secs(60));
        let mut stream = Lifetime::new(server, lifetime);
        let (mut read, mut buf) = (Vec::new(), [0u8; 3]);
        loop {
            match stream.read(&mut buf).await? {
                0 => return Ok(read),
                n => read.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[tokio::test]
    async fn a_limited_connection_may_not_open_with_the_http2_preface() {
        let preface: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert!(read_through(&[preface], true).await.is_err());
        let bytewise: Vec<&[u8]> = preface.chunks(1).collect();
        assert!(read_through(&bytewise, true).await.is_err());
        assert_eq!(read_through(&[preface], false).await.unwrap(), preface);
        // HTTP/1.1, even what starts as the preface does, passes whole.
        for request in [
            &b"GET /apis HTTP/1.1\r\n\r\n"[..],
            b"PRIX / HTTP/1.1\r\n\r\n",
            b"PR",
        ] {
            assert_eq!(read_through(&[request], true).await.unwrap(), request);
        }
    }

    /// The server's end of a new loopback TCP connection (the client's end is dropped).
    async fn accepted(listener: &tokio::net::TcpListener) -> TcpStream {
        let address = listener.local_addr().unwrap();
        let (_client, (server, _)) =
            tokio::try_join!(TcpStream::connect(address), listener.accept()).unwrap();
        server
    }

    #[tokio::test]
    async fn one_connection_over_the_limit_is_refused_and_a_closed_one_frees_its_place() {
        let metrics = homestead_directory::scim::metrics::Metrics::new().connections();
        let limit = ConnectionLimit::new(2, metrics.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let first = limit.accept(accepted(&listener).await, ()).await.unwrap();
        assert!(first.0.inner.nodelay().unwrap(), "Nagle's algorithm is on");
        let second = limit.accept(accepted(&listener).await, ()).await.unwrap();
        assert!(limit.accept(accepted(&listener).await, ()).await.is_err());
        assert_eq!((metrics.open.get(), metrics.refused.get()), (2, 1));
        drop(first);
        assert_eq!(metrics.open.get(), 1);
        assert!(limit.accept(accepted(&listener).await, ()).await.is_ok());
        drop(second);
    }
}
