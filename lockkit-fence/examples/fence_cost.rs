//! What a fence costs: the same write fenced and unfenced, side by side in one run, with the
//! store's own floor (a bare round trip) measured in the same run.
//!
//! `cargo run --release -p lockkit-fence --features postgres,redis --example fence_cost [SAMPLES]`
//!
//! - PostgreSQL: a transaction `BEGIN; UPDATE …; COMMIT` against the same transaction with the
//!   fence check pipelined with the update (`PgFence::check_with`), and with the check sent
//!   first (`check`, then the update): with the commit flushed to disk (the default) and with
//!   `synchronous_commit = off`, where the flush no longer hides the fence's own cost.
//! - PostgreSQL, the fenced table (`PgFencedTable`): the same transaction whose `UPDATE` sets
//!   the row's lock and token columns, checked by the table's trigger; beside it the same
//!   `UPDATE` on a table with the same columns and no trigger.
//! - Redis: `SET` against the fenced `SET` (one `EVALSHA`), the script floor (`EVALSHA` and
//!   `FCALL` of `return 1` with the same keys and arguments), a script that only `SET`s and
//!   the fenced `SET` as a Redis Function, with the server's time per call of each from
//!   `INFO commandstats`.
//!
//! Samples of the two sides alternate, so drift on a shared machine hits both alike. The
//! servers are the testkit's (fsync on), or `LOCKKIT_POSTGRES_URL` / `LOCKKIT_REDIS_URL`.

use std::time::{Duration, Instant};

use lockkit_core::{Fence, FenceMode, FencingToken, LockId, LockName};
use lockkit_fence::postgres::{PgFence, PgFencedTable, PreparedFence};
use lockkit_fence::redis::RedisFence;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let samples: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(3000);
    let lock = LockId::new("fence-cost://bench", LockName::new("bench")?)?;
    let fence = Fence::new(lock, FencingToken::new(1_000), FenceMode::Write);
    println!("{samples} samples per side, alternating; times in µs\n");
    postgres(samples, &fence).await?;
    redis(samples, &fence).await?;
    Ok(())
}

/// One side's latencies.
struct Side {
    name: &'static str,
    times: Vec<Duration>,
}

impl Side {
    fn new(name: &'static str, samples: usize) -> Self {
        Self { name, times: Vec::with_capacity(samples) }
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.times.clone();
        sorted.sort_unstable();
        let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }
}

/// Prints each side's p50 and p99, and their ratio to `base`'s.
fn report(title: &str, base: &Side, others: &[&Side]) {
    println!("{title}");
    println!("  {:<44} {:>9} {:>9} {:>8} {:>8}", "", "p50", "p99", "p50 ×", "p99 ×");
    for side in std::iter::once(base).chain(others.iter().copied()) {
        let (p50, p99) = (side.percentile(0.5), side.percentile(0.99));
        let (r50, r99) = (p50 / base.percentile(0.5), p99 / base.percentile(0.99));
        println!("  {:<44} {p50:>9.1} {p99:>9.1} {r50:>8.3} {r99:>8.3}", side.name);
    }
    println!();
}

async fn timed<T, E>(side: &mut Side, work: impl std::future::Future<Output = Result<T, E>>) -> Result<T, E> {
    let start = Instant::now();
    let outcome = work.await;
    side.times.push(start.elapsed());
    outcome
}

async fn postgres(samples: usize, fence: &Fence) -> Result<(), Error> {
    // The server LOCKKIT_POSTGRES_URL names, else one started for this run.
    let url = lockkit_testkit::fixture::PostgresServer::shared().await?.url();
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS fence_cost; CREATE TABLE fence_cost (id int PRIMARY KEY, v bigint);
             INSERT INTO fence_cost VALUES (1, 0);
             DROP TABLE IF EXISTS fence_cost_wide; CREATE TABLE fence_cost_wide (id int PRIMARY KEY, v bigint, lock text, token bigint);
             INSERT INTO fence_cost_wide VALUES (1, 0);
             DROP TABLE IF EXISTS fence_cost_fenced; CREATE TABLE fence_cost_fenced (id int PRIMARY KEY, v bigint);
             INSERT INTO fence_cost_fenced VALUES (1, 0);",
        )
        .await?;
    let pg = PgFence::new();
    pg.migrate(&client).await?;
    let table = PgFencedTable::new(&pg, "fence_cost_fenced")?;
    table.migrate(&client).await?;
    let (lock, token) = table.values(fence)?;
    let update = client.prepare("UPDATE fence_cost SET v = $1 WHERE id = 1").await?;
    let wide = client.prepare("UPDATE fence_cost_wide SET v = $1, lock = $2, token = $3 WHERE id = 1").await?;
    let fenced_update = client
        .prepare("UPDATE fence_cost_fenced SET v = $1, lockkit_lock = $2, lockkit_token = $3 WHERE id = 1")
        .await?;
    let select_one = client.prepare("SELECT 1").await?;
    let ready = pg.prepare(&client).await?;
    for (title, synchronous) in
        [("PostgreSQL, commit flushed (fsync on)", "on"), ("PostgreSQL, synchronous_commit = off", "off")]
    {
        client.batch_execute(&format!("SET synchronous_commit = {synchronous}")).await?;
        let mut floor = Side::new("SELECT 1 (a round trip)", samples);
        let mut plain = Side::new("BEGIN; UPDATE; COMMIT", samples);
        let mut piped = Side::new("BEGIN; fence + UPDATE pipelined; COMMIT", samples);
        let mut prepared = Side::new("… with the fence prepared (PreparedFence)", samples);
        let mut serial = Side::new("BEGIN; fence; UPDATE; COMMIT", samples);
        let mut wide_plain = Side::new("… UPDATE of v, lock, token, no trigger", samples);
        let mut in_row = Side::new("BEGIN; UPDATE of a fenced table; COMMIT", samples);
        for round in 0..samples + samples / 10 {
            let keep = round >= samples / 10;
            let mut scratch = Side::new("", 0);
            let value = i64::try_from(round)?;
            timed(if keep { &mut floor } else { &mut scratch }, client.query_one(&select_one, &[])).await?;
            timed(if keep { &mut plain } else { &mut scratch }, write(&mut client, &update, value, Check::None))
                .await?;
            timed(
                if keep { &mut piped } else { &mut scratch },
                write(&mut client, &update, value, Check::Piped(&pg, fence)),
            )
            .await?;
            timed(
                if keep { &mut prepared } else { &mut scratch },
                write(&mut client, &update, value, Check::Prepared(&ready, fence)),
            )
            .await?;
            timed(
                if keep { &mut serial } else { &mut scratch },
                write(&mut client, &update, value, Check::First(&pg, fence)),
            )
            .await?;
            timed(
                if keep { &mut wide_plain } else { &mut scratch },
                write_row(&mut client, &wide, value, &lock, token),
            )
            .await?;
            timed(
                if keep { &mut in_row } else { &mut scratch },
                write_row(&mut client, &fenced_update, value, &lock, token),
            )
            .await?;
        }
        report(title, &plain, &[&in_row, &wide_plain, &piped, &prepared, &serial, &floor]);
    }
    statements(&mut client, samples, fence).await?;
    Ok(())
}

/// Where a fenced transaction's time goes: each statement alone, timed inside its own
/// transaction (`synchronous_commit = off`).
async fn statements(client: &mut Client, samples: usize, fence: &Fence) -> Result<(), Error> {
    let pg = PgFence::new();
    let lock = fence.lock().to_string();
    let token = i64::try_from(fence.token().get())?;
    let ready = pg.prepare(&*client).await?;
    let upsert = client
        .prepare(
            "INSERT INTO lockkit_fence.fences AS f (resource, lock_id, highest) VALUES ($1, $2, $3)
             ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest
             WHERE f.lock_id = excluded.lock_id AND f.highest <= excluded.highest RETURNING f.highest",
        )
        .await?;
    let fence_update = client
        .prepare("UPDATE lockkit_fence.fences SET highest = $3 WHERE resource = $1 AND lock_id = $2 AND highest <= $3")
        .await?;
    let update = client.prepare("UPDATE fence_cost SET v = $1 WHERE id = 1").await?;
    let select_one = client.prepare("SELECT 1").await?;
    let mut sides = [
        Side::new("SELECT 1, prepared", samples),
        Side::new("UPDATE the row, prepared", samples),
        Side::new("the fence, one round trip unprepared (used)", samples),
        Side::new("the fence, prepared", samples),
        Side::new("its upsert alone, prepared, no plpgsql", samples),
        Side::new("its UPDATE alone, prepared, no plpgsql", samples),
        Side::new("UPDATE of a fenced table (its trigger), prepared", samples),
    ];
    let fenced_update = client
        .prepare("UPDATE fence_cost_fenced SET v = $1, lockkit_lock = $2, lockkit_token = $3 WHERE id = 1")
        .await?;
    let resource = "fence-cost";
    for round in 0..samples + samples / 10 {
        let keep = round >= samples / 10;
        for (at, side) in sides.iter_mut().enumerate() {
            let tx = client.transaction().await?;
            let start = Instant::now();
            match at {
                0 => drop(tx.query(&select_one, &[]).await?),
                1 => drop(tx.execute(&update, &[&i64::try_from(round)?]).await?),
                2 => pg.check(&tx, resource, fence).await?,
                3 => ready.check(&tx, resource, fence).await?,
                4 => drop(tx.query(&upsert, &[&resource, &lock, &token]).await?),
                5 => drop(tx.execute(&fence_update, &[&resource, &lock, &token]).await?),
                _ => drop(tx.execute(&fenced_update, &[&i64::try_from(round)?, &lock, &token]).await?),
            }
            if keep {
                side.times.push(start.elapsed());
            }
            tx.commit().await?;
        }
    }
    let [floor, rest @ ..] = &sides;
    report(
        "PostgreSQL, one statement inside a transaction (where the time goes)",
        floor,
        &rest.iter().collect::<Vec<_>>(),
    );
    Ok(())
}

/// How a benchmarked transaction is fenced.
enum Check<'a> {
    None,
    /// `check_with`: the check pipelined with the update, sent unprepared.
    Piped(&'a PgFence, &'a Fence),
    /// `PreparedFence::check_with`.
    Prepared(&'a PreparedFence, &'a Fence),
    /// `check`, then the update.
    First(&'a PgFence, &'a Fence),
}

/// One transaction updating the row, fenced as `check` says.
async fn write(client: &mut Client, update: &Statement, value: i64, check: Check<'_>) -> Result<(), Error> {
    let tx = client.transaction().await?;
    let params: [&(dyn ToSql + Sync); 1] = [&value];
    match check {
        Check::None => {
            tx.execute(update, &params).await?;
        }
        Check::Piped(pg, fence) => {
            pg.check_with(&tx, "fence-cost", fence, tx.execute(update, &params)).await?;
        }
        Check::Prepared(ready, fence) => {
            ready.check_with(&tx, "fence-cost", fence, tx.execute(update, &params)).await?;
        }
        Check::First(pg, fence) => {
            pg.check(&tx, "fence-cost", fence).await?;
            tx.execute(update, &params).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// One transaction writing the row and its fence columns (`v`, lock, token) with `update`.
async fn write_row(client: &mut Client, update: &Statement, value: i64, lock: &str, token: i64) -> Result<(), Error> {
    let tx = client.transaction().await?;
    tx.execute(update, &[&value, &lock, &token]).await?;
    tx.commit().await?;
    Ok(())
}

/// A script of the fenced `SET`'s size that only writes: the same text length, keys and
/// arguments, so that the gap between it and plain `SET` is the cost of a script, and the gap
/// between it and the fenced `SET` the cost of the fence.
fn plain_script() -> redis::Script {
    // The fenced SET's text: the check (check.lua), a newline and the SET body (167 bytes, src/redis/mod.rs).
    const FENCED_LEN: usize = include_str!("../src/redis/check.lua").len() + 167;
    let body = "return redis.call('SET', KEYS[2], ARGV[4])\n";
    let padding = "-".repeat(FENCED_LEN.saturating_sub(body.len() + 4));
    redis::Script::new(&format!("-- {padding}\n{body}"))
}

/// The server's time per call of `command` since the last `CONFIG RESETSTAT`.
async fn server_usec(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> Result<String, Error> {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await?;
    Ok(stats
        .lines()
        .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|line| line.split(',').find_map(|field| field.strip_prefix("usec_per_call=")))
        .unwrap_or("?")
        .to_owned())
}

/// The fenced `SET` script's body after the check (as in src/redis/mod.rs).
const FENCED_SET_BODY: &str = "local reply\n\
     if ARGV[5] then reply = redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])\n\
     else reply = redis.call('SET', KEYS[2], ARGV[4]) end\n\
     fence_raise()\nreturn reply";

/// A Redis Functions library (Redis 7) of the same three: nothing, `SET` only, the fenced
/// `SET`, called with `FCALL` instead of `EVALSHA`.
fn functions() -> String {
    let check = include_str!("../src/redis/check.lua");
    format!(
        "#!lua name=fence_cost\n\
         redis.register_function('noop', function(KEYS, ARGV) return 1 end)\n\
         redis.register_function('set_only', function(KEYS, ARGV) return redis.call('SET', KEYS[2], ARGV[4]) end)\n\
         redis.register_function('fenced_set', function(KEYS, ARGV)\n{check}\n{FENCED_SET_BODY}\nend)\n"
    )
}

/// What one Redis sample sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RedisCall {
    Ping,
    Set,
    EvalNoop,
    FcallNoop,
    EvalSet,
    FcallSet,
    Fenced,
    FcallFenced,
}

impl RedisCall {
    const ALL: [Self; 8] = [
        Self::Set,
        Self::EvalNoop,
        Self::FcallNoop,
        Self::EvalSet,
        Self::FcallSet,
        Self::Fenced,
        Self::FcallFenced,
        Self::Ping,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Ping => "PING (a round trip)",
            Self::Set => "SET",
            Self::EvalNoop => "EVALSHA 'return 1', same keys and args",
            Self::FcallNoop => "FCALL 'return 1', same keys and args",
            Self::EvalSet => "EVALSHA, SET only (no fence)",
            Self::FcallSet => "FCALL, SET only (no fence)",
            Self::Fenced => "fenced SET (EVALSHA: check, SET)",
            Self::FcallFenced => "fenced SET as FCALL",
        }
    }

    /// The command INFO commandstats counts it under.
    fn command(self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Set => "set",
            Self::EvalNoop | Self::EvalSet | Self::Fenced => "evalsha",
            Self::FcallNoop | Self::FcallSet | Self::FcallFenced => "fcall",
        }
    }
}

/// What the Redis samples share.
struct RedisBench {
    conn: redis::aio::MultiplexedConnection,
    fenced: RedisFence<redis::aio::MultiplexedConnection>,
    noop: redis::Script,
    set_only: redis::Script,
    fence_key: String,
    lock: String,
    token: u64,
}

impl RedisBench {
    async fn send(&mut self, call: RedisCall, fence: &Fence, value: &str) -> Result<(), Error> {
        let conn = &mut self.conn;
        let fcall = |function: &str, key: &str| {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function)
                .arg(2)
                .arg(&self.fence_key)
                .arg(key)
                .arg(&self.lock)
                .arg(self.token)
                .arg("write")
                .arg(value);
            cmd
        };
        match call {
            RedisCall::Ping => drop(redis::cmd("PING").query_async::<String>(conn).await?),
            RedisCall::Set => redis::cmd("SET").arg("fence-cost:plain").arg(value).query_async::<()>(conn).await?,
            RedisCall::EvalNoop | RedisCall::EvalSet => {
                let script = if call == RedisCall::EvalNoop { &self.noop } else { &self.set_only };
                let mut invoke = script.prepare_invoke();
                invoke
                    .key(&self.fence_key)
                    .key("fence-cost:eval")
                    .arg(&self.lock)
                    .arg(self.token)
                    .arg("write")
                    .arg(value);
                invoke.invoke_async::<()>(conn).await?
            }
            RedisCall::FcallNoop => fcall("noop", "fence-cost:eval").query_async::<()>(conn).await?,
            RedisCall::FcallSet => fcall("set_only", "fence-cost:eval").query_async::<()>(conn).await?,
            RedisCall::FcallFenced => {
                // A fence key of its own, in the slot of its key.
                let mut cmd = redis::cmd("FCALL");
                let key = "fence-cost:fcall-fenced";
                cmd.arg("fenced_set").arg(2).arg(self.fenced.fence_key(key)?).arg(key);
                cmd.arg(&self.lock).arg(self.token).arg("write").arg(value);
                cmd.query_async::<()>(conn).await?
            }
            RedisCall::Fenced => self.fenced.set("fence-cost:fenced", fence, value).await?,
        }
        Ok(())
    }
}

async fn redis(samples: usize, fence: &Fence) -> Result<(), Error> {
    // The server LOCKKIT_REDIS_URL names, else one started for this run.
    let url = lockkit_testkit::fixture::RedisServer::shared().await?.url();
    let mut conn = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(functions()).query_async(&mut conn).await?;
    let fenced = RedisFence::new(conn.clone());
    let fence_key = fenced.fence_key("fence-cost:eval")?;
    let mut bench = RedisBench {
        conn,
        fenced,
        noop: redis::Script::new("return 1"),
        set_only: plain_script(),
        fence_key,
        lock: fence.lock().to_string(),
        token: fence.token().get(),
    };
    let mut sides: Vec<Side> = RedisCall::ALL.iter().map(|call| Side::new(call.name(), samples)).collect();
    for round in 0..samples + samples / 10 {
        let keep = round >= samples / 10;
        let value = round.to_string();
        for (call, side) in RedisCall::ALL.into_iter().zip(sides.iter_mut()) {
            let start = Instant::now();
            bench.send(call, fence, &value).await?;
            if keep {
                side.times.push(start.elapsed());
            }
        }
    }
    let [base, rest @ ..] = sides.as_slice() else { return Ok(()) };
    report("Redis", base, &rest.iter().collect::<Vec<_>>());

    // Server time per call, each kind alone (commandstats counts every EVALSHA together).
    println!("  Redis server time per call (µs, INFO commandstats usec_per_call):");
    for call in RedisCall::ALL {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut bench.conn).await?;
        for round in 0..samples {
            bench.send(call, fence, &round.to_string()).await?;
        }
        println!("    {:<44} {}", call.name(), server_usec(&mut bench.conn, call.command()).await?);
    }
    Ok(())
}
