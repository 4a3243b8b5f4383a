//! End-to-end tests of `lockkit break`: a real `lockkit run` holds a lock on files, a real
//! redis-server, a real ZooKeeper server and a real PostgreSQL server, another `lockkit`
//! breaks it, and the holder's command is stopped for the loss while a later owner gets a
//! greater token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use lockkit_testkit::fixture::PostgresServer;

const LONG: Duration = Duration::from_secs(30);

/// Exit codes of `lockkit break`.
const NOTHING_TO_BREAK: i32 = 1;
const DECLINED: i32 = 2;

fn file_url(dir: &Path) -> String {
    format!("file://{}?check_every=200ms", dir.display())
}

/// A lock held by `lockkit run` on a `file://` store in a directory of its own.
struct FileHold {
    /// The store's directory, kept as long as the test runs.
    _dir: tempfile::TempDir,
    url: String,
    name: String,
    holder: Lockkit,
    token: u64,
}

/// A fresh lock named after `what`, held on a `file://` store of its own.
async fn held_on_file(what: &str) -> FileHold {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    let name = unique(what);
    let (holder, token) = hold(&name, &url, &[], dir.path()).await;
    FileHold { _dir: dir, url, name, holder, token }
}

/// Holds a lock with `lockkit run`, breaks it with `lockkit break --yes`, and checks what the
/// operator is shown, that the holder exits 70 (lost) within `lost_within`, and that the next
/// owner's token is greater.
async fn break_a_held_lock(url: &str, holder_extra: &[&str], lost_within: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("break");
    let (holder, token) = hold(&name, url, holder_extra, dir.path()).await;

    let out = run(&["break", &name, "--url", url, "--yes"], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("held:    yes"), "the holder is shown first: {out:?}");
    assert!(out.stdout.contains(&format!("broke:   token {token} (exclusive)")), "{out:?}");
    assert!(out.stdout.contains("is free"), "{out:?}");

    let lost = holder.finish(lost_within).await;
    assert_eq!(lost.code, Some(LOST), "the holder's lockkit stops its command for the loss: {lost:?}");
    assert!(lost.stderr.contains("lost"), "{lost:?}");

    let next =
        run(&["run", &name, "--url", url, "--no-wait", "--", "sh", "-c", "echo $LOCKKIT_FENCING_TOKEN"], LONG).await;
    assert_eq!(next.code, Some(0), "{next:?}");
    let next_token: u64 = next.stdout.trim().parse().expect("a token");
    assert!(next_token > token, "the next owner's token {next_token} is greater than the broken {token}");
}

/// A free lock: "nothing to break" and its own exit code, with or without --yes.
async fn nothing_to_break(url: &str) {
    let name = unique("free");
    for args in [&["break", &name, "--url", url, "--yes"][..], &["break", &name, "--url", url]] {
        let out = run(args, LONG).await;
        assert_eq!(out.code, Some(NOTHING_TO_BREAK), "{out:?}");
        assert!(out.stdout.contains("nothing to break"), "{out:?}");
    }
}

#[tokio::test]
async fn break_frees_a_held_lock_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    // The holder's checker looks every 200 ms.
    break_a_held_lock(&url, &[], Duration::from_secs(10)).await;
    nothing_to_break(&url).await;
}

#[tokio::test]
async fn break_frees_a_held_lock_on_redis() {
    let url = redis_url().await;
    // A lease of 3 s is renewed every second: the loss comes at the next renewal.
    break_a_held_lock(&url, &["--lease", "3s"], Duration::from_secs(10)).await;
    nothing_to_break(&url).await;
}

#[tokio::test]
async fn break_frees_a_held_lock_on_zookeeper() {
    let url = zk_url().await;
    // The holder's deletion watch fires at once.
    break_a_held_lock(&url, &[], Duration::from_secs(10)).await;
    nothing_to_break(&url).await;
}

#[tokio::test]
async fn break_frees_a_held_lock_on_postgres() {
    let url = PostgresServer::shared().await.expect("PostgreSQL starts").url();
    // A lease of 3 s is renewed every second: the loss comes at the next renewal, which finds
    // the row gone.
    break_a_held_lock(&url, &["--lease", "3s"], Duration::from_secs(10)).await;
    nothing_to_break(&url).await;
}

/// Without a terminal and without --yes, `break` refuses with a clear message and leaves the
/// holder alone.
#[tokio::test]
async fn break_without_a_terminal_needs_yes() {
    let FileHold { _dir, url, name, holder, token } = held_on_file("ask").await;
    let out = run(&["break", &name, "--url", &url], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    assert!(out.stderr.contains("--yes") && out.stderr.contains("terminal"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["token"], token, "{status}");
    stop(holder).await;
}

/// A bad lock name is a usage error before anything is asked of the store.
#[tokio::test]
async fn break_of_a_bad_name_is_a_usage_error() {
    let out = run(&["break", "", "--url", "mem://", "--yes"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    assert!(out.stderr.contains("name"), "{out:?}");
}

/// `lockkit break name --url url` on a terminal (a pty from `script(1)`, a failure when it is
/// missing), its input and output piped to the test.
fn break_on_a_terminal(name: &str, url: &str) -> tokio::process::Command {
    assert!(
        Path::new("/usr/bin/script").exists(),
        "the terminal tests need script(1): install it (Debian: `apt-get install bsdutils`)"
    );
    let inner = format!("{} break {name} --url '{url}'", env!("CARGO_BIN_EXE_lockkit"));
    let mut command = tokio::process::Command::new("script");
    command
        .args(["-qec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

/// On a terminal (a pty from `script(1)`), `break` asks first: "n" leaves the holder alone
/// (exit 2), "y" breaks the lock (exit 0) and the holder's `lockkit run` exits 70.
#[tokio::test]
async fn break_on_a_terminal_asks_first() {
    let FileHold { _dir, url, name, holder, token } = held_on_file("tty").await;
    let on_a_terminal = |answer: &'static str| {
        let mut command = break_on_a_terminal(&name, &url);
        async move {
            let mut child = command.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stdin, answer.as_bytes()).await.unwrap();
            let out = tokio::time::timeout(LONG, child.wait_with_output()).await.unwrap().unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let (code, text) = on_a_terminal("n\n").await;
    assert_eq!(code, Some(DECLINED), "{text}");
    assert!(text.contains("[y/N]") && text.contains("not broken"), "{text}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["token"], token, "declined: the holder keeps the lock: {status}");

    let (code, text) = on_a_terminal("y\n").await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("broke:   token {token}")), "{text}");
    let lost = holder.finish(LONG).await;
    assert_eq!(lost.code, Some(LOST), "{lost:?}");
}

/// On a terminal, a lock that changes hands while the person answers is not broken: the new
/// owner keeps it, the new holder is shown, and `break` exits 2 (declined).
#[tokio::test]
async fn break_on_a_terminal_spares_a_new_owner_that_came_while_asking() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let FileHold { _dir, url, name, holder: first, token: first_token } = held_on_file("tty-moved").await;

    let mut breaker = break_on_a_terminal(&name, &url).spawn().unwrap();
    let mut stdin = breaker.stdin.take().unwrap();
    let mut stdout = breaker.stdout.take().unwrap();
    let mut shown = String::new();
    tokio::time::timeout(LONG, async {
        let mut buffer = [0u8; 4096];
        while !shown.contains("[y/N]") {
            let read = stdout.read(&mut buffer).await.unwrap();
            assert!(read > 0, "break ended before asking: {shown}");
            shown.push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("break did not ask within {LONG:?}: {shown}"));
    assert!(shown.contains(&first_token.to_string()), "the first holder is shown: {shown}");

    // While the question waits, the first holder stops and a second one takes the lock.
    stop(first).await;
    let second_dir = tempfile::tempdir().unwrap();
    let (second, second_token) = hold(&name, &url, &[], second_dir.path()).await;
    assert!(second_token > first_token);

    stdin.write_all(b"y\n").await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(LONG, stdout.read_to_string(&mut rest)).await.unwrap().unwrap();
    let code = tokio::time::timeout(LONG, breaker.wait()).await.unwrap().unwrap().code();
    assert_eq!(code, Some(DECLINED), "{shown}{rest}");
    assert!(rest.contains("changed hands") && rest.contains(&second_token.to_string()), "{rest}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["token"], second_token, "the new owner keeps the lock: {status}");
    stop(second).await;
}
