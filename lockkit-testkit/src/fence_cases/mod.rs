//! The fence cases: contract behaviours 29-33 (fencing at the resource), one documented
//! `pub async fn` per behaviour, run on any [`FenceSink`] through a [`FenceHarness`]. The
//! [`fence_conformance!`](crate::fence_conformance) macro holds the one list of them.
//!
//! The cases make their own fences (a [`LockId`] of a made-up store, tokens chosen to show
//! each rule), except [`a_stale_holder_of_a_real_lock_is_refused`], which takes them from
//! guards of the memory backend: a sink checks fences, not where they came from. Each case
//! draws fresh uuid-based resource names, so cases run in parallel on one store.

mod cases;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode, FencingToken, LockId, LockName};
use lockkit_fence::{FenceError, FenceSink, FenceState};

pub use cases::*;

use crate::FencedResource;
use crate::harness::{FaultResult, Unsupported};

/// What a fence sink provides to the fence cases: fresh clients of its store, and a restart
/// of the store when it has one.
#[async_trait]
pub trait FenceHarness: Send + Sync + 'static {
    /// The sink's name in failure messages.
    fn name(&self) -> String;

    /// A client of the sink's store: each call a new one (its own connection, where the store
    /// has connections), all over one store.
    async fn sink(&self) -> Arc<dyn FenceSink>;

    /// A harness over a store of its own (a server of its own), for the case that restarts
    /// it while the other cases run beside it on the shared one. `Err(Unsupported)` when the
    /// harness cannot.
    async fn isolated(&self) -> Result<Arc<dyn FenceHarness>, Unsupported> {
        Err(Unsupported)
    }

    /// Restarts the store keeping what it persisted (the server stopped or crashed and
    /// started again; for files, nothing but new clients). Called on an
    /// [`isolated`](Self::isolated) harness only. Clients made before may fail afterwards; the
    /// case makes new ones. `Err(Unsupported)` when the harness cannot.
    async fn restart_store(&self) -> FaultResult {
        Err(Unsupported)
    }
}

/// The memory reference: one [`FencedResource`] as the store, every client a handle on it.
/// It has no store to restart (declare `the_highest_token_survives_a_store_restart` in
/// `without`).
#[derive(Debug, Default)]
pub struct MemoryFenceHarness {
    store: Arc<FencedResource<Vec<u8>>>,
}

impl MemoryFenceHarness {
    /// A fresh store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl FenceHarness for MemoryFenceHarness {
    fn name(&self) -> String {
        "memory fence".to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        self.store.clone()
    }
}

/// Runs one fence case: makes the harness on first use (shared by the process), then runs
/// the case on the kit's runtime with a time limit. Used by
/// [`fence_conformance!`](crate::fence_conformance); not for direct use.
#[doc(hidden)]
pub fn run_fence_case<M, MF, C, CF>(
    cell: &'static tokio::sync::OnceCell<Arc<dyn FenceHarness>>,
    make: M,
    name: &str,
    case: C,
) where
    M: FnOnce() -> MF,
    MF: Future<Output = Arc<dyn FenceHarness>>,
    C: FnOnce(Arc<dyn FenceHarness>) -> CF,
    CF: Future<Output = ()>,
{
    crate::runtime().block_on(async {
        let harness = cell.get_or_init(make).await.clone();
        let sink = harness.name();
        if tokio::time::timeout(crate::CASE_LIMIT, case(harness)).await.is_err() {
            panic!("[{sink} / {name}] the case did not finish within {:?}", crate::CASE_LIMIT);
        }
    });
}

/// The context of one running case: the harness, the case and a fresh resource name, so that
/// every failure says where it happened.
pub(crate) struct Ctx<'h> {
    h: &'h dyn FenceHarness,
    case: &'static str,
    resource: String,
}

impl<'h> Ctx<'h> {
    fn new(h: &'h dyn FenceHarness, case: &'static str) -> Self {
        Self { h, case, resource: format!("lockkit-fence-test/{case}/{}", uuid::Uuid::new_v4().simple()) }
    }

    #[track_caller]
    fn fail(&self, step: &str, detail: impl Debug) -> ! {
        panic!("[{} / {}] resource {:?}: {step}: {detail:?}", self.h.name(), self.case, self.resource)
    }

    #[track_caller]
    fn check(&self, condition: bool, step: &str) {
        if !condition {
            self.fail(step, "check failed");
        }
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        self.h.sink().await
    }

    /// The identity of the case's lock `tag` on the kit's made-up store.
    #[track_caller]
    fn lock(&self, tag: &str) -> LockId {
        self.lock_on("fence-cases://kit", tag)
    }

    #[track_caller]
    fn lock_on(&self, store: &str, tag: &str) -> LockId {
        let name = match LockName::new(&format!("{}/{tag}", self.resource)) {
            Ok(name) => name,
            Err(error) => self.fail("name the lock", error.to_string()),
        };
        match LockId::new(store, name) {
            Ok(id) => id,
            Err(error) => self.fail("identify the lock", error.to_string()),
        }
    }

    fn write_fence(lock: &LockId, token: u64) -> Fence {
        Fence::new(lock.clone(), FencingToken::new(token), FenceMode::Write)
    }

    fn read_fence(lock: &LockId, token: u64) -> Fence {
        Fence::new(lock.clone(), FencingToken::new(token), FenceMode::Read)
    }

    /// Writes `value` to the case's resource and expects it accepted.
    async fn written(&self, sink: &dyn FenceSink, fence: &Fence, value: &str, step: &str) {
        if let Err(error) = sink.write(&self.resource, fence, value.as_bytes()).await {
            self.fail(step, format!("refused or failed: {error}"));
        }
    }

    /// Reads the case's resource and expects the read admitted.
    async fn read(&self, sink: &dyn FenceSink, fence: &Fence, step: &str) -> Option<String> {
        match sink.read(&self.resource, fence).await {
            Ok(value) => value.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            Err(error) => self.fail(step, format!("refused or failed: {error}")),
        }
    }

    /// Expects `outcome` to be [`FenceError::Stale`] for `token` below `highest`.
    #[track_caller]
    fn stale<T: Debug>(&self, outcome: Result<T, FenceError>, token: u64, highest: u64, step: &str) {
        match outcome {
            Err(FenceError::Stale { token: t, highest: h, .. }) if (t.get(), h.get()) == (token, highest) => {}
            other => self.fail(step, format!("expected Stale {{ token: {token}, highest: {highest} }}, got {other:?}")),
        }
    }

    async fn state(&self, sink: &dyn FenceSink, step: &str) -> Option<FenceState> {
        match sink.state(&self.resource).await {
            Ok(state) => state,
            Err(error) => self.fail(step, format!("the state cannot be read: {error}")),
        }
    }
}

/// Stamps out one `#[test]` per fence case for the [`FenceHarness`] built by `$harness`, as
/// [`conformance!`](crate::conformance) does for lock backends: a sink proves the contract's
/// fencing behaviours (29-33) with one line.
///
/// ```no_run
/// # mod wrapper {
/// lockkit_testkit::fence_conformance!(
///     lockkit_testkit::MemoryFenceHarness::new(),
///     without: [the_highest_token_survives_a_store_restart],
/// );
/// # }
/// ```
///
/// `$harness` is evaluated once per test process inside an async block (it may `.await`);
/// cases listed in `without` are stamped `#[ignore]`. The tests live in the module `fence`.
#[macro_export]
macro_rules! fence_conformance {
    ($harness:expr $(,)?) => {
        $crate::fence_conformance!($harness, without: []);
    };
    ($harness:expr, without: [$($skip:ident),* $(,)?] $(,)?) => {
        $crate::__fence_cases! {
            ($) $harness; [$($skip),*];
            stale_writes_are_refused_and_change_nothing,
            the_check_and_the_write_are_one_step,
            a_stale_holder_of_a_real_lock_is_refused,
            readers_are_refused_only_below_the_highest_write,
            a_read_never_raises_the_highest_token,
            a_token_of_another_lock_is_refused,
            the_highest_token_survives_a_store_restart,
            bad_input_is_refused_and_writes_nothing,
        }
    };
}

/// The expansion of [`fence_conformance!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __fence_cases {
    (($d:tt) $harness:expr; [$($skip:ident),*]; $($case:ident),* $(,)?) => {
        static __LOCKKIT_FENCE_HARNESS: $crate::__private::OnceCell<::std::sync::Arc<dyn $crate::FenceHarness>> =
            $crate::__private::OnceCell::const_new();

        macro_rules! __lockkit_fence_case {
            $(
                ($skip) => {
                    #[test]
                    #[ignore = "declared in fence_conformance!(…, without: […]): the harness cannot check it"]
                    fn $skip() {}
                };
            )*
            ($d case:ident) => {
                #[test]
                fn $d case() {
                    $crate::fence_cases::run_fence_case(
                        &super::__LOCKKIT_FENCE_HARNESS,
                        || async { ::std::sync::Arc::new($harness) as ::std::sync::Arc<dyn $crate::FenceHarness> },
                        stringify!($d case),
                        |harness| async move { $crate::fence_cases::$d case(&*harness).await },
                    );
                }
            };
        }

        mod fence {
            $( __lockkit_fence_case!($case); )*
        }
    };
}
