//! End-to-end tests of the `lockkit` binary: real processes against the file backend, a real
//! redis-server and a real ZooKeeper server from the testkit's fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use lockkit_testkit::fixture::free_port;
use rustix::process::{Pid, Signal, test_kill_process};

const LONG: Duration = Duration::from_secs(30);

fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

// ------------------------------------------------------------------ the command

fn unix_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

/// The deadline file follows renewals: the command reads a deadline in the future within the
/// lease, waits (bounded) until lockkit rewrites it, and reads a later one; the file is gone
/// once lockkit has ended.
#[tokio::test]
async fn the_deadline_file_follows_renewals_and_is_removed_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("deadline");
    let url = format!("{}?lease=2s", redis_url().await);
    let d = dir.path().display();
    let script = format!(
        "f=$LOCKKIT_VALID_UNTIL_FILE; echo \"$f\" > {d}/path; first=$(cat \"$f\"); i=0; \
         while [ \"$(cat \"$f\")\" = \"$first\" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; \
         echo \"$first $(cat \"$f\")\""
    );
    let started = unix_ms();
    let out = run(&["run", &name, "--url", &url, "--", "sh", "-c", &script], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let (first, second) = out.stdout.trim().split_once(' ').expect("two deadlines");
    let (first, second): (u128, u128) = (first.parse().unwrap(), second.parse().unwrap());
    assert!(first > started && first <= unix_ms() + 2_000, "the first deadline is within the lease: {first}");
    assert!(second > first, "a renewal moved the deadline: {first} -> {second}");
    let path = std::fs::read_to_string(dir.path().join("path")).unwrap();
    assert!(!Path::new(path.trim()).exists(), "{} is removed when lockkit ends", path.trim());
}

/// A hold without a deadline says `none`; when the hold is lost (broken here), the file says
/// `0` before the command is stopped.
#[tokio::test]
async fn the_deadline_file_says_none_without_a_lease_and_zero_once_lost() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("deadline-lost");
    let url = format!("file://{}?check_every=200ms", dir.path().display());
    let d = dir.path().display();
    let script = format!(
        "trap 'cat \"$LOCKKIT_VALID_UNTIL_FILE\" > {d}/at-term; kill $!; exit 0' TERM; \
         cat \"$LOCKKIT_VALID_UNTIL_FILE\" > {d}/at-start; sleep 30 & wait"
    );
    let holder = spawn(&["run", &name, "--url", &url, "--", "sh", "-c", &script]);
    assert_eq!(line_in(&dir.path().join("at-start"), LONG).await, "none");
    let out = run(&["break", &name, "--url", &url, "--yes"], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lost = holder.finish(LONG).await;
    assert_eq!(lost.code, Some(LOST), "{lost:?}");
    assert_eq!(line_in(&dir.path().join("at-term"), LONG).await, "0", "the file says the hold ended");
}

#[tokio::test]
async fn the_command_sees_the_lock_and_its_token_and_its_exit_code_is_passed_on() {
    let name = unique("env");
    let out = run(
        &["run", &name, "--url", "mem://", "--", "sh", "-c", "echo \"$LOCKKIT_LOCK $LOCKKIT_FENCING_TOKEN\"; exit 7"],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(7), "{out:?}");
    let (lock, token) = out.stdout.trim().split_once(' ').expect("two words");
    assert_eq!(lock, name);
    assert!(token.parse::<u64>().expect("a number") > 0);
    assert_eq!(out.stderr, "", "nothing to say on success");
}

/// The command gets what a fenced store needs (the SQL function `lockkit_fence.fence`, or
/// `Fence::from_env`): the lock's identity (its store, without credentials, and its name) and
/// the mode, a write for a lock and a read for `--shared`; `store_id` names the store.
#[tokio::test]
async fn the_command_gets_the_fence_of_its_hold() {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("fence");
    let script = "echo \"$LOCKKIT_LOCK_ID|$LOCKKIT_FENCE_MODE|$LOCKKIT_FENCING_TOKEN\"";
    let url = file_url(dir.path());
    let out = run(&["run", &name, "--url", &url, "--", "sh", "-c", script], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let fields: Vec<&str> = out.stdout.trim().split('|').collect();
    let [lock_id, mode, token] = fields.as_slice() else { panic!("three fields: {out:?}") };
    assert!(lock_id.starts_with("file:///") && lock_id.ends_with(&format!("#{name}")), "{lock_id}");
    assert_eq!(*mode, "write");
    assert!(token.parse::<u64>().expect("a number") > 0);
    let out = run(&["run", &name, "--url", &url, "--shared", "--", "sh", "-c", script], LONG).await;
    assert!(out.stdout.contains("|read|"), "a reader fences as a read: {out:?}");
    let named = format!("{url}?store_id=ledger-files");
    let out = run(&["run", &name, "--url", &named, "--", "sh", "-c", script], LONG).await;
    assert!(out.stdout.starts_with(&format!("ledger-files#{name}|write|")), "{out:?}");
}

#[tokio::test]
async fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
    let out = run(&["run", "x", "--url", "mem://", "--", "sh", "-c", "kill -KILL $$"], LONG).await;
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
}

#[tokio::test]
async fn a_missing_command_exits_127_and_a_missing_argument_is_a_usage_error() {
    let out = run(&["run", "x", "--url", "mem://", "--", "no-such-command-lockkit"], LONG).await;
    assert_eq!(out.code, Some(NOT_FOUND), "{out:?}");
    assert!(out.stderr.contains("no-such-command-lockkit"), "{out:?}");
    let out = run(&["run", "x", "--url", "mem://"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
}

#[tokio::test]
async fn tokens_increase_across_runs_on_redis() {
    let url = redis_url().await;
    let name = unique("tokens");
    let mut last = 0;
    for _ in 0..3 {
        let out = run(&["run", &name, "--url", &url, "--", "sh", "-c", "echo $LOCKKIT_FENCING_TOKEN"], LONG).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let token: u64 = out.stdout.trim().parse().expect("a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

// ------------------------------------------------------------------ contention

/// Three `lockkit run` processes on one lock: each command appends `start T` and `end T` to
/// one file around a pause. The lines must come in pairs (never overlapping), with tokens
/// strictly increasing, and no waiting line on a stderr that is not a terminal.
async fn contenders_take_turns(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let name = unique("turns");
    let script = format!(
        "echo \"start $LOCKKIT_FENCING_TOKEN\" >> '{log}'; sleep 0.3; echo \"end $LOCKKIT_FENCING_TOKEN\" >> '{log}'",
        log = log.display()
    );
    let contenders: Vec<Lockkit> =
        (0..3).map(|_| spawn(&["run", &name, "--url", url, "--", "sh", "-c", &script])).collect();
    for contender in contenders {
        let out = contender.finish(LONG).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(!out.stderr.contains("waiting for lock"), "progress on a non-terminal: {out:?}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let mut last = 0;
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").unwrap_or_else(|| panic!("overlap:\n{text}"));
        let end = pair[1].strip_prefix("end ").unwrap_or_else(|| panic!("overlap:\n{text}"));
        assert_eq!(start, end, "overlap:\n{text}");
        let token: u64 = start.parse().unwrap();
        assert!(token > last, "tokens not increasing:\n{text}");
        last = token;
    }
}

#[tokio::test]
async fn contenders_take_turns_on_files() {
    let dir = tempfile::tempdir().unwrap();
    contenders_take_turns(&file_url(dir.path())).await;
}

#[tokio::test]
async fn contenders_take_turns_on_redis() {
    contenders_take_turns(&redis_url().await).await;
}

#[tokio::test]
async fn contenders_take_turns_on_zookeeper() {
    contenders_take_turns(&zk_url().await).await;
}

/// `--no-wait` on a held lock exits 73 at once; `--wait 300ms` exits 75 close to 300 ms.
async fn busy_and_timeout(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("busy");
    let (holder, token) = hold(&name, url, &[], dir.path()).await;

    let out = run(&["run", &name, "--url", url, "--no-wait", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(BUSY), "{out:?}");
    assert!(out.stderr.contains(&format!("{name:?}")) && out.stderr.contains("held"), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(3), "--no-wait took {:?}", out.elapsed);

    let out = run(&["run", &name, "--url", url, "--wait", "300ms", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(TIMEOUT), "{out:?}");
    assert!(out.stderr.contains(&format!("{name:?}")) && out.stderr.contains("300ms"), "{out:?}");
    assert!(
        out.elapsed >= Duration::from_millis(300) && out.elapsed < Duration::from_millis(2300),
        "--wait 300ms took {:?}",
        out.elapsed
    );
    if url.starts_with("redis") || url.starts_with("zk") {
        assert!(out.stderr.contains(&format!("held by token {token}")), "{out:?}");
    }
    stop(holder).await;
}

#[tokio::test]
async fn busy_and_timeout_on_files() {
    let dir = tempfile::tempdir().unwrap();
    busy_and_timeout(&file_url(dir.path())).await;
}

#[tokio::test]
async fn busy_and_timeout_on_redis() {
    busy_and_timeout(&redis_url().await).await;
}

#[tokio::test]
async fn busy_and_timeout_on_zookeeper() {
    busy_and_timeout(&zk_url().await).await;
}

// ------------------------------------------------------------------ shared and permits

/// Two `--shared` commands hold NAME at once; an exclusive one waits (`--no-wait`: 73), and
/// `lockkit status` lists both readers.
async fn shared_holders_run_together(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("shared");
    let (first, _) = hold(&name, url, &["--shared"], dir.path()).await;
    let second_dir = dir.path().join("second");
    std::fs::create_dir(&second_dir).unwrap();
    let (second, _) = hold(&name, url, &["--shared"], &second_dir).await;
    let out = run(&["run", &name, "--url", url, "--no-wait", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(BUSY), "an exclusive run waits for the readers: {out:?}");
    let status = run(&["status", &name, "--url", url, "--json"], LONG).await;
    assert_eq!(status.code, Some(0), "{status:?}");
    let json: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    let kinds: Vec<&str> = json["holders"].as_array().unwrap().iter().filter_map(|h| h["kind"].as_str()).collect();
    assert_eq!(kinds, ["read", "read"], "{json}");
    stop(first).await;
    stop(second).await;
}

/// `--permits 2`: two commands hold a permit at once, a third waits (`--no-wait`: 73), and a
/// run that gives another count is a usage error.
async fn permits_bound_the_runs(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("permits");
    let (first, _) = hold(&name, url, &["--permits", "2"], dir.path()).await;
    let second_dir = dir.path().join("second");
    std::fs::create_dir(&second_dir).unwrap();
    let (second, _) = hold(&name, url, &["--permits", "2"], &second_dir).await;
    let out = run(&["run", &name, "--url", url, "--permits", "2", "--no-wait", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(BUSY), "a third permit of two: {out:?}");
    let out = run(&["run", &name, "--url", url, "--permits", "3", "--no-wait", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "another count while the semaphore is in use: {out:?}");
    assert!(out.stderr.contains("permits"), "{out:?}");
    let out = run(&["run", &name, "--url", url, "--permits", "0", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    stop(first).await;
    stop(second).await;
}

#[tokio::test]
async fn shared_holders_run_together_on_redis() {
    shared_holders_run_together(&redis_url().await).await;
}

#[tokio::test]
async fn shared_holders_run_together_on_files() {
    let dir = tempfile::tempdir().unwrap();
    shared_holders_run_together(&file_url(dir.path())).await;
}

#[tokio::test]
async fn permits_bound_the_runs_on_zookeeper() {
    permits_bound_the_runs(&zk_url().await).await;
}

#[tokio::test]
async fn permits_bound_the_runs_on_redis() {
    permits_bound_the_runs(&redis_url().await).await;
}

// ------------------------------------------------------------------ elections

/// Two `lockkit elect` candidates: the first leads and runs its command with the term as its
/// token, the second waits; `lockkit leader` names the first; when the first stops, the second
/// leads with a greater term, and a `lockkit leader --watch` started at the beginning printed
/// both leaders in order.
async fn elect_and_follow(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("elect");
    let watcher = spawn(&["leader", &name, "--url", url, "--watch", "--json"]);
    let first_marker = dir.path().join("first.held");
    let first =
        spawn(&["elect", &name, "--url", url, "--id", "first:1", "--", "sh", "-c", &hold_script(&first_marker)]);
    let first_term: u64 = line_in(&first_marker, Duration::from_secs(20)).await.parse().unwrap();
    let second_marker = dir.path().join("second.held");
    let second =
        spawn(&["elect", &name, "--url", url, "--id", "second:2", "--", "sh", "-c", &hold_script(&second_marker)]);
    let out = run(&["leader", &name, "--url", url, "--json"], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let now: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!((now["identity"].as_str(), now["term"].as_u64()), (Some("first:1"), Some(first_term)), "{now}");
    assert!(!second_marker.exists(), "the second candidate waits while the first leads");
    stop(first).await;
    let second_term: u64 = line_in(&second_marker, Duration::from_secs(20)).await.parse().unwrap();
    assert!(second_term > first_term, "the next term is greater: {second_term} after {first_term}");
    stop(second).await;
    // The watcher saw the first leader, then the second (a vacancy may show between them).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(&["leader", &name, "--url", url, "--json"], LONG).await;
        if out.stdout.contains("\"vacant\"") || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.signal(Signal::TERM);
    let watched = watcher.finish(LONG).await;
    let identities: Vec<String> = watched
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|event| event["identity"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(identities, ["first:1", "second:2"], "{watched:?}");
}

#[tokio::test]
async fn elect_and_follow_on_files() {
    let dir = tempfile::tempdir().unwrap();
    elect_and_follow(&file_url(dir.path())).await;
}

#[tokio::test]
async fn permits_bound_the_runs_on_files() {
    let dir = tempfile::tempdir().unwrap();
    permits_bound_the_runs(&file_url(dir.path())).await;
}

#[tokio::test]
async fn elect_and_follow_on_redis() {
    elect_and_follow(&redis_url().await).await;
}

#[tokio::test]
async fn elect_and_follow_on_zookeeper() {
    elect_and_follow(&zk_url().await).await;
}

// ------------------------------------------------------------------ loss

async fn delete_record(url: &str, name: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let deleted: i64 = redis::cmd("DEL").arg(format!("lockkit:{{{name}}}")).query_async(&mut admin).await.unwrap();
    assert_eq!(deleted, 1, "the lock record was there to delete");
}

/// The lock's record is deleted behind the holder's back: the renewal finds it gone, the
/// command gets SIGTERM, ignores it, and gets SIGKILL after the grace period.
#[tokio::test]
async fn a_command_that_ignores_sigterm_after_a_loss_is_killed_after_the_grace() {
    let url = redis_url().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("lost-stubborn");
    let (pid_file, marker) = (dir.path().join("pid"), dir.path().join("marker"));
    let script = format!(
        "echo $$ > '{}'; trap '' TERM; echo \"$LOCKKIT_FENCING_TOKEN\" > '{}'; exec sleep 60",
        pid_file.display(),
        marker.display()
    );
    let holder = spawn(&["run", &name, "--url", &url, "--lease", "1s", "--grace", "700ms", "--", "sh", "-c", &script]);
    line_in(&marker, LONG).await;
    let pid: i32 = line_in(&pid_file, LONG).await.parse().unwrap();

    delete_record(&url, &name).await;
    let lost_at = Instant::now();
    let out = holder.finish(LONG).await;
    let took = lost_at.elapsed();
    assert_eq!(out.code, Some(LOST), "{out:?}");
    assert!(out.stderr.contains("lost") && out.stderr.contains(&format!("{name:?}")), "{out:?}");
    assert!(out.stderr.contains("SIGKILL"), "{out:?}");
    // Seen within a renewal period (lease/3), then the whole grace: SIGTERM was ignored.
    assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(5), "took {took:?}");
    let pid = Pid::from_raw(pid).unwrap();
    assert!(test_kill_process(pid).is_err(), "the command is gone");
}

/// With `--kill-group`, a loss stops the processes the command started too: a shell's
/// background child, which SIGTERM to the shell alone would leave running without the lock.
#[tokio::test]
async fn kill_group_stops_the_commands_children_after_a_loss() {
    let url = redis_url().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("lost-group");
    let (pid_file, marker) = (dir.path().join("grandchild"), dir.path().join("marker"));
    let script = format!(
        "sleep 60 & echo $! > '{}'; echo \"$LOCKKIT_FENCING_TOKEN\" > '{}'; wait",
        pid_file.display(),
        marker.display()
    );
    let args =
        ["run", &name, "--url", &url, "--lease", "1s", "--grace", "5s", "--kill-group", "--", "sh", "-c", &script];
    let holder = spawn(&args);
    line_in(&marker, LONG).await;
    let grandchild = Pid::from_raw(line_in(&pid_file, LONG).await.parse().unwrap()).unwrap();
    delete_record(&url, &name).await;
    let out = holder.finish(LONG).await;
    assert_eq!(out.code, Some(LOST), "{out:?}");
    // The grandchild was signalled with its group; it is gone once reaped by init, which may
    // take a moment after the group's SIGTERM.
    let deadline = Instant::now() + LONG;
    while test_kill_process(grandchild).is_ok() {
        assert!(Instant::now() < deadline, "the command's background child outlived the lost lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A command that obeys SIGTERM stops at once after a loss, long before the grace ends.
#[tokio::test]
async fn a_command_is_stopped_with_sigterm_when_the_lock_is_lost() {
    let url = redis_url().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("lost");
    let (holder, _) = hold(&name, &url, &["--lease", "1s", "--grace", "30s"], dir.path()).await;
    delete_record(&url, &name).await;
    let lost_at = Instant::now();
    let out = holder.finish(LONG).await;
    assert_eq!(out.code, Some(LOST), "{out:?}");
    assert!(!out.stderr.contains("SIGKILL after 30s;"), "{out:?}");
    assert!(lost_at.elapsed() < Duration::from_secs(5), "took {:?}: SIGTERM was not sent", lost_at.elapsed());
}

// ------------------------------------------------------------------ a killed lockkit

/// SIGKILL of `lockkit run` while its command runs: the command dies with it (the
/// parent-death signal set by `lockkit __child`), and with `--kill-group` so does a background
/// child of the command. Both are gone within a bounded wait.
async fn a_killed_lockkit_takes_its_command_with_it(url: &str, group: bool) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("killed");
    let (command_pid, background_pid, marker) =
        (dir.path().join("command"), dir.path().join("background"), dir.path().join("marker"));
    // The command writes its pid, starts a background child (the grandchild, off lockkit's
    // output pipes so that an orphan does not hold them open) and waits; both would sleep for a
    // minute.
    let script = format!(
        "echo $$ > '{}'; sleep 60 > /dev/null 2>&1 & echo $! > '{}'; echo \"$LOCKKIT_FENCING_TOKEN\" > '{}'; wait",
        command_pid.display(),
        background_pid.display(),
        marker.display()
    );
    let mut args = vec!["run", &name, "--url", url];
    if group {
        args.push("--kill-group");
    }
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let holder = spawn(&args);
    line_in(&marker, LONG).await;
    let command: i32 = line_in(&command_pid, LONG).await.parse().unwrap();
    let background: i32 = line_in(&background_pid, LONG).await.parse().unwrap();
    assert!(!has_ended(command) && !has_ended(background), "the command runs under the lock");

    holder.signal(Signal::KILL);
    // The processes first: a surviving command would keep lockkit's output pipes open.
    all_end(&[command], Duration::from_secs(5), "the command of a killed lockkit").await;
    if group {
        all_end(&[background], Duration::from_secs(5), "the command's child of a killed lockkit --kill-group").await;
    } else {
        // Without --kill-group only the command is lockkit's to stop; the orphan is ours.
        let _ = rustix::process::kill_process(Pid::from_raw(background).unwrap(), Signal::KILL);
    }
    let out = holder.finish(LONG).await;
    assert_eq!(out.code, None, "lockkit was killed: {out:?}");
}

#[tokio::test]
async fn a_killed_lockkit_takes_its_command_with_it_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    a_killed_lockkit_takes_its_command_with_it(&url, false).await;
    a_killed_lockkit_takes_its_command_with_it(&url, true).await;
}

#[tokio::test]
async fn a_killed_lockkit_takes_its_command_with_it_on_redis() {
    let url = redis_url().await;
    a_killed_lockkit_takes_its_command_with_it(&url, false).await;
    a_killed_lockkit_takes_its_command_with_it(&url, true).await;
}

#[tokio::test]
async fn a_killed_lockkit_takes_its_command_with_it_on_zookeeper() {
    let url = zk_url().await;
    a_killed_lockkit_takes_its_command_with_it(&url, false).await;
    a_killed_lockkit_takes_its_command_with_it(&url, true).await;
}

/// SIGKILL of `lockkit elect` while it leads: the command dies with it.
#[tokio::test]
async fn a_killed_leader_takes_its_command_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    let (pid_file, marker) = (dir.path().join("pid"), dir.path().join("marker"));
    let script = format!(
        "echo $$ > '{}'; echo \"$LOCKKIT_FENCING_TOKEN\" > '{}'; exec sleep 60",
        pid_file.display(),
        marker.display()
    );
    let leader = spawn(&["elect", &unique("killed-leader"), "--url", &url, "--id", "a:1", "--", "sh", "-c", &script]);
    line_in(&marker, LONG).await;
    let command: i32 = line_in(&pid_file, LONG).await.parse().unwrap();
    leader.signal(Signal::KILL);
    all_end(&[command], Duration::from_secs(5), "the command of a killed lockkit elect").await;
    leader.finish(LONG).await;
}

/// Through the supervisor that `--kill-group` puts between lockkit and the command, the
/// command still gets the lock's name and token, its exit code is passed on, a command killed
/// by a signal gives 128 + the signal, and a missing command gives 127.
#[tokio::test]
async fn with_kill_group_the_command_gets_its_environment_and_its_exit_code_is_passed_on() {
    let name = unique("group-env");
    let script = "echo \"$LOCKKIT_LOCK $LOCKKIT_FENCING_TOKEN\"; exit 7";
    let out = run(&["run", &name, "--url", "mem://", "--kill-group", "--", "sh", "-c", script], LONG).await;
    assert_eq!(out.code, Some(7), "{out:?}");
    let (lock, token) = out.stdout.trim().split_once(' ').expect("two words");
    assert_eq!(lock, name);
    assert!(token.parse::<u64>().expect("a number") > 0);
    assert_eq!(out.stderr, "", "nothing to say on success");
    let out = run(&["run", "x", "--url", "mem://", "--kill-group", "--", "sh", "-c", "kill -KILL $$"], LONG).await;
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
    let out = run(&["run", "x", "--url", "mem://", "--kill-group", "--", "no-such-command-lockkit"], LONG).await;
    assert_eq!(out.code, Some(NOT_FOUND), "{out:?}");
    assert!(out.stderr.contains("no-such-command-lockkit"), "{out:?}");
}

/// SIGTERM to lockkit with `--kill-group` still reaches the command through the supervisor:
/// the command stops, the lock is released, lockkit exits 143.
#[tokio::test]
async fn with_kill_group_a_terminated_lockkit_stops_the_command_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    let name = unique("group-term");
    let (holder, _) = hold(&name, &url, &["--kill-group", "--grace", "30s"], dir.path()).await;
    holder.signal(Signal::TERM);
    let out = holder.finish(Duration::from_secs(10)).await;
    assert_eq!(out.code, Some(143), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(25), "the command got SIGTERM, not the grace's SIGKILL: {out:?}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["held"], false, "{status}");
}

/// lockkit starts the command through its own binary again (`/proc/self/exe` on Linux): a
/// lockkit whose binary was deleted or replaced (a package upgrade) while it waited for the
/// lock still runs the command.
#[tokio::test]
async fn a_lockkit_whose_binary_was_deleted_while_it_waited_still_runs_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    let name = unique("deleted-binary");
    let (holder, _) = hold(&name, &url, &[], dir.path()).await;
    let exe = dir.path().join("lockkit-copy");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_lockkit"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_lockkit"), &exe).unwrap();
    }
    let script = "echo \"token $LOCKKIT_FENCING_TOKEN\"; exit 5";
    let waiter = tokio::process::Command::new(&exe)
        .args(["run", &name, "--url", &url, "--wait", "20s", "--", "sh", "-c", script])
        .env_remove("LOCKKIT_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The process runs the binary once spawn returns; the path can go.
    std::fs::remove_file(&exe).unwrap();
    stop(holder).await;
    let out = tokio::time::timeout(LONG, waiter.wait_with_output()).await.unwrap().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    assert!(stdout.starts_with("token "), "{stdout}{stderr}");
}

// ------------------------------------------------------------------ signals

/// SIGINT to lockkit stops the command and releases the lock: the next owner gets it.
#[tokio::test]
async fn an_interrupt_stops_the_command_and_releases_the_lock() {
    let url = redis_url().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("interrupt");
    let (holder, _) = hold(&name, &url, &[], dir.path()).await;
    holder.signal(Signal::INT);
    let out = holder.finish(Duration::from_secs(10)).await;
    assert_eq!(out.code, Some(130), "{out:?}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["held"], false, "{status}");
}

/// SIGTERM to a lockkit that still waits for the lock gives up the wait and leaves the
/// holder alone.
#[tokio::test]
async fn a_terminated_waiter_gives_up_and_leaves_the_holder_alone() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(dir.path());
    let name = unique("waiter");
    let (holder, token) = hold(&name, &url, &[], dir.path()).await;
    let waiter = spawn(&["run", &name, "--url", &url, "--", "true"]);
    // Give it time to queue; whether it did or not, it must not run its command.
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiter.signal(Signal::TERM);
    let out = waiter.finish(Duration::from_secs(10)).await;
    assert_eq!(out.code, Some(143), "{out:?}");
    let status = status_json(&name, &url).await;
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["token"], token, "{status}");
    stop(holder).await;
}

// ------------------------------------------------------------------ status

async fn status_free_and_held(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique("status");

    let free = status_json(&name, url).await;
    assert_eq!(free["held"], false, "{free}");
    assert_eq!(free["lock"], name.as_str(), "{free}");
    assert_eq!(free["url"], url, "{free}");
    assert!(free["token"].is_null() && free["owner"].is_null(), "{free}");
    let out = run(&["status", &name, "--url", url], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("held:    no"), "{out:?}");

    let (holder, token) = hold(&name, url, &[], dir.path()).await;
    let held = status_json(&name, url).await;
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["token"], token, "{held}");
    let owner = held["owner"].as_str().unwrap_or_else(|| panic!("no owner: {held}"));
    if !url.starts_with("file") {
        // Redis and ZooKeeper record the holder's process: lockkit's, not its command's.
        assert!(owner.contains(&format!("pid {} ", holder.pid())), "{held}");
        assert!(held["since_unix_ms"].as_u64().is_some(), "{held}");
    }
    let out = run(&["status", &name, "--url", url], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("held:    yes"), "{out:?}");
    assert!(out.stdout.contains(&format!("token:   {token}\n")), "{out:?}");
    stop(holder).await;
}

#[tokio::test]
async fn status_of_a_free_and_a_held_lock_on_redis() {
    let url = redis_url().await;
    status_free_and_held(&url).await;
    // Redis keeps a lease: the holder's is shown.
    let dir = tempfile::tempdir().unwrap();
    let name = unique("lease");
    let (holder, _) = hold(&name, &url, &["--lease", "5s"], dir.path()).await;
    let held = status_json(&name, &url).await;
    let left = held["lease_left_ms"].as_u64().unwrap_or_else(|| panic!("no lease: {held}"));
    assert!(left > 0 && left <= 5000, "{held}");
    stop(holder).await;
}

#[tokio::test]
async fn status_of_a_free_and_a_held_lock_on_zookeeper() {
    let url = zk_url().await;
    status_free_and_held(&url).await;
    // ZooKeeper keeps a queue: a waiter is counted.
    let dir = tempfile::tempdir().unwrap();
    let name = unique("queue");
    let (holder, _) = hold(&name, &url, &[], dir.path()).await;
    let waiter = spawn(&["run", &name, "--url", &url, "--", "true"]);
    lockkit_testkit::wait::eventually_some(LONG, "the waiter is counted", || async {
        let status = status_json(&name, &url).await;
        (status["waiters"] == 1).then_some(())
    })
    .await;
    stop(holder).await;
    let out = waiter.finish(LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[tokio::test]
async fn status_of_a_held_lock_on_files() {
    let dir = tempfile::tempdir().unwrap();
    status_free_and_held(&file_url(dir.path())).await;
}

// ------------------------------------------------------------------ bad input

#[tokio::test]
async fn a_bad_url_is_a_usage_error_that_says_what_to_write() {
    for url in ["bogus", "nosuch://host"] {
        for args in [&["run", "x", "--url", url, "--", "true"][..], &["status", "x", "--url", url]] {
            let out = run(args, LONG).await;
            assert_eq!(out.code, Some(USAGE), "{out:?}");
            assert!(out.stderr.starts_with("lockkit: ") && out.stderr.contains(url), "{out:?}");
            assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
        }
    }
    // From the environment, too.
    let out = spawn_with(&["status", "x"], &[("LOCKKIT_URL", "bogus")]).finish(LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    assert!(out.stderr.contains("LOCKKIT_URL"), "{out:?}");
}

#[tokio::test]
async fn a_bad_duration_is_a_usage_error_that_shows_the_accepted_forms() {
    for flag in ["--wait", "--lease", "--grace"] {
        let out = run(&["run", "x", "--url", "mem://", flag, "5", "--", "true"], LONG).await;
        assert_eq!(out.code, Some(USAGE), "{flag}: {out:?}");
        assert!(out.stderr.contains("500ms") && out.stderr.contains(flag), "{flag}: {out:?}");
    }
}

#[tokio::test]
async fn lease_on_a_backend_without_a_lease_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["run", "x", "--url", &file_url(dir.path()), "--lease", "10s", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    assert!(out.stderr.contains("--lease"), "{out:?}");
}

#[tokio::test]
async fn an_empty_lock_name_is_a_usage_error() {
    let out = run(&["run", "", "--url", "mem://", "--", "true"], LONG).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
}

#[tokio::test]
async fn an_unreachable_redis_fails_quickly_without_showing_the_password() {
    let port = free_port().unwrap();
    let url = format!("redis://app:hunter2@127.0.0.1:{port}/");
    for args in [&["run", "x", "--url", &url, "--", "true"][..], &["status", "x", "--url", &url]] {
        let out = run(args, LONG).await;
        assert_eq!(out.code, Some(UNAVAILABLE), "{out:?}");
        assert!(out.elapsed < Duration::from_secs(5), "took {:?}", out.elapsed);
        assert!(out.stderr.contains(&format!("127.0.0.1:{port}")), "{out:?}");
        assert!(!out.stderr.contains("hunter2") && out.stderr.contains("***"), "{out:?}");
    }
}

#[tokio::test]
async fn an_unreachable_zookeeper_fails_within_its_session_timeout() {
    let port = free_port().unwrap();
    let url = format!("zk://127.0.0.1:{port}?session_timeout=1s");
    let out = run(&["status", "x", "--url", &url], LONG).await;
    assert_eq!(out.code, Some(UNAVAILABLE), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(5), "took {:?}", out.elapsed);
}

// ------------------------------------------------------------------ the waiting line

/// On a terminal (a pty from `script(1)`), the wait shows what it waits for.
#[tokio::test]
async fn a_wait_on_a_terminal_shows_the_lock_the_store_and_the_holder() {
    if !Path::new("/usr/bin/script").exists() {
        eprintln!("skipped: script(1) is not installed");
        return;
    }
    let url = redis_url().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("tty");
    let (holder, token) = hold(&name, &url, &[], dir.path()).await;
    // Three seconds of waiting draw the line at 0.3, 1 and 2 s: the holder, read by a task of
    // its own, is known by the later draws even on a loaded machine.
    let inner = format!("{} run {name} --url {url} --wait 3s -- true", env!("CARGO_BIN_EXE_lockkit"));
    let out = tokio::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(LONG, out).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(TIMEOUT), "{text}");
    // The queue's length follows the holder's token when the store counts waiters (this wait
    // among them once it has queued, which may come before or after the holder is read).
    let line = format!("waiting for lock {name:?} on {url} (held by token {token}");
    assert!(text.contains(&line) && text.contains(" of 3s"), "{text}");
    stop(holder).await;
}
