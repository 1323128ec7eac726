//! The errors of starting and driving the local cluster.

/// Errors from building, starting or talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `tools/control-plane/build.sh` failed or printed no directory.
    #[error("building the control-plane binaries failed: {0}")]
    Build(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process exited or the API server did not become ready in time; holds the process logs.
    #[error("control plane failed to start: {reason}\n{logs}")]
    Startup {
        /// What went wrong.
        reason: String,
        /// The last lines of each process log.
        logs: String,
    },
    /// Generating the serving certificate or the service-account signing key failed.
    #[error("generating TLS material failed: {0}")]
    Tls(#[from] rcgen::Error),
    /// A request to the API server failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be built or loaded.
    #[error("kubeconfig error: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// No token was issued for this identity; add it to [`Options::identities`].
    #[error("unknown identity {0:?}: declare it in Options::identities before start")]
    UnknownIdentity(String),
    /// A CRD did not report `Established=True` within 30 seconds.
    #[error("CRD {0} did not become Established")]
    CrdNotEstablished(String),
    /// The node cannot start: what is missing or what failed (root, a program, a lock, a
    /// process that exited, readiness).
    #[error("the local node cannot start: {0}")]
    Node(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
