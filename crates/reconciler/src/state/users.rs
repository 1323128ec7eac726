//! The User cache: every User as a [`CompactStore`] record of its trimmed JSON, decoded when a
//! reconcile or a trigger reads it (docs/performance.md, "Memory").
//!
//! kube-runtime's reflector kept each User as an `Arc<User>`: 968 bytes inline (360 of them
//! `ObjectMeta`, fifteen fields, nearly all empty), its strings, and a 96-byte `ObjectRef`
//! key, about 1.6 KiB a User in a heap profile at 10,000. A [`PackedUser`] is the User's
//! metadata, spec and status as one JSON array without the name (the key holds it) and
//! without what JSON leaves out of empty fields, a few hundred bytes. A reconcile decodes the
//! one User it works on, a few microseconds against the milliseconds of its requests; the
//! Controller over Users runs on keys ([`crate::runtime::keyed`]), not on the cache's objects.

use homestead_api::{User, UserSpec, UserStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::state::store::Compact;

/// A User as the cache keeps it: `[metadata, spec, status]` as JSON, `metadata.name` left out.
pub struct PackedUser(Box<[u8]>);

/// What a [`PackedUser`] holds, borrowed to encode.
type Parts<'a> = (&'a ObjectMeta, &'a UserSpec, &'a Option<UserStatus>);

impl Compact for User {
    type Record = PackedUser;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        (None, self.metadata.name.as_deref().unwrap_or_default())
    }

    /// # Panics
    /// Never in practice: a User always encodes as JSON (it came from JSON).
    fn record(&self) -> PackedUser {
        let metadata = ObjectMeta {
            name: None,
            ..self.metadata.clone()
        };
        let parts: Parts<'_> = (&metadata, &self.spec, &self.status);
        let json = serde_json::to_vec(&parts).expect("a User encodes as JSON");
        PackedUser(json.into_boxed_slice())
    }

    /// # Panics
    /// Never in practice: the record is JSON [`Compact::record`] wrote from a User.
    fn from_record(_: Option<&str>, name: &str, record: &PackedUser) -> Self {
        let (mut metadata, spec, status): (ObjectMeta, UserSpec, Option<UserStatus>) =
            serde_json::from_slice(&record.0).expect("a packed User decodes");
        metadata.name = Some(name.to_owned());
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
}
