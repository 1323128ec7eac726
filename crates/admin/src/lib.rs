//! Homestead's admin commands, as a library the `homestead` binary calls with the arguments it
//! parsed ([`args`]): each `run` talks to the cluster those arguments choose, prints its report
//! on stdout and returns the process's exit code (docs/operations.md, "Exit codes and output").
//!
//! - [`doctor`]: checks a live cluster as the platform team would before go-live.
//! - [`adopt`]: hands existing namespaces to Users.
//! - [`access`]: where every access to a Homestead namespace comes from.
//! - [`release`]: releases every person before Homestead's CRDs are removed.
//! - [`import`]: a roster (CSV) to Users.
//! - [`share`]: creates a Share as the person sharing.
//! - [`workspace`]: creates a personal Workspace as the person.
//! - [`probe`]: what the Pods of doctor's isolation check run.

pub mod access;
pub mod adopt;
pub mod args;
pub mod doctor;
pub mod import;
pub mod probe;
pub mod release;
pub mod share;
pub mod workspace;
