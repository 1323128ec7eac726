//! `homestead-testenv up`: runs the local control plane in the foreground until SIGINT or
//! SIGTERM, for `just up` / `just down`. It writes, into the state directory (default
//! `.homestead`): `admin.kubeconfig`, `operator.kubeconfig`, `scim.kubeconfig` and
//! `homes-api.kubeconfig`, and `alice.kubeconfig` (the sample person `alice@example.com` with a
//! token of her own, as she would sign in; `homestead doctor --person-kubeconfig`); for the SCIM
//! service `scim-ca.crt`, `scim-tls.crt`, `scim-tls.key` and a bearer token in `scim-token`;
//! `bin` (a symlink to the
//! directory with the matching `kubectl`), `testenv.pid`, `testenv.dir` (the control plane's
//! directory with its logs), and `ready` once the API server is ready. With `--node` it also
//! starts the node (root only) and writes `node.dir` (the node's directory, with containerd's
//! socket) and `toolbox.ref` (the test image's reference); when the node cannot start, it says
//! why in one line (`node.error`) and goes on without it, unless `--require-node` is given.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use homestead_testenv::{
    ADMIN, ControlPlane, HOMES_API, Identity, OPERATOR, Options, SCIM, scim_credentials,
};

/// The sample person (manifests/samples/) who gets a token of her own.
const ALICE: &str = "alice@example.com";

#[derive(Parser)]
#[command(about = "Run Homestead's local Kubernetes control plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start etcd, kube-apiserver and kube-controller-manager and keep them running.
    Up {
        /// Where to write kubeconfigs, the pid file and the ready marker.
        #[arg(long, default_value = ".homestead")]
        state_dir: PathBuf,
        /// Also start a node (containerd, kubelet, kube-proxy, kube-router), so Pods run.
        #[arg(long)]
        node: bool,
        /// With --node: fail instead of going on without the node when it cannot start.
        #[arg(long, requires = "node")]
        require_node: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let Command::Up {
        state_dir,
        node,
        require_node,
    } = Cli::parse().command;
    std::fs::create_dir_all(&state_dir)?;
    let ready = state_dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    std::fs::write(
        state_dir.join("testenv.pid"),
        std::process::id().to_string(),
    )?;

    let plane = start(&state_dir, node, require_node).await?;
    if let Some(node) = plane.node() {
        std::fs::write(state_dir.join("node.dir"), node.dir().display().to_string())?;
        std::fs::write(state_dir.join("toolbox.ref"), node.toolbox_image()?)?;
    }
    plane.write_kubeconfig(ADMIN, &state_dir.join("admin.kubeconfig"))?;
    plane.write_kubeconfig(OPERATOR, &state_dir.join("operator.kubeconfig"))?;
    plane.write_kubeconfig(SCIM, &state_dir.join("scim.kubeconfig"))?;
    plane.write_kubeconfig(HOMES_API, &state_dir.join("homes-api.kubeconfig"))?;
    plane.write_kubeconfig(ALICE, &state_dir.join("alice.kubeconfig"))?;
    scim_credentials(&state_dir)?;
    let bin = state_dir.join("bin");
    let _ = std::fs::remove_file(&bin);
    std::os::unix::fs::symlink(plane.bin_dir(), &bin)?;
    std::fs::write(
        state_dir.join("testenv.dir"),
        plane.dir().display().to_string(),
    )?;
    std::fs::write(&ready, plane.server())?;
    tracing::info!(
        server = plane.server(),
        "control plane running; stop it with SIGTERM (just down)"
    );

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping the control plane");
    plane.stop();
    remove_state(&state_dir);
    Ok(())
}

/// Starts the control plane, with a node when `node` is set; when the node cannot start and
/// `require_node` is not set, starts without it and writes the first line of the reason to
/// `<state_dir>/node.error` (what `just up` prints).
async fn start(
    state_dir: &Path,
    node: bool,
    require_node: bool,
) -> Result<ControlPlane, Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(state_dir.join("node.error"));
    let options = || Options::default().identity(Identity::new(ALICE));
    if !node {
        return Ok(ControlPlane::start(options()).await?);
    }
    match ControlPlane::start(options().with_node()).await {
        Ok(plane) => Ok(plane),
        Err(e) if !require_node => {
            let reason = e.to_string();
            let first = reason.lines().next().unwrap_or_default();
            tracing::warn!(error = %reason, "starting without a node");
            std::fs::write(state_dir.join("node.error"), format!("{first}\n"))?;
            Ok(ControlPlane::start(options()).await?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes what `up` wrote into `state_dir`, once the control plane has stopped.
fn remove_state(state_dir: &Path) {
    for file in [
        "ready",
        "testenv.pid",
        "admin.kubeconfig",
        "operator.kubeconfig",
        "scim.kubeconfig",
        "homes-api.kubeconfig",
        "alice.kubeconfig",
        "scim-ca.crt",
        "scim-tls.crt",
        "scim-tls.key",
        "scim-token",
        "bin",
        "node.dir",
        "toolbox.ref",
    ] {
        let _ = std::fs::remove_file(state_dir.join(file));
    }
}
