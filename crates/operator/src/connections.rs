//! The SCIM server's bound on connections, enforced as each TCP connection is accepted, before
//! the TLS handshake and before any request (so before a token is checked): at most
//! `max` connections are open at once; one more is closed at once and counted. Each open
//! connection holds a permit of a [`Semaphore`] until its stream is dropped, and the gauge
//! `homestead_scim_connections_open` follows. Together with hyper's header read timeout and
//! header size limit (set in `scim.rs`), this bounds what clients that never authenticate can
//! hold: connections, time and memory.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use homestead_directory::scim::metrics::Connections;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
