//! Counts panics per thread name, caught ones included, so that a case can prove that
//! something did not panic even where the panic would have been caught (by a thread join or
//! by a Tokio task) and never seen.

use std::collections::HashMap;
use std::sync::{Mutex, Once, PoisonError};

static COUNTS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

/// Installs the counting panic hook once per process, in front of the hook already there
/// (which still runs, so panic messages are printed as before).
pub fn watch() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().unwrap_or("<unnamed>").to_owned();
            let mut counts = COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
            *counts.get_or_insert_with(HashMap::new).entry(name).or_default() += 1;
            drop(counts);
            previous(info);
        }));
    });
}

/// How many panics happened on threads called `name` since [`watch`] was first called.
pub fn on_thread(name: &str) -> usize {
    let counts = COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
    counts.as_ref().and_then(|counts| counts.get(name).copied()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_panics_are_counted_by_thread() {
        watch();
        let name = "lockkit-panics-self-test";
        assert_eq!(on_thread(name), 0);
        let joined = std::thread::Builder::new().name(name.to_owned()).spawn(|| panic!("on purpose")).map(|t| t.join());
        assert!(matches!(joined, Ok(Err(_))), "the thread panicked and the panic was caught by join");
        assert_eq!(on_thread(name), 1);
    }
}
