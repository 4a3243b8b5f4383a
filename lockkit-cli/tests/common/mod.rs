//! Helpers for the end-to-end tests: the built `lockkit` binary as real processes, bounded
//! waits on conditions, and clean-up that leaves no process behind.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::process::{Child, Command};

/// The exit codes the binary documents.
pub const USAGE: i32 = 64;
pub const UNAVAILABLE: i32 = 69;
pub const LOST: i32 = 70;
pub const BUSY: i32 = 73;
pub const TIMEOUT: i32 = 75;
pub const NOT_FOUND: i32 = 127;

/// The URL of the Redis server these tests share.
pub async fn redis_url() -> String {
    lockkit_testkit::fixture::RedisServer::shared().await.expect("redis-server starts").url()
}

/// The URL of the ZooKeeper server these tests share.
pub async fn zk_url() -> String {
    format!("zk://{}", lockkit_testkit::fixture::ZkServer::shared().await.expect("ZooKeeper starts").connect_string())
}

/// A lock name no other test (nor an earlier run on an external server) uses.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("cli-{what}-{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A running `lockkit` process, in a process group of its own. Dropping it kills the whole
/// group (lockkit and its command), so that a failing test leaves nothing behind.
pub struct Lockkit {
    child: Option<Child>,
    pid: Pid,
    started: Instant,
}

/// What a finished `lockkit` process left.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From the spawn to the exit.
    pub elapsed: Duration,
}

/// Starts `lockkit ARGS…` with no `LOCKKIT_URL`, stdin closed and output captured.
pub fn spawn(args: &[&str]) -> Lockkit {
    spawn_with(args, &[])
}

/// Starts `lockkit ARGS…` with extra environment variables.
pub fn spawn_with(args: &[&str], env: &[(&str, &str)]) -> Lockkit {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockkit"));
    command
        .args(args)
        .env_remove("LOCKKIT_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().expect("the lockkit binary starts");
    let pid = child.id().and_then(|id| Pid::from_raw(id as i32)).expect("a running child has a pid");
    Lockkit { child: Some(child), pid, started: Instant::now() }
}

/// Runs `lockkit ARGS…` to its end, which must come within `within`.
pub async fn run(args: &[&str], within: Duration) -> Finished {
    spawn(args).finish(within).await
}

impl Lockkit {
    /// lockkit's process id.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Sends `signal` to lockkit itself (not to its command).
    pub fn signal(&self, signal: Signal) {
        kill_process(self.pid, signal).expect("lockkit is alive to be signalled");
    }

    /// Waits for the exit, which must come within `within`, and collects the output.
    pub async fn finish(mut self, within: Duration) -> Finished {
        let child = self.child.take().expect("finish is called once");
        let output = tokio::time::timeout(within, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("lockkit did not exit within {within:?}"))
            .expect("lockkit's output can be read");
        Finished {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for Lockkit {
    fn drop(&mut self) {
        // The group is lockkit's pid; it may already be gone.
        let _ = kill_process_group(self.pid, Signal::KILL);
    }
}

/// Waits until `path` holds a complete line (written by a command under the lock) and
/// returns it without the newline.
pub async fn line_in(path: &Path, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Some(line) = text.lines().next()
            && text.ends_with('\n')
        {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "{} got no line within {within:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `lockkit status NAME --url URL --json`, parsed.
pub async fn status_json(name: &str, url: &str) -> serde_json::Value {
    let out = run(&["status", name, "--url", url, "--json"], Duration::from_secs(20)).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("status --json printed no JSON ({e}): {out:?}"))
}

/// A command for `sh -c` that writes its fencing token to `marker` and then sleeps (as the
/// same process, so that signals to it reach the sleep).
pub fn hold_script(marker: &Path) -> String {
    format!("echo \"$LOCKKIT_FENCING_TOKEN\" > '{}'; exec sleep 60", marker.display())
}

/// Starts a `lockkit run` that holds `name` on `url` until it is signalled, and waits until
/// its command runs; returns the process and the fencing token.
pub async fn hold(name: &str, url: &str, extra: &[&str], dir: &Path) -> (Lockkit, u64) {
    let marker = dir.join(format!("{name}.held"));
    let script = hold_script(&marker);
    let mut args = vec!["run", name, "--url", url];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let holder = spawn(&args);
    let token = line_in(&marker, Duration::from_secs(20)).await.parse().expect("the token is a number");
    (holder, token)
}

/// Stops a holder started by [`hold`] with SIGTERM and checks that it exits 143.
pub async fn stop(holder: Lockkit) {
    holder.signal(Signal::TERM);
    let out = holder.finish(Duration::from_secs(10)).await;
    assert_eq!(out.code, Some(143), "{out:?}");
}

/// Whether process `pid` has ended: it no longer exists, or it is a zombie that nobody reaped
/// yet (an orphan waits for init, which in a container may reap late or never).
pub fn has_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold spaces.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => Pid::from_raw(pid).is_none_or(|pid| rustix::process::test_kill_process(pid).is_err()),
    }
}

/// Waits until every process in `pids` has ended, for at most `within`.
pub async fn all_end(pids: &[i32], within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while let Some(alive) = pids.iter().find(|pid| !has_ended(**pid)) {
        assert!(Instant::now() < deadline, "{what}: process {alive} still runs after {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
