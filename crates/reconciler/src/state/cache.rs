//! The compact forms in which the caches keep Namespaces, RoleBindings, LimitRanges,
//! NetworkPolicies and Shares: what reconciles read of them, and nothing more (the kube.rs
//! optimization guide's "pruning fields", <https://kube.rs/controllers/optimization/>). At
//! 10,000 Users the operator caches 10,000 of each, and a k8s-openapi object costs kilobytes
//! even when trimmed: a label map is a B-tree whose every node holds room for eleven pairs of
//! strings. A spec a reconcile only compares with the desired one is kept as a print of it
//! (a RoleBinding's roleRef and subjects, a LimitRange's or NetworkPolicy's spec).
//!
//! Reconciles ask a cached object only membership questions: does it carry this label with
//! this value, this annotation, an owner reference to this User? So labels, annotations and
//! owner references are kept as [`Facts`]: one 64-bit fingerprint of each, keyed with a
//! per-process random key (so nobody can craft a label that collides with another on
//! purpose), sorted for lookup. Each type deserializes from the full object (`serde(from)`),
//! so the watch decodes the API server's JSON as usual and keeps only this.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::LazyLock;

use homestead_api::{
    ANNOTATION_CREATED_BY, CONDITION_READY, LABEL_USER, LABEL_WORKSPACE, Share, ShareSpec, User,
};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, NamespaceStatus};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::plan::drift::GuardSpec;
use crate::plan::facts::{Facts, print};
use crate::plan::ownership::Holder;
use crate::plan::share::{Recorded, compact_uid, status_print, uid_string};
use homestead_model::packed::Packed;
use homestead_model::store::{Compact, namespace_and_name};

/// The metadata a cached object keeps: name, namespace, and the resourceVersion (which the
/// watch reads and [`homestead_model::trim`] then drops).
fn identity(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    }
}

/// The metadata of an object rebuilt from its cache key: its `namespace` and `name` alone.
fn keyed(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

/// A Namespace as the cache keeps it: its identity, [`Facts`], the User it is labelled for,
/// and its status only while it terminates (the conditions that say what still blocks its
/// deletion).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "Namespace")]
pub struct CachedNamespace {
    /// Name, uid, deletion timestamp.
    pub metadata: ObjectMeta,
    /// Labels, annotations and owner references.
    pub facts: Facts,
    /// The `homestead.dev/user` label, naming the User the Namespace belongs to.
    user: Option<String>,
    /// The `homestead.dev/workspace` label, naming the Workspace the Namespace belongs to.
    workspace: Option<String>,
    /// The status while terminating, else `None`.
    pub status: Option<NamespaceStatus>,
}

impl From<Namespace> for CachedNamespace {
    fn from(namespace: Namespace) -> Self {
        let mut meta = namespace.metadata;
        let terminating = meta.deletion_timestamp.is_some();
        let (uid, deletion_timestamp) = (meta.uid.take(), meta.deletion_timestamp.take());
        let facts = Facts::of(&meta);
        let user = meta.labels.as_mut().and_then(|l| l.remove(LABEL_USER));
        let workspace = meta.labels.as_mut().and_then(|l| l.remove(LABEL_WORKSPACE));
        Self {
            facts,
            user,
            workspace,
            metadata: ObjectMeta {
                uid,
                deletion_timestamp,
                ..identity(meta)
            },
            status: namespace.status.filter(|_| terminating),
        }
    }
}

impl CachedNamespace {
    /// The User the Namespace is labelled for (`homestead.dev/user`), if any: the operator maps
    /// watch events to reconciles with this (a RoleBinding's too, through its Namespace).
    pub fn user(&self) -> Option<ObjectRef<User>> {
        self.user.as_deref().map(ObjectRef::new)
    }

    /// The Workspace the Namespace is labelled for (`homestead.dev/workspace`), if any.
    pub fn workspace(&self) -> Option<ObjectRef<homestead_api::Workspace>> {
        self.workspace.as_deref().map(ObjectRef::new)
    }
}

/// A RoleBinding as the cache keeps it: its identity, [`Facts`], the name of the role it
/// binds, and fingerprints of its roleRef and subjects.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "RoleBinding")]
pub struct CachedRoleBinding {
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// Labels, annotations and owner references.
    pub facts: Facts,
    /// `roleRef.name`.
    pub role: String,
    role_ref: u64,
    subjects: u64,
    /// Whether it has subjects and every one is a ServiceAccount of its own namespace: what a
    /// governed home (`ServiceAccountsOnly`) admits from a tenant.
    pub local_service_accounts_only: bool,
}

impl From<RoleBinding> for CachedRoleBinding {
    fn from(binding: RoleBinding) -> Self {
        let subjects = binding.subjects.as_deref().unwrap_or_default();
        let local_service_accounts_only = !subjects.is_empty()
            && subjects
                .iter()
                .all(|s| s.kind == "ServiceAccount" && s.namespace == binding.metadata.namespace);
        Self {
            facts: Facts::of(&binding.metadata),
            metadata: identity(binding.metadata),
            role_ref: print_role_ref(&binding.role_ref),
            subjects: print_subjects(binding.subjects.as_deref()),
            role: binding.role_ref.name,
            local_service_accounts_only,
        }
    }
}

fn print_role_ref(role_ref: &RoleRef) -> u64 {
    print(&(&role_ref.api_group, &role_ref.kind, &role_ref.name))
}

fn print_subjects(subjects: Option<&[Subject]>) -> u64 {
    let subjects: Vec<_> = subjects
        .unwrap_or_default()
        .iter()
        .map(|s| (&s.api_group, &s.kind, &s.name, &s.namespace))
        .collect();
    print(&subjects)
}

impl CachedRoleBinding {
    /// Whether this binding has `desired`'s roleRef (immutable: a different one means the
    /// binding must be replaced).
    pub fn binds_role_of(&self, desired: &RoleBinding) -> bool {
        self.role_ref == print_role_ref(&desired.role_ref)
    }

    /// Whether this binding has exactly `desired`'s subjects (a different set means the User's
    /// identity changed, or someone rewrote Homestead's binding).
    pub fn binds_subjects_of(&self, desired: &RoleBinding) -> bool {
        self.subjects == print_subjects(desired.subjects.as_deref())
    }

    /// Whether this binding grants exactly what `desired` does (roleRef and subjects) and
    /// carries its labels, annotations and owner references.
    pub fn matches(&self, desired: &RoleBinding) -> bool {
        self.binds_role_of(desired)
            && self.binds_subjects_of(desired)
            && self.facts.include(&desired.metadata)
    }
}

/// What [`homestead_model::store::CompactStore`] keeps of a Namespace: no `ObjectMeta`, the name is the
/// store's key. Kept small, one of these a home: the uid in 16 bytes where it is a UUID (as
/// the API server makes them), and what only a terminating Namespace has behind one pointer.
pub struct NamespaceRecord {
    uid: Uid,
    facts: Facts,
    user: Option<Box<str>>,
    workspace: Option<Box<str>>,
    terminating: Option<Box<Terminating>>,
}

/// A uid as a record keeps it: a UUID as its 16 bytes (two `u64`s, not a `u128`, whose
/// 16-byte alignment would pad the record), anything else as written.
enum Uid {
    None,
    Uuid([u64; 2]),
    Other(Box<str>),
}

impl Uid {
    fn of(uid: Option<&str>) -> Self {
        let Some(uid) = uid else { return Self::None };
        match compact_uid(uid).filter(|compact| uid_string(*compact) == uid) {
            Some(compact) => Self::Uuid([(compact >> 64) as u64, compact as u64]),
            None => Self::Other(uid.into()),
        }
    }

    fn text(&self) -> Option<String> {
        match self {
            Self::None => None,
            Self::Uuid([high, low]) => Some(uid_string(u128::from(*high) << 64 | u128::from(*low))),
            Self::Other(uid) => Some(uid.to_string()),
        }
    }
}

/// What a terminating Namespace's record has besides.
struct Terminating {
    deletion_timestamp: Option<Time>,
    status: Option<NamespaceStatus>,
}

impl Compact for CachedNamespace {
    type Record = NamespaceRecord;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        (None, self.metadata.name.as_deref().unwrap_or_default())
    }

    fn record(&self) -> NamespaceRecord {
        let deletion_timestamp = self.metadata.deletion_timestamp.clone();
        let terminating = (deletion_timestamp.is_some() || self.status.is_some()).then(|| {
            Box::new(Terminating {
                deletion_timestamp,
                status: self.status.clone(),
            })
        });
        NamespaceRecord {
            uid: Uid::of(self.metadata.uid.as_deref()),
            facts: self.facts.clone(),
            user: self.user.as_deref().map(Into::into),
            workspace: self.workspace.as_deref().map(Into::into),
            terminating,
        }
    }

    fn from_record(_: Option<&str>, name: &str, record: &NamespaceRecord) -> Self {
        let terminating = record.terminating.as_deref();
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: record.uid.text(),
                deletion_timestamp: terminating.and_then(|t| t.deletion_timestamp.clone()),
                ..ObjectMeta::default()
            },
            facts: record.facts.clone(),
            user: record.user.as_deref().map(str::to_owned),
            workspace: record.workspace.as_deref().map(str::to_owned),
            status: terminating.and_then(|t| t.status.clone()),
        }
    }
}

/// What [`homestead_model::store::CompactStore`] keeps of a RoleBinding: no `ObjectMeta`, the namespace
/// and name are the store's key.
pub struct RoleBindingRecord {
    facts: Facts,
    role: Box<str>,
    role_ref: u64,
    subjects: u64,
    local_service_accounts_only: bool,
}

impl Compact for CachedRoleBinding {
    type Record = RoleBindingRecord;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        namespace_and_name(&self.metadata)
    }

    fn record(&self) -> RoleBindingRecord {
        RoleBindingRecord {
            facts: self.facts.clone(),
            role: self.role.as_str().into(),
            role_ref: self.role_ref,
            subjects: self.subjects,
            local_service_accounts_only: self.local_service_accounts_only,
        }
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &RoleBindingRecord) -> Self {
        Self {
            metadata: keyed(namespace, name),
            facts: record.facts.clone(),
            role: record.role.to_string(),
            role_ref: record.role_ref,
            subjects: record.subjects,
            local_service_accounts_only: record.local_service_accounts_only,
        }
    }
}

/// A guard Homestead keeps in a home (a LimitRange, a NetworkPolicy: [`GuardSpec`]) as the cache
/// keeps it: its identity, [`Facts`], and the print of its spec as stored. The operator's
/// LimitRange and NetworkPolicy caches hold these, one for each home its Profile gives one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(
    from = "K",
    bound(deserialize = "K: GuardSpec + Resource + serde::de::DeserializeOwned")
)]
pub struct CachedGuard<K> {
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// Labels, annotations and owner references.
    pub facts: Facts,
    /// [`GuardSpec::stored_print`].
    spec: u64,
    /// The `homestead.dev/user` label, if any.
    user: Option<Box<str>>,
    /// The `homestead.dev/workspace` label, if any.
    workspace: Option<Box<str>>,
    kind: PhantomData<K>,
}

/// A NetworkPolicy as the cache keeps it.
pub type CachedNetworkPolicy = CachedGuard<NetworkPolicy>;

/// A LimitRange as the cache keeps it.
pub type CachedLimitRange = CachedGuard<LimitRange>;

impl<K: GuardSpec + Resource> From<K> for CachedGuard<K> {
    fn from(mut guard: K) -> Self {
        let label = |key: &str| guard.labels().get(key).map(|v| v.as_str().into());
        let (user, workspace) = (label(LABEL_USER), label(LABEL_WORKSPACE));
        Self {
            facts: Facts::of(guard.meta()),
            spec: guard.stored_print(),
            user,
            workspace,
            metadata: identity(std::mem::take(guard.meta_mut())),
            kind: PhantomData,
        }
    }
}

impl<K: GuardSpec + Resource> CachedGuard<K> {
    /// Whether this guard already is `desired`: the spec as the API server stores the desired
    /// one, and the desired labels, annotations and owner references ([`Facts::include`]).
    pub fn matches(&self, desired: &K) -> bool {
        self.spec == desired.desired_print() && self.facts.include(desired.meta())
    }
}

impl<K> CachedGuard<K> {
    /// Whether it carries `holder`'s label (`homestead.dev/user=<name>` for a User), as
    /// [`crate::plan::ownership::labelled_for`] asks of a whole object.
    pub fn labelled_for<H: Holder>(&self, holder: &H) -> bool {
        self.facts.has_label(H::LABEL, &holder.name_any())
    }

    /// The User it is labelled for (`homestead.dev/user`), if any: a tenant may write this
    /// label on a guard in their own namespace, so only a wake may rest on it.
    pub fn user(&self) -> Option<ObjectRef<User>> {
        self.user.as_deref().map(ObjectRef::new)
    }

    /// The Workspace it is labelled for (`homestead.dev/workspace`), if any (a wake only, as
    /// [`CachedGuard::user`]).
    pub fn workspace(&self) -> Option<ObjectRef<homestead_api::Workspace>> {
        self.workspace.as_deref().map(ObjectRef::new)
    }
}

/// What [`homestead_model::store::CompactStore`] keeps of a guard: its facts, its spec's print
/// and its holder labels; the namespace and name are the store's key.
pub struct GuardRecord {
    facts: Facts,
    spec: u64,
    user: Option<Box<str>>,
    workspace: Option<Box<str>>,
}

impl<K> Compact for CachedGuard<K> {
    type Record = GuardRecord;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        namespace_and_name(&self.metadata)
    }

    fn record(&self) -> GuardRecord {
        GuardRecord {
            facts: self.facts.clone(),
            spec: self.spec,
            user: self.user.clone(),
            workspace: self.workspace.clone(),
        }
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &GuardRecord) -> Self {
        Self {
            metadata: keyed(namespace, name),
            facts: record.facts.clone(),
            spec: record.spec,
            user: record.user.clone(),
            workspace: record.workspace.clone(),
            kind: PhantomData,
        }
    }
}

/// [`kube::Resource`] for a cached guard: the coordinates of its kind, so it is watched at the
/// same URL and decoded from the same JSON.
impl<K: Resource<DynamicType = ()>> Resource for CachedGuard<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Share as the cache keeps it: its identity (name, namespace, uid, generation, creation
/// time), its creator (`homestead.dev/created-by`, for the access log), its spec, and of its
/// status what the next reconcile compares and carries over. At 10,000 Shares a whole Share
/// (label and annotation B-trees, the status's grantees) would cost the operator kilobytes each.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "Share")]
pub struct CachedShare {
    /// Name, namespace, uid, generation and creation time.
    pub metadata: ObjectMeta,
    /// The annotation `homestead.dev/created-by`.
    pub created_by: Option<Box<str>>,
    /// The spec, whole.
    pub spec: ShareSpec,
    /// What the status says, if it has one.
    pub status: Option<CachedShareStatus>,
}

impl homestead_model::names::Names for CachedShare {
    fn names(&self) -> impl Iterator<Item = (bool, &str)> {
        homestead_model::names::grantees(&self.spec.to)
    }
}

/// What the Share cache keeps of a [`CachedShare`]: all of it but its name and namespace (the
/// cache's key) and the rest of its `ObjectMeta` (360 bytes inline, nearly all empty), packed
/// ([`Packed::encode`]: JSON, LZ4-compressed against [`CACHED_SHARE_DICTIONARY`]). Kept as
/// fields, its spec and status sat inline in the cache's B-tree (about 170 bytes a Share) with a
/// dozen allocations beside (strings, grantees, the status); packed, it is one allocation: the
/// unit test's Share, 592 bytes of JSON, in 287. These are the fields packed (the record is the
/// [`Packed`]). Times are kept to the second, as k8s-openapi writes them: a `spec.expiresAt`
/// with a fraction of a second comes back earlier, by less than a second (access ends no later).
#[derive(Serialize, Deserialize)]
struct ShareFields<'a> {
    uid: Cow<'a, Option<String>>,
    generation: Option<i64>,
    created: Cow<'a, Option<Time>>,
    created_by: Cow<'a, Option<Box<str>>>,
    spec: Cow<'a, ShareSpec>,
    status: Cow<'a, Option<CachedShareStatus>>,
}

/// The JSON of a typical [`CachedShare`]'s record, against which each is compressed: what every
/// record repeats (field names, a Ready condition's reason, the shape of a grantee) is then a
/// reference into it. A record lives only in its process's cache, so this may change with any
/// release.
static CACHED_SHARE_DICTIONARY: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    let share: Share = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "share", "namespace": "user-",
            "annotations": { ANNOTATION_CREATED_BY: "user@example.com" },
            "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
            "uid": "00000000-0000-4000-8000-000000000000",
        },
        "spec": {
            "to": [{ "user": "user" }, { "group": "group" }], "role": "edit",
            "reason": "pairing", "expiresAt": "2026-01-01T00:00:00Z",
        },
        "status": {
            "observedGeneration": 1, "renewedAt": "2026-01-01T00:00:00Z",
            "ownerUid": "00000000-0000-4000-8000-000000000000",
            "grantees": [{ "user": "user", "uid": "00000000-0000-4000-8000-000000000000" }],
            "conditions": [{
                "type": CONDITION_READY, "status": "True", "reason": "Granted", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        },
    }))
    .expect("the Share dictionary is a Share");
    let record = CachedShare::from(share).fields_json();
    record.into_boxed_slice()
});

impl CachedShare {
    /// What the record keeps, by reference.
    fn fields(&self) -> ShareFields<'_> {
        let meta = &self.metadata;
        ShareFields {
            uid: Cow::Borrowed(&meta.uid),
            generation: meta.generation,
            created: Cow::Borrowed(&meta.creation_timestamp),
            created_by: Cow::Borrowed(&self.created_by),
            spec: Cow::Borrowed(&self.spec),
            status: Cow::Borrowed(&self.status),
        }
    }

    /// [`CachedShare::fields`] as JSON, uncompressed (the dictionary).
    fn fields_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.fields()).expect("a Share's record encodes as JSON")
    }
}

impl Compact for CachedShare {
    type Record = Packed;

    fn namespace_and_name(&self) -> (Option<&str>, &str) {
        namespace_and_name(&self.metadata)
    }

    fn record(&self) -> Packed {
        Packed::encode(&self.fields(), &CACHED_SHARE_DICTIONARY)
    }

    fn from_record(namespace: Option<&str>, name: &str, record: &Packed) -> Self {
        let fields: ShareFields = record.decode(&CACHED_SHARE_DICTIONARY);
        Self {
            metadata: ObjectMeta {
                uid: fields.uid.into_owned(),
                generation: fields.generation,
                creation_timestamp: fields.created.into_owned(),
                ..keyed(namespace, name)
            },
            created_by: fields.created_by.into_owned(),
            spec: fields.spec.into_owned(),
            status: fields.status.into_owned(),
        }
    }
}

/// What [`CachedShare`] keeps of a Share's status. It serializes only into the Share cache's
/// packed record: its uids are `u128`s, beyond what `serde_json::Value` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CachedShareStatus {
    /// [`status_print`] of the whole status: a reconcile writes only a status that differs.
    pub print: u64,
    /// `observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `renewedAt`.
    pub renewed_at: Option<Time>,
    /// The `Ready` condition, in short.
    pub ready: Option<CachedReady>,
    /// `ownerUid`, compacted ([`compact_uid`]).
    pub owner_uid: Option<u128>,
    /// Each User grantee's recorded `uid`, compacted, by `user` (16 bytes a uid where the
    /// string takes 52).
    pub grantee_uids: Box<[(Box<str>, u128)]>,
}

impl CachedShareStatus {
    /// What the status recorded of the home's owner and the User grantees ([`Recorded`]).
    pub fn recorded(&self) -> Recorded {
        Recorded {
            owner_uid: self.owner_uid.map(uid_string),
            grantees: self
                .grantee_uids
                .iter()
                .map(|(name, uid)| (name.to_string(), uid_string(*uid)))
                .collect(),
        }
    }
}

/// What [`CachedShareStatus`] keeps of the `Ready` condition: its status, its reason, a print of
/// its message (a new refusal is told from a repeated one), and its `lastTransitionTime`
/// (which carries over while the status stays).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedReady {
    /// `status` is `"True"`.
    pub status: bool,
    /// `reason`.
    pub reason: Box<str>,
    /// [`print`] of `message`.
    pub message: u64,
    /// `lastTransitionTime`.
    pub last_transition_time: Time,
}

impl From<Condition> for CachedReady {
    fn from(condition: Condition) -> Self {
        Self {
            status: condition.status == "True",
            reason: condition.reason.into_boxed_str(),
            message: print(&condition.message),
            last_transition_time: condition.last_transition_time,
        }
    }
}

impl From<Share> for CachedShare {
    fn from(share: Share) -> Self {
        let mut meta = share.metadata;
        let created_by = meta
            .annotations
            .as_mut()
            .and_then(|a| a.remove(ANNOTATION_CREATED_BY))
            .map(String::into_boxed_str);
        let (uid, generation, created) = (
            meta.uid.take(),
            meta.generation.take(),
            meta.creation_timestamp.take(),
        );
        let status = share.status.map(|status| CachedShareStatus {
            print: status_print(&status),
            observed_generation: status.observed_generation,
            renewed_at: status.renewed_at,
            ready: status
                .conditions
                .into_iter()
                .find(|c| c.type_ == CONDITION_READY)
                .map(CachedReady::from),
            owner_uid: status.owner_uid.as_deref().and_then(compact_uid),
            grantee_uids: status
                .grantees
                .iter()
                .filter_map(|g| {
                    let uid = compact_uid(g.uid.as_deref()?)?;
                    Some((g.user.as_deref()?.into(), uid))
                })
                .collect(),
        });
        Self {
            metadata: ObjectMeta {
                uid,
                generation,
                creation_timestamp: created,
                ..identity(meta)
            },
            created_by,
            spec: share.spec,
            status,
        }
    }
}

/// Implements [`kube::Resource`] for a cached form with `$full`'s API coordinates, so it is
/// watched at the same URL and decoded from the same JSON.
macro_rules! resource_as {
    ($cached:ty, $full:ty, $scope:ty) => {
        impl Resource for $cached {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource_as!(
    CachedNamespace,
    Namespace,
    k8s_openapi::ClusterResourceScope
);
resource_as!(
    CachedRoleBinding,
    RoleBinding,
    k8s_openapi::NamespaceResourceScope
);
resource_as!(CachedShare, Share, k8s_openapi::NamespaceResourceScope);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::desired::{Traits, desired_namespace, desired_role_binding};
    use homestead_api::User;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    #[test]
    fn a_namespace_comes_back_from_its_record_as_cached() {
        let namespace = |uid: Option<&str>, terminating: bool| {
            CachedNamespace::from(
                serde_json::from_value::<Namespace>(json!({
                    "metadata": {
                        "name": "user-alice", "uid": uid,
                        "labels": { "homestead.dev/user": "alice", "team": "a" },
                        "deletionTimestamp": terminating.then_some("2026-12-03T10:00:00Z"),
                    },
                    "status": {
                        "phase": if terminating { "Terminating" } else { "Active" },
                        "conditions": [{ "type": "NamespaceContentRemaining", "status": "True" }],
                    },
                }))
                .unwrap(),
            )
        };
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        for cached in [
            namespace(Some(uuid), false),
            namespace(Some(uuid), true),
            // Not a UUID, a UUID in upper case, none: kept as written.
            namespace(Some("not-a-uuid"), false),
            namespace(Some(&uuid.to_uppercase()), true),
            namespace(None, false),
        ] {
            let back = CachedNamespace::from_record(None, "user-alice", &cached.record());
            assert_eq!(back, cached);
        }
        assert!(
            namespace(Some(uuid), false).status.is_none(),
            "kept only while terminating"
        );
        #[cfg(target_pointer_width = "64")]
        assert_eq!(
            std::mem::size_of::<NamespaceRecord>(),
            88,
            "one of these a home: a field more is a choice"
        );
    }

    #[test]
    fn drift_is_seen_and_others_keys_are_left_alone() {
        let u =
            User::test("alice").with_spec(json!({ "namespace": { "labels": { "team": "a" } } }));
        let desired = desired_namespace(&u, "user-alice", Default::default(), Traits::default());
        let facts = |edit: &dyn Fn(&mut ObjectMeta)| {
            let mut meta = desired.metadata.clone();
            edit(&mut meta);
            Facts::of(&meta)
        };
        let include = |edit: &dyn Fn(&mut ObjectMeta)| facts(edit).include(&desired.metadata);
        assert!(include(&|_| {}));
        assert!(!include(&|m| {
            m.labels.as_mut().unwrap().insert("team".into(), "b".into());
        }));
        assert!(!include(&|m| {
            m.labels.as_mut().unwrap().remove("team");
        }));
        assert!(!include(&|m| {
            m.annotations = None;
        }));
        assert!(!include(&|m| m.owner_references = None), "orphaned");
        let other_user = OwnerReference {
            api_version: homestead_api::API_VERSION.into(),
            kind: "User".into(),
            name: "mallory".into(),
            uid: "uid-mallory".into(),
            ..OwnerReference::default()
        };
        assert!(
            !include(&|m| m
                .owner_references
                .as_mut()
                .unwrap()
                .push(other_user.clone())),
            "a second User owner is drift"
        );
        // A label or owner reference someone else added is theirs: no drift.
        assert!(include(&|m| {
            m.labels
                .as_mut()
                .unwrap()
                .insert("extra".into(), "x".into());
        }));
        assert!(include(&|m| {
            m.owner_references.as_mut().unwrap().push(OwnerReference {
                api_version: "example.com/v1".into(),
                kind: "Team".into(),
                name: "a".into(),
                uid: "team-uid".into(),
                ..OwnerReference::default()
            });
        }));
        // A label and an annotation with the same key and value are different facts.
        let u = User::test("alice");
        let ns = desired_namespace(&u, "user-alice", Default::default(), Traits::default());
        let mut swapped = ns.metadata.clone();
        swapped.labels = ns.metadata.annotations.clone();
        swapped.annotations = ns.metadata.labels.clone();
        assert!(!Facts::of(&swapped).include(&ns.metadata));
    }

    #[test]
    fn a_binding_matches_on_role_subjects_and_metadata() {
        let u = User::test("alice").with_spec(json!({ "role": "edit" }));
        let desired = desired_role_binding(&u, "user-alice");
        let cached = CachedRoleBinding::from(desired.clone());
        assert_eq!(cached.role, "edit");
        assert!(cached.matches(&desired));
        let mut other_subject = desired.clone();
        other_subject.subjects.as_mut().unwrap()[0].name = "mallory@example.com".into();
        assert!(!CachedRoleBinding::from(other_subject.clone()).matches(&desired));
        assert!(CachedRoleBinding::from(other_subject).binds_role_of(&desired));
        let admin = desired_role_binding(
            &User::test("alice").with_spec(json!({ "role": "admin" })),
            "user-alice",
        );
        assert!(!cached.binds_role_of(&admin));
    }

    #[test]
    fn a_namespace_keeps_its_identity_and_its_status_only_while_terminating() {
        let namespace = |deleting: bool| -> CachedNamespace {
            let mut ns: Namespace = serde_json::from_value(json!({
                "metadata": {
                    "name": "user-ada", "uid": "uid-ns", "resourceVersion": "7",
                    "labels": { "homestead.dev/user": "ada" },
                    "managedFields": [{ "manager": "homestead", "operation": "Update" }],
                },
                "spec": { "finalizers": ["kubernetes"] },
                "status": { "phase": "Terminating", "conditions": [
                    { "type": "NamespaceContentRemaining", "status": "True" }
                ] },
            }))
            .unwrap();
            if deleting {
                ns.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            serde_json::from_value(serde_json::to_value(ns).unwrap()).unwrap()
        };
        let live = namespace(false);
        assert_eq!(live.metadata.name.as_deref(), Some("user-ada"));
        assert_eq!(live.metadata.uid.as_deref(), Some("uid-ns"));
        assert_eq!(live.metadata.resource_version.as_deref(), Some("7"));
        assert!(live.metadata.labels.is_none() && live.metadata.managed_fields.is_none());
        assert_eq!(live.user(), Some(ObjectRef::new("ada")));
        assert!(live.status.is_none());
        let terminating = namespace(true);
        assert_eq!(terminating.status.unwrap().conditions.unwrap().len(), 1);
    }

    #[test]
    fn a_cached_share_keeps_what_a_reconcile_reads_and_a_print_of_its_status() {
        let share: Share = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "Share",
            "metadata": { "name": "review", "namespace": "user-alice", "uid": "u1",
                "generation": 2, "creationTimestamp": "2026-11-01T00:00:00Z",
                "resourceVersion": "7", "labels": { "team": "x" },
                "annotations": { ANNOTATION_CREATED_BY: "alice@example.com", "note": "n" },
                "managedFields": [{ "manager": "kubectl" }] },
            "spec": { "to": [{ "user": "bob" }], "role": "view",
                "expiresAt": "2026-12-01T00:00:00Z", "reason": "r" },
            "status": { "observedGeneration": 2, "renewedAt": "2026-11-02T00:00:00Z",
                "conditions": [{ "type": "Ready", "status": "True", "reason": "Active",
                    "message": "m", "lastTransitionTime": "2026-11-02T00:00:00Z" }] },
        }))
        .unwrap();
        let print = status_print(share.status.as_ref().unwrap());
        let cached: CachedShare =
            serde_json::from_value(serde_json::to_value(&share).unwrap()).unwrap();
        assert_eq!(cached.created_by.as_deref(), Some("alice@example.com"));
        assert_eq!(cached.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(cached.metadata.generation, Some(2));
        assert!(cached.metadata.labels.is_none() && cached.metadata.annotations.is_none());
        assert!(cached.metadata.managed_fields.is_none());
        let status = cached.status.unwrap();
        assert_eq!(status.print, print);
        assert_eq!(&*status.ready.unwrap().reason, "Active");
        assert_eq!(cached.spec, share.spec);
    }

    #[test]
    fn a_cached_share_comes_back_from_its_packed_record_whole_and_in_fewer_bytes() {
        let share: Share = serde_json::from_value(json!({
            "metadata": { "name": "pairing", "namespace": "user-alice",
                "uid": "0b6c2a4e-6f1e-4d7a-9a57-2b1f3c4d5e6f", "generation": 3,
                "creationTimestamp": "2026-11-01T00:00:00Z",
                "annotations": { ANNOTATION_CREATED_BY: "alice@example.com" } },
            "spec": { "to": [{ "user": "bob" }, { "group": "eng" }], "role": "edit",
                "expiresAt": "2026-12-01T00:00:00Z", "reason": "pairing on the release" },
            "status": { "observedGeneration": 3, "renewedAt": "2026-11-02T00:00:00Z",
                "ownerUid": "1c7d3b5f-7a2f-4e8b-8b68-3c2a4d5e6f70",
                "grantees": [{ "user": "bob", "uid": "2d8e4c6a-8b3a-4f9c-9c79-4d3b5e6f7a81" }],
                "conditions": [{ "type": "Ready", "status": "False", "reason": "Refused",
                    "message": "m", "lastTransitionTime": "2026-11-02T00:00:00Z" }] },
        }))
        .unwrap();
        let cached = CachedShare::from(share);
        let status = cached.status.as_ref().unwrap();
        assert!(status.owner_uid.is_some() && status.grantee_uids.len() == 1);
        assert!(status.ready.as_ref().is_some_and(|r| !r.status));

        let record = cached.record();
        let back = CachedShare::from_record(Some("user-alice"), "pairing", &record);
        assert_eq!(back, cached, "every field the cache keeps comes back");
        let json = cached.fields_json();
        assert!(
            record.heap_bytes() < json.len() * 2 / 3,
            "{} bytes compressed from {} of JSON",
            record.heap_bytes(),
            json.len()
        );
        assert!(
            !String::from_utf8(json).unwrap().contains("user-alice"),
            "the key is not kept twice"
        );

        let mut fraction = cached.clone();
        fraction.spec.expires_at =
            serde_json::from_value(json!("2026-12-01T00:00:00.75Z")).unwrap();
        let back = CachedShare::from_record(Some("user-alice"), "pairing", &fraction.record());
        let lost = fraction
            .spec
            .expires_at
            .0
            .duration_since(back.spec.expires_at.0);
        assert!(
            lost.is_positive() && lost.as_secs() == 0,
            "a fraction of a second comes back earlier, by less than a second: {lost}"
        );
    }

    #[test]
    fn a_cached_guard_keeps_its_facts_and_the_print_of_its_spec() {
        use crate::plan::desired::desired_network_policy;
        let alice = User::test("alice");
        let desired = desired_network_policy(&alice, "user-alice", &["shared".to_owned()]);
        let delivered = |edit: &dyn Fn(&mut serde_json::Value)| -> CachedNetworkPolicy {
            let mut stored = serde_json::to_value(&desired).unwrap();
            stored["metadata"]["resourceVersion"] = json!("7");
            stored["metadata"]["labels"]["added-by-someone"] = json!("x");
            edit(&mut stored);
            serde_json::from_value(stored).unwrap()
        };
        let cached = delivered(&|_| {});
        assert!(cached.matches(&desired), "others' labels are left alone");
        assert!(cached.labelled_for(&alice) && !cached.labelled_for(&User::test("bob")));
        assert_eq!(cached.user().map(|u| u.name).as_deref(), Some("alice"));
        assert!(cached.workspace().is_none());
        let back = CachedNetworkPolicy::from_record(Some("user-alice"), "p", &cached.record());
        assert!(back.matches(&desired) && back.labelled_for(&alice) && back.user().is_some());

        let opened = delivered(&|p| p["spec"]["ingress"] = json!([{}]));
        assert!(
            !opened.matches(&desired),
            "a tenant's edit of the spec is drift"
        );
        let unlabelled = delivered(&|p| {
            p["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(LABEL_USER);
        });
        assert!(!unlabelled.matches(&desired) && !unlabelled.labelled_for(&alice));
    }
}
