//! How a third party writes a backend and proves it with the conformance kit.
//!
//! `cargo run -p lockkit-examples --example custom_backend` uses the backend of
//! `backend.rs` (a lock table in process) through `LockProvider`, then runs a few cases of
//! the kit by hand. The whole kit runs as tests with one line, as in
//! `examples/tests/custom_backend_conformance.rs`:
//!
//! ```ignore
//! lockkit_testkit::conformance!(TableHarness::default());
//! ```

mod backend;

use std::sync::Arc;

use backend::{Table, TableHarness, client};

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let table = Arc::new(Table::default());
    let (a, b) = (client(Arc::clone(&table)), client(table));
    let guard = a.lock("reports/weekly")?.acquire().await?;
    println!("client a holds reports/weekly with token {}", guard.token());
    println!(
        "client b's try_acquire while a holds it: {:?}",
        b.lock("reports/weekly")?.try_acquire().await?.map(|g| g.token())
    );
    guard.release().await?;
    let again = b.lock("reports/weekly")?.acquire().await?;
    println!("client b holds it now with token {}", again.token());
    again.release().await?;

    // A few cases of the kit, run by hand; `conformance!` runs them all as tests.
    let harness = TableHarness::default();
    lockkit_testkit::cases::mutual_exclusion::one_holder_at_a_time_under_contention(&harness).await;
    lockkit_testkit::cases::acquire::release_wakes_waiter_promptly(&harness).await;
    lockkit_testkit::cases::fencing::tokens_increase_across_clients(&harness).await;
    println!("the table backend passed the cases run here");
    Ok(())
}
