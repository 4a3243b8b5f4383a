//! Contract 1 and 14 across OS processes: a holder in another process excludes this one, and
//! a killed holder process frees its lock.
//!
//! # How a case gets a second process
//!
//! The case runs its own test binary again ([`std::env::current_exe`]) with the filter
//! `cross_process::__child_contender`, which the [`conformance!`](crate::conformance) macro
//! stamps out next to the cases, plus the environment of [`Harness::child_env`] (so the
//! harness expression, evaluated in the child, reaches the same store) and
//! [`CHILD_LOCK_ENV`] (the lock to take) and [`CHILD_KIND_ENV`] (the kind of hold: these cases
//! run on every kind the mutex cases run on). The child builds a client from its harness,
//! acquires the lock, prints `lockkit-kit-child: ACQUIRED <token>`, waits for a line (or the
//! end) on its standard input, releases, prints `lockkit-kit-child: RELEASED` and exits.
//! Without [`CHILD_LOCK_ENV`] the child entry does nothing, so it passes in normal runs.
//!
//! The parent reads the child's output with bounded waits and kills the child whenever it
//! stops early (`kill_on_drop`), so no case leaves a process behind. Invoke the macro once
//! per test binary: the filter would run the child entry of every invocation.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockkit_core::{Error, FencingToken};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::Ctx;
use crate::harness::{Harness, TestClient};

/// The environment variable that makes the child entry take a lock: the lock's name.
pub const CHILD_LOCK_ENV: &str = "LOCKKIT_KIT_CHILD_LOCK";

/// The kind of hold the child takes (`{:?}` of the parent case's kind): the filter matches
/// the child entry of every run of the mutex cases (the mutex, the write lock, the one-permit
/// semaphore, candidates), and only the one of the parent's kind acts.
pub const CHILD_KIND_ENV: &str = "LOCKKIT_KIT_CHILD_KIND";

/// The test-name filter that selects the child entry in a test binary made by the macro.
pub const CHILD_TEST_FILTER: &str = "cross_process::__child_contender";

/// What starts every line of the child's protocol on its standard output.
const MARK: &str = "lockkit-kit-child:";

/// How long a child may take to start, connect and report its acquisition.
fn start_bound(h: &dyn Harness) -> Duration {
    h.timing().operation * 10
}

/// Contract 1: while a child process holds the lock, this process can neither take it with
/// `try_acquire` nor with a timed acquisition, and `inspect` (when the backend can) reports
/// the child's token; once the child releases, a waiter of this process gets the lock with a
/// greater token.
pub async fn holder_in_another_process_excludes_this_one(h: &dyn Harness) {
    let cx = Ctx::new(h, "holder_in_another_process_excludes_this_one");
    let Some((a, mut child, child_token)) = ChildContender::holding(&cx).await else { return };
    let lock = cx.lock(&a);
    cx.check(
        cx.try_acquire(&lock, "try while the child holds").await.is_none(),
        "a holder in another process excludes try_acquire",
    );
    let outcome = cx
        .within(
            h.timing().operation,
            "a timed acquire while the child holds",
            lock.acquire_timeout(Duration::from_millis(200)),
        )
        .await;
    cx.check(
        matches!(outcome, Err(Error::Timeout { .. })),
        &format!("a timed acquire times out while the child holds: {outcome:?}"),
    );
    if let Some(info) = cx.inspect(&a).await {
        let seen = info.holder().map(|holder| holder.token);
        cx.check(seen == Some(child_token), &format!("inspect reports the child's token {child_token}, not {info:?}"));
    }
    let waiting = tokio::spawn(async move { lock.acquire().await.map(|guard| (guard.token(), guard)) });
    child.release(&cx).await;
    let bound = h.timing().wake + h.timing().operation;
    let (token, guard) = match cx.within(bound, "a waiter here acquires after the child released", waiting).await {
        Ok(Ok(got)) => got,
        other => cx.fail("a waiter here acquires after the child released", format!("{other:?}")),
    };
    cx.check(token > child_token, &format!("token {token} here follows the child's {child_token}"));
    cx.release(guard, "release here").await;
    child.exits_cleanly(&cx).await;
}

/// Contract 14: a holder process that is killed (SIGKILL: no release, no goodbye) frees its
/// lock: at once for a backend without leases (the OS or the connection's end frees it),
/// after the lease or session timeout and not before otherwise. The next holder's token is
/// greater.
pub async fn killed_process_frees_its_lock(h: &dyn Harness) {
    let cx = Ctx::new(h, "killed_process_frees_its_lock");
    let Some((a, mut child, child_token)) = ChildContender::holding(&cx).await else { return };
    let lock = cx.lock(&a);
    cx.check(cx.try_acquire(&lock, "try while the child holds").await.is_none(), "the child holds the lock");
    child.kill(&cx).await;
    let killed_at = Instant::now();
    let guard = cx.acquire_after_death(&lock, killed_at).await;
    cx.check(guard.token() > child_token, &format!("token {} follows the killed child's {child_token}", guard.token()));
    cx.release(guard, "release").await;
}

/// The child side of the cross-process cases; does nothing unless [`CHILD_LOCK_ENV`] is set.
/// Not a behaviour: the macro stamps it out so that the cases can run it in a child process.
#[doc(hidden)]
pub async fn __child_contender(h: &dyn Harness) {
    let Ok(name) = std::env::var(CHILD_LOCK_ENV) else { return };
    let kind = h.mutex_kind();
    if std::env::var(CHILD_KIND_ENV).ok() != Some(format!("{kind:?}")) {
        return;
    }
    let client = match h.client().await {
        Ok(client) => client,
        Err(error) => say_and_panic(&format!("connect a client: {error}")),
    };
    let lock = match client.provider.handle(&name, kind) {
        Ok(lock) => lock,
        Err(error) => say_and_panic(&format!("make a handle for {name:?}: {error}")),
    };
    let guard = match lock.acquire_timeout(h.timing().operation * 3).await {
        Ok(guard) => guard,
        Err(error) => say_and_panic(&format!("acquire {name:?}: {error}")),
    };
    say(&format!("ACQUIRED {}", guard.token()));
    // A line or the end of standard input is the parent's order to release.
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)
    })
    .await;
    match guard.release().await {
        Ok(()) => say("RELEASED"),
        Err(error) => say_and_panic(&format!("release {name:?}: {error}")),
    }
}

fn say(line: &str) {
    use std::io::Write;
    // A new line first: libtest may have printed `test … ... ` without one.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{MARK} {line}");
    let _ = out.flush();
}

fn say_and_panic(error: &str) -> ! {
    say(&format!("ERROR {error}"));
    panic!("the cross-process child failed: {error}");
}

/// A child process running the child entry, seen from the parent.
struct ChildContender {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The protocol lines of the child's standard output (what follows the mark).
    said: mpsc::UnboundedReceiver<String>,
    /// Everything the child printed, for failure messages.
    output: Arc<Mutex<Vec<String>>>,
}

impl ChildContender {
    /// A client of this process, and a child that holds the case's lock with its token; `None`
    /// (after saying why) when the backend does not declare `cross_process` or the harness
    /// cannot make a child.
    async fn holding(cx: &Ctx<'_>) -> Option<(TestClient, Self, FencingToken)> {
        let [client] = cx.clients_declaring("cross_process", |c| c.cross_process).await?;
        let mut child = Self::spawn(cx).await?;
        let token = child.acquired(cx).await;
        Some((client, child, token))
    }

    /// Starts a child that acquires the case's lock; `None` (after saying why) when the
    /// harness cannot make one.
    async fn spawn(cx: &Ctx<'_>) -> Option<Self> {
        let env = match cx.h.child_env() {
            Ok(env) => env,
            Err(_) => {
                cx.unchecked("the harness has no `child_env` hook to reach its store from another process");
                return None;
            }
        };
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(error) => cx.fail("find the test binary", error.to_string()),
        };
        let spawned = Command::new(&exe)
            .args([CHILD_TEST_FILTER, "--nocapture", "--test-threads=1"])
            .envs(env)
            .env(CHILD_LOCK_ENV, &cx.name)
            .env(CHILD_KIND_ENV, format!("{:?}", cx.kind))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => cx.fail("start the child process", format!("{}: {error}", exe.display())),
        };
        let output = Arc::new(Mutex::new(Vec::new()));
        let (tell, said) = mpsc::unbounded_channel();
        if let Some(stdout) = child.stdout.take() {
            let output = output.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some((_, said)) = line.split_once(MARK) {
                        let _ = tell.send(said.trim().to_owned());
                    }
                    output.lock().unwrap_or_else(PoisonError::into_inner).push(line);
                }
            });
        }
        if let Some(stderr) = child.stderr.take() {
            let output = output.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    output.lock().unwrap_or_else(PoisonError::into_inner).push(format!("stderr: {line}"));
                }
            });
        }
        let stdin = child.stdin.take();
        Some(Self { child, stdin, said, output })
    }

    fn output(&self) -> String {
        self.output.lock().unwrap_or_else(PoisonError::into_inner).join("\n")
    }

    /// Waits for the child's next protocol line, which must start with `word`; returns the rest.
    async fn expect(&mut self, cx: &Ctx<'_>, word: &str, bound: Duration) -> String {
        let step = format!("the child reports {word}");
        match tokio::time::timeout(bound, self.said.recv()).await {
            Ok(Some(line)) => match line.strip_prefix(word) {
                Some(rest) => rest.trim().to_owned(),
                None => cx.fail(&step, format!("it said {line:?}; its output:\n{}", self.output())),
            },
            Ok(None) => cx.fail(&step, format!("it ended without saying so; its output:\n{}", self.output())),
            Err(_) => cx.fail(&step, format!("nothing within {bound:?}; its output:\n{}", self.output())),
        }
    }

    /// Waits until the child holds the lock; returns its token.
    async fn acquired(&mut self, cx: &Ctx<'_>) -> FencingToken {
        let token = self.expect(cx, "ACQUIRED", start_bound(cx.h)).await;
        match token.parse::<u64>() {
            Ok(token) => FencingToken::new(token),
            Err(_) => cx.fail("read the child's token", format!("{token:?} is not a token")),
        }
    }

    /// Tells the child to release and waits until it did.
    async fn release(&mut self, cx: &Ctx<'_>) {
        if let Some(mut stdin) = self.stdin.take() {
            // The line, then the end of input: either one makes the child release.
            let _ = stdin.write_all(b"release\n").await;
            let _ = stdin.flush().await;
        }
        self.expect(cx, "RELEASED", cx.h.timing().operation * 2).await;
    }

    /// Kills the child (SIGKILL on Unix) and waits until it is gone.
    async fn kill(&mut self, cx: &Ctx<'_>) {
        if let Err(error) = self.child.kill().await {
            cx.fail("kill the child process", error.to_string());
        }
    }

    /// Waits for the child to exit and checks it succeeded.
    async fn exits_cleanly(mut self, cx: &Ctx<'_>) {
        let status = cx.within(cx.h.timing().operation * 2, "the child exits", self.child.wait()).await;
        match status {
            Ok(status) if status.success() => {}
            other => cx.fail("the child exits cleanly", format!("{other:?}; its output:\n{}", self.output())),
        }
    }
}
