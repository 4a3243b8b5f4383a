//! What the cost examples share: the server's own count of script calls and their time.

use redis::aio::MultiplexedConnection;

/// `(calls, usec)` of `EVALSHA` since the server's statistics were last reset
/// (`INFO commandstats`; a script's time holds the commands it calls).
pub(crate) async fn evalsha_stats(admin: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(admin).await.unwrap();
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")).unwrap_or("cmdstat_evalsha:calls=0,usec=0");
    let field = |name: &str| -> u64 {
        line.split(':')
            .nth(1)
            .and_then(|fields| fields.split(',').find_map(|f| f.strip_prefix(name)))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}
