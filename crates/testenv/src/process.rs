//! Supervised child processes that cannot outlive the process that started them.
//!
//! Every control-plane process runs under a small `bash` watchdog. The watchdog stops its child
//! (`SIGTERM`, then `SIGKILL` after 10 seconds) when it receives `SIGTERM` itself (on [`Drop`])
//! or when the process that started it is gone, whatever the reason: a panic, `SIGKILL`, or a
//! test harness exiting without running destructors (Rust never drops statics). It checks twice
//! a second. This needs no `unsafe` (`PR_SET_PDEATHSIG` would).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The watchdog: runs `"$@"` until it gets SIGTERM, the child exits, or its parent is gone;
/// then stops the child, removes `$HOMESTEAD_TESTENV_REMOVE` if set, and exits with the child's
/// status.
const WATCHDOG: &str = r#"
parent=$PPID
stop=0
trap 'stop=1' TERM
"$@" </dev/null &
pid=$!
while [ "$stop" = 0 ] && kill -0 "$pid" 2>/dev/null && kill -0 "$parent" 2>/dev/null; do
  sleep 0.5 &
  wait $!
done
kill -TERM "$pid" 2>/dev/null
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -KILL "$pid" 2>/dev/null
wait "$pid"
rc=$?
if [ -n "${HOMESTEAD_TESTENV_REMOVE:-}" ]; then rm -rf -- "$HOMESTEAD_TESTENV_REMOVE"; fi
exit "$rc"
"#;

/// A process under its watchdog, with stdout and stderr in a log file; stopped on drop.
#[derive(Debug)]
pub struct Supervised {
    pub(crate) name: &'static str,
    pub(crate) log: PathBuf,
    child: Child,
}

impl Supervised {
    /// Starts `program args...` with output appended to `log`. When `remove_on_exit` is set, the
    /// watchdog deletes that directory after the process has stopped.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
        remove_on_exit: Option<&Path>,
    ) -> std::io::Result<Self> {
        Self::spawn_with_env(name, program, args, &[], log, remove_on_exit)
    }

    /// [`Supervised::spawn`] with extra environment variables.
    pub(crate) fn spawn_with_env(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        remove_on_exit: Option<&Path>,
    ) -> std::io::Result<Self> {
        let out = File::create(&log)?;
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg(name)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = remove_on_exit {
            cmd.env("HOMESTEAD_TESTENV_REMOVE", dir);
        }
        let child = cmd.spawn()?;
        Ok(Self { name, log, child })
    }

    /// How the process ended, if it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Whether the process is still running (its watchdog exits as soon as it does).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops the process and waits up to 15 seconds for it (the watchdog escalates to `SIGKILL`
    /// after 10); idempotent.
    pub fn stop(&mut self) {
        if !self.is_running() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!(
            process = self.name,
            "watchdog did not stop in time; killing it"
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last `lines` lines of the process log, for error reports.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}
