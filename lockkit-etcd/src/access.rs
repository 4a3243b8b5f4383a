//! The check a provider makes when it connects: that it may read, write and delete keys under
//! its prefix, so that missing credentials or permissions are a clear error at connect
//! rather than a failure at the first acquisition.

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use lockkit_core::Result;

use crate::config::EtcdConfig;
use crate::error::connect_error;

/// The key under the prefix that the probe names (and, with `-delete`, the key it names for
/// the delete: etcd refuses a transaction that puts and deletes one key); neither is written.
const PROBE: &str = ".lockkit-access-probe";

/// Asks etcd whether this client may use the keys under the prefix, writing nothing: a
/// transaction whose comparison is always false, with a put and a delete in the branch that
/// never runs and a read in the other. etcd checks the permissions of both branches before it
/// evaluates the comparison, so a user without readwrite permission on the prefix is refused
/// (`permission denied`), and nothing changes in the store.
pub(crate) async fn check(client: &mut Client, config: &EtcdConfig) -> Result<()> {
    let prefix = format!("{}/", config.prefix);
    let probe = format!("{prefix}{PROBE}");
    let txn = Txn::new()
        .when([Compare::create_revision(probe.clone(), CompareOp::Less, 0)])
        .and_then([TxnOp::put(probe.clone(), "", None), TxnOp::delete(format!("{probe}-delete"), None)])
        .or_else([TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_keys_only().with_limit(1)))]);
    match tokio::time::timeout(config.connect_timeout, client.txn(txn)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(connect_error(error, config)),
        Err(_) => Err(crate::error::unreachable(config, None)),
    }
}
