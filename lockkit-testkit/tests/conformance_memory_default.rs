//! The memory backend in its embedded default configuration (no lease) through the kit.
lockkit_testkit::conformance!(lockkit_testkit::memory::MemoryHarness::new());
