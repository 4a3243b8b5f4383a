//! The fence cases on the in-memory reference sink (`lockkit_testkit::FencedResource`). It has
//! no store to restart: that case is declared.

lockkit_testkit::fence_conformance!(
    lockkit_testkit::MemoryFenceHarness::new(),
    without: [the_highest_token_survives_a_store_restart],
);

/// The cases can fail: a sink that writes without checking (a planted bug) fails them.
mod planted_bug {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use async_trait::async_trait;
    use lockkit_core::Fence;
    use lockkit_fence::{FenceError, FenceSink, FenceState};
    use lockkit_testkit::{FenceHarness, FencedResource};

    /// Writes with the fence's token as if it were the highest, whatever came before.
    #[derive(Debug, Default)]
    struct Unchecked {
        values: std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>,
        reference: FencedResource<Vec<u8>>,
    }

    #[async_trait]
    impl FenceSink for Unchecked {
        fn name(&self) -> &'static str {
            "unchecked"
        }

        async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
            let _ = FenceSink::write(&self.reference, resource, fence, value).await;
            self.values.lock().unwrap().insert(resource.to_owned(), value.to_vec());
            Ok(())
        }

        async fn read(&self, resource: &str, _fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
            Ok(self.values.lock().unwrap().get(resource).cloned())
        }

        async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
            FenceSink::state(&self.reference, resource).await
        }
    }

    struct Harness(Arc<Unchecked>);

    #[async_trait]
    impl FenceHarness for Harness {
        fn name(&self) -> String {
            "unchecked (planted bug)".to_owned()
        }

        async fn sink(&self) -> Arc<dyn FenceSink> {
            self.0.clone()
        }
    }

    #[test]
    fn a_sink_that_does_not_check_fails_the_cases() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        for case in ["stale", "real lock", "another lock", "readers"] {
            let harness = Harness(Arc::default());
            let outcome = runtime.block_on(runtime.spawn(async move {
                let h: &dyn FenceHarness = &harness;
                match case {
                    "stale" => lockkit_testkit::fence_cases::stale_writes_are_refused_and_change_nothing(h).await,
                    "real lock" => lockkit_testkit::fence_cases::a_stale_holder_of_a_real_lock_is_refused(h).await,
                    "another lock" => lockkit_testkit::fence_cases::a_token_of_another_lock_is_refused(h).await,
                    _ => lockkit_testkit::fence_cases::readers_are_refused_only_below_the_highest_write(h).await,
                }
            }));
            assert!(outcome.is_err_and(|error| error.is_panic()), "{case}: the case caught the planted bug");
        }
    }
}
