//! What the tests share: a temporary directory per test (removed when dropped), a store on
//! a file in it, and the store as the conformance kit's subject.

#![allow(dead_code)]

pub mod subject;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use idem_sqlite::SqliteStore;

/// A directory of its own under the system's temporary directory, removed with everything
/// in it when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "idem-sqlite-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The database file's path in this directory.
    pub fn db(&self) -> PathBuf {
        self.0.join("idem.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A migrated store on a fresh file in `dir`.
pub async fn store(dir: &TempDir) -> SqliteStore {
    let store = SqliteStore::open(dir.db()).await.unwrap();
    store.migrate().await.unwrap();
    store
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
