//! `homestead`: the operator binary. Parses the command line and runs the operator; everything
//! else lives in the modules below and in the `homestead-reconciler` library.

mod cli;
mod leadership;
mod operator;
mod server;
mod watches;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli.init_tracing();
    operator::run(cli).await
}
