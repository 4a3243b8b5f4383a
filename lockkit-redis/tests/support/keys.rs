//! Counting keys on a Redis server, for the tests and the `fence_retention` example (which
//! includes this file).

/// How many keys under `prefix` (`prefix:*`) the server holds, counted with `SCAN`.
///
/// # Panics
///
/// When the server does not answer.
#[allow(clippy::unwrap_used)] // a test helper: a server that does not answer fails the test
pub(crate) async fn keys_under(admin: &mut redis::aio::MultiplexedConnection, prefix: &str) -> usize {
    let mut cursor = 0_u64;
    let mut count = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(admin)
            .await
            .unwrap();
        count += keys.len();
        if next == 0 {
            return count;
        }
        cursor = next;
    }
}
