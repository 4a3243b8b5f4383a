//! Where a script's server time goes, piece by piece: the server's µs per `EVALSHA` (`INFO
//! commandstats`) of scripts that each add one piece of the provider's lean paths (the
//! arguments, a table reply, each `redis.call`, the Lua around them), and of the provider's
//! own acquire and release scripts on each kind's uncontended cycle, the mutex's also on names
//! used once each (what a name's first use costs the server: its keys are new Lua strings). On a private
//! redis-server (or `LOCKKIT_REDIS_URL`):
//! `cargo run --release -p lockkit-redis --example script_pieces [-- --batches 10 --calls 300 --pipeline 100]`.
//!
//! Each variant runs `--calls` calls per batch, sent `--pipeline` at a time (1: one round trip
//! each, as a client does; more keeps the server's caches warm and the figures steadier on a
//! busy machine), the variants taking turns batch after batch; it prints the median and the
//! quartiles of the batch means. A variant whose script leaves state behind runs with a plain
//! command that undoes it (`DEL`, `SET`), or beside the release script of its kind; a pair
//! prints the mean of its two scripts.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

mod support;

use lockkit_testkit::fixture::RedisServer;
use redis::aio::MultiplexedConnection;
use support::evalsha_stats;

/// The provider's acquire and release scripts as it sends them for every kind (thirteen keys;
/// seven for a mutex), made from its sources as `store/scripts.rs` makes them.
const PROVIDER_ACQUIRE: &str = concat!(
    include_str!("../src/store/scripts/layout.lua"),
    include_str!("../src/store/scripts/fence.lua"),
    include_str!("../src/store/scripts/acquire_lean.lua"),
    include_str!("../src/store/scripts/acquire_shared_lean.lua"),
    include_str!("../src/store/scripts/acquire_permit_queued.lua"),
    include_str!("../src/store/scripts/queue.lua"),
    include_str!("../src/store/scripts/acquire.lua"),
);
const PROVIDER_RELEASE: &str = concat!(
    include_str!("../src/store/scripts/layout.lua"),
    include_str!("../src/store/scripts/fence.lua"),
    include_str!("../src/store/scripts/release_lean.lua"),
    include_str!("../src/store/scripts/release_shared_lean.lua"),
    include_str!("../src/store/scripts/release_permit_queued.lua"),
    include_str!("../src/store/scripts/queue.lua"),
    include_str!("../src/store/scripts/release.lua"),
);

const OWNER: &str = "lockkit1 9fa19208-9c21-4b28-9689-ce5f7a278fab vm 2318 1795936238056";

/// The thirteen keys of a name, in the order of `layout.lua`.
fn keys(name: &str) -> Vec<String> {
    let base = format!("lockkit:{{{name}}}");
    let mut keys = vec![base.clone()];
    for suffix in ["fence", "void:0", "queue", "queue:expiry", "released", "kinds"] {
        keys.push(format!("{base}:{suffix}"));
    }
    for suffix in ["writer", "readers", "permits", "tokens", "permits:count", "terms"] {
        keys.push(format!("{base}:{suffix}"));
    }
    keys
}

/// The acquire script's arguments for `kind` (none for a mutex) and `permits`.
fn acquire_args(kind: Option<(&str, u32)>) -> Vec<String> {
    let member = match kind {
        Some((letter, _)) => format!("lockkit:wake:0\n{letter}\n{OWNER}"),
        None => format!("lockkit:wake:0\n{OWNER}"),
    };
    let mut args: Vec<String> =
        [OWNER, "30000", "1", "60200", "200", &member, "300000"].iter().map(ToString::to_string).collect();
    if let Some((letter, permits)) = kind {
        args.push(letter.to_owned());
        args.push(permits.to_string());
    }
    args
}

/// The release script's arguments for `kind` (none for a mutex).
fn release_args(kind: Option<&str>) -> Vec<String> {
    let mut args = vec![OWNER.to_owned(), "200".to_owned()];
    args.extend(kind.map(ToOwned::to_owned));
    args
}

/// What runs after the script in each call: nothing, a plain command, or another script.
enum After {
    Nothing,
    Command(fn(&[String]) -> redis::Cmd),
    Script(String, Vec<usize>, Vec<String>),
}

struct Variant {
    label: String,
    sha: String,
    key_order: Vec<usize>,
    args: Vec<String>,
    after: After,
    keys: Vec<String>,
    /// Whether each call takes the keys of a name never used before (the `--locks` loop of
    /// `peer_cycle`), rather than the same name's every time.
    fresh_names: bool,
    means: Vec<f64>,
}

async fn load(admin: &mut MultiplexedConnection, script: &str) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(script).query_async(admin).await.unwrap()
}

fn evalsha(sha: &str, keys: &[String], order: &[usize], args: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(order.len());
    for &i in order {
        cmd.arg(&keys[i]);
    }
    for arg in args {
        cmd.arg(arg);
    }
    cmd
}

impl Variant {
    async fn new(
        admin: &mut MultiplexedConnection,
        label: &str,
        script: &str,
        key_order: Vec<usize>,
        args: Vec<String>,
        after: After,
    ) -> Self {
        let sha = load(admin, script).await;
        let keys = keys(&format!("pieces/{}", uuid::Uuid::new_v4().simple()));
        Self { label: label.to_owned(), sha, key_order, args, after, keys, fresh_names: false, means: Vec::new() }
    }

    /// The same variant, each call on a name never used before.
    fn on_fresh_names(mut self) -> Self {
        self.label.push_str(", a new name each call");
        self.fresh_names = true;
        self
    }

    async fn batch(&mut self, connection: &mut MultiplexedConnection, calls: usize, pipeline: usize) {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(connection).await.unwrap();
        let mut pipe = redis::pipe();
        let mut queued = 0;
        for i in 0..calls {
            if self.fresh_names {
                self.keys = keys(&format!("pieces/{}", uuid::Uuid::new_v4().simple()));
            }
            pipe.add_command(evalsha(&self.sha, &self.keys, &self.key_order, &self.args)).ignore();
            match &self.after {
                After::Nothing => {}
                After::Command(make) => {
                    pipe.add_command(make(&self.keys)).ignore();
                }
                After::Script(sha, order, args) => {
                    pipe.add_command(evalsha(sha, &self.keys, order, args)).ignore();
                }
            }
            queued += 1;
            if queued >= pipeline || i + 1 == calls {
                let _: () = pipe.query_async(connection).await.unwrap();
                pipe = redis::pipe();
                queued = 0;
            }
        }
        let (n, usec) = evalsha_stats(connection).await;
        self.means.push(usec as f64 / n.max(1) as f64);
    }
}

fn quartiles(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.5), at(0.75))
}

fn option(name: &str, default: usize) -> usize {
    std::env::args().skip_while(|a| a != name).nth(1).and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// The pieces of the mutex's lean acquire, one added per step (each runs beside a `DEL` of
/// the record), and of its lean release (each beside a `SET` of the record).
const ACQUIRE_STEPS: [(&str, &str); 7] = [
    ("acquire: return 1 (7 keys, 7 args)", "return 1"),
    ("acquire: return {1, 0, 0, 0} instead", "return {1, 0, 0, 0}"),
    (
        "acquire: + EXISTS queue, kinds, void",
        "if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 then return 1 end return 0",
    ),
    (
        "acquire: + SET NX PX",
        "if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
    ),
    (
        "acquire: + TIME",
        "if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local t = redis.call('TIME') return tonumber(t[1]) * 1000000 + tonumber(t[2]) end return 0",
    ),
    (
        "acquire: + SET counter PX GET (= lean)",
        "if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local t = redis.call('TIME') local token = tonumber(t[1]) * 1000000 + tonumber(t[2]) local last = tonumber(redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[7], 'GET')) if last and last >= token then token = last + 1 redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[7]) end return token end return 0",
    ),
    (
        "acquire: the old lean path (GET, TIME, SET; a table)",
        "if redis.call('EXISTS', KEYS[4], KEYS[7], KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local token = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1 local t = redis.call('TIME') local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) if now > token then token = now end redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[7]) return {1, token, 0, 0} end return {0, 0, 0, 0}",
    ),
];
const RELEASE_STEPS: [(&str, &str); 5] = [
    ("release: return 1 (7 keys, 2 args)", "return 1"),
    ("release: + GET record", "if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end return 0"),
    (
        "release: + EXISTS queue, kinds",
        "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[4], KEYS[7]) == 0 then return 1 end return 0",
    ),
    (
        "release: + DEL",
        "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[4], KEYS[7]) == 0 then redis.call('DEL', KEYS[1]) return 1 end return 0",
    ),
    (
        "release: + PUBLISH (= lean)",
        "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[4], KEYS[7]) == 0 then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[6], '') return 1 end return 0",
    ),
];
/// The pieces of a reader's lean acquire on a name nobody holds (each runs beside a `DEL` of
/// the readers, their tokens and the marker of the other kinds), with the thirteen keys, after
/// the layout and the fence's function as the provider's script has them.
macro_rules! shared_prelude {
    ($body:literal) => {
        concat!(include_str!("../src/store/scripts/layout.lua"), include_str!("../src/store/scripts/fence.lua"), $body)
    };
}
const READ_ACQUIRE_STEPS: [(&str, &str); 8] = [
    ("read acquire: return 1 (13 keys, 9 args)", shared_prelude!("return 1")),
    (
        "read acquire: + EXISTS of 7 keys",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) return 1"
        ),
    ),
    (
        "read acquire: + TIME",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') return 1"
        ),
    ),
    (
        "read acquire: + ZADD NX",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) local now = math.floor(now_us / 1000) local lease = tonumber(ARGV[2]) redis.call('ZADD', K_READERS, 'NX', string.format('%d', now + lease), ARGV[1]) return 1"
        ),
    ),
    (
        "read acquire: + the fence's SET GET",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) local now = math.floor(now_us / 1000) local lease = tonumber(ARGV[2]) redis.call('ZADD', K_READERS, 'NX', string.format('%d', now + lease), ARGV[1]) local token, text = raise_fence(K_FENCE, now_us, ARGV[7]) return token"
        ),
    ),
    (
        "read acquire: + HSET of the token",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) local now = math.floor(now_us / 1000) local lease = tonumber(ARGV[2]) redis.call('ZADD', K_READERS, 'NX', string.format('%d', now + lease), ARGV[1]) local token, text = raise_fence(K_FENCE, now_us, ARGV[7]) redis.call('HSET', K_TOKENS, ARGV[1], text) return token"
        ),
    ),
    (
        "read acquire: + PEXPIRE of the readers and the tokens",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) local now = math.floor(now_us / 1000) local lease = tonumber(ARGV[2]) redis.call('ZADD', K_READERS, 'NX', string.format('%d', now + lease), ARGV[1]) local token, text = raise_fence(K_FENCE, now_us, ARGV[7]) redis.call('HSET', K_TOKENS, ARGV[1], text) local keep = string.format('%d', lease * 2) redis.call('PEXPIRE', K_READERS, keep) redis.call('PEXPIRE', K_TOKENS, keep) return token"
        ),
    ),
    (
        "read acquire: + SET of the marker (= lean)",
        shared_prelude!(
            "redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID) local t = redis.call('TIME') local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) local now = math.floor(now_us / 1000) local lease = tonumber(ARGV[2]) redis.call('ZADD', K_READERS, 'NX', string.format('%d', now + lease), ARGV[1]) local token, text = raise_fence(K_FENCE, now_us, ARGV[7]) redis.call('HSET', K_TOKENS, ARGV[1], text) local keep = string.format('%d', lease * 2) redis.call('PEXPIRE', K_READERS, keep) redis.call('PEXPIRE', K_TOKENS, keep) redis.call('SET', K_KINDS, '1', 'PX', keep) return token"
        ),
    ),
];
/// The pieces of a reader's lean release as its only holder, each run beside the provider's
/// acquire of the reader (so that each finds the hold and frees it all with its `DEL`); as for
/// the `provider:` lines, the figure is the pair's mean per script.
const READ_RELEASE_STEPS: [(&str, &str); 6] = [
    (
        "read release: DEL of readers, tokens, marker (13 keys, 3 args)",
        shared_prelude!("redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) return 1"),
    ),
    (
        "read release: + EXISTS of 4 keys",
        shared_prelude!(
            "redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT) redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) return 1"
        ),
    ),
    (
        "read release: + ZRANGE 0 1 WITHSCORES (the lean path before)",
        shared_prelude!(
            "redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT) redis.call('ZRANGE', K_READERS, 0, 1, 'WITHSCORES') redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) return 1"
        ),
    ),
    (
        "read release: ZSCORE + ZCARD instead (the lean path now)",
        shared_prelude!(
            "redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT) redis.call('ZSCORE', K_READERS, ARGV[1]) redis.call('ZCARD', K_READERS) redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) return 1"
        ),
    ),
    (
        "read release: + PUBLISH",
        shared_prelude!(
            "redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT) redis.call('ZSCORE', K_READERS, ARGV[1]) redis.call('ZCARD', K_READERS) redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) redis.call('PUBLISH', K_CHANNEL, '') return 1"
        ),
    ),
    (
        "read release: + TIME (= lean)",
        shared_prelude!(
            "redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT) redis.call('ZSCORE', K_READERS, ARGV[1]) redis.call('ZCARD', K_READERS) redis.call('DEL', K_READERS, K_TOKENS, K_KINDS) redis.call('PUBLISH', K_CHANNEL, '') redis.call('TIME') return 1"
        ),
    ),
];
/// Lua alone: what a script pays for what it makes, with one key and one argument.
const LUA_STEPS: [(&str, &str); 7] = [
    ("lua: return 1 (1 key, 1 arg)", "return 1"),
    ("lua: + TIME", "redis.call('TIME') return 1"),
    ("lua: + EXISTS", "redis.call('EXISTS', KEYS[1]) return 1"),
    ("lua: + PUBLISH", "redis.call('PUBLISH', KEYS[1], '') return 1"),
    ("lua: + string.format('%d')", "local s = string.format('%d', 1795936883399179) return 1"),
    (
        "lua: + 5 local functions",
        "local function a() end local function b() end local function c() end local function d() end local function e() end return 1",
    ),
    (
        "lua: + a table of 20 functions (machinery())",
        "local M = {} for i = 1, 20 do M[i] = function() return i end end return 1",
    ),
];

/// The prelude of the queue's scripts (what a contended acquire or release pays before its
/// own commands), with the thirteen keys: the layout and the fence's function alone, then
/// with `queue.lua`'s functions defined, then with its machinery table made.
const PRELUDE_STEPS: [(&str, &str); 3] = [
    (
        "prelude: layout + fence.lua, return 1 (13 keys)",
        concat!(
            include_str!("../src/store/scripts/layout.lua"),
            include_str!("../src/store/scripts/fence.lua"),
            "return 1"
        ),
    ),
    (
        "prelude: + queue.lua's functions",
        concat!(
            include_str!("../src/store/scripts/layout.lua"),
            include_str!("../src/store/scripts/fence.lua"),
            include_str!("../src/store/scripts/queue.lua"),
            "return 1"
        ),
    ),
    (
        "prelude: + machinery() made",
        concat!(
            include_str!("../src/store/scripts/layout.lua"),
            include_str!("../src/store/scripts/fence.lua"),
            include_str!("../src/store/scripts/queue.lua"),
            "machinery() return 1"
        ),
    ),
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (batches, calls, pipeline) = (option("--batches", 10), option("--calls", 300), option("--pipeline", 100));
    // A private server of the test kit's, or the one `LOCKKIT_REDIS_URL` names.
    let url = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mutex: Vec<usize> = (0..7).collect();
    let release_order = vec![0, 1, 0, 3, 4, 5, 6];
    let all: Vec<usize> = (0..13).collect();
    let mut variants = Vec::new();
    for (label, script) in ACQUIRE_STEPS {
        let after = After::Command(|k| redis::cmd("DEL").arg(&k[0]).clone());
        variants.push(Variant::new(&mut admin, label, script, mutex.clone(), acquire_args(None), after).await);
    }
    for (label, script) in RELEASE_STEPS {
        let after = After::Command(|k| redis::cmd("SET").arg(&k[0]).arg(OWNER).arg("PX").arg(30_000).clone());
        variants.push(Variant::new(&mut admin, label, script, release_order.clone(), release_args(None), after).await);
    }
    // A reader's acquire pieces beside a DEL of its keys, then its release pieces beside the
    // provider's acquire of the reader.
    for (label, script) in READ_ACQUIRE_STEPS {
        let after = After::Command(|k| redis::cmd("DEL").arg(&k[8]).arg(&k[10]).arg(&k[6]).clone());
        variants.push(Variant::new(&mut admin, label, script, all.clone(), acquire_args(Some(("r", 0))), after).await);
    }
    let read_acquire = load(&mut admin, PROVIDER_ACQUIRE).await;
    let mut read_release_keys = all.clone();
    read_release_keys[2] = 0;
    for (label, script) in READ_RELEASE_STEPS {
        let after = After::Script(read_acquire.clone(), all.clone(), acquire_args(Some(("r", 0))));
        variants.push(
            Variant::new(&mut admin, label, script, read_release_keys.clone(), release_args(Some("r")), after).await,
        );
    }
    for (label, script) in LUA_STEPS {
        variants.push(Variant::new(&mut admin, label, script, vec![0], vec![OWNER.to_owned()], After::Nothing).await);
    }
    // What a name's first use costs the server: every key a script takes is a Lua string the
    // server makes (and later collects) unless the same string is alive in its Lua state.
    for fresh in [false, true] {
        let label = "lua: return 1 (7 keys, 7 args)";
        let variant = Variant::new(&mut admin, label, "return 1", mutex.clone(), acquire_args(None), After::Nothing);
        let variant = variant.await;
        variants.push(if fresh { variant.on_fresh_names() } else { variant });
    }
    for (label, script) in PRELUDE_STEPS {
        variants
            .push(Variant::new(&mut admin, label, script, all.clone(), vec![OWNER.to_owned()], After::Nothing).await);
    }
    // The provider's scripts on each kind's uncontended cycle (the pair's mean per script).
    let release = load(&mut admin, PROVIDER_RELEASE).await;
    for (label, order, kind) in [
        ("provider: mutex cycle, per script", &mutex, None),
        ("provider: read cycle, per script", &all, Some(("r", 0))),
        ("provider: permit cycle (3), per script", &all, Some(("p", 3))),
        ("provider: write cycle, per script", &all, Some(("w", 0))),
    ] {
        let mut release_keys = order.clone();
        release_keys[2] = 0;
        let after = After::Script(release.clone(), release_keys, release_args(kind.map(|(letter, _)| letter)));
        let script = PROVIDER_ACQUIRE;
        variants.push(Variant::new(&mut admin, label, script, order.clone(), acquire_args(kind), after).await);
    }
    // The mutex's cycle on names used once each (the `--locks` loop of `peer_cycle`).
    let mut release_keys = mutex.clone();
    release_keys[2] = 0;
    let after = After::Script(release.clone(), release_keys, release_args(None));
    let label = "provider: mutex cycle, per script";
    let variant = Variant::new(&mut admin, label, PROVIDER_ACQUIRE, mutex.clone(), acquire_args(None), after).await;
    variants.push(variant.on_fresh_names());
    for variant in &mut variants {
        variant.batch(&mut admin, 20, pipeline).await;
        variant.means.clear();
    }
    for _ in 0..batches {
        for variant in &mut variants {
            variant.batch(&mut admin, calls, pipeline).await;
        }
    }
    println!(
        "script_pieces: {batches} batches of {calls} calls, {pipeline} per round trip; µs per EVALSHA, median [p25-p75] of the batch means"
    );
    for variant in &variants {
        let (p25, p50, p75) = quartiles(&variant.means);
        println!("  {:<75} {p50:6.2} [{p25:5.2}-{p75:5.2}]", variant.label);
    }
}
