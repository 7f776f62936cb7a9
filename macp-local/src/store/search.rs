//! The SQLite [`VectorIndex`]: vectors stored durably in the database, scanned in process.
//!
//! Each finding's vector is kept exactly (f32, little-endian) in `finding_vectors`, in the same
//! database file as the findings. Queries run against an in-memory copy of one room, loaded on
//! first use and kept current by every upsert: vectors quantised to `i8` with one scale per
//! vector, scanned with an integer dot product (split over the available cores for large
//! rooms), and the top `k` selected without a full sort. An exact scan keeps recall perfect and
//! the cost linear in the room size; measured against sqlite-vec, see BENCHMARKS.md.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use macp_core::search::image::{ImageReader, ImageWriter};
use macp_core::search::{
    Best, IndexModel, VectorFilter, VectorHit, VectorIndex, VectorRecord, model_mismatch,
};
use macp_core::{AgentId, Error, FindingId, Result, RoomId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::db::{SqliteStore, exec, row, sql_err};
use crate::indexes::RoomIndex;
use crate::writer::{Effects, Sync};

/// Rows per segment: a snapshot shares every full segment and copies at most the open one when
/// a write lands on it while a search holds it.
const SEGMENT: usize = 1024;

/// One room's vectors, quantised for scanning, in segments of [`SEGMENT`] rows (see
/// [`crate::indexes`] for why a clone must be cheap).
#[derive(Debug, Clone, Default)]
pub(crate) struct RoomVectors {
    dim: usize,
    sealed: Vec<Arc<Rows>>,
    open: Arc<Rows>,
}

/// A segment's rows. A removed row stays in place, marked dead, so positions never move.
#[derive(Debug, Clone, Default)]
struct Rows {
    ids: Vec<FindingId>,
    agents: Vec<AgentId>,
    tags: Vec<Vec<String>>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// The sign of each dimension, packed (`dim / 64` words a row): a first pass over these
    /// picks the candidates that the int8 codes then score (see [`RoomVectors::top_k`]).
    signs: Vec<u64>,
    live: Vec<bool>,
    pos: HashMap<FindingId, u32>,
    /// The smallest and largest id in the segment: ids are time-ordered and rows arrive roughly
    /// in that order, so a lookup skips every segment whose range cannot hold the id.
    range: Option<(FindingId, FindingId)>,
}

/// A change to a room's vectors, as committed.
pub(crate) enum VectorOp {
    Put(FindingId, AgentId, Vec<String>, Vec<f32>),
    Remove(FindingId),
}

impl RoomIndex for RoomVectors {
    type Op = VectorOp;

    fn apply(&mut self, op: VectorOp) {
        match op {
            VectorOp::Put(id, agent, tags, v) => self.put(id, agent, tags, &v),
            VectorOp::Remove(id) => self.remove(id),
        }
    }
}

impl RoomVectors {
    /// Writes the room's vectors as they are held (quantised, in segments) for
    /// [`read_image`](Self::read_image). A removed row (an erased finding) keeps its place but
    /// is written as zeros: what was erased is never written out again.
    pub(crate) fn write_image(&self, w: &mut ImageWriter) {
        let (dim, words) = (self.dim, self.dim.div_ceil(64));
        w.u64(dim as u64);
        w.count(self.sealed.len() + 1);
        for rows in self.segments() {
            w.count(rows.ids.len());
            let mut codes = Vec::with_capacity(rows.codes.len());
            let mut signs = Vec::with_capacity(rows.signs.len());
            for (i, id) in rows.ids.iter().enumerate() {
                let live = rows.live[i];
                w.id(*id);
                w.str(rows.agents[i].as_str());
                let tags: &[String] = if live { &rows.tags[i] } else { &[] };
                w.count(tags.len());
                for t in tags {
                    w.str(t);
                }
                w.u32(if live { rows.scales[i].to_bits() } else { 0 });
                w.u8(u8::from(live));
                if live {
                    codes.extend(rows.codes[i * dim..(i + 1) * dim].iter().map(|c| *c as u8));
                    signs.extend_from_slice(&rows.signs[i * words..(i + 1) * words]);
                } else {
                    codes.resize(codes.len() + dim, 0);
                    signs.resize(signs.len() + words, 0);
                }
            }
            w.bytes(&codes);
            w.count(signs.len());
            for s in &signs {
                w.u64(*s);
            }
        }
    }

    /// The vectors an image holds, or `None` when it is not one [`write_image`](Self::write_image)
    /// wrote (short, or rows and codes that do not match the dimension and segment sizes).
    pub(crate) fn read_image(r: &mut ImageReader<'_>) -> Option<Self> {
        // Any model's dimension is far below this; a larger one is damage.
        let dim = usize::try_from(r.u64()?).ok().filter(|d| *d <= 65_536)?;
        let words = dim.div_ceil(64);
        let n = r.count(8)?;
        let mut segments = Vec::with_capacity(n);
        for s in 0..n {
            let count = r.count(16)?;
            // Every segment but the last is full; the last never is.
            if (s + 1 < n && count != SEGMENT) || (s + 1 == n && count >= SEGMENT) {
                return None;
            }
            let mut rows = Rows { pos: HashMap::with_capacity(count), ..Default::default() };
            for i in 0..count {
                let id = r.id()?;
                rows.agents.push(AgentId::new(r.str()?).ok()?);
                let tags = r.count(8)?;
                rows.tags.push((0..tags).map(|_| r.str().map(str::to_owned)).collect::<Option<Vec<_>>>()?);
                rows.scales.push(f32::from_bits(r.u32()?));
                let live = r.u8()? == 1;
                rows.live.push(live);
                if live {
                    rows.pos.insert(id, i as u32);
                }
                rows.range = Some(rows.range.map_or((id, id), |(lo, hi)| (lo.min(id), hi.max(id))));
                rows.ids.push(id);
            }
            rows.codes = r.bytes()?.iter().map(|b| *b as i8).collect();
            let signs = r.count(8)?;
            rows.signs = (0..signs).map(|_| r.u64()).collect::<Option<Vec<_>>>()?;
            if rows.codes.len() != count * dim || rows.signs.len() != count * words {
                return None;
            }
            segments.push(Arc::new(rows));
        }
        let open = segments.pop()?;
        Some(Self { dim, sealed: segments, open })
    }

    fn len(&self) -> usize {
        self.sealed.len() * SEGMENT + self.open.ids.len()
    }

    /// The dimension its rows have (0 before the first).
    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    fn segments(&self) -> impl Iterator<Item = &Rows> {
        self.sealed.iter().map(|s| &**s).chain(std::iter::once(&*self.open))
    }

    /// `(segment, row)` of a live id; segment `sealed.len()` is the open one.
    fn find(&self, id: FindingId) -> Option<(usize, usize)> {
        self.segments().enumerate().find_map(|(s, rows)| {
            let (lo, hi) = rows.range?;
            if id < lo || id > hi {
                return None;
            }
            rows.pos.get(&id).map(|&r| (s, r as usize))
        })
    }

    fn segment_mut(&mut self, s: usize) -> &mut Rows {
        match self.sealed.get_mut(s) {
            Some(seg) => Arc::make_mut(seg),
            None => Arc::make_mut(&mut self.open),
        }
    }

    fn put(&mut self, id: FindingId, agent: AgentId, tags: Vec<String>, v: &[f32]) {
        if self.dim == 0 {
            self.dim = v.len();
        }
        let dim = self.dim;
        let (codes, scale) = quantize(v);
        if let Some((s, i)) = self.find(id) {
            let rows = self.segment_mut(s);
            rows.agents[i] = agent;
            rows.tags[i] = tags;
            rows.codes[i * dim..(i + 1) * dim].copy_from_slice(&codes);
            rows.scales[i] = scale;
            let w = dim.div_ceil(64);
            rows.signs[i * w..(i + 1) * w].copy_from_slice(&signs(&codes));
            return;
        }
        self.append(id, agent, tags, v);
    }

    /// Adds a row for an id not held yet.
    fn append(&mut self, id: FindingId, agent: AgentId, tags: Vec<String>, v: &[f32]) {
        if self.dim == 0 {
            self.dim = v.len();
        }
        let (codes, scale) = quantize(v);
        let rows = Arc::make_mut(&mut self.open);
        rows.pos.insert(id, rows.ids.len() as u32);
        rows.range = Some(rows.range.map_or((id, id), |(lo, hi)| (lo.min(id), hi.max(id))));
        rows.ids.push(id);
        rows.agents.push(agent);
        rows.tags.push(tags);
        rows.signs.extend_from_slice(&signs(&codes));
        rows.codes.extend_from_slice(&codes);
        rows.scales.push(scale);
        rows.live.push(true);
        if rows.ids.len() == SEGMENT {
            self.sealed.push(std::mem::take(&mut self.open));
        }
    }

    fn remove(&mut self, id: FindingId) {
        let Some((s, i)) = self.find(id) else { return };
        let rows = self.segment_mut(s);
        rows.live[i] = false;
        rows.pos.remove(&id);
    }

    /// Scores of every live vector passing the filter, best `k`.
    ///
    /// A large room is scanned in two passes: the Hamming distance between the query's and
    /// each row's sign bits (32 bytes a row instead of 256) picks [`OVERSAMPLE`] times `k`
    /// candidates, which the int8 codes then score exactly. The scan of the full codes is
    /// bound by memory bandwidth (25.6 MB a query at 100,000 findings); the sign bits fit in
    /// cache. Recall against the exact ranking is measured by `benches/vector_choice.rs`.
    fn top_k(&self, query: &[f32], k: usize, filter: &VectorFilter) -> Vec<VectorHit> {
        let (q, qs) = quantize(query);
        let segs: Vec<&Rows> = self.segments().collect();
        if self.len() >= TWO_PASS_FROM && self.dim.is_multiple_of(64) {
            return self.two_pass(&segs, &q, qs, k, filter);
        }
        let mut best = Best::new(k);
        for rows in &segs {
            scan_rows(rows, self.dim, &q, qs, filter, &mut best);
        }
        hits(best)
    }

    fn two_pass(&self, segs: &[&Rows], q: &[i8], qs: f32, k: usize, filter: &VectorFilter) -> Vec<VectorHit> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: `two_pass_x86` only differs from `two_pass_portable` in being compiled for
            // AVX2 and POPCNT, which the CPU was just checked to support.
            #[allow(unsafe_code)]
            return unsafe { self.two_pass_x86(segs, q, qs, k, filter) };
        }
        self.two_pass_portable(segs, q, qs, k, filter)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    fn two_pass_x86(
        &self,
        segs: &[&Rows],
        q: &[i8],
        qs: f32,
        k: usize,
        filter: &VectorFilter,
    ) -> Vec<VectorHit> {
        self.two_pass_portable(segs, q, qs, k, filter)
    }

    #[inline(always)]
    fn two_pass_portable(
        &self,
        segs: &[&Rows],
        q: &[i8],
        qs: f32,
        k: usize,
        filter: &VectorFilter,
    ) -> Vec<VectorHit> {
        let qbits = signs(q);
        let w = qbits.len();
        let all = filter.is_empty();
        // Hamming distances are small integers: count them, then keep every row closer than the
        // distance that reaches the wanted number of candidates.
        let mut dist: Vec<Vec<u16>> = Vec::with_capacity(segs.len());
        let mut counts = vec![0usize; w * 64 + 2];
        for rows in segs {
            let mut d = Vec::with_capacity(rows.ids.len());
            for (i, (bits, live)) in rows.signs.chunks_exact(w).zip(&rows.live).enumerate() {
                if !*live || (!all && !filter.matches(&rows.tags[i], &rows.agents[i])) {
                    d.push(u16::MAX);
                    continue;
                }
                let x: u32 = bits.iter().zip(&qbits).map(|(a, b)| (a ^ b).count_ones()).sum();
                counts[x as usize] += 1;
                d.push(x as u16);
            }
            dist.push(d);
        }
        let want = k * OVERSAMPLE;
        let mut reach = 0;
        let mut cut = counts.len();
        for (d, c) in counts.iter().enumerate() {
            reach += c;
            if reach >= want {
                cut = d + 1;
                break;
            }
        }
        let near = dist.iter().enumerate().flat_map(|(s, d)| {
            d.iter().enumerate().filter(|(_, x)| (**x as usize) < cut).map(move |(i, _)| (s, i))
        });
        let mut best = Best::new(k);
        for (s, i) in near {
            let rows = segs[s];
            let score = dot_i8(&rows.codes[i * self.dim..(i + 1) * self.dim], q) as f32 * rows.scales[i] * qs;
            best.push(f64::from(score), rows.ids[i]);
        }
        hits(best)
    }

    /// Cosine of `query` with each of `ids` held here.
    fn scores(&self, query: &[f32], ids: &[FindingId]) -> Vec<VectorHit> {
        let (q, qs) = quantize(query);
        let dim = self.dim;
        ids.iter()
            .filter_map(|id| {
                let (s, i) = self.find(*id)?;
                let rows = self.sealed.get(s).map_or(&*self.open, |r| r);
                let score = dot_i8(&rows.codes[i * dim..(i + 1) * dim], &q) as f32 * rows.scales[i] * qs;
                Some(VectorHit { finding_id: *id, score })
            })
            .collect()
    }
}

/// Scores the live rows of a segment that pass the filter into `out`, using AVX2 when the CPU
/// has it.
fn scan_rows(rows: &Rows, dim: usize, q: &[i8], qs: f32, filter: &VectorFilter, out: &mut Best<FindingId>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `scan_rows_avx2` only differs from `scan_rows_portable` in being compiled
        // for AVX2, and the CPU was just checked to support AVX2.
        #[allow(unsafe_code)]
        return unsafe { scan_rows_avx2(rows, dim, q, qs, filter, out) };
    }
    scan_rows_portable(rows, dim, q, qs, filter, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_rows_avx2(
    rows: &Rows,
    dim: usize,
    q: &[i8],
    qs: f32,
    filter: &VectorFilter,
    out: &mut Best<FindingId>,
) {
    scan_rows_portable(rows, dim, q, qs, filter, out)
}

#[inline(always)]
fn scan_rows_portable(
    rows: &Rows,
    dim: usize,
    q: &[i8],
    qs: f32,
    filter: &VectorFilter,
    out: &mut Best<FindingId>,
) {
    let all = filter.is_empty();
    for i in 0..rows.ids.len() {
        if !rows.live[i] || (!all && !filter.matches(&rows.tags[i], &rows.agents[i])) {
            continue;
        }
        let row = &rows.codes[i * dim..(i + 1) * dim];
        out.push(f64::from(dot_i8(row, q) as f32 * rows.scales[i] * qs), rows.ids[i]);
    }
}

/// Rooms from this size are scanned in two passes (see [`RoomVectors::top_k`]).
const TWO_PASS_FROM: usize = 20_000;

/// Candidates the first pass keeps, per result asked for.
const OVERSAMPLE: usize = 40;

fn hits(best: Best<FindingId>) -> Vec<VectorHit> {
    best.into_sorted()
        .into_iter()
        .map(|(score, finding_id)| VectorHit { finding_id, score: score as f32 })
        .collect()
}

/// The sign bits of int8 codes, 64 dimensions a word (a zero counts as positive).
fn signs(codes: &[i8]) -> Vec<u64> {
    codes
        .chunks(64)
        .map(|c| c.iter().enumerate().fold(0u64, |w, (j, &x)| if x < 0 { w | (1 << j) } else { w }))
        .collect()
}

/// Symmetric int8 quantisation with one scale per vector.
fn quantize(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        return (vec![0; v.len()], 0.0);
    }
    let scale = max / 127.0;
    (v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale)
}

/// Integer dot product, written in the shape that compiles to `pmaddwd` (pairs of i8 products
/// summed into i32 lanes) so the scan is vectorised on any x86-64 and uses 256-bit lanes where
/// AVX2 is present.
#[inline(always)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(32), b.chunks_exact(32));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..16 {
            acc[j] += i32::from(i16::from(x[2 * j]) * i16::from(y[2 * j]))
                + i32::from(i16::from(x[2 * j + 1]) * i16::from(y[2 * j + 1]));
        }
    }
    let mut sum: i32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

pub(crate) fn read_model(c: &rusqlite::Connection) -> Result<Option<IndexModel>> {
    let get = |k: &str| -> Result<Option<String>> {
        row(c, "SELECT value FROM meta WHERE key = ?", params![k], |r| r.get(0)).optional().map_err(sql_err)
    };
    match (get("vector_model_id")?, get("vector_dimension")?) {
        (Some(model_id), Some(d)) => Ok(Some(IndexModel {
            model_id,
            dimension: d
                .parse()
                .map_err(|_| Error::backend("sqlite", false, "bad vector_dimension in meta", None))?,
        })),
        _ => Ok(None),
    }
}

fn write_model(c: &rusqlite::Connection, m: &IndexModel) -> Result<()> {
    for (k, v) in [("vector_model_id", m.model_id.clone()), ("vector_dimension", m.dimension.to_string())] {
        exec(c, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", params![k, v])
            .map_err(sql_err)?;
    }
    Ok(())
}

/// Stores vectors inside the caller's transaction (see [`VectorIndex::upsert`]).
pub(crate) fn put_vectors(tx: &Connection, records: Vec<VectorRecord>, fx: &mut Effects) -> Result<()> {
    if let Some(m) = read_model(tx)?
        && let Some(bad) = records.iter().find(|r| r.vector.len() != m.dimension)
    {
        return Err(Error::invalid(
            "vector",
            format!("vector of length {} for an index of dimension {}", bad.vector.len(), m.dimension),
        ));
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO finding_vectors (room_id, finding_id, agent_id, tags, vector) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (room_id, finding_id) DO UPDATE SET agent_id = excluded.agent_id, tags = excluded.tags, vector = excluded.vector",
        )
        .map_err(sql_err)?;
    for r in &records {
        stmt.execute(params![
            r.room_id.to_string(),
            r.finding_id.to_string(),
            r.agent_id.as_str(),
            serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into()),
            to_blob(&r.vector),
        ])
        .map_err(sql_err)?;
    }
    fx.then(move |caches| {
        for r in records {
            caches.vectors.apply(r.room_id, VectorOp::Put(r.finding_id, r.agent_id, r.tags, r.vector));
        }
    });
    Ok(())
}

impl SqliteStore {
    /// Loads the search indexes (keywords and vectors) of the rooms most recently written to,
    /// at most `rooms` of them, so that the first search after a start does not wait for its
    /// room to load. A server calls it in the background as it starts. Returns the rooms loaded.
    pub async fn warm_up(&self, rooms: usize) -> Result<usize> {
        let ids: Vec<RoomId> = self
            .read(move |c| {
                let mut st = c
                    .prepare("SELECT room_id FROM rooms WHERE status = 'active' ORDER BY last_finding_at DESC LIMIT ?")
                    .map_err(sql_err)?;
                let rows = st.query_map(params![rooms as i64], |r| r.get::<_, String>(0)).map_err(sql_err)?;
                rows.map(|r| r.map_err(sql_err)?.parse()).collect()
            })
            .await?;
        for room in &ids {
            let (k, v) = tokio::join!(self.room_keywords(*room), self.room_vectors(*room));
            k?;
            v?;
        }
        Ok(ids.len())
    }

    /// The room's vectors, from the cache or loaded from disk.
    async fn room_vectors(&self, room_id: RoomId) -> Result<Arc<RoomVectors>> {
        let store = self.clone();
        self.inner.caches.vectors.get(room_id, move || async move { store.load_vectors(room_id).await }).await
    }

    async fn load_vectors(&self, room_id: RoomId) -> Result<RoomVectors> {
        self.read(move |c| {
            let dim = read_model(c)?.map_or(0, |m| m.dimension);
            let mut rv = RoomVectors { dim, ..Default::default() };
            let mut stmt = c
                .prepare_cached(
                    "SELECT finding_id, agent_id, tags, vector FROM finding_vectors WHERE room_id = ?",
                )
                .map_err(sql_err)?;
            let mut rows = stmt.query(params![room_id.to_string()]).map_err(sql_err)?;
            let text = |r: &rusqlite::Row<'_>, i: usize| -> Result<String> {
                Ok(r.get_ref(i).map_err(sql_err)?.as_str().map_err(|e| sql_err(e.into()))?.to_owned())
            };
            while let Some(r) = rows.next().map_err(sql_err)? {
                let id: FindingId = text(r, 0)?.parse()?;
                let agent = AgentId::new(text(r, 1)?)?;
                let tags: Vec<String> = serde_json::from_str(&text(r, 2)?)
                    .map_err(|e| Error::backend("sqlite", false, e.to_string(), None))?;
                let v = from_blob(r.get_ref(3).map_err(sql_err)?.as_blob().map_err(|e| sql_err(e.into()))?);
                // Each id is stored once: append without looking it up.
                rv.append(id, agent, tags, &v);
            }
            Ok(rv)
        })
        .await
    }
}

#[async_trait]
impl VectorIndex for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn model(&self) -> Result<Option<IndexModel>> {
        self.read_small(read_model).await
    }

    async fn bind(&self, model: &IndexModel) -> Result<()> {
        let model = model.clone();
        self.write(Sync::Durable, move |tx, _| match read_model(tx)? {
            Some(m) if m == model => Ok(()),
            Some(m) => Err(model_mismatch(&m, &model)),
            None => write_model(tx, &model),
        })
        .await
    }

    async fn reset(&self, model: &IndexModel) -> Result<()> {
        let model = model.clone();
        self.write(Sync::Durable, move |tx, fx| {
            exec(tx, "DELETE FROM finding_vectors", []).map_err(sql_err)?;
            write_model(tx, &model)?;
            fx.then(|caches| caches.vectors.clear());
            Ok(())
        })
        .await
    }

    async fn upsert(&self, records: &[VectorRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let records = records.to_vec();
        // Vectors are derived from findings: lost in a crash, their findings are pending again
        // (their `indexed` mark is as lazy and written after) and are indexed once more.
        self.write(Sync::Lazy, move |tx, fx| put_vectors(tx, records, fx)).await
    }

    async fn delete(&self, room_id: RoomId, ids: &[FindingId]) -> Result<()> {
        let ids = ids.to_vec();
        self.write(Sync::Durable, move |tx, fx| {
            for id in &ids {
                exec(
                    tx,
                    "DELETE FROM finding_vectors WHERE room_id = ? AND finding_id = ?",
                    params![room_id.to_string(), id.to_string()],
                )
                .map_err(sql_err)?;
            }
            fx.then(move |caches| {
                for id in ids {
                    caches.vectors.apply(room_id, VectorOp::Remove(id));
                }
            });
            Ok(())
        })
        .await
    }

    async fn query(
        &self,
        room_id: RoomId,
        vector: &[f32],
        k: usize,
        filter: &VectorFilter,
    ) -> Result<Vec<VectorHit>> {
        let rv = self.room_vectors(room_id).await?;
        if rv.dim != 0 && rv.dim != vector.len() {
            return Err(Error::invalid(
                "vector",
                format!("query vector of length {} for an index of dimension {}", vector.len(), rv.dim),
            ));
        }
        // A small room is scanned at once; a large one off the async workers.
        if rv.len() < 20_000 {
            return Ok(rv.top_k(vector, k, filter));
        }
        let (vector, filter) = (vector.to_vec(), filter.clone());
        tokio::task::spawn_blocking(move || rv.top_k(&vector, k, &filter))
            .await
            .map_err(|e| Error::backend("sqlite", true, format!("scan task failed: {e}"), None))
    }

    async fn scores(&self, room_id: RoomId, vector: &[f32], ids: &[FindingId]) -> Result<Vec<VectorHit>> {
        Ok(self.room_vectors(room_id).await?.scores(vector, ids))
    }

    async fn count(&self, room_id: RoomId) -> Result<u64> {
        self.read_small(move |c| {
            row(
                c,
                "SELECT count(*) FROM finding_vectors WHERE room_id = ?",
                params![room_id.to_string()],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(sql_err)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantised_scores_track_exact_cosine() {
        let a: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let b: Vec<f32> = (0..256).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
        let exact = macp_core::search::dot(&a, &b);
        let (qa, sa) = quantize(&a);
        let (qb, sb) = quantize(&b);
        let approx = dot_i8(&qa, &qb) as f32 * sa * sb;
        assert!((exact - approx).abs() / exact.abs().max(1.0) < 0.01, "{exact} vs {approx}");
    }

    /// A room large enough for the two-pass scan finds an exact vector first, honours filters,
    /// and skips removed rows.
    #[test]
    fn two_pass_finds_the_nearest_and_honours_filters() {
        let mut x: u64 = 42;
        let mut next = move || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let mut rv = RoomVectors { dim: 256, ..Default::default() };
        let (a, b) = (AgentId::new("a").unwrap(), AgentId::new("b").unwrap());
        let mut rows = Vec::new();
        for i in 0..TWO_PASS_FROM + 5_000 {
            let mut v: Vec<f32> = (0..256).map(|_| next()).collect();
            macp_core::search::normalize(&mut v);
            let id = FindingId::generate();
            let agent = if i % 2 == 0 { a.clone() } else { b.clone() };
            rv.put(id, agent, vec![], &v);
            rows.push((id, v));
        }
        assert!(rv.len() >= TWO_PASS_FROM);
        let (want, q) = rows[12_345].clone();
        let hits = rv.top_k(&q, 10, &VectorFilter::default());
        assert_eq!(hits[0].finding_id, want);
        assert!(hits[0].score > 0.99, "{}", hits[0].score);
        let only_a = VectorFilter { agent_id: Some(a.clone()), ..Default::default() };
        let hits = rv.top_k(&q, 10, &only_a);
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| rows.iter().position(|r| r.0 == h.finding_id).unwrap() % 2 == 0));
        assert_ne!(hits[0].finding_id, want, "row 12345 is agent b's");
        rv.remove(want);
        let hits = rv.top_k(&q, 10, &VectorFilter::default());
        assert!(hits.iter().all(|h| h.finding_id != want));
    }

    #[test]
    fn removing_keeps_positions_consistent() {
        let mut rv = RoomVectors { dim: 2, ..Default::default() };
        let ids: Vec<FindingId> = (0..3).map(|_| FindingId::generate()).collect();
        let agent = AgentId::new("a").unwrap();
        for (i, id) in ids.iter().enumerate() {
            rv.put(*id, agent.clone(), vec![], &[i as f32 + 1.0, 0.0]);
        }
        rv.remove(ids[0]);
        let hits = rv.top_k(&[1.0, 0.0], 10, &VectorFilter::default());
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|h| h.finding_id != ids[0]));
    }
}
