//! What a kind must be to be watched and cached by the operator, the homes API or a command.

use kube::Resource;
use serde::de::DeserializeOwned;

/// What a kind must be for the operator (or the homes API) to watch it: a cluster-wide
/// [`Resource`] decoded from the API server's JSON, shared between tasks.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}
