//! Homestead's HR path: people from an HR system become User objects.
//!
//! - [`roster`]: the CSV roster format and its parser.
//! - [`import`]: applying a roster to the cluster (field manager `homestead-import`), with dry
//!   run and prune.
//!
//! Knows no controller: it writes Users, and the operator does the rest.

pub mod import;
pub mod roster;
