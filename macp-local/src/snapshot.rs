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
//! - Each room in the file carries the room's counters as the database had them (highest
//!   finding and event numbers; an erasure is an event). A room whose counters moved since (a
//!   `macp` of an older build, which knows nothing of the token, wrote to it), that was
//!   purged, or whose vectors do not have the index model's dimension, loads from the
//!   database; so does every room after a schema migration.
//! - The file is bound to this build's version and [`FORMAT`] and checksummed; a file that
//!   fails any check is ignored, and the rooms load from the database as before.
//! - An erased finding's postings and vector are not in the indexes, so not in the file; the
//!   file exists only while no server runs, readable by the data directory's owner alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use macp_core::search::image::{ImageReader, ImageWriter};
use macp_core::{Error, Result, RoomId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::db::{Caches, sql_err};
use crate::store::{RoomKeywords, RoomVectors, read_model};

/// The file in the data directory.
pub(crate) const FILE: &str = "indexes.snapshot";

/// The `meta` key holding the token of the snapshot the database matches.
const TOKEN_KEY: &str = "index_snapshot";

const MAGIC: &[u8; 8] = b"MACPIDX1";

/// The layout of the file and of the index images in it: bump it with any change to either
/// (or to how an index is built from findings: tokeniser, quantiser), so no build reads back
/// what another build wrote differently.
const FORMAT: u32 = 2;

/// The build that wrote a snapshot.
const BUILD: &str = env!("CARGO_PKG_VERSION");

/// A room's counters in the database: the highest finding number and the highest event
/// number. Every change to what a room's indexes hold moves one of them (a post, an erasure).
type Marks = (u64, u64);

/// One room's indexes, either of which may be absent (never loaded), and the room's counters
/// when they were kept.
pub(crate) struct RoomImage {
    pub(crate) room: RoomId,
    pub(crate) marks: Marks,
    pub(crate) keywords: Option<Arc<RoomKeywords>>,
    pub(crate) vectors: Option<Arc<RoomVectors>>,
}

/// Every room's counters (inside the last write, so they are those of what the indexes hold).
pub(crate) fn marks(conn: &Connection) -> Result<HashMap<RoomId, Marks>> {
    let mut st = conn.prepare("SELECT room_id, last_seq, last_event FROM rooms").map_err(sql_err)?;
    let rows = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))
        .map_err(sql_err)?;
    let mut out = HashMap::new();
    for row in rows {
        let (room, seq, event) = row.map_err(sql_err)?;
        out.insert(room.parse()?, (seq as u64, event as u64));
    }
    Ok(out)
}

/// The loaded indexes of every room the database still has, with its counters (in the last
/// write's effect: every earlier write's changes are applied).
pub(crate) fn images(caches: &Caches, marks: &HashMap<RoomId, Marks>) -> Vec<RoomImage> {
    let mut rooms: HashMap<RoomId, RoomImage> = HashMap::new();
    let keywords = caches.keywords.ready().into_iter().map(|(room, k)| (room, Some(k), None));
    let vectors = caches.vectors.ready().into_iter().map(|(room, v)| (room, None, Some(v)));
    for (room, k, v) in keywords.chain(vectors) {
        let Some(&marks) = marks.get(&room) else { continue };
        let r = rooms.entry(room).or_insert(RoomImage { room, marks, keywords: None, vectors: None });
        r.keywords = r.keywords.take().or(k);
        r.vectors = r.vectors.take().or(v);
    }
    rooms.into_values().collect()
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
/// and removes the snapshot file, first reading the file back when `resume` is set, no
/// migration ran (`migrated`) and its token is the database's. Only the token's removal can
/// fail the open: a file that cannot be read or removed can never match again.
pub(crate) fn take(
    conn: &Connection,
    dir: &Path,
    resume: bool,
    migrated: bool,
) -> Result<(Vec<RoomImage>, IndexesResumed)> {
    let token: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = ?1", params![TOKEN_KEY], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    if token.is_some() {
        conn.execute("DELETE FROM meta WHERE key = ?1", params![TOKEN_KEY]).map_err(sql_err)?;
    }
    let file = path(dir);
    let mut report = IndexesResumed::default();
    let there = file.exists();
    let bytes = match (there, resume, &token, migrated) {
        (false, ..) => None,
        (true, false, ..) => {
            report.ignored = Some("this process does not resume indexes".into());
            None
        }
        (true, true, None, _) => {
            report.ignored =
                Some("the database changed after the snapshot was taken (opened by another process)".into());
            None
        }
        (true, true, Some(_), true) => {
            report.ignored = Some("the database was migrated to a new schema".into());
            None
        }
        (true, true, Some(_), false) => match std::fs::read(&file) {
            Ok(b) => Some(b),
            Err(e) => {
                report.ignored = Some(format!("cannot read {}: {e}", file.display()));
                None
            }
        },
    };
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(temp_path(dir));
    let (Some(bytes), Some(token)) = (bytes, token) else { return Ok((Vec::new(), report)) };
    let rooms = match decode(&bytes, &token) {
        Ok(rooms) => rooms,
        Err(why) => {
            report.ignored = Some(why);
            return Ok((Vec::new(), report));
        }
    };
    // Each room against the database as it is now.
    let now = marks(conn)?;
    let dim = read_model(conn)?.map(|m| m.dimension);
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for r in rooms {
        match r {
            Ok(img) => {
                let same = now.get(&img.room) == Some(&img.marks);
                let fits = img.vectors.as_ref().is_none_or(|v| v.dim() == 0 || Some(v.dim()) == dim);
                if same && fits { kept.push(img) } else { dropped.push(img.room.to_string()) }
            }
            Err(room) => dropped.push(room),
        }
    }
    report.rooms = kept.len();
    if !dropped.is_empty() {
        report.ignored = Some(format!(
            "{} of {} rooms changed since the snapshot was taken, or are damaged in it ({}); they load from the database",
            dropped.len(),
            dropped.len() + kept.len(),
            dropped.join(", ")
        ));
    }
    Ok((kept, report))
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
        body.u64(r.marks.0);
        body.u64(r.marks.1);
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
    head.u32(FORMAT);
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

/// The rooms of a snapshot, each read back or (`Err`, naming the room) damaged; `Err` for the
/// whole file when it is not this build's snapshot for `token`, or fails its checksum.
fn decode(
    bytes: &[u8],
    token: &str,
) -> std::result::Result<Vec<std::result::Result<RoomImage, String>>, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else { return Err("not an index snapshot".into()) };
    let mut r = ImageReader::new(rest);
    let damaged = || "the snapshot is damaged".to_owned();
    let format = r.u32().ok_or_else(damaged)?;
    let build = r.str().ok_or_else(damaged)?;
    if format != FORMAT || build != BUILD {
        return Err(format!(
            "written by another build ({build}, format {format}; this is {BUILD}, format {FORMAT})"
        ));
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
        let marks = (r.u64().ok_or_else(damaged)?, r.u64().ok_or_else(damaged)?);
        let (k, v) = (r.bytes().ok_or_else(damaged)?, r.bytes().ok_or_else(damaged)?);
        // The vectors on a second thread while this one reads the keywords.
        let (keywords, vectors) = std::thread::scope(|s| {
            let vectors = s.spawn(|| whole(v, RoomVectors::read_image));
            (whole(k, RoomKeywords::read_image), vectors.join().unwrap_or(None))
        });
        rooms.push(match (keywords, vectors) {
            (Some(keywords), Some(vectors)) => Ok(RoomImage {
                room,
                marks,
                keywords: keywords.map(Arc::new),
                vectors: vectors.map(Arc::new),
            }),
            _ => Err(room.to_string()),
        });
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
