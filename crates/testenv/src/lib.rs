//! A real local Kubernetes control plane for Homestead's integration tests, benchmarks and
//! `just up`: etcd, kube-apiserver (RBAC authorization, static token authentication, audit log)
//! and kube-controller-manager running the [`CONTROLLERS`] a real cluster needs for what
//! Homestead relies on: garbage collection, namespace deletion, aggregated `admin`/`edit`/`view`
//! roles, `default` ServiceAccounts and quota status.
//!
//! The binaries are built from the Go modules pinned in `tools/control-plane/` into a
//! version-keyed cache (`$HOMESTEAD_CACHE`, default `~/.cache/homestead`) and reused; a
//! `KUBEBUILDER_ASSETS` directory holding them is used instead when set (the envtest convention).
//!
//! Every process listens on a free 127.0.0.1 port, keeps its files in a fresh temporary directory,
//! and is stopped when the [`ControlPlane`] is dropped or the test process exits, including on a
//! panic (see [`process`]). Set `HOMESTEAD_TESTENV_KEEP=1` to keep the directory for inspection.

mod binaries;
mod certificates;
mod control_plane;
mod credentials;
mod error;
mod flags;
pub mod network;
pub mod node;
mod process;

pub use binaries::binaries;
pub use certificates::{
    APISERVER_KUBELET_CLIENT, ApiServerFiles, FRONT_PROXY_CLIENT, FrontProxyFiles,
    KubeletClientFiles,
};
pub use control_plane::{ControlPlane, NetworkPolicyPaused, Node, Options};
pub use credentials::{
    ADMIN, HOMES_API, Identity, OPERATOR, SCIM, ScimCredentials, kubeconfig, scim_credentials,
    scim_credentials_until, token_file,
};
pub use error::{Error, Result};
pub use flags::{
    CONTROLLERS, Ports, apiserver_args, controller_manager_args, etcd_args, free_port,
};
pub use node::{NODE_NAME, NodeTools, node_tools};
pub use process::Supervised;
