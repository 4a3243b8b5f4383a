//! Signals to the run's processes (workers, `lockkit`, a store), through kill(1). A leaf.

use std::process::Stdio;

use tokio::process::Command;

/// Sends `signal` (`STOP`, `CONT`) to `pid` with kill(1).
pub(crate) async fn signal(pid: u32, signal: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map_err(|error| format!("cannot run kill(1): {error}"))?;
    if status.success() { Ok(()) } else { Err(format!("kill -s {signal} {pid} failed: {status}")) }
}
