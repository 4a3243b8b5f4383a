//! The fence cases on fenced files, and what only files do: appends, a fence file beside each
//! file, writers in several processes, a missing directory.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode, FencingToken, LockId, LockName};
use lockkit_fence::file::FileFence;
use lockkit_fence::{FenceError, FenceSink};
use lockkit_testkit::FenceHarness;
use lockkit_testkit::{FaultResult, Unsupported};

/// Every client a new `FileFence` on one directory, as a new process would open it; a
/// restart is a new client (the files are the store).
struct FileHarness {
    dir: tempfile::TempDir,
}

impl FileHarness {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("a temporary directory") }
    }
}

#[async_trait]
impl FenceHarness for FileHarness {
    fn name(&self) -> String {
        "file fence".to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        Arc::new(FileFence::new(self.dir.path()))
    }

    async fn isolated(&self) -> Result<Arc<dyn FenceHarness>, Unsupported> {
        Ok(Arc::new(Self::new()))
    }

    async fn restart_store(&self) -> FaultResult {
        Ok(())
    }
}

lockkit_testkit::fence_conformance!(crate::FileHarness::new());

fn fence(name: &str, token: u64) -> Fence {
    let lock = LockId::new("fence-tests://files", LockName::new(name).unwrap()).unwrap();
    Fence::new(lock, FencingToken::new(token), FenceMode::Write)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

#[test]
fn appends_are_fenced_and_the_fence_file_sits_beside_the_file() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let files = FileFence::new(dir.path());
        files.append("log/today", &fence("log", 5), b"one\n".to_vec()).await.unwrap();
        files.append("log/today", &fence("log", 6), b"two\n".to_vec()).await.unwrap();
        let stale = files.append("log/today", &fence("log", 5), b"stale\n".to_vec()).await;
        assert!(matches!(stale, Err(FenceError::Stale { .. })), "{stale:?}");
        assert_eq!(std::fs::read(dir.path().join("log%2Ftoday")).unwrap(), b"one\ntwo\n");
        assert!(dir.path().join(".log%2Ftoday.fence").exists(), "the fence file beside it");
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    });
}

#[test]
fn a_missing_directory_says_to_create_it_and_writes_nothing() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("not-yet");
        let files = FileFence::new(&missing);
        match files.replace("a", &fence("a", 1), b"x".to_vec()).await {
            Err(FenceError::NotSetUp { how, .. }) => assert!(how.contains("create it"), "{how}"),
            other => panic!("expected NotSetUp, got {other:?}"),
        }
        assert!(!missing.exists());
        let long = "x".repeat(300);
        let refused = files.replace(&long, &fence("a", 1), b"x".to_vec()).await;
        assert!(matches!(refused, Err(FenceError::InvalidInput { .. })), "{refused:?}");
    });
}

/// Writers in separate processes (this test binary re-run) against one directory: the fence
/// file's flock orders them, and the last value is the highest token's.
#[test]
fn writers_in_several_processes_keep_the_highest() {
    const CHILD: &str = "LOCKKIT_FENCE_FILE_CHILD";
    if let Ok(spec) = std::env::var(CHILD) {
        // In a child: write tokens `first`, `first + step`, … up to 60 to the directory.
        let mut parts = spec.split(',');
        let dir = parts.next().unwrap().to_owned();
        let first: u64 = parts.next().unwrap().parse().unwrap();
        runtime().block_on(async {
            let files = FileFence::new(&dir);
            for token in (first..=60).step_by(4) {
                match files.replace("shared", &fence("shared", token), token.to_string().into_bytes()).await {
                    Ok(()) | Err(FenceError::Stale { .. }) => {}
                    Err(other) => panic!("token {token}: {other}"),
                }
            }
        });
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (1..=4)
        .map(|first| {
            std::process::Command::new(&exe)
                .args(["--exact", "writers_in_several_processes_keep_the_highest", "--nocapture"])
                .env(CHILD, format!("{},{first}", dir.path().display()))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a writer process failed");
    }
    runtime().block_on(async {
        let files = FileFence::new(dir.path());
        let state = files.state("shared").await.unwrap().unwrap();
        assert_eq!(state.highest, FencingToken::new(60));
        assert_eq!(files.read("shared", &fence("shared", 60)).await.unwrap().unwrap(), b"60");
    });
}

/// A resource name within the fence's 1024 bytes but too long for a file name: refused with
/// the file fence's own limit in the message, and nothing created in the directory (no
/// temporary file, no fence file).
#[test]
fn a_name_too_long_for_a_file_says_the_limit_and_writes_nothing() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let files = FileFence::new(dir.path());
        let long = "é".repeat(150); // 300 bytes, 1,800 once escaped
        for refused in [
            files.replace(&long, &fence("a", 1), b"x".to_vec()).await,
            files.append(&long, &fence("a", 1), b"x".to_vec()).await,
        ] {
            match refused {
                Err(FenceError::InvalidInput { message }) => {
                    let limit = lockkit_fence::file::MAX_FILE_NAME.to_string();
                    assert!(message.contains(&limit), "{message}");
                }
                other => panic!("expected InvalidInput, got {other:?}"),
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
    });
}
