//! Command-line flags (each also readable from an environment variable) and logging setup.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
pub use homestead_admin::args::{
    AccessArgs, AdoptArgs, DoctorArgs, ImportArgs, ProbeArgs, ReleaseArgs, ShareArgs,
    WorkspaceArgs, parse_positive_duration,
};
use homestead_reconciler::Config;
use homestead_reconciler::plan::config::{
    DEFAULT_ALLOWED_ROLES, DEFAULT_NAMESPACE_PREFIX, DEFAULT_OPERATOR_NAMESPACE,
    DEFAULT_POD_SECURITY, DEFAULT_RESERVED_KEYS, DEFAULT_SHARE_MAX_ROLE, DEFAULT_WORKSPACE_PREFIX,
    PodSecurity, PodSecurityLevel, SharingDefaults, parse_duration,
};

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines.
    Text,
}

/// Exit codes, as every command uses them (docs/operations.md, "Exit codes and output").
const EXIT_CODES: &str = "Exit codes: 0 done (every check ok or warn, every row applied); 1 a check, \
row or request failed, or the cluster could not be reached (the message says which; for \
import and adopt the other rows were still applied); 2 the command line is wrong (unknown \
flag, missing argument, a value that does not parse); see docs/operations.md, \
\"Exit codes and output\".";

/// Homestead: gives every person a namespace of their own on this cluster.
#[derive(Debug, Parser)]
#[command(version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// A task other than running the operator (the default).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The operator's flags (its logging flags serve every command).
    #[command(flatten)]
    pub operator: OperatorCli,
}

/// The operator's exit codes (docs/operations.md, "Exit codes and output").
const OPERATOR_EXIT_CODES: &str = "Exit codes: 0 stopped by SIGTERM or SIGINT; 1 a flag it \
refuses, an address in use, an API server it cannot reach, or a lost Lease (the message says \
which; the Pod restarts with fresh state); 2 the command line is wrong (unknown flag, a value \
that does not parse).";

/// `homestead-operator`: runs Homestead's operator (what `homestead` runs without a command).
#[derive(Debug, Parser)]
#[command(name = "homestead-operator", version, about, after_help = OPERATOR_EXIT_CODES)]
pub struct OperatorCli {
    /// What Homestead may create and grant: the reconciler's [`Config`].
    #[command(flatten)]
    pub policy: PolicyArgs,

    /// How the operator runs: concurrency, intervals, metrics, logs.
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    /// Leader election through a Lease.
    #[command(flatten)]
    pub election: ElectionArgs,
}

/// The flags that become the reconciler's [`Config`]; each default is a `DEFAULT_*` constant of
/// `homestead_reconciler::plan::config`, which [`Config::default`] uses too.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Policy")]
pub struct PolicyArgs {
    /// Prefix of derived namespace names: `<prefix><User name>`.
    #[arg(long, env = "HOMESTEAD_NAMESPACE_PREFIX", default_value = DEFAULT_NAMESPACE_PREFIX)]
    pub namespace_prefix: String,

    /// Prefix of every Workspace's namespace: `<prefix><Workspace name>` unless
    /// `spec.namespace.name` says otherwise, which must start with it too. Keep `<prefix>*` in
    /// the admission policy's `namespacePattern` (the chart adds it).
    #[arg(long, env = "HOMESTEAD_WORKSPACE_PREFIX", default_value = DEFAULT_WORKSPACE_PREFIX)]
    pub workspace_prefix: String,

    /// Shell-style patterns (`*`, `?`, `[a-z]`) that a name in `spec.namespace.name` must match
    /// (repeat the flag or separate with commas). Default: `<namespace prefix>*`. The operator
    /// allows derived names (`<prefix><User name>`) whatever the patterns, but the admission
    /// policy `homestead-operator-bounds` judges every namespace it creates by its own
    /// `namespacePattern`: keep `<prefix>*` among the patterns written there (docs/security.md).
    #[arg(
        long = "allowed-namespace",
        env = "HOMESTEAD_ALLOWED_NAMESPACES",
        value_delimiter = ','
    )]
    pub allowed_namespaces: Vec<String>,

    /// Extra label and annotation keys Users may not set on their Namespace: `domain/` reserves
    /// that prefix and its subdomains, anything else one exact key. Keys under `homestead.dev/`,
    /// `kubernetes.io/` and `k8s.io/` are always reserved.
    #[arg(
        long = "reserved-key",
        env = "HOMESTEAD_RESERVED_KEYS",
        value_delimiter = ',',
        default_values = DEFAULT_RESERVED_KEYS
    )]
    pub reserved_keys: Vec<String>,

    /// Pod Security level enforced in every managed Namespace
    /// (`pod-security.kubernetes.io/enforce`): baseline or restricted (privileged is refused:
    /// the admission policy `homestead-operator-bounds` refuses the operator such a Namespace).
    #[arg(
        long,
        env = "HOMESTEAD_POD_SECURITY_ENFORCE",
        default_value = DEFAULT_POD_SECURITY.enforce.as_str()
    )]
    pub pod_security_enforce: PodSecurityLevel,

    /// Pod Security level that warns (`pod-security.kubernetes.io/warn`).
    #[arg(
        long,
        env = "HOMESTEAD_POD_SECURITY_WARN",
        default_value = DEFAULT_POD_SECURITY.warn.as_str()
    )]
    pub pod_security_warn: PodSecurityLevel,

    /// Pod Security level recorded in the audit log (`pod-security.kubernetes.io/audit`).
    #[arg(
        long,
        env = "HOMESTEAD_POD_SECURITY_AUDIT",
        default_value = DEFAULT_POD_SECURITY.audit.as_str()
    )]
    pub pod_security_audit: PodSecurityLevel,

    /// The Profile of every User that names none in `spec.profile` and is in no directory group
    /// a Profile names. Unset: such Users get only what their own spec says.
    #[arg(long, env = "HOMESTEAD_DEFAULT_PROFILE")]
    pub default_profile: Option<String>,

    /// How long before a User's `validUntil` its condition `Expiring` turns True (with an
    /// Event): a number with a unit, `s`, `m`, `h` or `d` (for example `14d`, `36h`).
    #[arg(long, env = "HOMESTEAD_EXPIRY_WARNING", default_value = "14d", value_parser = parse_duration)]
    pub expiry_warning: std::time::Duration,

    /// Whether people whose Profile sets no `sharing` may share their homes (Shares).
    #[arg(long, env = "HOMESTEAD_SHARE_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub share_enabled: bool,

    /// The highest ClusterRole a Share may grant for people whose Profile sets no
    /// `sharing.maxRole` (in the order `view` < `edit` < `admin`).
    #[arg(long, env = "HOMESTEAD_SHARE_MAX_ROLE", default_value = DEFAULT_SHARE_MAX_ROLE)]
    pub share_max_role: String,

    /// The longest a Share may last from its creation or renewal for people whose Profile sets
    /// no `sharing.maxDuration`: a number with a unit, `s`, `m`, `h` or `d` (default `90d`).
    #[arg(long, env = "HOMESTEAD_SHARE_MAX_DURATION", default_value = "90d", value_parser = parse_positive_duration)]
    pub share_max_duration: std::time::Duration,

    /// Whether DirectoryGroups may be grantees of the Shares of people whose Profile sets no
    /// `sharing.groups`.
    #[arg(long, env = "HOMESTEAD_SHARE_GROUPS", default_value_t = true, action = clap::ArgAction::Set)]
    pub share_groups: bool,

    /// Whether adopting an existing namespace (labelled `homestead.dev/adopt-for=<User>` by the
    /// platform) removes the RoleBindings made before it; `false` keeps them, named in the
    /// `NamespaceAdopted` Event and shown as `unmanaged` by `homestead access`.
    #[arg(long, env = "HOMESTEAD_REVOKE_ADOPTED_ROLE_BINDINGS", default_value_t = false, action = clap::ArgAction::Set)]
    pub revoke_adopted_role_bindings: bool,

    /// ClusterRoles a User may ask for (repeat the flag or separate with commas).
    /// `cluster-admin` is refused at start-up.
    #[arg(
        long = "allowed-role",
        env = "HOMESTEAD_ALLOWED_ROLES",
        value_delimiter = ',',
        default_values = DEFAULT_ALLOWED_ROLES
    )]
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
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_OPERATOR_NAMESPACE)]
    pub operator_namespace: String,
}

/// How the operator process runs.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Runtime")]
pub struct RuntimeArgs {
    /// How many Users are reconciled at once, 1-65535 (never unbounded: a bulk change would
    /// send the API server every User at once). The default is measured on the
    /// local control plane: run alternately, 10,000 new Users were all Ready in 82.7-92.1 s with
    /// 64 and 85.2-100.7 s with 32 (etcd batches more writes: 1.2-1.4 against 1.5-1.7 ms of its
    /// CPU per User), for about 2.5 MiB more memory; 128 took 73.4 s once (and 6 MiB more than 32)
    /// and 8 took 117.1-123.9 s; at 1,000 Users 16 to 64 were within noise of each other (the
    /// API server is the bottleneck; see docs/performance.md).
    #[arg(long, env = "HOMESTEAD_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// How often the leader counts retained namespaces for `homestead_retained_namespaces`
    /// (metadata-only lists of 500 namespaces a page each time): a number with a unit, `s`,
    /// `m`, `h` or `d`; more than 0.
    #[arg(long, env = "HOMESTEAD_RETAINED_COUNT_INTERVAL", default_value = "60s", value_parser = parse_positive_duration)]
    pub retained_count_interval: std::time::Duration,

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
}

/// Leader election: one replica reconciles, the others wait for its Lease.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Leader election")]
pub struct ElectionArgs {
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

/// Tasks besides running the operator.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Import people from a roster (CSV) as Users, by server-side apply (field manager
    /// `homestead-import`); writes only what differs, so a re-import of the same roster writes
    /// nothing. Exits 1 if any row failed (the others are still applied).
    Import(ImportArgs),
    /// Serve SCIM 2.0 (RFC 7644) over HTTPS for identity providers: people they push become
    /// Users (field manager `homestead-scim`); `active: false` suspends, DELETE offboards.
    Scim(ScimArgs),
    /// Where every access to a Homestead namespace comes from: each subject bound there, its
    /// role, its source (own home, a Share with its reason and creator, a directory group, or
    /// `unmanaged`) and until when. Reads only: the `homestead-auditor` ClusterRole suffices.
    Access(AccessArgs),
    /// Hand existing namespaces to Users, many at once, from a CSV with the columns
    /// `namespace` and `user` (docs/adoption.md): says for each what adoption would find and
    /// change, then labels it `homestead.dev/adopt-for=<user>` (the platform's confirmation;
    /// needs the right to patch Namespaces). Exits 1 if any row is refused.
    Adopt(AdoptArgs),
    /// Check a live cluster the way the platform team would before go-live: the CRDs, the
    /// admission policies (loaded, bound to deny, and refusing a write they must refuse), the
    /// operator's Lease, with `--person-kubeconfig` that a person authenticates with the very
    /// username their User binds, and when a Profile isolates, that NetworkPolicies are
    /// enforced (real traffic between probe Pods of Homestead's image, in two namespaces
    /// `homestead-doctor-*` it removes afterwards). Prints each check and what to fix; exits 1
    /// if one fails.
    Doctor(DoctorArgs),
    /// Serve the aggregated API `homes.homestead.dev/v1alpha1` (`kubectl get homes`): each
    /// person's homes, to that person alone, for requests kube-apiserver proxies with its
    /// front-proxy certificate (docs/homes.md).
    HomesApi(HomesApiArgs),
    /// Release every person before Homestead's CRDs are removed (an uninstall with
    /// `crds.keep=false`; the chart's pre-delete hook runs it): with the operator still
    /// running, deletes the `users.homestead.dev` CRD, so the operator releases every User as
    /// `Retain` (access revoked; namespace and data kept, labelled
    /// `homestead.dev/retained-from`), and waits until the CRD is gone. Refuses (exit 1) when
    /// no operator leads: the CRD's deletion would then wait on every User's finalizer.
    Release(ReleaseArgs),
    /// Share a home (`kubectl homestead share`): creates a Share in the namespace for the
    /// grantees, role and time given, with `homestead.dev/created-by` set to whoever the API
    /// server says you are (a SelfSubjectReview), as the admission policy requires. Only
    /// Homestead turns it into access, within the limits in force (docs/sharing.md). Exits 1
    /// if the API server refuses it (the message names the rule).
    Share(ShareArgs),
    /// Create a workspace of your own (`kubectl homestead workspace NAME --reason ...`): a
    /// Workspace owned by your User, labelled self-service and naming you as its creator, as the
    /// admission policy requires; Homestead provisions it within your Profile's
    /// `spec.workspaces` (docs/workspaces.md). Exits 1 if the API server refuses it.
    Workspace(WorkspaceArgs),
    /// What the Pods of `homestead doctor`'s network isolation check run (not for people).
    #[command(hide = true)]
    Probe(ProbeArgs),
}

impl Command {
    /// Whether the command reports to a person on stdout (and so logs on stderr), rather than
    /// serving until stopped.
    pub fn reports(&self) -> bool {
        !matches!(self, Self::Scim(_) | Self::HomesApi(_) | Self::Probe(_))
    }
}

/// The name under which kubectl runs this binary as a plugin: installed on the `PATH` as
/// `kubectl-homestead` (a copy or a link, or by krew from `plugins/homestead.yaml`), it answers
/// `kubectl homestead import ...` and `kubectl homestead access ...`
/// (<https://kubernetes.io/docs/tasks/extend-kubectl/kubectl-plugins/>).
pub const KUBECTL_PLUGIN: &str = "kubectl-homestead";

impl Cli {
    /// Parses the command line. Run as [`KUBECTL_PLUGIN`] (the name `program` was started by),
    /// the usage says `kubectl homestead` and a command is required: a person's kubectl never
    /// starts the operator, which is what no command means to `homestead`. Exits with clap's
    /// usage message on bad arguments, as [`Parser::parse`] does.
    pub fn parse_as(program: &std::path::Path) -> Self {
        if program.file_name() != Some(std::ffi::OsStr::new(KUBECTL_PLUGIN)) {
            return Self::parse();
        }
        let command = Self::command()
            .bin_name("kubectl homestead")
            .subcommand_required(true)
            .arg_required_else_help(true);
        Self::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }
}

/// `homestead homes-api`.
#[derive(Debug, clap::Args)]
pub struct HomesApiArgs {
    /// Where to serve HTTPS.
    #[arg(long, env = "HOMESTEAD_HOMES_ADDRESS", default_value = "0.0.0.0:8443")]
    pub address: SocketAddr,
    /// The serving certificate (PEM), trusted by the APIService's `caBundle`.
    #[arg(long, env = "HOMESTEAD_HOMES_TLS_CERT")]
    pub tls_cert: std::path::PathBuf,
    /// Its private key (PEM).
    #[arg(long, env = "HOMESTEAD_HOMES_TLS_KEY")]
    pub tls_key: std::path::PathBuf,
    /// Address of the plain HTTP server for /metrics, /healthz and /readyz (ready once the
    /// caches are listed).
    #[arg(
        long,
        env = "HOMESTEAD_HOMES_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: SocketAddr,
    /// What a client that never authenticates can hold: connections, time, header bytes.
    #[command(flatten)]
    pub bounds: ConnectionBounds,
}

/// `homestead scim`.
#[derive(Debug, clap::Args)]
pub struct ScimArgs {
    /// Address to serve SCIM on (`/scim/v2`), with `/healthz` and `/readyz` beside it.
    #[arg(long, env = "HOMESTEAD_SCIM_ADDRESS", default_value = "0.0.0.0:8443")]
    pub address: SocketAddr,

    /// File of accepted bearer tokens, one per line (several allow rotation; `#` comments).
    /// Re-read every `--reload-interval`, so a rotated Secret takes effect without a restart.
    #[arg(long, env = "HOMESTEAD_SCIM_TOKEN_FILE")]
    pub token_file: std::path::PathBuf,

    /// PEM certificate chain served for TLS. Re-read with the key every `--reload-interval`.
    #[arg(long, env = "HOMESTEAD_SCIM_TLS_CERT")]
    pub tls_cert: std::path::PathBuf,

    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "HOMESTEAD_SCIM_TLS_KEY")]
    pub tls_key: std::path::PathBuf,

    /// How often the token file, certificate and key are re-read: a number with a unit, `s`,
    /// `m`, `h` or `d`; more than 0. A change takes effect at the next read; a file that is
    /// unreadable, holds no token or does not load keeps what is in force, with a warning.
    #[arg(long, env = "HOMESTEAD_SCIM_RELOAD_INTERVAL", default_value = "30s", value_parser = parse_positive_duration)]
    pub reload_interval: std::time::Duration,

    /// `spec.profile` of every User created over SCIM. Unset: none (the operator's
    /// `--default-profile` applies).
    #[arg(long, env = "HOMESTEAD_SCIM_PROFILE")]
    pub profile: Option<String>,

    /// The largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, env = "HOMESTEAD_SCIM_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// What a client that never authenticates can hold: connections, time, header bytes.
    #[command(flatten)]
    pub bounds: ConnectionBounds,

    /// The base URL clients reach the service at, up to `/scim/v2` (for `meta.location`).
    /// Default: `https://<Host header>/scim/v2`.
    #[arg(long, env = "HOMESTEAD_SCIM_BASE_URL")]
    pub base_url: Option<String>,
}

/// The bounds of a server that faces the network (`homestead scim`, `homestead homes-api`), in
/// force before any request is read, so before its caller is authenticated
/// (docs/security.md, "What an unauthenticated client can hold").
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionBounds {
    /// The most connections open at once (a count); one more is closed as it is accepted,
    /// before TLS and before any credential is checked (`homestead_*_connections_refused_total`).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_connections: u16,

    /// How long a connection may take for its TLS handshake, and then for each request's
    /// headers, including the wait for the next request on a kept-alive connection (so also
    /// the idle timeout): a number with a unit, `s`, `m`, `h` or `d`; more than 0. For the
    /// homes API also how long a connection without the front proxy's certificate lives,
    /// from its handshake (the front proxy's HTTP/2 connection has no idle timeout).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub header_read_timeout: std::time::Duration,

    /// The largest request line and headers accepted, in bytes (larger ones get 431), from
    /// 8192 to 65536.
    #[arg(long, default_value_t = 16 * 1024, value_parser = clap::value_parser!(u32).range(8192..=65536))]
    pub max_header_bytes: u32,
}

impl PolicyArgs {
    /// The reconciler configuration these flags describe.
    ///
    /// # Errors
    /// When `cluster-admin` is in the allow-list (Homestead never grants it), or an
    /// `--allowed-namespace` pattern is not a valid pattern.
    pub fn config(&self) -> anyhow::Result<Config> {
        anyhow::ensure!(
            !self.allowed_roles.iter().any(|r| r == "cluster-admin"),
            "--allowed-role cluster-admin is refused: Homestead never grants cluster-wide administration"
        );
        anyhow::ensure!(
            self.pod_security_enforce != PodSecurityLevel::Privileged,
            "--pod-security-enforce privileged is refused: the admission policy \
             homestead-operator-bounds refuses the operator a Namespace that enforces it \
             (baseline or restricted; warn and audit may be any level)"
        );
        let (homes, workspaces) = (&self.namespace_prefix, &self.workspace_prefix);
        anyhow::ensure!(
            !workspaces.is_empty()
                && !workspaces.starts_with(homes.as_str())
                && !homes.starts_with(workspaces.as_str()),
            "--workspace-prefix {workspaces:?} must be non-empty and neither start nor be the start \
             of --namespace-prefix {homes:?}: the prefixes keep workspaces and people's homes apart"
        );
        let patterns = if self.allowed_namespaces.is_empty() {
            vec![format!("{}*", self.namespace_prefix)]
        } else {
            self.allowed_namespaces.clone()
        };
        let allowed_namespaces = patterns
            .iter()
            .map(|p| glob::Pattern::new(p).with_context(|| format!("--allowed-namespace {p:?}")))
            .collect::<anyhow::Result<_>>()?;
        Ok(Config {
            namespace_prefix: self.namespace_prefix.clone(),
            workspace_prefix: self.workspace_prefix.clone(),
            allowed_namespaces,
            reserved_keys: self.reserved_keys.clone(),
            pod_security: PodSecurity {
                enforce: self.pod_security_enforce,
                warn: self.pod_security_warn,
                audit: self.pod_security_audit,
            },
            allowed_roles: self.allowed_roles.iter().cloned().collect(),
            reserved_namespaces: self
                .reserved_namespaces
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>(),
            operator_namespace: self.operator_namespace.clone(),
            default_profile: self.default_profile.clone(),
            expiry_warning: self.expiry_warning,
            sharing: SharingDefaults {
                enabled: self.share_enabled,
                max_role: self.share_max_role.clone(),
                max_duration: self.share_max_duration,
                groups: self.share_groups,
            },
            revoke_adopted_role_bindings: self.revoke_adopted_role_bindings,
        })
    }
}

impl RuntimeArgs {
    /// Installs the global `tracing` subscriber: JSON or text lines, filtered by `RUST_LOG` if
    /// set, else by `--log-level`; on stderr for a `command` that reports on stdout (import,
    /// access, adopt, doctor, release: their `-o json|yaml` stays parseable), on stdout for the
    /// servers (the operator, `scim`, `homes-api`, whose output is their log).
    pub fn init_tracing(&self, command: Option<&Command>) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&self.log_level));
        let reports = command.is_some_and(Command::reports);
        let writer = move || -> Box<dyn std::io::Write> {
            if reports {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::stdout())
            }
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer);
        match self.log_format {
            LogFormat::Json => builder.json().init(),
            LogFormat::Text => builder.init(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::{Cli, OperatorCli};

    #[test]
    fn durations_take_a_unit_and_intervals_are_positive() {
        let cli = OperatorCli::try_parse_from([
            "homestead-operator",
            "--expiry-warning=36h",
            "--retained-count-interval=2m",
        ])
        .unwrap();
        assert_eq!(cli.policy.expiry_warning, Duration::from_secs(36 * 3_600));
        assert_eq!(
            cli.runtime.retained_count_interval,
            Duration::from_secs(120)
        );
        let defaults = OperatorCli::try_parse_from(["homestead-operator"]).unwrap();
        assert_eq!(
            defaults.policy.expiry_warning,
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(
            defaults.runtime.retained_count_interval,
            Duration::from_secs(60)
        );
        for bad in [
            "--expiry-warning=14",
            "--expiry-warning=d",
            "--expiry-warning=2w",
        ] {
            let error = OperatorCli::try_parse_from(["homestead-operator", bad]).unwrap_err();
            assert!(
                error.to_string().contains("is not a duration"),
                "{bad}: {error}"
            );
        }
        let error =
            OperatorCli::try_parse_from(["homestead-operator", "--retained-count-interval=0s"])
                .unwrap_err();
        assert!(error.to_string().contains("more than 0"), "{error}");
    }

    /// The chart's schema allows 1-65535 reconciles at once; so does the flag (0 would be
    /// unbounded to kube-runtime).
    #[test]
    fn concurrency_is_bounded_as_the_charts_schema_says() {
        let error =
            OperatorCli::try_parse_from(["homestead-operator", "--concurrency=0"]).unwrap_err();
        assert!(error.to_string().contains("not in 1..=65535"), "{error}");
        let cli = OperatorCli::try_parse_from(["homestead-operator", "--concurrency=1"]).unwrap();
        assert_eq!(cli.runtime.concurrency, 1);
    }

    /// Both command lines are well formed (clap's own checks: no two flags with one name, every
    /// default parses, ...), and the chart's and `manifests/`'s operator Deployments run the
    /// operator's binary where the image puts it.
    #[test]
    fn both_binaries_command_lines_hold_and_the_pods_find_the_operator() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
        OperatorCli::command().debug_assert();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        let command = r#"command: ["/usr/local/bin/homestead-operator"]"#;
        for deployment in [
            "charts/homestead/templates/deployment.yaml",
            "manifests/deployment.yaml",
        ] {
            assert!(read(deployment).contains(command), "{deployment}");
        }
        assert!(
            read("tools/image/build.sh")
                .contains(r#""$operator" "$root/usr/local/bin/homestead-operator""#)
        );
        assert!(
            read("Dockerfile")
                .contains("target/release/homestead-operator /usr/local/bin/homestead-operator")
        );
    }

    /// `homestead` without a command runs the operator `homestead-operator` runs, with the same
    /// flags; with a command, the operator's logging flags still apply, before it.
    #[test]
    fn homestead_takes_the_operators_flags() {
        let flags = ["--concurrency=3", "--log-format=text", "--lease-name=l"];
        let cli = Cli::try_parse_from(std::iter::once("homestead").chain(flags)).unwrap();
        let alone = OperatorCli::try_parse_from(std::iter::once("homestead-operator").chain(flags))
            .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(format!("{:?}", cli.operator), format!("{alone:?}"));
        assert_eq!(cli.operator.runtime.concurrency, 3);
        assert_eq!(cli.operator.election.lease_name, "l");
        let scim = Cli::try_parse_from([
            "homestead",
            "--log-format=text",
            "scim",
            "--token-file=t",
            "--tls-cert=c",
            "--tls-key=k",
        ])
        .unwrap();
        assert!(matches!(scim.command, Some(super::Command::Scim(_))));
        assert!(matches!(
            scim.operator.runtime.log_format,
            super::LogFormat::Text
        ));
    }

    /// The flags' defaults are [`Config::default`] (both from the `DEFAULT_*` constants), so a
    /// unit test's configuration is the one an operator started without flags runs with.
    #[test]
    fn the_flags_defaults_are_the_default_config() {
        let cli = OperatorCli::try_parse_from(["homestead-operator"]).unwrap();
        assert_eq!(
            cli.policy.config().unwrap(),
            homestead_reconciler::Config::default()
        );
        let refused = OperatorCli::try_parse_from([
            "homestead-operator",
            "--allowed-role=admin,cluster-admin",
        ])
        .unwrap()
        .policy
        .config()
        .unwrap_err();
        assert!(
            refused.to_string().contains("cluster-admin is refused"),
            "{refused}"
        );
    }

    /// The chart's `values.yaml` passes every operator and SCIM flag explicitly; its defaults
    /// must be the flags' own, so an install by Helm and one from `manifests/` (which passes
    /// few flags) behave alike.
    /// The operator's arguments in the plain install (rendered from the chart by `just
    /// generate`) parse, and give the flags' defaults: a flag the chart passes in a form clap
    /// refuses (say `--share-enabled` without `=true`) would crash every operator Pod.
    #[test]
    fn the_deployments_arguments_parse() {
        let manifests = include_str!("../../../manifests/deployment.yaml");
        let args: Vec<String> = manifests
            .lines()
            .skip_while(|l| l.trim() != "args:")
            .skip(1)
            .map_while(|l| l.trim().strip_prefix("- ").map(str::to_owned))
            .collect();
        assert!(args.iter().any(|a| a.starts_with("--share-")), "{args:?}");
        let cli = OperatorCli::try_parse_from(
            std::iter::once("homestead-operator".to_owned()).chain(args),
        )
        .expect("the Deployment's arguments parse");
        let defaults = OperatorCli::try_parse_from(["homestead-operator"]).unwrap();
        assert_eq!(
            cli.policy.config().unwrap().sharing,
            defaults.policy.config().unwrap().sharing
        );
    }

    #[test]
    fn the_charts_defaults_are_the_flags_defaults() {
        let values: serde_json::Value =
            serde_saphyr::from_str(include_str!("../../../charts/homestead/values.yaml")).unwrap();
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        let cli = OperatorCli::try_parse_from(["homestead-operator"]).unwrap();
        let operator = &values["operator"];
        assert_eq!(
            operator["namespacePrefix"],
            cli.policy.namespace_prefix.as_str()
        );
        assert_eq!(
            operator["workspacePrefix"],
            cli.policy.workspace_prefix.as_str()
        );
        assert_eq!(strings(&operator["reservedKeys"]), cli.policy.reserved_keys);
        assert_eq!(strings(&operator["allowedRoles"]), cli.policy.allowed_roles);
        assert_eq!(
            strings(&operator["allowedNamespaces"]),
            cli.policy.allowed_namespaces
        );
        assert_eq!(
            strings(&operator["reservedNamespaces"]),
            cli.policy.reserved_namespaces
        );
        assert_eq!(
            homestead_reconciler::plan::config::parse_duration(
                operator["expiryWarning"].as_str().unwrap()
            ),
            Ok(cli.policy.expiry_warning)
        );
        assert_eq!(
            homestead_reconciler::plan::config::parse_duration(
                operator["retainedCountInterval"].as_str().unwrap()
            ),
            Ok(cli.runtime.retained_count_interval)
        );
        let sharing = &operator["sharing"];
        assert_eq!(sharing["enabled"], cli.policy.share_enabled);
        assert_eq!(sharing["maxRole"], cli.policy.share_max_role.as_str());
        assert_eq!(sharing["groups"], cli.policy.share_groups);
        assert_eq!(
            operator["revokeAdoptedRoleBindings"],
            cli.policy.revoke_adopted_role_bindings
        );
        assert_eq!(
            homestead_reconciler::plan::config::parse_duration(
                sharing["maxDuration"].as_str().unwrap()
            ),
            Ok(cli.policy.share_max_duration)
        );
        let levels = &operator["podSecurity"];
        for (value, flag) in [
            (&levels["enforce"], cli.policy.pod_security_enforce),
            (&levels["warn"], cli.policy.pod_security_warn),
            (&levels["audit"], cli.policy.pod_security_audit),
        ] {
            assert_eq!(value.as_str().unwrap().parse(), Ok(flag));
        }
        assert_eq!(operator["defaultProfile"], "", "no default Profile");
        assert_eq!(cli.policy.default_profile, None);
        assert_eq!(operator["logFormat"], "json");
        assert!(matches!(cli.runtime.log_format, super::LogFormat::Json));
        assert_eq!(operator["logLevel"], cli.runtime.log_level.as_str());
        assert!(
            operator["concurrency"].is_null(),
            "null: the chart leaves --concurrency to the operator"
        );

        let scim = Cli::try_parse_from([
            "homestead",
            "scim",
            "--token-file=t",
            "--tls-cert=c",
            "--tls-key=k",
        ])
        .unwrap();
        let Some(super::Command::Scim(scim)) = scim.command else {
            panic!("not the scim command");
        };
        let values = &values["scim"];
        assert_eq!(
            values["maxBodyBytes"].as_u64(),
            u64::try_from(scim.max_body_bytes).ok()
        );
        assert_eq!(values["profile"], "");
        assert_eq!(scim.profile, None);
        assert_eq!(values["baseUrl"], "");
        assert_eq!(scim.base_url, None);
        assert_eq!(
            homestead_reconciler::plan::config::parse_duration(
                values["reloadInterval"].as_str().unwrap()
            ),
            Ok(scim.reload_interval)
        );
    }
}
