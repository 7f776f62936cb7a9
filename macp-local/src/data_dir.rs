//! The data directory: the one-process lock, private directories, and backups.

use std::path::Path;

use macp_core::{Error, Result};

use crate::blobs;
use crate::db::{DB_FILE, SqliteStore};

/// An exclusive hold on a data directory, kept while it lives (an advisory lock on
/// `<dir>/macp.lock`, released when dropped or when the process exits, however it exits).
///
/// Why: a [`SqliteStore`] keeps each room's keyword and vector indexes in memory and updates
/// them only on its own writes, so two processes writing one directory would each miss the
/// other's indexing (`macp reconcile` or `macp reindex` next to a running `macp serve`).
/// Processes that index take this lock; readers (`macp rooms`, `macp timeline`, `macp backup`)
/// need not.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Claims `dir` for this process; refuses with `conflict` if another process holds it.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock> {
    create_private_dir(dir).map_err(|e| {
        Error::backend("sqlite", false, format!("cannot create {}: {e}", dir.display()), None)
    })?;
    let path = dir.join("macp.lock");
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| {
            Error::backend("sqlite", false, format!("cannot open {}: {e}", path.display()), None)
        })?;
    match file.try_lock() {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::conflict(format!(
            "another macp process (a running `macp serve`?) is using {}; stop it first — a running \
             server already reconciles pending findings itself",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::backend("sqlite", false, format!("cannot lock {}: {e}", path.display()), None))
        }
    }
}

/// Creates `dir` (and missing parents). A directory this creates is readable by its owner only
/// (0700 on Unix): it holds the whole record, artifacts and the URL signing key. An existing
/// directory keeps its permissions.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    match b.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// What [`backup`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// Bytes of the database snapshot.
    pub database_bytes: u64,
    /// Artifact files copied (with their metadata).
    pub artifacts: u64,
    /// Bytes of artifact files copied.
    pub artifact_bytes: u64,
}

/// Backs up a data directory while `store` (opened on it) keeps serving: the database as one
/// consistent snapshot ([`SqliteStore::backup_database`]), then the artifact files, their
/// metadata and the URL signing key ([`blobs::copy_files`]). `dest` must not exist or be empty.
/// Artifact files never change once stored, so copying them after the snapshot captures every
/// artifact the snapshot knows. Restore by stopping the server and pointing `--data-dir` at
/// the copy (or moving it into place).
pub async fn backup(store: &SqliteStore, dest: &Path) -> Result<BackupReport> {
    let data_dir = store.path().parent().map(Path::to_path_buf).unwrap_or_default();
    if dest.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::invalid(
            "dest",
            format!("{} is not empty; a backup never overwrites, pick a new directory", dest.display()),
        ));
    }
    create_private_dir(dest).map_err(|e| {
        Error::backend("sqlite", false, format!("cannot create {}: {e}", dest.display()), None)
    })?;
    let database_bytes = store.backup_database(&dest.join(DB_FILE)).await?;
    let (artifacts, artifact_bytes) = blobs::copy_files(&data_dir, dest)?;
    Ok(BackupReport { database_bytes, artifacts, artifact_bytes })
}
