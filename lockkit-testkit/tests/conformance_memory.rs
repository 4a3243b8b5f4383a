//! The memory backend, leased, through the conformance kit: the same one line a third-party
//! backend writes.
lockkit_testkit::conformance!(lockkit_testkit::memory::MemoryHarness::with_lease());
