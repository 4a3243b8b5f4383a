//! Lock names into file paths: an injective, filesystem-safe encoding.
//!
//! Bytes `a-z`, `0-9`, `-` and `_` stay as they are; every other byte of the name's UTF-8,
//! `%` and upper-case letters included, becomes `%xx` with lower-case hex digits. The result
//! uses only lower-case ASCII, so names stay distinct on case-insensitive filesystems (macOS,
//! Windows shares) and under Unicode normalisation, and it never contains `.` or `/`, so it
//! can never be `.`, `..`, a hidden file or a path of several components by accident.
//!
//! An encoded name is at most 3072 bytes (1024 bytes, each escaped), above the usual limit
//! of 255 bytes per file name. It is therefore cut into components of at most
//! [`COMPONENT_LEN`] bytes: all but the last become sub-directories, and the last gets the
//! suffix `.lock`. Joining the components back (without the suffix) gives the encoded name,
//! and decoding it gives the lock name, so two names never share a file.
//!
//! Next to the lock file, the other files of a name take the same encoded stem with another
//! suffix ([`LockFiles`]): `.fence` (the token counter), `.readers/` and `.permits/` (one
//! record file per reader or permit holder) and `.election` (the journal of an election's
//! terms). Encoded names never contain a `.`, so a stem and its suffix are told apart at the
//! first `.`, and the files of two names never meet.

use std::path::{Path, PathBuf};

use lockkit_core::LockName;

/// The longest component of a lock file's path, in bytes (the suffix `.lock` comes on top).
pub const COMPONENT_LEN: usize = 200;

/// The suffix of lock files. Encoded names never contain a `.`, so no directory and no
/// other file of the backend ends in it.
pub const LOCK_SUFFIX: &str = ".lock";

/// The suffix of a name's fence file, which keeps the last token issued for the name.
pub const FENCE_SUFFIX: &str = ".fence";

/// The suffix of a name's directory of reader records.
pub const READERS_SUFFIX: &str = ".readers";

/// The suffix of a name's directory of permit records, when the name is a semaphore.
pub const PERMITS_SUFFIX: &str = ".permits";

/// The suffix of a name's election journal, when the name is an election: every change of
/// leader, numbered, for observers to replay.
pub const ELECTION_SUFFIX: &str = ".election";

/// The files and directories of one lock name, all in one directory of the lock directory
/// (see the [crate docs](crate) for what each holds). Only those a name has used exist.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockFiles {
    /// The lock file: writers and mutexes hold its exclusive flock, readers its shared flock;
    /// its record names the writer.
    pub lock: PathBuf,
    /// The fence file: the last token issued for the name and the permit count of a
    /// semaphore; its exclusive flock is taken for an instant to issue a token.
    pub fence: PathBuf,
    /// One record file per live reader, each locked by its reader.
    pub readers: PathBuf,
    /// One record file per live permit of a semaphore, each locked by its holder.
    pub permits: PathBuf,
    /// The journal of an election: its changes of leader, numbered (see the
    /// [crate docs](crate#elections)).
    pub election: PathBuf,
}

/// The escaped form of `name`: lower-case ASCII letters, digits, `-`, `_` and `%xx`.
pub fn encode_name(name: &LockName) -> String {
    name.percent_encoded(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' || byte == b'_')
}

/// The path of the lock file of `name` under `dir`.
#[cfg(test)]
fn lock_path(dir: &Path, name: &LockName) -> PathBuf {
    lock_files(dir, name).lock
}

/// The files of `name` under `dir`.
pub(crate) fn lock_files(dir: &Path, name: &LockName) -> LockFiles {
    let stem = stem(dir, name);
    let with = |suffix: &str| {
        let mut path = stem.clone().into_os_string();
        path.push(suffix);
        PathBuf::from(path)
    };
    LockFiles {
        lock: with(LOCK_SUFFIX),
        fence: with(FENCE_SUFFIX),
        readers: with(READERS_SUFFIX),
        permits: with(PERMITS_SUFFIX),
        election: with(ELECTION_SUFFIX),
    }
}

/// The path of `name`'s files under `dir`, without a suffix.
fn stem(dir: &Path, name: &LockName) -> PathBuf {
    let encoded = encode_name(name);
    let mut path = dir.to_path_buf();
    // The encoding is ASCII, so cutting at any byte offset keeps valid UTF-8.
    let mut rest = encoded.as_str();
    while rest.len() > COMPONENT_LEN {
        let (head, tail) = rest.split_at(COMPONENT_LEN);
        path.push(head);
        rest = tail;
    }
    path.push(rest);
    path
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;

    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn readable_names_stay_readable() {
        assert_eq!(encode_name(&name("orders-42_x")), "orders-42_x");
        assert_eq!(encode_name(&name("orders/42")), "orders%2f42");
        assert_eq!(encode_name(&name("A")), "%41");
        assert_eq!(encode_name(&name(".")), "%2e");
        assert_eq!(encode_name(&name("%41")), "%2541");
    }

    #[test]
    fn tricky_names_never_share_a_file() {
        let names = ["a/b", "a%2fb", "a%2Fb", "A/B", "a b", "ä", "a\0b", ".", "..", "a.lock", "a", "A", "%41"];
        let dir = Path::new("/d");
        let paths: HashSet<_> = names.iter().map(|n| lock_path(dir, &name(n))).collect();
        assert_eq!(paths.len(), names.len());
        // Case-insensitive filesystems: the paths differ even when lower-cased.
        let folded: HashSet<_> = paths.iter().map(|p| p.to_string_lossy().to_lowercase()).collect();
        assert_eq!(folded.len(), names.len());
    }

    #[test]
    fn long_names_are_cut_into_short_components() {
        let dir = Path::new("/d");
        for long in ["é".repeat(512), "x".repeat(1024), "/".repeat(1024), "x".repeat(200), "x".repeat(201)] {
            let path = lock_path(dir, &name(&long));
            for component in path.strip_prefix(dir).unwrap().components() {
                assert!(component.as_os_str().len() <= COMPONENT_LEN + LOCK_SUFFIX.len(), "{path:?}");
                assert!(!component.as_os_str().is_empty());
            }
            // Joining the components back gives the encoded name.
            let joined: String = path
                .strip_prefix(dir)
                .unwrap()
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            assert_eq!(joined.strip_suffix(LOCK_SUFFIX).unwrap(), encode_name(&name(&long)));
        }
        // A name whose encoding ends at a cut differs from the one cut one byte later.
        assert_ne!(lock_path(dir, &name(&"x".repeat(200))), lock_path(dir, &name(&"x".repeat(201))));
    }

    #[test]
    fn a_names_files_share_its_stem_and_never_meet_anothers() {
        let dir = Path::new("/d");
        let files = lock_files(dir, &name("a/b"));
        assert_eq!(files.lock, Path::new("/d/a%2fb.lock"));
        assert_eq!(files.fence, Path::new("/d/a%2fb.fence"));
        assert_eq!(files.readers, Path::new("/d/a%2fb.readers"));
        assert_eq!(files.permits, Path::new("/d/a%2fb.permits"));
        assert_eq!(files.election, Path::new("/d/a%2fb.election"));
        let mut all = HashSet::new();
        for n in ["a", "a.lock", "a.fence", "a.readers", "a.permits", "a.election", "a/b", "x".repeat(200).as_str()] {
            let files = lock_files(dir, &name(n));
            for path in [files.lock, files.fence, files.readers, files.permits, files.election] {
                assert!(all.insert(path.clone()), "{path:?} is shared");
                let file_name = path.file_name().unwrap().to_str().unwrap();
                assert!(file_name.len() <= COMPONENT_LEN + ELECTION_SUFFIX.len(), "{path:?}");
            }
        }
    }
}
