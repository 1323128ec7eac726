//! `homestead`: the binary. Parses the command line and wires the libraries: the operator
//! (`homestead-reconciler`, with leader election and the health and metrics server), `homestead
//! scim` (`homestead-directory`), `homestead homes-api` (`homestead-homes-api`), and the admin
//! commands (`homestead-admin`; also `kubectl homestead ...` when installed as
//! `kubectl-homestead`).

mod cli;
mod connections;
mod homes;
mod leadership;
mod operator;
mod scim;
mod server;

use homestead_admin as admin;

/// jemalloc returns freed memory to the system within seconds (its decay), where glibc's
/// allocator keeps what the initial lists needed: see docs/performance.md. Without the
/// `jemalloc` feature (on by default) the system allocator serves, for heap profilers.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// One thread runs every task (tokio's current-thread runtime): the operator needs a tenth of a
/// core at 10,000 Users, and tokio's multi-threaded runtime spent about a third of its CPU
/// waking and parking its worker threads (docs/performance.md). Nothing here blocks a thread.
/// The homes API alone gets a worker per core: it answers many people at once, each over TLS.
fn main() -> anyhow::Result<std::process::ExitCode> {
    let program = std::env::args_os().next().unwrap_or_default();
    let mut cli = cli::Cli::parse_as(std::path::Path::new(&program));
    cli.runtime.init_tracing(cli.command.as_ref());
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
            Some(cli::Command::HomesApi(args)) => homes::run(args)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
            Some(cli::Command::Scim(args)) => scim::run(args)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
            None => operator::run(cli)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
        }
    })
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
