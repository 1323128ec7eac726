//! The command-line arguments of the admin commands (clap `Args`): the binary puts each under
//! its subcommand, and every command reads only its own.

use std::net::SocketAddr;

use clap::{Subcommand, ValueEnum};
use homestead_directory::import::PruneLimit;
use homestead_reconciler::plan::config::parse_duration;

/// `homestead release`.
#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The cluster, as a platform administrator (or the chart's hook identity: delete the
    /// `users.homestead.dev` CRD, list Users, read the Lease).
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Where the operator runs.
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// How long to wait for every User to be released: a number with a unit, `s`, `m` or `h`.
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    pub timeout: std::time::Duration,
}

/// Where the operator runs, for the commands that look at it (`doctor`, `release`).
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// The namespace the operator runs in.
    #[arg(long, default_value = "homestead-system")]
    pub operator_namespace: String,

    /// The prefix of the install's objects (the chart's `fullnameOverride`, else `homestead`):
    /// the admission policies `<fullname>-*`, the Deployment `<fullname>`, and by default the
    /// ServiceAccount `<fullname>` and the Lease `<fullname>-leader`.
    #[arg(long, default_value = "homestead")]
    pub fullname: String,

    /// The operator's ServiceAccount in `--operator-namespace` (the chart's
    /// `operator.serviceAccount.name`). Default: `--fullname`.
    #[arg(long)]
    pub service_account: Option<String>,

    /// The operator's leader-election Lease there (its `--lease-name`). Default:
    /// `<fullname>-leader`.
    #[arg(long)]
    pub lease_name: Option<String>,
}

impl OperatorArgs {
    /// The operator's username, as the API server authenticates its ServiceAccount.
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.operator_namespace,
            self.service_account.as_deref().unwrap_or(&self.fullname)
        )
    }

    /// The Lease the leader renews.
    pub fn lease(&self) -> String {
        self.lease_name
            .clone()
            .unwrap_or_else(|| format!("{}-leader", self.fullname))
    }
}

/// The port `homestead probe serve` listens on by default.
pub const PROBE_PORT: u16 = 8080;

/// `homestead probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ProbeAction,
}

/// `homestead probe serve` and `homestead probe connect`.
#[derive(Debug, Subcommand)]
pub enum ProbeAction {
    /// Accept TCP connections and greet each, until stopped.
    Serve {
        /// The port to listen on (every address).
        #[arg(long, default_value_t = PROBE_PORT)]
        port: u16,
    },
    /// Try an address once a second until the outcome is the one wanted or time is up; exit 0
    /// when it was, 1 when not.
    Connect {
        /// Where a `probe serve` may listen (IP:port).
        address: SocketAddr,
        /// The outcome wanted.
        #[arg(long)]
        want: ProbeWant,
        /// How long to keep trying, in seconds.
        #[arg(long, default_value_t = 30)]
        within_seconds: u64,
    },
}

/// What `homestead probe connect` wants to see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProbeWant {
    /// The server greets.
    Reached,
    /// Several attempts in a row fail (a NetworkPolicy holds).
    Blocked,
}

/// Which cluster a command for people (`import`, `access`) talks to, chosen as kubectl chooses
/// it: `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else the Pod's own
/// ServiceAccount; `--context`, else the kubeconfig's current context.
#[derive(Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// The kubeconfig file to use.
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// A client for the cluster these flags choose.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read, has no such context, or no configuration is found.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        use anyhow::Context as _;
        let config = self.config().await?;
        kube::Client::try_from(config).context("connecting to the Kubernetes API server")
    }

    /// The client configuration these flags choose: the kubeconfig file and context given, or
    /// else the in-cluster configuration or `$KUBECONFIG` (`kube::Config::infer`).
    ///
    /// # Errors
    /// When the kubeconfig cannot be read, has no such context, or no configuration is found.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        use anyhow::Context as _;
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options).await
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options).await,
            (None, None) => {
                return kube::Config::infer()
                    .await
                    .context("loading the Kubernetes client configuration");
            }
        }
        .context("loading the kubeconfig")?;
        Ok(config)
    }
}

/// `homestead share`.
#[derive(Debug, clap::Args)]
pub struct ShareArgs {
    /// The cluster, as the person sharing (their own kubeconfig, or `--as`).
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Act as this identity (impersonation, as `kubectl --as`; needs the right to impersonate).
    #[arg(long = "as")]
    pub impersonate: Option<String>,

    /// The Share's name (at most 63 characters: lower-case letters, digits and `-`).
    pub name: String,

    /// The home to share (a namespace).
    #[arg(long, short = 'n')]
    pub namespace: String,

    /// A grantee: `user:<User>` or `group:<DirectoryGroup>` (by `metadata.name`); repeat for
    /// more, 1 to 20.
    #[arg(long = "to", required = true, value_parser = parse_grantee)]
    pub to: Vec<homestead_api::Grantee>,

    /// The ClusterRole shared: one the operator allows, at most the sharing limit.
    #[arg(long, default_value = "view")]
    pub role: String,

    /// How long the access lasts from now: a number with a unit, `s`, `m`, `h` or `d`; at most
    /// the sharing limit's `maxDuration`. `spec.expiresAt` is now plus this, to the second.
    #[arg(long = "for", value_parser = parse_positive_duration)]
    pub duration: std::time::Duration,

    /// Why (at most 256 characters; shown by `homestead access`).
    #[arg(long)]
    pub reason: String,

    /// Ask the API server to check the Share (admission included) and write nothing.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub dry_run: bool,

    /// How to print the created Share: one line (`table`), or the whole object as JSON or YAML.
    #[arg(long, short = 'o', value_enum, default_value_t = AccessFormat::Table)]
    pub output: AccessFormat,
}

/// `homestead workspace`.
#[derive(Debug, clap::Args)]
pub struct WorkspaceArgs {
    /// The cluster, as the person (their own kubeconfig, or `--as`).
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Act as this identity (impersonation, as `kubectl --as`; needs the right to impersonate).
    #[arg(long = "as")]
    pub impersonate: Option<String>,

    /// The Workspace's name (at most 63 characters: lower-case letters, digits and `-`); its
    /// namespace is `<workspace prefix><name>` (`ws-<name>` by default).
    pub name: String,

    /// Why (at most 256 characters; shown by `homestead access`).
    #[arg(long)]
    pub reason: String,

    /// The owner: your own User (by `metadata.name`); default: the User the homes API names
    /// for you.
    #[arg(long)]
    pub owner: Option<String>,

    /// A Profile your Profile lets you choose (its `spec.workspaces.profiles`); default: yours.
    #[arg(long)]
    pub profile: Option<String>,

    /// Delete the namespace and its data with the Workspace (`deletionPolicy: Delete`); by
    /// default they are kept (`Retain`).
    #[arg(long, default_value_t = false)]
    pub delete_with_it: bool,

    /// Ask the API server to check the Workspace (admission included) and write nothing.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub dry_run: bool,

    /// How to print the created Workspace: one line (`table`), or the whole object as JSON or YAML.
    #[arg(long, short = 'o', value_enum, default_value_t = AccessFormat::Table)]
    pub output: AccessFormat,
}

/// A `--to` value: `user:<name>` or `group:<name>`.
///
/// # Errors
/// When the value has neither prefix, or an empty name.
pub fn parse_grantee(text: &str) -> Result<homestead_api::Grantee, String> {
    let (kind, name) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: a grantee is user:<User> or group:<DirectoryGroup>"))?;
    let name = (!name.is_empty())
        .then(|| name.to_owned())
        .ok_or_else(|| format!("{text:?}: the name after {kind}: is empty"))?;
    match kind {
        "user" => Ok(homestead_api::Grantee {
            user: Some(name),
            group: None,
        }),
        "group" => Ok(homestead_api::Grantee {
            user: None,
            group: Some(name),
        }),
        _ => Err(format!(
            "{text:?}: a grantee is user:<User> or group:<DirectoryGroup>"
        )),
    }
}

/// `homestead access`.
#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Only the accesses of this person (a User's `metadata.name`).
    #[arg(long)]
    pub user: Option<String>,

    /// Only the accesses to this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,

    /// How to print: an aligned table, CSV (RFC 4180, with a header) or a JSON array.
    #[arg(long, short = 'o', value_enum, default_value_t = AccessFormat::Table)]
    pub output: AccessFormat,
}

/// `homestead adopt`.
#[derive(Debug, clap::Args)]
pub struct AdoptArgs {
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// The CSV: a header naming the columns `namespace` and `user` (a User's `metadata.name`),
    /// then a row per namespace; `-` reads standard input.
    pub file: std::path::PathBuf,

    /// Print what adoption would find and change, and write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// How to print: an aligned table, CSV (RFC 4180, with a header) or a JSON array.
    #[arg(long, short = 'o', value_enum, default_value_t = AccessFormat::Table)]
    pub output: AccessFormat,
}

/// `homestead doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The cluster, as a platform administrator (it reads CRDs, admission policies and Users,
    /// and impersonates the operator's ServiceAccount for a server-side dry run).
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Where the operator runs (its ServiceAccount `homestead` and its Lease).
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// A kubeconfig of one person with a User (their own credentials, as they sign in): the
    /// identity mapping check asks the API server who they are (SelfSubjectReview) and looks
    /// for a User binding exactly that username.
    #[arg(long)]
    pub person_kubeconfig: Option<std::path::PathBuf>,

    /// Homestead's image, for the Pods that try network isolation with real traffic when a
    /// Profile isolates (two namespaces `homestead-doctor-*`, removed afterwards). Default: the
    /// image of the operator's Deployment `homestead` in --operator-namespace.
    #[arg(long)]
    pub probe_image: Option<String>,

    /// How to print the checks: a line each with its fix (`table`), or a JSON or YAML list of
    /// `{name, verdict, found, fix}`. CSV prints as `table`.
    #[arg(long, short = 'o', value_enum, default_value_t = AccessFormat::Table)]
    pub output: AccessFormat,
}

/// The output formats of the commands that report (`access`, `adopt`, `share`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccessFormat {
    /// Aligned columns with a header.
    Table,
    /// CSV with a header; cells that a spreadsheet would take for a formula start with `'`.
    Csv,
    /// A JSON array of rows.
    Json,
    /// A YAML sequence of rows.
    Yaml,
}

/// `homestead import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// The roster: CSV with a header naming the columns name, username (both required), email,
    /// displayName, givenName, familyName, profile, role, groups (separated by `;`) and
    /// validUntil (RFC 3339).
    pub roster: std::path::PathBuf,

    /// The roster's name, set on every User as the label `homestead.dev/roster-source`; prune
    /// considers only Users of the same source. Required with `--prune suspend|delete` (a
    /// date-stamped file name would never match the last import's); otherwise the file's name.
    #[arg(long, required_if_eq_any([("prune", "suspend"), ("prune", "delete")]))]
    pub source: Option<String>,

    /// Print what would be created, changed, left alone and pruned, each write validated by the
    /// API server (server-side dry run), and write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// What happens to Users of this source that are no longer in the roster: left alone,
    /// suspended (access revoked, data kept) or deleted (offboarded per their deletionPolicy).
    #[arg(long, value_enum, default_value_t = PruneMode::None)]
    pub prune: PruneMode,

    /// The most Users one import prunes without `--allow-mass-prune` (count).
    #[arg(long, default_value_t = PruneLimit::default().max_count)]
    pub max_prune: usize,

    /// The largest share of the source's Users one import prunes without
    /// `--allow-mass-prune` (percent, 0-100; more than one User).
    #[arg(long, default_value_t = PruneLimit::default().max_percent, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub max_prune_percent: u8,

    /// Confirms a prune over `--max-prune` or `--max-prune-percent` of up to N Users (the
    /// refusal says how many it would be). Without it such an import writes nothing.
    #[arg(long, value_name = "N")]
    pub allow_mass_prune: Option<usize>,

    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
}

/// `--prune`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PruneMode {
    /// Leave them.
    None,
    /// Suspend them.
    Suspend,
    /// Delete them.
    Delete,
}

/// [`parse_duration`], refusing zero (a period of zero would make a busy loop).
///
/// # Errors
/// As [`parse_duration`], and when the duration is zero.
pub fn parse_positive_duration(text: &str) -> Result<std::time::Duration, String> {
    match parse_duration(text)? {
        std::time::Duration::ZERO => Err(format!("{text:?}: the interval must be more than 0")),
        period => Ok(period),
    }
}
