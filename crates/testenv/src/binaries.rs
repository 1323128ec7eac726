//! The control plane's binaries: built from the Go modules pinned in `tools/control-plane/` into
//! a version-keyed cache, once, or taken from `KUBEBUILDER_ASSETS` (the envtest convention).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Runs `tools/control-plane/build.sh` (a no-op when the binaries are cached) and returns the
/// directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` and `kubectl`.
///
/// # Errors
/// [`Error::Build`] when the Go build fails; its output goes to this process's stderr.
pub fn binaries() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| run_build_script("tools/control-plane/build.sh"))
        .clone()
        .map_err(Error::Build)
}

/// Runs the script at `relative` (to the repository root), its stderr going to ours, and returns
/// the directory it prints on stdout.
pub(crate) fn run_build_script(relative: &str) -> std::result::Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} exited with {}", script.display(), out.status));
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(format!("{} printed no directory", script.display()));
    }
    Ok(PathBuf::from(dir))
}
