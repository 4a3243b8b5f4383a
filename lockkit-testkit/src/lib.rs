//! The lockkit conformance kit, and the real-server test tools behind it.
//!
//! - [`conformance!`]: one line runs every case of the lock contract against a backend, as
//!   one named `#[test]` per case, on a runtime owned by the kit. The macro holds the only
//!   list of cases, so a backend gains new cases when it upgrades the kit.
//! - [`Harness`]: what a backend provides: fresh independent clients, its time bounds, and
//!   the fault hooks it has (kill, blackhole, delete the record, restart the store).
//! - [`cases`]: the cases themselves, one documented `pub async fn` per behaviour.
//! - [`fixture`]: `redis-server`, standalone ZooKeeper and a three-node ensemble on free
//!   loopback ports; [`proxy`]: a fault-injecting TCP proxy.
//! - [`History`] and [`FencedResource`]: the mutual-exclusion checker and the fenced store.
//! - [`fence_conformance!`]: one line runs the fence cases ([`fence_cases`], contract
//!   behaviours 29-33) against a fence sink through its [`FenceHarness`].
//!
//! # Running the kit on a backend
//!
//! ```no_run
//! // tests/conformance.rs of a backend crate
//! lockkit_testkit::conformance!(lockkit_testkit::memory::MemoryHarness::with_lease());
//! # fn main() {}
//! ```
//!
//! The argument is an expression evaluated once per test process inside an async block, so
//! it may `.await` (to start a server, say).

mod as_kind;
pub mod cases;
pub mod chaos;
pub mod fence_cases;
mod fenced;
pub mod fixture;
mod harness;
mod history;
pub mod holds;
pub mod memory;
pub mod observer_chaos;
pub mod panics;
pub mod process_chaos;
pub mod proxied;
pub mod proxy;
mod rng;
mod setters;
mod sync;
pub mod wait;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use as_kind::{AsKind, Variant};
pub use fence_cases::{FenceHarness, MemoryFenceHarness};
pub use fenced::{FencedResource, StaleToken};
pub use harness::{ClientFaults, FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};
pub use history::{History, Hold, Violation};

/// The message of the [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) that
/// `result` must be: what a builder's unit tests check.
///
/// # Panics
///
/// When `result` is anything else, saying what it was.
#[track_caller]
pub fn refused<T>(result: lockkit_core::Result<T>) -> String {
    let Err(error) = result else { panic!("expected InvalidConfig, got a value") };
    error.config_message().unwrap_or_else(|| panic!("expected InvalidConfig, got {error:?}")).to_owned()
}

/// The longest one case may run before it fails as hung.
pub const CASE_LIMIT: Duration = Duration::from_secs(120);

/// The multi-thread runtime every case runs on, shared by the whole test process so that
/// fixtures, proxies and background releases outlive any single test.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("lockkit-test")
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => panic!("lockkit-testkit could not start its test runtime: {error}"),
        }
    })
}

/// Runs one case: makes the harness on first use (shared by the process), then runs the case
/// on the kit's runtime with a time limit; for a [`Variant`] other than the mutex, on the
/// harness wrapped in [`AsKind`], or not at all (after saying so) when the backend does not
/// grant that kind. Used by [`conformance!`]; not for direct use.
#[doc(hidden)]
pub fn run_case<M, MF, C, CF>(
    cell: &'static tokio::sync::OnceCell<Arc<dyn Harness>>,
    make: M,
    name: &str,
    variant: Variant,
    case: C,
) where
    M: FnOnce() -> MF,
    MF: Future<Output = Arc<dyn Harness>>,
    C: FnOnce(Arc<dyn Harness>) -> CF,
    CF: Future<Output = ()>,
{
    // The case runs on the test's own thread (block_on), so its panic message is captured
    // with the test's output; the tasks it spawns run on the shared workers.
    runtime().block_on(async {
        let mut harness = cell.get_or_init(make).await.clone();
        if variant != Variant::Mutex {
            let kind = variant.kind();
            let capabilities = match harness.client().await {
                Ok(client) => client.provider.capabilities(),
                Err(error) => panic!("[{} / {name}] connect a client: {error}", harness.name()),
            };
            if !kind.is_supported_by(&capabilities) {
                println!("[{} / {name}] not applicable: the backend does not grant {kind}", harness.name());
                return;
            }
            harness = Arc::new(AsKind::new(harness, kind));
        }
        let backend = harness.name().to_owned();
        if tokio::time::timeout(CASE_LIMIT, case(harness)).await.is_err() {
            panic!("[{backend} / {name}] the case did not finish within {CASE_LIMIT:?}");
        }
    });
}

#[doc(hidden)]
pub mod __private {
    pub use tokio::sync::OnceCell;
}

/// Stamps out one `#[test]` per conformance case for the harness built by `$harness`.
///
/// `$harness` is an expression whose value implements [`Harness`]; it is evaluated once per
/// test process, inside an async block, so it may `.await`. The tests are grouped in modules
/// by topic, named after the behaviour they check: `acquire::try_acquire_leaves_no_trace`.
///
/// A harness that lacks a fault hook some cases need declares those cases, so that they are
/// reported as ignored instead of passing unchecked:
///
/// ```no_run
/// # mod wrapper {
/// lockkit_testkit::conformance!(
///     lockkit_testkit::memory::MemoryHarness::new(),
///     without: [timeout_against_an_unreachable_store_says_so],
/// );
/// # }
/// ```
///
/// A run may be limited to some groups of cases with `only: [...]` (the modules' names),
/// after `without`: a second run of the loss cases on another configuration of the same
/// backend, say, in a module of its own. That module goes before the file's main run (or in
/// a file of its own): the helper macros a run defines reach the modules that follow it, and
/// two of them in reach fail to compile as ambiguous.
///
/// ```no_run
/// mod many_holds {
///     lockkit_testkit::conformance!(
///         lockkit_testkit::memory::MemoryHarness::with_lease(),
///         without: [],
///         only: [loss, release],
///     );
/// }
/// # fn main() {}
/// ```
///
/// A case that cannot check its behaviour and is not declared prints why on stderr and
/// passes; with `LOCKKIT_CONFORMANCE_STRICT=1` in the environment it fails instead. Cases
/// whose behaviour the backend does not claim (a capability it does not declare) pass in
/// both modes.
#[macro_export]
macro_rules! conformance {
    ($harness:expr $(,)?) => {
        $crate::conformance!($harness, without: []);
    };
    ($harness:expr, without: [$($skip:ident),* $(,)?] $(,)?) => {
        $crate::conformance!(@select ($harness) [$($skip),*] [] all);
    };
    ($harness:expr, without: [$($skip:ident),* $(,)?], only: [$($only:ident),* $(,)?] $(,)?) => {
        $crate::conformance!(@select ($harness) [$($skip),*] [$($only),*] none);
    };
    (@select ($harness:expr) [$($skip:ident),*] [$($only:ident),*] $others:ident) => {
        $crate::__conformance_cases! {
            ($) $harness; [$($skip),*]; [$($only),*] $others;
            mutex {
                errors {
                    errors_name_the_backend_and_the_lock,
                    unreachable_store_gives_retryable_errors,
                    timeout_against_an_unreachable_store_says_so,
                    bad_configuration_is_refused_when_building,
                    undeclared_kinds_are_unsupported,
                }
                rw_lock {
                    readers_share_the_lock,
                    a_writer_excludes_readers_and_writers,
                    a_queued_writer_is_not_overtaken_by_later_readers,
                    every_grant_carries_a_greater_token,
                    a_read_from_a_write_guard_is_the_same_hold,
                    an_upgrade_from_a_read_guard_is_refused_at_once,
                    releasing_the_write_guard_under_live_reads_downgrades_in_place,
                    a_dead_readers_share_returns_after_the_lease,
                }
                election {
                    the_leader_is_published_while_it_leads,
                    observers_see_every_change_in_term_order,
                    observing_starts_with_the_current_state,
                    bad_identities_are_refused,
                    a_new_terms_since_is_not_before_the_previous_term_ended,
                }
                semaphore {
                    at_most_n_permits_are_held,
                    permit_counts_must_agree,
                    out_of_range_permit_counts_are_refused,
                    permits_are_granted_in_arrival_order,
                    every_permit_carries_a_greater_token,
                    a_name_in_use_as_another_kind_conflicts_or_excludes,
                }
                multi {
                    multi_lock_is_all_or_nothing,
                    multi_locks_in_opposite_order_do_not_deadlock,
                    multi_lock_rollback_leaves_no_trace,
                    dropped_multi_lock_acquisition_leaves_no_trace,
                    multi_lock_refuses_a_name_given_twice,
                    multi_guard_signals_the_first_loss,
                }
                break_lock {
                    breaking_a_held_lock_signals_the_holder_and_admits_another,
                    breaking_a_free_lock_finds_nothing_to_break,
                    breaking_shared_holds_breaks_every_holder,
                    breaking_the_leader_hands_the_election_on,
                }
            }
            mutex_cases {
                mutual_exclusion {
                    second_owner_cannot_acquire_while_held,
                    two_handles_of_one_client_exclude_each_other,
                    one_holder_at_a_time_under_contention,
                    different_names_are_independent,
                    names_are_case_sensitive,
                    unusual_names_are_accepted_and_never_collide,
                    empty_name_is_rejected,
                    oversized_name_is_rejected,
                }
                acquire {
                    try_acquire_returns_none_while_held,
                    try_acquire_leaves_no_trace,
                    acquire_timeout_fails_close_to_the_timeout,
                    acquire_timeout_leaves_no_trace,
                    extreme_timeouts_are_handled,
                    acquire_timeout_succeeds_when_released_in_time,
                    release_wakes_waiter_promptly,
                    dropped_acquire_leaves_no_trace,
                    cancelled_waiter_does_not_block_others,
                    acquire_cancelled_at_any_point_leaves_no_trace,
                    acquire_dropped_after_grant_frees_the_lock,
                    waiters_are_granted_in_arrival_order,
                }
                reentrancy {
                    reenter_returns_a_guard_of_the_same_hold_at_once,
                    lock_is_freed_only_after_every_reentrant_guard,
                    tasks_sharing_a_handle_exclude_each_other,
                    a_second_acquisition_through_one_handle_is_another_owner,
                    reentry_after_loss_fails_with_lock_lost,
                }
                fencing {
                    tokens_increase_with_every_acquisition,
                    tokens_increase_across_clients,
                    tokens_increase_across_store_restart,
                    fenced_resource_refuses_the_stale_holder,
                }
                release {
                    release_frees_the_lock,
                    release_admits_next_waiter,
                    release_after_loss_fails_and_spares_the_new_holder,
                    dropped_guard_frees_the_lock_promptly,
                    reacquire_right_after_drop_succeeds,
                    guard_dropped_on_a_plain_thread_is_released_promptly,
                    guard_dropped_after_its_runtime_shut_down_is_released_promptly,
                    provider_used_from_two_runtimes_keeps_its_holds,
                    dead_holder_frees_the_lock_after_the_lease_not_before,
                }
                runtime {
                    a_hold_outlives_the_shutdown_of_its_runtime,
                    a_hold_outlives_its_runtime_left_idle,
                    a_guard_dropped_after_its_runtime_and_provider_frees_the_lock_promptly,
                }
                loss {
                    loss_is_signalled_when_the_record_is_deleted,
                    normal_release_is_not_a_loss,
                    loss_is_signalled_when_the_client_dies,
                    loss_is_signalled_before_another_owner_can_acquire,
                    lease_is_renewed_while_the_guard_lives,
                }
                max_hold {
                    a_hold_past_its_maximum_is_lost_and_the_lock_is_freed,
                    a_maximum_hold_below_the_renewal_interval_is_refused,
                }
                cross_process {
                    holder_in_another_process_excludes_this_one,
                    killed_process_frees_its_lock,
                    __child_contender,
                }
            }
        }
    };
}

/// The expansion of [`conformance!`]; not for direct use. `$d` is a `$` token, so that the
/// expansion can define a macro of its own that matches the declared cases by name. The
/// cases of `mutex` run once; the `mutex_cases` run four times: on the mutex (at the top
/// level, grouped by topic), on the write side of a read-write lock (`write_lock::…`), on a
/// one-permit semaphore (`one_permit::…`) and on election candidates (`candidate::…`).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    (
        ($d:tt) $harness:expr; [$($skip:ident),*]; [$($only:ident),*] $others:ident;
        mutex { $($group:ident { $($case:ident),* $(,)? })* }
        mutex_cases { $($mgroup:ident { $($mcase:ident),* $(,)? })* }
    ) => {
        // Keeps a group of cases (`name mod name { … }`) that the run selects: one named in
        // `only`, or any other when the run has no `only` (`$others` is `all`, else `none`).
        macro_rules! __lockkit_group {
            $( ($only $d($d body:tt)*) => { $d($d body)* }; )*
            ($d group:ident $d($d body:tt)*) => { $crate::__conformance_others!($others $d($d body)*); };
        }
        // A name in `only` that is no group fails to compile here instead of selecting nothing.
        $( #[allow(unused_imports)] use self::$only as _; )*

        static __LOCKKIT_HARNESS: $crate::__private::OnceCell<::std::sync::Arc<dyn $crate::Harness>> =
            $crate::__private::OnceCell::const_new();

        macro_rules! __lockkit_case {
            $(
                ($d variant:ident, $d group:ident, $skip) => {
                    #[test]
                    #[ignore = "declared in conformance!(…, without: […]): the harness cannot check it"]
                    fn $skip() {}
                };
            )*
            ($d variant:ident, $d group:ident, $d case:ident) => {
                #[test]
                fn $d case() {
                    $crate::run_case(
                        &super::__LOCKKIT_HARNESS,
                        || async { ::std::sync::Arc::new($harness) as ::std::sync::Arc<dyn $crate::Harness> },
                        stringify!($d case),
                        $crate::Variant::$d variant,
                        |harness| async move { $crate::cases::$d group::$d case(&*harness).await },
                    );
                }
            };
        }

        $(
            __lockkit_group! { $group mod $group {
                $( __lockkit_case!(Mutex, $group, $case); )*
            } }
        )*
        $(
            __lockkit_group! { $mgroup mod $mgroup {
                $( __lockkit_case!(Mutex, $mgroup, $mcase); )*
            } }
        )*
        // The mutex cases again on another kind, in a module of its own.
        macro_rules! __lockkit_variant {
            ($d module:ident, $d variant:ident) => {
                mod $d module {
                    #[allow(unused_imports)]
                    use super::__LOCKKIT_HARNESS;
                    $(
                        __lockkit_group! { $mgroup mod $mgroup {
                            $( __lockkit_case!($d variant, $mgroup, $mcase); )*
                        } }
                    )*
                }
            };
        }
        __lockkit_variant!(write_lock, WriteLock);
        __lockkit_variant!(one_permit, OnePermit);
        __lockkit_variant!(candidate, Candidate);
    };
}

/// The groups of cases a run does not name in `only`: all kept (`all`, a run without `only`)
/// or none. Part of [`conformance!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_others {
    (all $($body:tt)*) => { $($body)* };
    (none $($body:tt)*) => {};
}
