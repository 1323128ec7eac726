//! Users, Shares and Workspaces as their caches keep them: each as a [`CompactStore`](crate::store)
//! record of its (trimmed) JSON, compressed, decoded when a reconcile, a trigger or a request
//! reads it (docs/performance.md, "Memory"). The operator's caches of Users and Workspaces and
//! the homes API's caches of Users and Shares are these; the operator's Share cache packs its
//! own compact form of a Share the same way ([`Packed::encode`], against a dictionary of that form).
//!
//! kube-runtime's reflector kept each User as an `Arc<User>`: 968 bytes inline (360 of them
//! `ObjectMeta`, fifteen fields, nearly all empty), its strings, and a 96-byte `ObjectRef`
//! key, about 1.6 KiB a User in a heap profile at 10,000. A [`Packed`] record is the object's
//! metadata, spec and status as one JSON array without the name and namespace (the key holds
//! them) and without what JSON leaves out of empty fields, a few hundred bytes; then LZ4 block
//! compression (`lz4_flex`) against a dictionary of its kind, the JSON of one typical object of
//! the kind ([`USER_DICTIONARY`], [`SHARE_DICTIONARY`], [`WORKSPACE_DICTIONARY`]), so what every object of a kind repeats
//! (field names, a User's finalizer, the shape of a `Ready` condition) is a reference into the
//! dictionary: the unit test's User, 609 bytes of JSON, is kept in 146. A reader decodes the one
//! object it needs, a few microseconds against the milliseconds of a request; the operator's
//! Controllers over Users, Shares and Workspaces run on keys, not on the cache's objects. No record outlives its
//! process, so the dictionaries may change with any release.

use std::sync::LazyLock;

use homestead_api::{
    Share, ShareSpec, ShareStatus, User, UserSpec, UserStatus, Workspace, WorkspaceSpec,
    WorkspaceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::store::{Compact, namespace_and_name};

/// An object as its cache keeps it: `[metadata, spec, status]` as JSON, `metadata.name` and
/// `metadata.namespace` left out (or any record, [`Packed::encode`]), LZ4-compressed against
/// its kind's dictionary with the JSON's length (4 bytes, little-endian) first.
pub struct Packed(Box<[u8]>);

/// `[metadata, spec, status]` of an object as JSON, without its name and namespace.
///
/// # Panics
/// Never in practice: a User, a Share or a Workspace always encodes as JSON (it came from JSON).
fn json_of(metadata: &ObjectMeta, spec: &impl Serialize, status: &impl Serialize) -> Vec<u8> {
    let metadata = ObjectMeta {
        name: None,
        namespace: None,
        ..metadata.clone()
    };
    serde_json::to_vec(&(&metadata, spec, status)).expect("an object encodes as JSON")
}

/// [`json_of`] the object, compressed against `dictionary`.
fn pack(
    (metadata, spec, status): (&ObjectMeta, &impl Serialize, &impl Serialize),
    dictionary: &[u8],
) -> Packed {
    Packed::compress(&json_of(metadata, spec, status), dictionary)
}

impl Packed {
    /// `json` LZ4-compressed against `dictionary`, its length first.
    fn compress(json: &[u8], dictionary: &[u8]) -> Self {
        let compressed = lz4_flex::block::compress_prepend_size_with_dict(json, dictionary);
        Packed(compressed.into_boxed_slice())
    }

    /// Any record, not only an object's: `value` as JSON, LZ4-compressed against `dictionary`
    /// (the JSON of a typical value of the same type: what they all repeat is then a reference
    /// into it). The Share cache of the operator keeps its compact form of a Share this way.
    ///
    /// # Panics
    /// If `value` does not encode as JSON (a map with keys that are not strings): never for the
    /// records kept here, which came from JSON.
    pub fn encode(value: &impl Serialize, dictionary: &[u8]) -> Self {
        let json = serde_json::to_vec(value).expect("a record encodes as JSON");
        Self::compress(&json, dictionary)
    }

    /// The value [`Packed::encode`] wrote, against the same `dictionary`.
    ///
    /// # Panics
    /// If the record was not encoded from a `T` against `dictionary`: never in practice, a
    /// record lives only in the cache of the process that encoded it.
    pub fn decode<T: DeserializeOwned>(&self, dictionary: &[u8]) -> T {
        serde_json::from_slice(&self.json(dictionary)).expect("a packed record decodes")
    }

    /// The record's JSON, decompressed against `dictionary`.
    fn json(&self, dictionary: &[u8]) -> Vec<u8> {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.0, dictionary)
            .expect("a packed record decompresses")
    }

    /// The bytes it holds on the heap: the compressed JSON and its length (4 bytes).
    pub fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

/// The metadata, spec and status [`pack`] wrote (against the same `dictionary`), with the name
/// and namespace put back.
///
/// # Panics
/// Never in practice: the record is what [`pack`] wrote from the same kind, in this process.
fn unpack<S: DeserializeOwned, T: DeserializeOwned>(
    (namespace, name): (Option<&str>, &str),
    record: &Packed,
    dictionary: &[u8],
) -> (ObjectMeta, S, T) {
    let (mut metadata, spec, status): (ObjectMeta, S, T) = record.decode(dictionary);
    metadata.name = Some(name.to_owned());
    metadata.namespace = namespace.map(str::to_owned);
    (metadata, spec, status)
}

/// The dictionary of [`Packed`] Users: a typical User (from the directory, Ready, with a Profile
/// chosen by a group) as [`json_of`] writes it. Its values matter only for how much they share
/// with real Users; any dictionary decodes what it encoded.
pub static USER_DICTIONARY: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    let user: User = serde_json::from_value(json!({
        "metadata": {
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [homestead_api::FINALIZER],
            "generation": 1,
            "labels": { homestead_api::LABEL_WRITER: "scim" },
            "resourceVersion": "100000",
            "uid": "00000000-0000-4000-8000-000000000000",
        },
        "spec": {
            "identity": { "username": "user@example.com", "groups": ["group"] },
            "directory": { "active": true },
            "profile": "standard", "role": "edit", "validUntil": "2026-01-01T00:00:00Z",
        },
        "status": {
            "namespace": "user-", "observedGeneration": 1, "role": "edit",
            "profile": { "name": "standard", "observedGeneration": 1, "group": "group" },
            "conditions": [
                { "type": "Ready", "status": "True", "reason": "Provisioned",
                  "message": "namespace user- is ready", "observedGeneration": 1,
                  "lastTransitionTime": "2026-01-01T00:00:00Z" },
                { "type": "Suspended", "status": "False", "reason": "Active",
                  "message": "", "observedGeneration": 1,
                  "lastTransitionTime": "2026-01-01T00:00:00Z" },
            ],
        },
    }))
    .expect("the User dictionary is a User");
    json_of(&user.metadata, &user.spec, &user.status).into_boxed_slice()
});

/// The dictionary of [`Packed`] Shares (the homes API's): a typical Share, Ready, as
/// [`json_of`] writes it.
pub static SHARE_DICTIONARY: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    let share: Share = serde_json::from_value(json!({
        "metadata": {
            "annotations": { homestead_api::ANNOTATION_CREATED_BY: "user@example.com" },
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 1,
            "resourceVersion": "100000",
            "uid": "00000000-0000-4000-8000-000000000000",
        },
        "spec": {
            "to": [{ "user": "user" }, { "group": "group" }], "role": "edit",
            "reason": "pairing", "expiresAt": "2026-01-01T00:00:00Z",
        },
        "status": {
            "observedGeneration": 1, "to": "user", "expiresAt": "2026-01-01T00:00:00Z",
            "renewedAt": "2026-01-01T00:00:00Z",
            "ownerUid": "00000000-0000-4000-8000-000000000000",
            "grantees": [{ "user": "user", "uid": "00000000-0000-4000-8000-000000000000" }],
            "conditions": [
                { "type": "Ready", "status": "True", "reason": "Granted",
                  "message": "", "observedGeneration": 1,
                  "lastTransitionTime": "2026-01-01T00:00:00Z" },
            ],
        },
    }))
    .expect("the Share dictionary is a Share");
    json_of(&share.metadata, &share.spec, &share.status).into_boxed_slice()
});

/// The dictionary of [`Packed`] Workspaces: a typical team workspace, Ready, as [`json_of`]
/// writes it.
pub static WORKSPACE_DICTIONARY: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    let workspace: Workspace = serde_json::from_value(json!({
        "metadata": {
            "annotations": { homestead_api::ANNOTATION_CREATED_BY: "user@example.com" },
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [homestead_api::FINALIZER],
            "generation": 1,
            "resourceVersion": "100000",
            "uid": "00000000-0000-4000-8000-000000000000",
        },
        "spec": {
            "owner": { "group": "group" }, "admins": ["user"], "members": { "role": "edit" },
            "profile": "standard", "reason": "team", "deletionPolicy": "Retain",
        },
        "status": {
            "observedGeneration": 1, "namespace": "ws-", "owner": "group group", "role": "edit",
            "members": { "count": 10, "active": 10 },
            "ownerUid": "00000000-0000-4000-8000-000000000000",
            "adminUids": { "user": "00000000-0000-4000-8000-000000000000" },
            "conditions": [
                { "type": "Ready", "status": "True", "reason": "Provisioned",
                  "message": "namespace \"ws-\" provisioned; 10 people have access",
                  "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z" },
            ],
        },
    }))
    .expect("the Workspace dictionary is a Workspace");
    json_of(&workspace.metadata, &workspace.spec, &workspace.status).into_boxed_slice()
});

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
        let object = (&self.metadata, &self.spec, &self.status);
        pack(object, &USER_DICTIONARY)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let (metadata, spec, status) =
            unpack::<UserSpec, Option<UserStatus>>((namespace, name), record, &USER_DICTIONARY);
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
        namespace_and_name(&self.metadata)
    }

    fn record(&self) -> Packed {
        let object = (&self.metadata, &self.spec, &self.status);
        pack(object, &SHARE_DICTIONARY)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let (metadata, spec, status) =
            unpack::<ShareSpec, Option<ShareStatus>>((namespace, name), record, &SHARE_DICTIONARY);
        Self {
            metadata,
            spec,
            status,
        }
    }
}

impl Compact for Workspace {
    type Record = Packed;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        (None, self.metadata.name.as_deref().unwrap_or_default())
    }

    fn record(&self) -> Packed {
        let object = (&self.metadata, &self.spec, &self.status);
        pack(object, &WORKSPACE_DICTIONARY)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let (metadata, spec, status) = unpack::<WorkspaceSpec, Option<WorkspaceStatus>>(
            (namespace, name),
            record,
            &WORKSPACE_DICTIONARY,
        );
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

    /// The JSON a record holds.
    fn json(record: &Packed, dictionary: &[u8]) -> String {
        let json = lz4_flex::block::decompress_size_prepended_with_dict(&record.0, dictionary);
        String::from_utf8(json.unwrap()).unwrap()
    }

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
        let json = json(&record, &USER_DICTIONARY);
        assert!(
            !json.contains("\"ada\""),
            "the name is the key's, not the record's"
        );
        // Less than half its JSON, and than the User itself held inline before any string.
        assert!(
            record.0.len() < json.len() / 2 && record.0.len() < std::mem::size_of::<User>(),
            "{} bytes of {}: {json}",
            record.0.len(),
            json.len(),
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
        assert!(!json(&record, &SHARE_DICTIONARY).contains("user-ada"));
        assert_eq!(
            Share::from_record(Some("user-ada"), "pairing", &record),
            share
        );
    }

    #[test]
    fn a_workspace_comes_back_as_it_went_in_from_a_fraction_of_its_json() {
        let workspace: Workspace = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
            "metadata": {
                "name": "platform", "uid": "5d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "generation": 2,
                "creationTimestamp": "2026-11-01T09:00:00Z",
                "finalizers": [homestead_api::FINALIZER],
                "annotations": { homestead_api::ANNOTATION_CREATED_BY: "hr@example.com" },
            },
            "spec": { "owner": { "group": "platform" }, "admins": ["ada"], "reason": "team" },
            "status": {
                "observedGeneration": 2, "namespace": "ws-platform", "owner": "group platform",
                "role": "edit", "members": { "count": 10, "active": 9 },
                "ownerUid": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
                "adminUids": { "ada": "0b6c2a4e-6f1e-4d7a-9a57-2b1f3c4d5e6f" },
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Provisioned",
                    "message": "namespace \"ws-platform\" provisioned; 10 people have access",
                    "observedGeneration": 2, "lastTransitionTime": "2026-11-01T09:00:01Z",
                }],
            },
        }))
        .unwrap();
        let record = workspace.record();
        assert_eq!(Workspace::from_record(None, "platform", &record), workspace);
        let json = json(&record, &WORKSPACE_DICTIONARY);
        assert!(
            record.0.len() < json.len() / 2,
            "{} bytes of {}: {json}",
            record.0.len(),
            json.len(),
        );
    }
}
