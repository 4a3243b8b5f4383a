//! etcd's calls of the observer: the read of every key under the election's prefix (the
//! view), and the watch of the prefix from the view's revision, with what its replies mean
//! (a compaction, a cancelled or broken watch) for the follower in `observe` (which, on a
//! compaction, drops the view and owes a gap).

use etcd_client::{Client, GetOptions, SortOrder, SortTarget, WatchOptions};
use lockkit_core::backend::{FollowEnd, Outbox};
use lockkit_core::{LockName, Result};

use super::view::{Change, View};
use crate::BACKEND;
use crate::client::EtcdBackend;
use crate::error::{to_error, unreachable};

/// Reads every key under `prefix`: the view at the read's revision.
pub(super) async fn read(mut client: Client, prefix: &str, lock: &LockName, backend: &EtcdBackend) -> Result<View> {
    let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let reply = match tokio::time::timeout(backend.config.connect_timeout, client.get(prefix, Some(options))).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => {
            // An expired token: renewed for the next try.
            backend.renew_token_after(&error).await;
            return Err(to_error(error, Some(lock)).with_server(Some(&backend.config.address)));
        }
        Err(_) => return Err(unreachable(&backend.config, Some(lock))),
    };
    let revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
    Ok(View::read(reply.kvs(), revision))
}

/// Watches the election's prefix from the revision after the view's, applying what comes to
/// the view, until the watch ends: compacted revisions are a gap and a new read (`Again`), a
/// broken or cancelled watch is watched again from the view (`Pause`).
pub(super) async fn watch(
    mut client: Client,
    backend: &EtcdBackend,
    lock: &LockName,
    prefix: &str,
    view: &mut View,
    outbox: &Outbox,
) -> FollowEnd {
    let after = view.revision;
    let timeout = backend.config.connect_timeout;
    let options = WatchOptions::new().with_prefix().with_start_revision(after + 1);
    let (mut watcher, mut stream) = match tokio::time::timeout(timeout, client.watch(prefix, Some(options))).await {
        Ok(Ok(watch)) => watch,
        Ok(Err(error)) => {
            return FollowEnd::Failed(to_error(error, Some(lock)).with_server(Some(&backend.config.address)));
        }
        Err(_) => return FollowEnd::Failed(unreachable(&backend.config, Some(lock))),
    };
    let end = loop {
        match stream.message().await {
            Ok(Some(reply)) => {
                if reply.compact_revision() != 0 {
                    tracing::debug!(
                        backend = BACKEND,
                        after,
                        "the revisions the observer missed were compacted: a gap"
                    );
                    break FollowEnd::Again;
                }
                view.apply(reply.events().iter().filter_map(Change::of), outbox);
                if reply.canceled() {
                    if reply.cancel_reason().contains(crate::watch::WATCH_DENIED)
                        && let Ok(session) = backend.session().await
                    {
                        // The stream's token may have expired: the next stream takes a new one.
                        session.renew_token().await;
                    }
                    break FollowEnd::Pause;
                }
            }
            Ok(None) | Err(_) => break FollowEnd::Pause,
        }
    };
    let _ = tokio::time::timeout(timeout, watcher.cancel()).await;
    end
}
