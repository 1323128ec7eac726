//! `homestead probe`: what the Pods of `homestead doctor`'s network isolation check run, from
//! Homestead's own image (docs/operations.md, "Before go-live"). Not for people: hidden from
//! the usage.
//!
//! - `probe serve`: accepts TCP connections and greets each with [`GREETING`].
//! - `probe connect ADDRESS --want reached|blocked`: tries once a second until the outcome is
//!   the one wanted (blocked: [`BLOCKED_IN_A_ROW`] attempts in a row, so a policy that is still
//!   being applied is not taken for one that holds) or the time is up; writes what it saw to
//!   the termination message (`/dev/termination-log`, which the kubelet reports in the Pod's
//!   status) and exits 0 when the outcome was the one wanted, 1 when not.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::args::{ProbeAction, ProbeArgs, ProbeWant};

/// What `probe serve` says to every connection, and `probe connect` expects: a connection that
/// does not say it reached something else.
pub const GREETING: &[u8] = b"homestead-probe\n";

/// How many attempts in a row must fail before `--want blocked` counts the target as blocked.
pub const BLOCKED_IN_A_ROW: u32 = 3;

/// Where the kubelet reads a container's termination message from (the Pod's default
/// `terminationMessagePath`).
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Runs `homestead probe`.
///
/// # Errors
/// `serve`: when the port cannot be bound or accepting fails.
pub async fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        ProbeAction::Serve { port } => serve(port).await,
        ProbeAction::Connect {
            address,
            want,
            within_seconds,
        } => {
            let (met, said) = connect(address, want, Duration::from_secs(within_seconds)).await;
            println!("{said}");
            // Outside a Pod there is no termination log; the line above says it all.
            let _ = std::fs::write(TERMINATION_LOG, &said);
            Ok(if met {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

async fn serve(port: u16) -> anyhow::Result<ExitCode> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)).await?;
    tracing::info!(port, "probe serving");
    loop {
        let (mut stream, peer) = listener.accept().await?;
        tokio::spawn(async move {
            tracing::debug!(%peer, "probe connection");
            let _ = stream.write_all(GREETING).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Tries `address` once a second (each attempt at most a second to connect and a second for
/// the greeting) until the outcome is `want` or `within` has passed. Returns whether it was,
/// and a one-line account of the attempts.
pub async fn connect(address: SocketAddr, want: ProbeWant, within: Duration) -> (bool, String) {
    let started = tokio::time::Instant::now();
    let (mut attempts, mut reached, mut blocked_in_a_row) = (0_u32, 0_u32, 0_u32);
    loop {
        let attempt = tokio::time::Instant::now();
        attempts += 1;
        if greets(address).await {
            reached += 1;
            blocked_in_a_row = 0;
        } else {
            blocked_in_a_row += 1;
        }
        let met = match want {
            ProbeWant::Reached => reached > 0,
            ProbeWant::Blocked => blocked_in_a_row >= BLOCKED_IN_A_ROW,
        };
        let elapsed = started.elapsed();
        if met || elapsed >= within {
            let outcome = if blocked_in_a_row == 0 {
                "reached"
            } else {
                "blocked"
            };
            return (
                met,
                format!(
                    "{address}: {outcome} on the last of {attempts} attempts in {:.1} s ({reached} reached)",
                    elapsed.as_secs_f64()
                ),
            );
        }
        tokio::time::sleep_until(attempt + Duration::from_secs(1)).await;
    }
}

/// Whether a connection to `address` is accepted and greeted with [`GREETING`] within a second
/// each.
async fn greets(address: SocketAddr) -> bool {
    let second = Duration::from_secs(1);
    let Ok(Ok(mut stream)) = tokio::time::timeout(second, TcpStream::connect(address)).await else {
        return false;
    };
    let mut greeting = [0_u8; GREETING.len()];
    matches!(
        tokio::time::timeout(second, stream.read_exact(&mut greeting)).await,
        Ok(Ok(_)) if greeting == GREETING
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let _ = stream.write_all(GREETING).await;
            }
        });
        address
    }

    #[tokio::test]
    async fn a_greeting_server_is_reached_at_once() {
        let address = server().await;
        let (met, said) = connect(address, ProbeWant::Reached, Duration::from_secs(5)).await;
        assert!(met, "{said}");
        assert!(said.contains("reached on the last of 1 attempts"), "{said}");
        let (met, said) = connect(address, ProbeWant::Blocked, Duration::ZERO).await;
        assert!(!met, "{said}");
    }

    #[tokio::test]
    async fn a_closed_port_counts_as_blocked_only_after_attempts_in_a_row() {
        let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = unused.local_addr().unwrap();
        drop(unused);
        let (met, said) = connect(address, ProbeWant::Blocked, Duration::from_secs(10)).await;
        assert!(met, "{said}");
        assert!(
            said.contains(&format!(
                "blocked on the last of {BLOCKED_IN_A_ROW} attempts"
            )),
            "{said}"
        );
        let (met, said) = connect(address, ProbeWant::Reached, Duration::ZERO).await;
        assert!(!met, "{said}");
        assert!(said.contains("(0 reached)"), "{said}");
    }

    #[tokio::test]
    async fn a_server_that_does_not_greet_is_not_taken_for_the_probe() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let _ = stream.write_all(b"SSH-2.0-other\r\n").await;
            }
        });
        let (met, said) = connect(address, ProbeWant::Reached, Duration::ZERO).await;
        assert!(!met, "{said}");
    }
}
