//! Users and Shares as their caches keep them: each as a [`CompactStore`](crate::store)
//! record of its (trimmed) JSON, decoded when a reconcile, a trigger or a request reads it
//! (docs/performance.md, "Memory"). The operator's User cache and the homes API's caches of
//! Users and Shares are these.
//!
//! kube-runtime's reflector kept each User as an `Arc<User>`: 968 bytes inline (360 of them
//! `ObjectMeta`, fifteen fields, nearly all empty), its strings, and a 96-byte `ObjectRef`
//! key, about 1.6 KiB a User in a heap profile at 10,000. A [`Packed`] record is the object's
//! metadata, spec and status as one JSON array without the name and namespace (the key holds
//! them) and without what JSON leaves out of empty fields, a few hundred bytes. A reader
//! decodes the one object it needs, a few microseconds against the milliseconds of a request;
//! the operator's Controller over Users runs on keys, not on the cache's objects.

use homestead_api::{Share, ShareSpec, ShareStatus, User, UserSpec, UserStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::Compact;

/// An object as its cache keeps it: `[metadata, spec, status]` as JSON, `metadata.name` and
/// `metadata.namespace` left out.
pub struct Packed(Box<[u8]>);

/// `[metadata, spec, status]` of an object as JSON, without its name and namespace.
///
/// # Panics
/// Never in practice: a User or a Share always encodes as JSON (it came from JSON).
fn pack(metadata: &ObjectMeta, spec: &impl Serialize, status: &impl Serialize) -> Packed {
    let metadata = ObjectMeta {
        name: None,
        namespace: None,
        ..metadata.clone()
    };
    let json = serde_json::to_vec(&(&metadata, spec, status)).expect("an object encodes as JSON");
    Packed(json.into_boxed_slice())
}

/// The metadata, spec and status [`pack`] wrote, with the name and namespace put back.
///
/// # Panics
/// Never in practice: the record is JSON [`pack`] wrote from the same kind.
fn unpack<S: DeserializeOwned, T: DeserializeOwned>(
    namespace: Option<&str>,
    name: &str,
    record: &Packed,
) -> (ObjectMeta, S, T) {
    let (mut metadata, spec, status): (ObjectMeta, S, T) =
        serde_json::from_slice(&record.0).expect("a packed object decodes");
    metadata.name = Some(name.to_owned());
    metadata.namespace = namespace.map(str::to_owned);
    (metadata, spec, status)
}

/// `object` as its cache gives it back: through its record and back again. The one difference
/// from `object`: k8s-openapi writes a `Time` to the second, so a time with a fraction (a
/// `validUntil` from a client that writes one) comes back without it. A watch that compares each
/// event with the cached object compares what it keeps, or it would see a change in every event
/// of that object; and a `validUntil` so cut ends access up to a second early, never late.
pub fn as_kept<C: Compact>(object: &C) -> C {
    let (namespace, name) = object.namespace_and_name();
    C::from_record(namespace, name, &object.record())
}

impl Compact for User {
    type Record = Packed;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        (None, self.metadata.name.as_deref().unwrap_or_default())
    }

    fn record(&self) -> Packed {
        pack(&self.metadata, &self.spec, &self.status)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let (metadata, spec, status) =
            unpack::<UserSpec, Option<UserStatus>>(namespace, name, record);
        Self {
            metadata,
            spec,
            status,
        }
    }
}

impl Compact for Share {
    type Record = Packed;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        let meta = &self.metadata;
        (
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn record(&self) -> Packed {
        pack(&self.metadata, &self.spec, &self.status)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let (metadata, spec, status) =
            unpack::<ShareSpec, Option<ShareStatus>>(namespace, name, record);
        Self {
            metadata,
            spec,
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_user_comes_back_as_it_went_in_from_fewer_bytes_than_it_held_inline() {
        let user: User = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "User",
            "metadata": {
                "name": "ada", "uid": "0b6c2a4e-6f1e-4d7a-9a57-2b1f3c4d5e6f", "generation": 3,
                "creationTimestamp": "2026-11-01T09:00:00Z",
                "finalizers": [homestead_api::FINALIZER],
                "labels": { homestead_api::LABEL_WRITER: "scim" },
            },
            "spec": {
                "identity": { "username": "ada@example.com", "groups": ["eng"] },
                "profile": "standard", "validUntil": "2027-01-01T00:00:00Z",
            },
            "status": {
                "namespace": "user-ada", "observedGeneration": 3, "role": "edit",
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Provisioned",
                    "message": "namespace user-ada is ready", "observedGeneration": 3,
                    "lastTransitionTime": "2026-11-01T09:00:01Z",
                }],
            },
        }))
        .unwrap();
        let record = user.record();
        assert_eq!(User::from_record(None, "ada", &record), user);
        assert!(
            !String::from_utf8_lossy(&record.0).contains("\"ada\""),
            "the name is the key's, not the record's"
        );
        // Less than the User itself held inline, before any of its strings.
        assert!(
            record.0.len() < std::mem::size_of::<User>(),
            "{} bytes: {}",
            record.0.len(),
            String::from_utf8_lossy(&record.0)
        );
    }

    #[test]
    fn a_time_with_a_fraction_is_kept_to_the_second_and_compared_so() {
        let user: User = serde_json::from_value(json!({
            "metadata": { "name": "ada" },
            "spec": { "identity": { "username": "ada" }, "validUntil": "2027-01-01T00:00:00.5Z" },
        }))
        .unwrap();
        let kept = as_kept(&user);
        assert_ne!(kept, user, "the fraction is not kept");
        assert_eq!(
            kept.spec.valid_until.as_ref().unwrap().0.to_string(),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(User::from_record(None, "ada", &kept.record()), kept);
    }

    #[test]
    fn a_share_comes_back_in_its_namespace() {
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "name": "pairing", "namespace": "user-ada", "generation": 2 },
            "spec": {
                "to": [{ "user": "bob" }], "role": "view", "reason": "pairing",
                "expiresAt": "2027-01-01T00:00:00Z",
            },
        }))
        .unwrap();
        let record = share.record();
        assert!(!String::from_utf8_lossy(&record.0).contains("user-ada"));
        assert_eq!(
            Share::from_record(Some("user-ada"), "pairing", &record),
            share
        );
    }
}
