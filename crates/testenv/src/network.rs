//! The local cluster's network: the node's bridge and address, and the Pod and Service ranges
//! (constants the API server's certificate and flags name, and the node sets up).

/// The Linux bridge pods attach to.
pub const BRIDGE: &str = "homestead0";

/// The node's address on [`BRIDGE`]: the pods' gateway and the API server's advertised address.
pub const NODE_IP: &str = "10.244.0.1";

/// Pod addresses (the node's `spec.podCIDR`).
pub const POD_CIDR: &str = "10.244.0.0/24";

/// The cluster's pod range, of which the node gets [`POD_CIDR`].
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// Service ClusterIPs; the `kubernetes` Service gets `10.0.0.1`.
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
