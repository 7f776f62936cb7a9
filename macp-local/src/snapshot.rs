//! The search indexes kept across a clean restart.
//!
//! Why: a room's keyword and vector indexes live in memory and are rebuilt from the database on
//! first use, about a second and a half for 100,000 findings on two cores: the first search
//! after a restart waited that long. A server that stops cleanly writes the indexes it holds to
//! `indexes.snapshot` in the data directory; the next server reads them back in a fraction of
//! that time instead of tokenising every finding again.
//!
//! An index read back must be exactly what the database would rebuild, or a search would miss
//! (or show) what it should not. So:
//! - The snapshot is taken by the store's last write ([`crate::writer::Job::last`]): once it is
//!   committed the writer refuses every later write, so the database cannot move past what the
//!   snapshot holds.
//! - That write stores a random token in the database (`meta`), and the file carries the same
//!   token. Every open of the store takes the token out of the database (durably, before any
//!   other write) and deletes the file; only an open that asked to resume, and found the tokens
//!   equal, reads the file first. Any other process that opened the store meanwhile (a `macp`
//!   command erasing a finding, an import, a restore of an older database) leaves no token, so
//!   its changes are never hidden behind an older snapshot.
//! - The file is bound to this build (its version string) and checksummed; a file that fails
//!   any check is ignored, and the rooms load from the database as before.
//! - An erased finding's postings and vector are not in the indexes, so not in the file; the
//!   file exists only while no server runs, readable by the data directory's owner alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use macp_core::search::image::{ImageReader, ImageWriter};
use macp_core::{Error, Result, RoomId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::db::sql_err;
use crate::store::{RoomKeywords, RoomVectors};

/// The file in the data directory.
pub(crate) const FILE: &str = "indexes.snapshot";

/// The `meta` key holding the token of the snapshot the database matches.
const TOKEN_KEY: &str = "index_snapshot";

const MAGIC: &[u8; 8] = b"MACPIDX1";

/// The build that wrote a snapshot: the image format is private to one build.
const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "/1");

/// One room's indexes, either of which may be absent (never loaded).
pub(crate) struct RoomImage {
    pub(crate) room: RoomId,
    pub(crate) keywords: Option<Arc<RoomKeywords>>,
    pub(crate) vectors: Option<Arc<RoomVectors>>,
}

/// What an open did with a snapshot it found (see [`crate::SqliteStore::resumed_indexes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexesResumed {
    /// Rooms whose indexes were read back.
    pub rooms: usize,
    /// Why a snapshot that was there was not used (none there is not a reason).
    pub ignored: Option<String>,
}

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

fn temp_path(dir: &Path) -> PathBuf {
    dir.join(format!("{FILE}.tmp"))
}

/// At open, on the writer's connection before any write: takes the token out of the database
/// and removes the snapshot file, first reading the file back when `resume` is set and its
/// token is the database's.
pub(crate) fn take(conn: &Connection, dir: &Path, resume: bool) -> Result<(Vec<RoomImage>, IndexesResumed)> {
    let token: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = ?1", params![TOKEN_KEY], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    if token.is_some() {
        conn.execute("DELETE FROM meta WHERE key = ?1", params![TOKEN_KEY]).map_err(sql_err)?;
    }
    let file = path(dir);
    let bytes = match std::fs::read(&file) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&format!("cannot read {}", file.display()), e)),
    };
    for p in [file.clone(), temp_path(dir)] {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err(&format!("cannot remove {}", p.display()), e));
            }
            _ => {}
        }
    }
    let mut report = IndexesResumed::default();
    let Some(bytes) = bytes else { return Ok((Vec::new(), report)) };
    let read = match (resume, token) {
        (false, _) => Err("this process does not resume indexes".to_owned()),
        (true, None) => {
            Err("the database changed after the snapshot was taken (opened by another process)".into())
        }
        (true, Some(t)) => decode(&bytes, &t),
    };
    match read {
        Ok(rooms) => {
            report.rooms = rooms.len();
            Ok((rooms, report))
        }
        Err(why) => {
            report.ignored = Some(why);
            Ok((Vec::new(), report))
        }
    }
}

/// A fresh token for a snapshot.
pub(crate) fn token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Error::backend("sqlite", false, format!("no randomness: {e}"), None))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Stores `token` as the one the snapshot about to be written carries (inside the last write).
pub(crate) fn put_token(conn: &Connection, token: &str) -> Result<()> {
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)", params![TOKEN_KEY, token])
        .map_err(sql_err)
        .map(|_| ())
}

/// Writes the snapshot file (a temporary file synced and renamed, so a crash leaves the old
/// state or the new one, never half of it). Returns its size in bytes.
pub(crate) fn write(dir: &Path, token: &str, rooms: &[RoomImage]) -> Result<u64> {
    let mut body = ImageWriter::new();
    body.count(rooms.len());
    // Each index as a blob of its own (empty when the room's was not loaded), so the two can
    // be read back on two threads.
    for r in rooms {
        body.str(&r.room.to_string());
        let mut k = ImageWriter::new();
        if let Some(ix) = &r.keywords {
            ix.write_image(&mut k);
        }
        body.bytes(&k.into_bytes());
        let mut v = ImageWriter::new();
        if let Some(ix) = &r.vectors {
            ix.write_image(&mut v);
        }
        body.bytes(&v.into_bytes());
    }
    let body = body.into_bytes();
    let mut head = ImageWriter::new();
    head.str(BUILD);
    head.str(token);
    head.u64(checksum(&body));
    let head = head.into_bytes();

    use std::io::Write;
    let tmp = temp_path(dir);
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let failed = |e| io_err(&format!("cannot write {}", tmp.display()), e);
    let mut f = o.open(&tmp).map_err(failed)?;
    f.write_all(MAGIC).map_err(failed)?;
    f.write_all(&head).map_err(failed)?;
    f.write_all(&body).map_err(failed)?;
    f.sync_all().map_err(failed)?;
    std::fs::rename(&tmp, path(dir)).map_err(failed)?;
    // The rename itself must survive a crash for the file to be found.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok((MAGIC.len() + head.len() + body.len()) as u64)
}

fn decode(bytes: &[u8], token: &str) -> std::result::Result<Vec<RoomImage>, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else { return Err("not an index snapshot".into()) };
    let mut r = ImageReader::new(rest);
    let damaged = || "the snapshot is damaged".to_owned();
    let build = r.str().ok_or_else(damaged)?;
    if build != BUILD {
        return Err(format!("written by another build ({build}, this is {BUILD})"));
    }
    if r.str().ok_or_else(damaged)? != token {
        return Err("the database changed after the snapshot was taken".into());
    }
    let sum = r.u64().ok_or_else(damaged)?;
    let body = &rest[rest.len() - r.remaining()..];
    if checksum(body) != sum {
        return Err(damaged());
    }
    let n = r.count(3).ok_or_else(damaged)?;
    let mut rooms = Vec::with_capacity(n);
    for _ in 0..n {
        let room: RoomId = r.str().and_then(|s| s.parse().ok()).ok_or_else(damaged)?;
        let (k, v) = (r.bytes().ok_or_else(damaged)?, r.bytes().ok_or_else(damaged)?);
        // The vectors on a second thread while this one reads the keywords.
        let (keywords, vectors) = std::thread::scope(|s| {
            let vectors = s.spawn(|| whole(v, RoomVectors::read_image));
            (whole(k, RoomKeywords::read_image), vectors.join().unwrap_or(None))
        });
        let (keywords, vectors) = (keywords.ok_or_else(damaged)?, vectors.ok_or_else(damaged)?);
        rooms.push(RoomImage { room, keywords: keywords.map(Arc::new), vectors: vectors.map(Arc::new) });
    }
    if !r.is_empty() {
        return Err(damaged());
    }
    Ok(rooms)
}

/// An index read from a whole blob: `Some(None)` for an empty one (not loaded when kept),
/// `None` when it does not read back, or leaves bytes over.
fn whole<T>(bytes: &[u8], read: impl FnOnce(&mut ImageReader<'_>) -> Option<T>) -> Option<Option<T>> {
    if bytes.is_empty() {
        return Some(None);
    }
    let mut r = ImageReader::new(bytes);
    let ix = read(&mut r)?;
    r.is_empty().then_some(Some(ix))
}

/// A cheap checksum against a damaged file (not against tampering: the file is as trusted as
/// the database beside it). Eight bytes at a time, so it costs little next to reading the file.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x0000_0100_0000_01b3;
    // Four independent lanes: a multiply's latency is not on one chain through the whole file.
    let mut lanes = [0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64, 1, 2, 3];
    let mut blocks = bytes.chunks_exact(32);
    for b in blocks.by_ref() {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let x = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
            *lane = (*lane ^ x).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = lanes.iter().fold(0u64, |h, l| (h ^ l).wrapping_mul(K).rotate_left(31));
    for b in blocks.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(K);
    }
    h
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::backend("sqlite", false, format!("{what}: {e}"), Some(Box::new(e)))
}
