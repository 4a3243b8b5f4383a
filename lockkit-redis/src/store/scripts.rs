//! The script registry: every Lua script the provider sends, made from `scripts/*.lua` (the
//! key layout, the queue's functions, the script's body), and how one is invoked.

use std::sync::LazyLock;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

use super::connection::Connection;
use crate::keys::Keys;

/// The sources of the scripts of the wait queue: the names of their keys (`layout.lua`), the
/// fence counter's raise (`fence.lua`), the queue's functions (`queue.lua`), then the
/// script's own body.
/// The acquire and release scripts put their lean paths (the mutex's uncontended case, then
/// the reader's and the permit's, then the contended permit's) between the layout and the queue's functions, so that they
/// run before those are made: `queue_script!(layout, lean paths… => body)`.
macro_rules! queue_script {
    ($layout:literal $(, $lean:literal)* => $body:literal) => {
        concat!(
            include_str!($layout),
            include_str!("scripts/fence.lua"),
            $(include_str!($lean),)*
            include_str!("scripts/queue.lua"),
            include_str!($body)
        )
    };
}

/// The acquire script of a mutex as benchmarks call it raw, with the six keys of earlier
/// versions (record, fence counter, void marker, queue, queue expiry times, channel; see
/// `layout_v1.lua`): the provider's own acquire script in every other respect.
pub const ACQUIRE_SCRIPT: &str =
    queue_script!("scripts/layout_v1.lua", "scripts/acquire_lean.lua" => "scripts/acquire.lua");
/// The release script of a mutex as benchmarks call it raw, with the five keys of earlier
/// versions (record, fence counter, queue, queue expiry times, channel; see `layout_v1.lua`).
pub const RELEASE_SCRIPT: &str =
    queue_script!("scripts/layout_v1.lua", "scripts/release_lean.lua" => "scripts/release.lua");

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(queue_script!("scripts/layout.lua", "scripts/acquire_lean.lua", "scripts/acquire_shared_lean.lua",
        "scripts/acquire_permit_queued.lua" => "scripts/acquire.lua"))
});
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(queue_script!("scripts/layout.lua", "scripts/release_lean.lua", "scripts/release_shared_lean.lua",
        "scripts/release_permit_queued.lua" => "scripts/release.lua"))
});

/// Declares the scripts of the wait queue that have no lean path: the layout, the queue's
/// functions, then the body.
macro_rules! queue_scripts {
    ($($name:ident => $body:literal),* $(,)?) => {$(
        pub(super) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua" => $body)));
    )*};
}

queue_scripts! {
    ABANDON => "scripts/abandon.lua",
    DOWNGRADE => "scripts/downgrade.lua",
    INSPECT => "scripts/inspect.lua",
    BREAK => "scripts/break.lua",
    OBSERVE => "scripts/observe.lua",
    RENEW_LEADER => "scripts/renew_leader.lua",
}

pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
/// Renews a batch of mutex holds in one call, on a server that is not a cluster.
pub(super) static RENEW_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew_many.lua")));
pub(super) static RENEW_RW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(include_str!("scripts/renew_shared.lua"), include_str!("scripts/renew_rw.lua")))
});
pub(super) static RENEW_PERMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(include_str!("scripts/renew_shared.lua"), include_str!("scripts/renew_permit.lua")))
});

/// One call of a script: `EVALSHA` with its keys and arguments written straight into the
/// command it sends (no key is made as a string on the way), sent again after loading the
/// script when the server does not have it (`NOSCRIPT`: a restart, `SCRIPT FLUSH`).
pub(super) struct ScriptCall<'a> {
    script: &'a Script,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script`, one of the scripts of the wait queue, with the thirteen keys of
    /// `layout.lua`, or only the first seven (`short`, for the mutex's acquire and release);
    /// `void` is the void marker of the acquisition (any key of the name for the scripts
    /// that void nothing).
    pub(super) fn queue(script: &'a Script, keys: Keys<'_>, void: &str, short: bool) -> Self {
        let count = if short { 7 } else { 13 };
        // EVALSHA, the hash, the key count, the keys and up to nine arguments: room for the
        // keys and for the arguments of a typical call (an owner id, a queue member and a few
        // numbers), so that the buffer is seldom grown on the way, and no more (it lives as
        // long as the call is in flight).
        let bytes = 64 + count * (keys.record().len() + 16) + void.len() + 256;
        let mut cmd = Cmd::with_capacity(3 + count + 9, bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(count);
        for key in keys.script_args(void, count) {
            cmd.arg(key);
        }
        Self { script, cmd }
    }

    /// Appends an argument.
    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call on `connection`; loads the script and sends it again when the server
    /// does not have it.
    pub(super) async fn invoke<T: FromRedisValue>(&self, connection: &mut Connection) -> RedisResult<T> {
        match self.cmd.query_async(connection).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(connection).await?;
                self.cmd.query_async(connection).await
            }
            other => other,
        }
    }
}
