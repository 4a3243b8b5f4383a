//! What the etcd examples share: lockkit's two transactions of a hold, as they are sent raw
//! beside lockkit's own calls.

use lockkit_etcd::etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};

/// lockkit's acquire transaction, as acquire.rs sends it: put the own key if absent and the
/// attempt not voided, and read the queue (with values, in create order) in either branch.
pub(crate) fn acquire_txn(key: &str, void: &str, prefix: &str, owner: &str, lease: i64) -> Txn {
    let queue =
        || TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend)));
    let put = TxnOp::put(key, owner, Some(PutOptions::new().with_lease(lease)));
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0), Compare::version(void, CompareOp::Equal, 0)])
        .and_then([put, queue()])
        .or_else([queue()])
}

/// lockkit's release: the own key deleted only in the incarnation the hold created.
pub(crate) fn release_txn(key: String, revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
}
