//! Homestead's HR path: people from an HR system or an identity provider become User objects.
//!
//! - [`roster`]: the CSV roster format and its parser.
//! - [`import`]: applying a roster to the cluster (field manager `homestead-import`), with dry
//!   run and prune.
//!
//! - [`scim`]: a SCIM 2.0 service provider (RFC 7643, RFC 7644) for identity providers.
//!
//! Knows no controller: it writes Users, and the operator does the rest.

pub mod import;
pub mod roster;
pub mod scim;
