//! What the benchmark examples share: the server's own count of script calls and their time,
//! and the refusal of a command line they cannot use.

// Each example uses part of this module.
#![allow(dead_code)]

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

/// Ends a benchmark whose command line cannot be used: the message, then exit status 2
/// (bad input is not a panic).
pub(crate) fn usage(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}

/// The number a flag's value gives, or [`usage`] naming the flag.
pub(crate) fn number<T: std::str::FromStr>(flag: &str, value: Option<&str>) -> T {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| usage(&format!("{flag} needs a number, not {:?}", value.unwrap_or(""))))
}

/// The median of `values` (the upper one of an even count).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
