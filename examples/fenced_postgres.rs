//! Fencing end to end on PostgreSQL: a holder stalls past its lease, the next holder writes,
//! and PostgreSQL itself refuses the stale holder's write, inside its transaction.
//!
//! `cargo run -p lockkit-examples --features fence-postgres --example fenced_postgres`
//!
//! The lock and the data live in one PostgreSQL (a server the testkit starts, or
//! `LOCKKIT_POSTGRES_URL`). The first holder's stall is its maximum hold running out while it
//! sleeps: renewal stops, its lease expires, exactly what a long GC pause or a frozen VM does.

use std::time::Duration;

use lockkit::fence::FenceError;
use lockkit::fence::postgres::PgFence;
use lockkit::fence::postgres::tokio_postgres::types::ToSql;
use lockkit::fence::postgres::tokio_postgres::{self, Client, NoTls};
use lockkit::{AcquireOptions, Fence};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server LOCKKIT_POSTGRES_URL names, else one started for this run.
    let url = lockkit_testkit::fixture::PostgresServer::shared().await?.url();
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS fenced_orders;
             CREATE TABLE fenced_orders (id int PRIMARY KEY, status text NOT NULL);
             INSERT INTO fenced_orders VALUES (42, 'new');",
        )
        .await?;
    let pg = PgFence::new();
    pg.migrate(&client).await?; // once, at deployment: the table and the SQL function

    let separator = if url.contains('?') { '&' } else { '?' };
    let locks = lockkit::connect(&format!("{url}{separator}lease=1s")).await?;
    let lock = locks.lock("orders/42")?;

    // Holder 1 takes the lock for at most 500 ms, writes once, then stalls for 3 s.
    let options = AcquireOptions::default().with_max_hold(Duration::from_millis(500));
    let Some(first) = lock.acquire_with(options).await? else { return Err("not granted".into()) };
    let stale_fence = first.fence();
    ship(&pg, &mut client, &stale_fence, "paid").await?;
    println!("holder 1 (token {}) wrote 'paid', then stalls", stale_fence.token());
    let stall = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        first
    });

    // Holder 2 gets the lock once holder 1's lease ran out, and writes.
    let second = lock.acquire().await?;
    ship(&pg, &mut client, &second.fence(), "shipped").await?;
    println!("holder 2 (token {}) got the lock and wrote 'shipped'", second.token());

    // Holder 1 wakes up and, ignoring its loss signal, writes anyway: PostgreSQL refuses.
    let first = stall.await?;
    println!("holder 1 wakes up; its guard says held = {}", first.is_held());
    match ship(&pg, &mut client, &stale_fence, "cancelled").await {
        Err(FenceError::Stale { token, highest, .. }) => {
            println!("PostgreSQL refused holder 1's write: token {token} < {highest} (SQLSTATE LKF01), rolled back");
        }
        other => println!("unexpected: {other:?}"),
    }
    let status: String = client.query_one("SELECT status FROM fenced_orders WHERE id = 42", &[]).await?.get(0);
    println!("the order is '{status}'");
    second.release().await?;
    drop(first);
    Ok(())
}

/// One fenced transaction: the check and the update sent together, committed together.
async fn ship(pg: &PgFence, client: &mut Client, fence: &Fence, status: &str) -> Result<(), FenceError> {
    let failed = |error| FenceError::store("postgres", "the transaction", error);
    let tx = client.transaction().await.map_err(failed)?;
    let params: [&(dyn ToSql + Sync); 1] = [&status];
    let update = tx.execute("UPDATE fenced_orders SET status = $1 WHERE id = 42", &params);
    pg.check_with(&tx, "orders/42", fence, update).await?;
    tx.commit().await.map_err(failed)
}
