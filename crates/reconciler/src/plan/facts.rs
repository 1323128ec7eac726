//! What an object's labels, annotations and owner references say, kept as fingerprints
//! ([`Facts`]): the form in which the caches keep the metadata of Namespaces, RoleBindings,
//! LimitRanges and NetworkPolicies (see [`crate::state::cache`]), and what ownership is decided on. A fingerprint is keyed with
//! a per-process random key, so nobody can craft a label that collides with another on
//! purpose. Pure.

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Owner references Homestead makes point to Users of this API group (`homestead.dev/...`);
/// only those are compared, as owner references to anything else were added by other writers.
const USER_API_GROUP: &str = "homestead.dev/";

/// The key of every fingerprint this process takes.
static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// One thing an object's metadata says, as fingerprinted in [`Facts`].
#[derive(Hash)]
enum Fact<'a> {
    Label(&'a str, &'a str),
    Annotation(&'a str, &'a str),
    UserOwner(&'a str),
}

impl Fact<'_> {
    fn print(&self) -> u64 {
        KEY.hash_one(self)
    }
}

/// A 64-bit fingerprint of `value` (see the module docs), for comparing fields such as a
/// RoleBinding's subjects without keeping them.
pub fn print(value: &impl Hash) -> u64 {
    KEY.hash_one(value)
}

/// What an object's labels, annotations and owner references say, as the cache keeps them:
/// sorted fingerprints of every label and annotation (key with value) and of every owner
/// reference to a User (by uid).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    prints: Box<[u64]>,
    /// How many of `prints` are owner references to Users.
    user_owners: usize,
}

impl Facts {
    /// The facts of `meta`.
    pub fn of(meta: &ObjectMeta) -> Self {
        let labels = meta.labels.iter().flatten();
        let annotations = meta.annotations.iter().flatten();
        let owners = user_owner_uids(meta);
        let user_owners = owners.clone().count();
        let mut prints: Vec<u64> = labels
            .map(|(k, v)| Fact::Label(k, v).print())
            .chain(annotations.map(|(k, v)| Fact::Annotation(k, v).print()))
            .chain(owners.map(|uid| Fact::UserOwner(uid).print()))
            .collect();
        prints.sort_unstable();
        Self {
            prints: prints.into(),
            user_owners,
        }
    }

    fn has(&self, fact: &Fact<'_>) -> bool {
        self.prints.binary_search(&fact.print()).is_ok()
    }

    /// Whether the object has the label `key=value`.
    pub fn has_label(&self, key: &str, value: &str) -> bool {
        self.has(&Fact::Label(key, value))
    }

    /// Whether the object has the annotation `key: value`.
    pub fn has_annotation(&self, key: &str, value: &str) -> bool {
        self.has(&Fact::Annotation(key, value))
    }

    /// Whether these facts already hold what `desired` asks: every desired label and
    /// annotation with its value (keys others added are left alone), and exactly the desired
    /// owner references to Users (by uid; a missing or extra one is drift).
    pub fn include(&self, desired: &ObjectMeta) -> bool {
        let labels = desired.labels.iter().flatten();
        let annotations = desired.annotations.iter().flatten();
        labels
            .into_iter()
            .all(|(k, v)| self.has(&Fact::Label(k, v)))
            && annotations
                .into_iter()
                .all(|(k, v)| self.has(&Fact::Annotation(k, v)))
            && user_owner_uids(desired).count() == self.user_owners
            && user_owner_uids(desired).all(|uid| self.has(&Fact::UserOwner(uid)))
    }
}

/// The uids of `meta`'s owner references to Users.
fn user_owner_uids(meta: &ObjectMeta) -> impl Iterator<Item = &str> + Clone {
    meta.owner_references
        .iter()
        .flatten()
        .filter(|o| o.api_version.starts_with(USER_API_GROUP))
        .map(|o| o.uid.as_str())
}
