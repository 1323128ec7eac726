//! Command-line flags (each also readable from an environment variable) and logging setup.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use clap::{Parser, ValueEnum};
use homestead_reconciler::Config;

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines.
    Text,
}

/// Homestead: gives every person a namespace of their own on this cluster.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    /// Prefix of derived namespace names: `<prefix><User name>`.
    #[arg(long, env = "HOMESTEAD_NAMESPACE_PREFIX", default_value = "user-")]
    pub namespace_prefix: String,

    /// ClusterRoles a User may ask for (repeat the flag or separate with commas).
    /// `cluster-admin` is refused at start-up.
    #[arg(long = "allowed-role", env = "HOMESTEAD_ALLOWED_ROLES", value_delimiter = ',', default_values_t = ["admin".to_owned(), "edit".to_owned(), "view".to_owned()])]
    pub allowed_roles: Vec<String>,

    /// Namespaces never touched, beyond `default`, `kube-*` and the operator's own
    /// (repeat the flag or separate with commas).
    #[arg(
        long = "reserved-namespace",
        env = "HOMESTEAD_RESERVED_NAMESPACES",
        value_delimiter = ','
    )]
    pub reserved_namespaces: Vec<String>,

    /// The namespace the operator runs in: reserved, and home of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "homestead-system")]
    pub operator_namespace: String,

    /// How many Users are reconciled at once (0 = unbounded).
    #[arg(long, env = "HOMESTEAD_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,

    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "HOMESTEAD_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: SocketAddr,

    /// Log format.
    #[arg(long, env = "HOMESTEAD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Log filter, in `tracing` EnvFilter syntax (RUST_LOG takes precedence).
    #[arg(long, env = "HOMESTEAD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Elect a leader through a Lease, so several replicas can run and only one reconciles.
    #[arg(long, env = "HOMESTEAD_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Name of the leader-election Lease in the operator's namespace.
    #[arg(long, env = "HOMESTEAD_LEASE_NAME", default_value = "homestead-leader")]
    pub lease_name: String,

    /// This replica's identity in the Lease (the Pod name in a Deployment).
    #[arg(long, env = "POD_NAME")]
    pub lease_identity: Option<String>,
}

impl Cli {
    /// The reconciler configuration these flags describe.
    ///
    /// # Errors
    /// When `cluster-admin` is in the allow-list: Homestead never grants it.
    pub fn config(&self) -> anyhow::Result<Config> {
        anyhow::ensure!(
            !self.allowed_roles.iter().any(|r| r == "cluster-admin"),
            "--allowed-role cluster-admin is refused: Homestead never grants cluster-wide administration"
        );
        Ok(Config {
            namespace_prefix: self.namespace_prefix.clone(),
            allowed_roles: self.allowed_roles.iter().cloned().collect(),
            reserved_namespaces: self
                .reserved_namespaces
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>(),
            operator_namespace: self.operator_namespace.clone(),
        })
    }

    /// Installs the global `tracing` subscriber: JSON or text lines on stdout, filtered by
    /// `RUST_LOG` if set, else by `--log-level`.
    pub fn init_tracing(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&self.log_level));
        let builder = tracing_subscriber::fmt().with_env_filter(filter);
        match self.log_format {
            LogFormat::Json => builder.json().init(),
            LogFormat::Text => builder.init(),
        }
    }
}
