//! Property test of every setting a URL can carry, for every backend: any option, any
//! value, any duration either builds a provider or is refused with `InvalidConfig` (never a
//! panic, never another error), and a provider that builds acquires and releases without
//! panicking (against a closed port for the network backends, where it must fail cleanly).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lockkit::config::StoreUrl;
use lockkit::{Error, LockProvider};
use proptest::prelude::*;

/// A duration as a URL would carry it: any number of any unit, huge ones included.
fn duration_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        (0u64..5_000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0.0f64..1e6).prop_map(|x| format!("{x}")),
        Just("5000000000000000".to_owned()),
        Just("1e400".to_owned()),
    ];
    let unit = prop_oneof![Just("us"), Just("ms"), Just("s"), Just("m"), Just("h"), Just("d"), Just(""), Just("x")];
    (number, unit).prop_map(|(number, unit)| format!("{number}{unit}"))
}

/// Any value: a duration, a flag, or arbitrary (percent-encoded) text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => duration_text(),
        1 => prop_oneof![Just("true".to_owned()), Just("false".to_owned())],
        1 => "[a-z0-9{}%:/ ]{0,12}".prop_map(|text| percent_encode(&text)),
    ]
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// A query of up to four options, drawn from `known` and from made-up names.
fn query(known: &'static [&'static dyn lockkit::config::OptionKey]) -> impl Strategy<Value = String> {
    let names: Vec<&'static str> = known.iter().map(|key| key.name()).collect();
    let key = prop_oneof![4 => proptest::sample::select(names), 1 => Just("bogus")];
    proptest::collection::vec((key, value()), 0..4).prop_map(|pairs| {
        let mut seen = std::collections::HashSet::new();
        pairs
            .into_iter()
            .filter(|(key, _)| seen.insert(*key))
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// A port on loopback where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// The outcome every built provider must reach without panicking: a grant released, or an
/// error (the network backends point at a closed port).
fn exercise(provider: LockProvider) {
    runtime().block_on(async move {
        let lock = provider.lock("property/lock").unwrap();
        match tokio::time::timeout(Duration::from_secs(10), lock.acquire_timeout(Duration::from_millis(50))).await {
            Ok(Ok(guard)) => drop(guard.release().await),
            Ok(Err(error)) => assert!(!matches!(error, Error::InvalidConfig { .. }), "refused after build: {error}"),
            Err(_) => panic!("acquire_timeout(50ms) did not return within 10 s"),
        }
    });
}

/// Builds a provider from `url` with `build`, and checks the outcome.
fn check(url: &str, build: impl FnOnce(&StoreUrl) -> lockkit::Result<LockProvider>) -> Result<(), TestCaseError> {
    let parsed = match StoreUrl::parse(url) {
        Ok(parsed) => parsed,
        Err(Error::InvalidConfig { .. }) => return Ok(()),
        Err(other) => return Err(TestCaseError::fail(format!("{url}: parse gave {other}"))),
    };
    match build(&parsed) {
        Ok(provider) => exercise(provider),
        Err(Error::InvalidConfig { message, .. }) => {
            prop_assert!(message.len() > 10, "{url}: the message says what to change: {message:?}");
        }
        Err(other) => return Err(TestCaseError::fail(format!("{url}: build gave {other}, not InvalidConfig"))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn memory_settings_build_or_are_refused(query in query(lockkit::memory::OPTIONS)) {
        check(&format!("mem://?{query}"), |url| lockkit::memory::MemoryLockProvider::from_url(url).map(Into::into))?;
    }

    #[test]
    fn file_settings_build_or_are_refused(query in query(lockkit::file::OPTIONS)) {
        // A directory of its own per case, removed when the case ends.
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&format!("file://{}?{query}", dir.path().display()), |url| {
            lockkit::file::FileLockProvider::connect(url).map(Into::into)
        })?;
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_settings_build_or_are_refused(query in query(lockkit::redis::OPTIONS)) {
        check(&format!("redis://127.0.0.1:{}/0?{query}", closed_port()), |url| {
            lockkit::redis::RedisLockProviderBuilder::from_url(url)?.build().map(Into::into)
        })?;
    }

    #[cfg(feature = "zk")]
    #[test]
    fn zk_settings_build_or_are_refused(query in query(lockkit::zk::OPTIONS)) {
        check(&format!("zk://127.0.0.1:{}/chroot?{query}", closed_port()), |url| {
            lockkit::zk::ZkLockProviderBuilder::from_url(url)?.build().map(Into::into)
        })?;
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_settings_build_or_are_refused(query in query(lockkit::postgres::OPTIONS)) {
        check(&format!("postgres://app@127.0.0.1:{}/db?{query}", closed_port()), |url| {
            lockkit::postgres::PostgresLockProviderBuilder::from_url(url)?.build().map(Into::into)
        })?;
    }

    #[test]
    fn any_text_is_a_url_or_invalid_config(text in "\\PC{0,40}") {
        match StoreUrl::parse(&text) {
            Ok(_) | Err(Error::InvalidConfig { .. }) => {}
            Err(other) => prop_assert!(false, "{text:?}: {other}"),
        }
    }
}
