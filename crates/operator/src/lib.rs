//! `homestead`: the library behind Homestead's two binaries, which parse the command line and
//! wire the libraries.
//!
//! - `homestead` ([`homestead()`]): every command. The operator (`homestead-reconciler`, with
//!   leader election and the health and metrics server) when given none, `homestead scim`
//!   (`homestead-directory`), `homestead homes-api` (`homestead-homes-api`), and the admin
//!   commands (`homestead-admin`; also `kubectl homestead ...` when installed as
//!   `kubectl-homestead`).
//! - `homestead-operator` ([`operator()`]): the operator alone, with the operator's flags, which
//!   the chart's operator Pods run. Its binary holds none of the other commands' code: the
//!   kernel keeps nearly all of a binary's code resident in each process that runs it, so that
//!   code would count in every replica's memory (docs/performance.md, "One binary for the
//!   operator").

#[cfg(feature = "jemalloc")]
mod allocator;
mod cli;
mod client;
mod connections;
mod homes;
mod leadership;
mod operator;
mod scim;
mod server;

use std::process::ExitCode;

use homestead_admin as admin;

/// jemalloc returns freed memory to the system within seconds (its decay), where glibc's
/// allocator keeps what the initial lists needed: see docs/performance.md. Without the
/// `jemalloc` feature (on by default) the system allocator serves, for heap profilers.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Runs `homestead` with this process's command line: the command it names, or the operator
/// when it names none, until it is done or stopped (SIGTERM or SIGINT for the servers).
/// Bad arguments exit the process with clap's usage message and code 2.
///
/// One thread runs every task (tokio's current-thread runtime): the operator needs a tenth of a
/// core at 10,000 Users, and tokio's multi-threaded runtime spent about a third of its CPU
/// waking and parking its worker threads (docs/performance.md). Nothing here blocks a thread.
/// The homes API alone gets a worker per core: it answers many people at once, each over TLS.
///
/// # Errors
/// Whatever the command returns: unreachable API server, bad flags it checks itself, an
/// address in use; the operator's as [`operator()`] says.
pub fn homestead() -> anyhow::Result<ExitCode> {
    let program = std::env::args_os().next().unwrap_or_default();
    let mut cli = cli::Cli::parse_as(std::path::Path::new(&program));
    cli.operator.runtime.init_tracing(cli.command.as_ref());
    let command = cli.command.take();
    let mut runtime = match command {
        Some(cli::Command::HomesApi(_)) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async move {
        match command {
            Some(cli::Command::Import(args)) => admin::import::run(args).await,
            Some(cli::Command::Access(args)) => admin::access::run(args).await,
            Some(cli::Command::Adopt(args)) => admin::adopt::run(args).await,
            Some(cli::Command::Doctor(args)) => admin::doctor::run(args).await,
            Some(cli::Command::Probe(args)) => admin::probe::run(args).await,
            Some(cli::Command::Release(args)) => admin::release::run(args).await,
            Some(cli::Command::Share(args)) => admin::share::run(args).await,
            Some(cli::Command::Workspace(args)) => admin::workspace::run(args).await,
            Some(cli::Command::HomesApi(args)) => {
                homes::run(args).await.map(|()| ExitCode::SUCCESS)
            }
            Some(cli::Command::Scim(args)) => scim::run(args).await.map(|()| ExitCode::SUCCESS),
            None => operator::run(cli.operator)
                .await
                .map(|()| ExitCode::SUCCESS),
        }
    })
}

/// Runs `homestead-operator` with this process's command line: the operator (the flags of
/// `homestead` without a command), on one thread as [`homestead()`] runs it, until SIGTERM or
/// SIGINT (then `Ok`). Bad arguments exit the process with clap's usage message and code 2.
///
/// # Errors
/// Bad flags, the metrics address already in use, no reachable API server, a failed Lease
/// manager, or lost leadership (so the Pod restarts with fresh state rather than reconcile
/// beside a new leader).
pub fn operator() -> anyhow::Result<ExitCode> {
    let cli = <cli::OperatorCli as clap::Parser>::parse();
    cli.runtime.init_tracing(None);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(operator::run(cli))
        .map(|()| ExitCode::SUCCESS)
}

#[cfg(all(test, feature = "jemalloc"))]
mod tests {
    use tikv_jemalloc_ctl::opt;

    /// `.cargo/config.toml` embeds jemalloc's options at build time (docs/performance.md,
    /// "Memory"); a typo there would only print a warning on stderr and leave the defaults.
    #[test]
    fn jemalloc_runs_with_the_options_the_repository_embeds() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return; // Overridden at run time on purpose.
        }
        assert!(opt::background_thread::read().unwrap());
        assert_eq!(opt::narenas::read().unwrap(), 1);
        assert_eq!(opt::tcache_max::read().unwrap(), 1024);
    }
}
