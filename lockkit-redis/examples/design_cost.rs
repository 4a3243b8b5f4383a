//! What candidate designs of the uncontended mutex cycle cost, before one is built (issue 19):
//! for each pair of an acquire and a release (scripts, a plain command or a `MULTI`), the
//! server's time per acquire and per release from `INFO commandstats` (every command but
//! `INFO`/`CONFIG`, so that designs with and without Lua compare), on 5,000 fresh names and on
//! the same 5,000 names used before, and the pair's cycle sent raw on one connection ÷ `PING`,
//! both p50 and interleaved in one loop. On a private redis-server (or `LOCKKIT_REDIS_URL`):
//! `cargo run --release -p lockkit-redis --example design_cost -- --runs 3`.
//!
//! The designs (only their uncontended paths: a candidate that would fall through returns 0):
//! - `today`: the provider's acquire and release scripts (the lean paths, queue.lua behind).
//! - `lean`: the lean paths alone: acquire `EXISTS`(queue, kinds, void), `SET NX PX`, `GET`
//!   counter, `TIME`, `SET` counter `PX`; release `GET`, `EXISTS`, `DEL`, `PUBLISH`.
//! - `lean-nopub`: the same, the release without `PUBLISH`.
//! - `lean-shebang`: `lean` with a Redis 7 shebang (`#!lua`), which runs a script in the
//!   newer mode (flags declared, no compatibility defaults).
//! - `lean-fewkeys`: `lean` given only the keys and arguments its calls use (5 keys and 3
//!   arguments, 4 keys and 1 argument) instead of the 7 keys and 7 (3) arguments the whole
//!   script behind the lean path needs: prices the keys and arguments.
//! - `setget`: the acquire's counter in one call: `SET` counter to the server µs `GET` (a
//!   second `SET` only when the old value is not below); 4 calls.
//! - `marker`: the record carries its token and a free marker `~<token>` replaces the counter:
//!   acquire `EXISTS`, `GET` record, `TIME`, `SET` record `<token>:<owner>` `PX`; release `GET`,
//!   `EXISTS`, `SET` record `~<token>` `PX` retention.
//! - `marker-notime`: `marker` without `TIME` when a marker is found (token = marker + 1):
//!   not failover-safe, measured to price `TIME`.
//! - `multi`: `MULTI` `SET NX PX`, `TIME`, `EXISTS`(queue, kinds, void) `EXEC`, released by the
//!   compare-and-delete script: no Lua to grant (and no guarantee kept; see PERFORMANCE.md).
//! - `peer`: a bare `SET NX PX` and a compare-and-delete script (the fencing-free peer).
//! - `empty`: two scripts that return at once, with the lean path's keys and arguments.
//! - `lockkit`: the provider's own acquire and release (today's scripts and lockkit's client),
//!   whose difference from `today` is the client's share.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

use std::time::{Duration, Instant};

use lockkit_testkit::fixture::RedisServer;
use redis::Script;
use redis::aio::MultiplexedConnection;

const NAMES: usize = 5_000;
const SAMPLES: usize = 3_000;
const BATCH: usize = 500;
const LEASE_MS: u64 = 30_000;
const RETENTION_MS: u64 = 300_000;

/// The old lean acquire path (EXISTS, SET NX, GET, TIME, SET) with the queue and the marker
/// of the other kinds at `KEYS[queue]` and `KEYS[kinds]` and the retention at `ARGV[retention]`.
fn lean_acquire(queue: usize, kinds: usize, retention: usize) -> String {
    format!(
        r"
if redis.call('EXISTS', KEYS[{queue}], KEYS[{kinds}], KEYS[3]) == 0
    and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if now > token then token = now end
  redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[{retention}])
  return {{1, token, 0, 0}}
end
return {{0, 0, 0, 0}}"
    )
}

/// The lean release path (GET, EXISTS, DEL, then PUBLISH on `KEYS[channel]` unless `None`)
/// with the queue and the marker of the other kinds at `KEYS[queue]` and `KEYS[kinds]`.
fn lean_release(queue: usize, kinds: usize, channel: Option<usize>) -> String {
    let publish = channel.map_or(String::new(), |channel| format!("\n  redis.call('PUBLISH', KEYS[{channel}], '')"));
    format!(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[{queue}], KEYS[{kinds}]) == 0 then
  redis.call('DEL', KEYS[1]){publish}
  return 1
end
return 0"
    )
}

const SETGET_ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0
    and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = tonumber(redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[7], 'GET'))
  if old and old >= token then
    token = old + 1
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[7])
  end
  return {1, token, 0, 0}
end
return {0, 0, 0, 0}";

const MARKER_ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 then
  local v = redis.call('GET', KEYS[1])
  local last = 0
  if v then
    if string.byte(v, 1) ~= 126 then return {0, 0, 0, 0} end
    last = tonumber(string.sub(v, 2))
  end
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if last >= token then token = last + 1 end
  local record = string.format('%d:', token) .. ARGV[1]
  redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
  return {1, token, 0, 0}
end
return {0, 0, 0, 0}";

const MARKER_NOTIME_ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 then
  local v = redis.call('GET', KEYS[1])
  local token
  if v then
    if string.byte(v, 1) ~= 126 then return {0, 0, 0, 0} end
    token = tonumber(string.sub(v, 2)) + 1
  else
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  redis.call('SET', KEYS[1], string.format('%d:', token) .. ARGV[1], 'PX', ARGV[2])
  return {1, token, 0, 0}
end
return {0, 0, 0, 0}";

// ARGV[1] is the whole record `<token>:<owner>`, ARGV[2] the token, ARGV[3] the retention.
const MARKER_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[4], KEYS[7]) == 0 then
  redis.call('SET', KEYS[1], '~' .. ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0";

const CAD_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

const EMPTY_ACQUIRE: &str = "return {1, 0, 0, 0}";
const EMPTY_RELEASE: &str = "return 1";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Design {
    Today,
    Lean,
    LeanNoPub,
    Shebang,
    FewKeys,
    SetGet,
    Marker,
    MarkerNoTime,
    Multi,
    Peer,
    Empty,
    Lockkit,
}

impl Design {
    const ALL: [Design; 12] = [
        Design::Today,
        Design::Lean,
        Design::LeanNoPub,
        Design::Shebang,
        Design::FewKeys,
        Design::SetGet,
        Design::Marker,
        Design::MarkerNoTime,
        Design::Multi,
        Design::Peer,
        Design::Empty,
        Design::Lockkit,
    ];

    fn label(self) -> &'static str {
        match self {
            Design::Today => "today",
            Design::Lean => "lean",
            Design::LeanNoPub => "lean-nopub",
            Design::Shebang => "lean-shebang",
            Design::FewKeys => "lean-fewkeys",
            Design::SetGet => "setget",
            Design::Marker => "marker",
            Design::MarkerNoTime => "marker-notime",
            Design::Multi => "multi",
            Design::Peer => "peer",
            Design::Empty => "empty",
            Design::Lockkit => "lockkit",
        }
    }

    fn scripts(self) -> (Option<Script>, Script) {
        let s = |src: &str| Script::new(src);
        match self {
            Design::Today => {
                (Some(s(lockkit_redis::scripts::ACQUIRE_SCRIPT)), s(lockkit_redis::scripts::RELEASE_SCRIPT))
            }
            Design::Lean => (Some(s(&lean_acquire(4, 7, 7))), s(&lean_release(4, 7, Some(6)))),
            Design::LeanNoPub => (Some(s(&lean_acquire(4, 7, 7))), s(&lean_release(4, 7, None))),
            Design::Shebang => (
                Some(s(&format!("#!lua\n{}", lean_acquire(4, 7, 7)))),
                s(&format!("#!lua\n{}", lean_release(4, 7, Some(6)))),
            ),
            // Only the keys and arguments the lean paths use (acquire: record, fence, void,
            // queue, kinds; owner, lease, retention. Release: record, queue, kinds, channel; owner).
            Design::FewKeys => (Some(s(&lean_acquire(4, 5, 3))), s(&lean_release(2, 3, Some(4)))),
            Design::SetGet => (Some(s(SETGET_ACQUIRE)), s(&lean_release(4, 7, Some(6)))),
            Design::Marker => (Some(s(MARKER_ACQUIRE)), s(MARKER_RELEASE)),
            Design::MarkerNoTime => (Some(s(MARKER_NOTIME_ACQUIRE)), s(MARKER_RELEASE)),
            Design::Multi | Design::Peer => (None, s(CAD_RELEASE)),
            Design::Empty => (Some(s(EMPTY_ACQUIRE)), s(EMPTY_RELEASE)),
            // Not sent raw: the provider's own cycle (see `lockkit_figures`).
            Design::Lockkit => (None, s(EMPTY_RELEASE)),
        }
    }
}

/// One acquire, then one release, of `key` by a fresh owner; returns whether it was granted.
async fn acquire(
    design: Design,
    scripts: &(Option<Script>, Script),
    con: &mut MultiplexedConnection,
    key: &str,
    owner: &str,
) -> (bool, String, i64) {
    match design {
        Design::Multi => {
            let (set, _time, _exists): (Option<String>, Vec<String>, i64) = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key)
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(LEASE_MS)
                .cmd("TIME")
                .cmd("EXISTS")
                .arg(format!("{key}:queue"))
                .arg(format!("{key}:kinds"))
                .arg(format!("{key}:void:x"))
                .query_async(con)
                .await
                .unwrap();
            (set.is_some(), owner.to_string(), 0)
        }
        Design::Peer => {
            let set: Option<String> =
                redis::cmd("SET").arg(key).arg(owner).arg("NX").arg("PX").arg(LEASE_MS).query_async(con).await.unwrap();
            (set.is_some(), owner.to_string(), 0)
        }
        Design::FewKeys => {
            let script = scripts.0.as_ref().unwrap();
            let (granted, token, _, _): (i64, i64, i64, i64) = script
                .key(key)
                .key(format!("{key}:fence"))
                .key(format!("{key}:void:x"))
                .key(format!("{key}:queue"))
                .key(format!("{key}:kinds"))
                .arg(owner)
                .arg(LEASE_MS)
                .arg(RETENTION_MS)
                .invoke_async(con)
                .await
                .unwrap();
            (granted == 1, owner.to_string(), token)
        }
        _ => {
            let script = scripts.0.as_ref().unwrap();
            let mut call = script.prepare_invoke();
            call.key(key)
                .key(format!("{key}:fence"))
                .key(format!("{key}:void:x"))
                .key(format!("{key}:queue"))
                .key(format!("{key}:queue:expiry"))
                .key(format!("{key}:released"));
            if design != Design::Today {
                call.key(format!("{key}:kinds"));
            }
            call.arg(owner).arg(LEASE_MS).arg("0").arg(60_000).arg(200).arg("").arg(RETENTION_MS);
            // The provider's lean path replies with the token alone; the designs, with a table.
            let (granted, token) = match call.invoke_async(con).await.unwrap() {
                redis::Value::Int(token) => (1, token),
                other => {
                    let (granted, token, _, _): (i64, i64, i64, i64) = redis::from_redis_value(other).unwrap();
                    (granted, token)
                }
            };
            let record = if matches!(design, Design::Marker | Design::MarkerNoTime) {
                format!("{token}:{owner}")
            } else {
                owner.to_string()
            };
            (granted == 1, record, token)
        }
    }
}

async fn release(
    design: Design,
    scripts: &(Option<Script>, Script),
    con: &mut MultiplexedConnection,
    key: &str,
    record: &str,
    token: i64,
) -> bool {
    let mut call = scripts.1.prepare_invoke();
    call.key(key);
    match design {
        Design::Today => {
            call.key(format!("{key}:fence"))
                .key(format!("{key}:queue"))
                .key(format!("{key}:queue:expiry"))
                .key(format!("{key}:released"))
                .arg(record)
                .arg(200);
        }
        Design::Multi | Design::Peer => {
            call.arg(record);
        }
        Design::FewKeys => {
            call.key(format!("{key}:queue")).key(format!("{key}:kinds")).key(format!("{key}:released")).arg(record);
        }
        _ => {
            call.key(format!("{key}:fence"))
                .key(format!("{key}:void:x"))
                .key(format!("{key}:queue"))
                .key(format!("{key}:queue:expiry"))
                .key(format!("{key}:released"))
                .key(format!("{key}:kinds"))
                .arg(record)
                .arg(token)
                .arg(RETENTION_MS);
        }
    }
    let released: i64 = call.invoke_async(con).await.unwrap();
    released == 1
}

/// The server's µs in every command but INFO and CONFIG since the last reset
/// (`INFO commandstats`), and the server process's CPU µs so far (`INFO cpu`: user and system
/// time, which a busy machine inflates less than the commands' wall time).
async fn server_usec(admin: &mut MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO").arg("commandstats").arg("cpu").query_async(admin).await.unwrap();
    let (mut usec, mut cpu) = (0.0, 0.0);
    for line in info.lines() {
        if let Some(v) = line.strip_prefix("used_cpu_sys:").or_else(|| line.strip_prefix("used_cpu_user:")) {
            cpu += v.trim().parse::<f64>().unwrap_or(0.0) * 1e6;
            continue;
        }
        let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
        let Some((name, fields)) = rest.split_once(':') else { continue };
        if name == "info" || name.starts_with("config") {
            continue;
        }
        usec +=
            fields.split(',').find_map(|f| f.strip_prefix("usec=")).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    }
    (usec, cpu)
}

async fn reset(admin: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(admin).await.unwrap();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn p50(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

/// Prints one run's row of `design` (`per`: server µs per acquire of a new name, of a used
/// one, per release, then the server's CPU µs of each; the PING and cycle p50 in µs and their
/// ratio) and adds it to `table`, whose rows are grouped by design.
fn add_row(table: &mut Vec<(Design, Vec<[f64; 7]>)>, design: Design, per: &[f64], ping: f64, cycle: f64) {
    println!(
        "{:<14} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>9.1} {:>6.2}×",
        design.label(),
        per[0],
        per[1],
        per[2],
        per[3],
        per[4],
        per[5],
        ping,
        cycle,
        cycle / ping
    );
    let row = [per[0], per[1], per[2], per[3], per[4], per[5], cycle / ping];
    match table.iter_mut().find(|(d, _)| *d == design) {
        Some((_, rows)) => rows.push(row),
        None => table.push((design, vec![row])),
    }
}

/// The `lockkit` design's figures: as the others', through the provider.
async fn lockkit_figures(
    provider: &lockkit_redis::RedisLockProvider,
    admin: &mut MultiplexedConnection,
    con: &mut MultiplexedConnection,
    prefix: &str,
) -> ([f64; 6], f64, f64) {
    provider.lock(&format!("{prefix}-warm")).unwrap().acquire().await.unwrap().release().await.unwrap();
    let mut samples: [Vec<f64>; 6] = Default::default();
    for round in 0..2 {
        for batch in 0..NAMES / BATCH {
            let mut guards = Vec::with_capacity(BATCH);
            reset(admin).await;
            let (_, cpu0) = server_usec(admin).await;
            for i in batch * BATCH..(batch + 1) * BATCH {
                guards.push(provider.lock(&format!("{prefix}/{i}")).unwrap().acquire().await.unwrap());
            }
            let (usec, cpu1) = server_usec(admin).await;
            samples[round].push(usec / BATCH as f64);
            samples[3 + round].push((cpu1 - cpu0) / BATCH as f64);
            reset(admin).await;
            let (_, cpu0) = server_usec(admin).await;
            for guard in guards {
                guard.release().await.unwrap();
            }
            let (usec, cpu1) = server_usec(admin).await;
            samples[2].push(usec / BATCH as f64);
            samples[5].push((cpu1 - cpu0) / BATCH as f64);
        }
    }
    let per = [0, 1, 2, 3, 4, 5].map(|i| median(&mut samples[i]));
    let lock = provider.lock(&format!("{prefix}/cycle")).unwrap();
    let (mut pings, mut cycles) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    for i in 0..SAMPLES + 200 {
        let start = Instant::now();
        let _: String = redis::cmd("PING").query_async(con).await.unwrap();
        let ping = start.elapsed();
        let start = Instant::now();
        lock.acquire().await.unwrap().release().await.unwrap();
        let cycle = start.elapsed();
        if i >= 200 {
            pings.push(ping);
            cycles.push(cycle);
        }
    }
    (per, p50(&mut pings), p50(&mut cycles))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args().skip_while(|a| a != "--runs").nth(1).and_then(|n| n.parse().ok()).unwrap_or(1);
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    // A private server of the test kit's, or the one `LOCKKIT_REDIS_URL` names.
    let url = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let provider = lockkit_redis::RedisLockProvider::builder().url(&url).key_prefix("design-cost").build().unwrap();
    provider.ping().await.unwrap();
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7}",
        "design", "acq new", "acq used", "release", "cpu new", "cpu used", "cpu rel", "PING p50", "cycle p50", "ratio"
    );
    let mut table: Vec<(Design, Vec<[f64; 7]>)> = Vec::new();
    for run in 1..=runs {
        println!("run {run}");
        for design in Design::ALL {
            if only.as_deref().is_some_and(|o| !o.split(',').any(|x| x == design.label())) {
                continue;
            }
            let scripts = design.scripts();
            let prefix = format!("{{d}}r{run}-{}-{}", design.label(), uuid::Uuid::new_v4().simple());
            if design == Design::Lockkit {
                let (per, ping, cycle) = lockkit_figures(&provider, &mut admin, &mut con, &prefix).await;
                add_row(&mut table, design, &per, ping, cycle);
                continue;
            }
            // Warm the script cache.
            let (_, record, token) = acquire(design, &scripts, &mut con, &format!("{prefix}-warm"), "w").await;
            release(design, &scripts, &mut con, &format!("{prefix}-warm"), &record, token).await;

            // Server µs per call: the median of batches of BATCH calls (a batch in which the
            // server was descheduled counts once, not in every figure).
            let mut samples: [Vec<f64>; 6] = Default::default();
            for round in 0..2 {
                for batch in 0..NAMES / BATCH {
                    let mut held = Vec::with_capacity(BATCH);
                    reset(&mut admin).await;
                    let (_, cpu0) = server_usec(&mut admin).await;
                    for i in batch * BATCH..(batch + 1) * BATCH {
                        let key = format!("{prefix}/{i}");
                        let owner = format!("o{round}-{i}");
                        let (granted, record, token) = acquire(design, &scripts, &mut con, &key, &owner).await;
                        assert!(granted, "{} did not grant {key}", design.label());
                        held.push((key, record, token));
                    }
                    let (usec, cpu1) = server_usec(&mut admin).await;
                    samples[round].push(usec / BATCH as f64);
                    samples[3 + round].push((cpu1 - cpu0) / BATCH as f64);
                    reset(&mut admin).await;
                    let (_, cpu0) = server_usec(&mut admin).await;
                    for (key, record, token) in &held {
                        assert!(release(design, &scripts, &mut con, key, record, *token).await);
                    }
                    let (usec, cpu1) = server_usec(&mut admin).await;
                    samples[2].push(usec / BATCH as f64);
                    samples[5].push((cpu1 - cpu0) / BATCH as f64);
                }
            }
            let per: Vec<f64> = samples.iter_mut().map(|v| median(v)).collect();

            let key = format!("{prefix}/cycle");
            let (mut pings, mut cycles) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
            for i in 0..SAMPLES + 200 {
                let start = Instant::now();
                let _: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
                let ping = start.elapsed();
                let owner = format!("c{i}");
                let start = Instant::now();
                let (granted, record, token) = acquire(design, &scripts, &mut con, &key, &owner).await;
                let released = release(design, &scripts, &mut con, &key, &record, token).await;
                let cycle = start.elapsed();
                assert!(granted && released);
                if i >= 200 {
                    pings.push(ping);
                    cycles.push(cycle);
                }
            }
            let (ping, cycle) = (p50(&mut pings), p50(&mut cycles));
            add_row(&mut table, design, &per, ping, cycle);
        }
    }
    println!("medians of {runs} runs (ranges)");
    for (design, rows) in &table {
        let cell = |i: usize| {
            let mut v: Vec<f64> = rows.iter().map(|r| r[i]).collect();
            let m = median(&mut v);
            format!("{m:.2} ({:.2}–{:.2})", v[0], v[v.len() - 1])
        };
        println!(
            "{:<14} commands µs: acquire new {} · used {} · release {}\n{:<14} server CPU µs: acquire new {} · used {} · release {} · cycle ÷ PING {}",
            design.label(),
            cell(0),
            cell(1),
            cell(2),
            "",
            cell(3),
            cell(4),
            cell(5),
            cell(6)
        );
    }
    // Paired with today's scripts in the same run: the designs run one after another in each
    // run, so that a busy machine moves them together.
    if let Some((_, today)) = table.iter().find(|(d, _)| *d == Design::Today) {
        println!("minus today's scripts in the same run: medians of the differences (ranges)");
        for (design, rows) in table.iter().filter(|(d, _)| *d != Design::Today) {
            let diff = |f: &dyn Fn(&[f64; 7]) -> f64| {
                let mut v: Vec<f64> = rows.iter().zip(today).map(|(a, b)| f(a) - f(b)).collect();
                let m = median(&mut v);
                format!("{m:+.2} ({:+.2}…{:+.2})", v[0], v[v.len() - 1])
            };
            println!(
                "{:<14} acquire used {} µs · release {} µs · cycle {} µs · cycle ÷ PING {}",
                design.label(),
                diff(&|r| r[1]),
                diff(&|r| r[2]),
                diff(&|r| r[1] + r[2]),
                diff(&|r| r[6])
            );
        }
    }
}
