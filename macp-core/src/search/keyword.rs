//! An in-memory BM25 index over one room's findings.
//!
//! Scores are Okapi BM25 exactly as SQLite FTS5's `bm25()` computes them (k1 = 1.2, b = 0.75,
//! idf `ln((N − n + 0.5) / (n + 0.5))` floored at 1e-6), with the room as the corpus: `N`, the
//! average length and each term's document frequency are the room's. `macp-local` checks it
//! against FTS5 itself on the same rows.
//!
//! Why not query FTS5 directly: `bm25()` is evaluated for every row that matches any query term,
//! so a query with common words costs time proportional to the room (21.5 ms median at 100,000
//! findings, measured in `benches/search.rs`). Here a posting list per term is summed once per
//! query and only the top results are sorted. Terms whose idf is floored (in at least half the
//! room's findings) add at most ~2e-6 to a score, so their long posting lists are read only when
//! the informative terms match fewer findings than asked for: then, as in FTS5, a finding that
//! shares only common words with the query is still a (weak) match. In a room of one or two
//! findings every term is floored, and an exact identifier must still be found.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::image::{ImageReader, ImageWriter};
use super::{Best, bm25_idf, keyword_terms};
use crate::ids::FindingId;
use crate::store::{KeywordHit, KeywordSearch};

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Findings per new segment. A clone of the index shares every full segment and copies at most
/// the open one, so a reader can take a snapshot while writers keep adding (see
/// [`KeywordIndex`]).
const SEGMENT: usize = 512;

/// Full segments of one size are merged this many at a time into one segment this many times
/// larger, so a room holds a few dozen segments at most: a query term is looked up once per
/// segment.
const FAN_IN: usize = 8;

/// The largest a merged segment grows (a merge copies postings, on the writer's path).
const MAX_SEGMENT: usize = SEGMENT * FAN_IN * FAN_IN;

/// Every token of `text` with repeats, tokenised like FTS5's unicode61.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).flat_map(keyword_terms)
}

/// Postings and lengths of one room's findings.
///
/// Held in segments: full segments are immutable and shared between clones, and only the open
/// segment (at most `SEGMENT`, 512, findings) is copied when a clone that shares it is written to.
/// That makes a clone a cheap snapshot: a search scores a clone while findings keep being added
/// to the original, and neither waits for the other nor copies the room. Full segments are
/// merged `FAN_IN` (8) at a time so that their number stays small as the room grows.
#[derive(Debug, Clone, Default)]
pub struct KeywordIndex {
    sealed: Vec<Arc<Segment>>,
    open: Arc<Segment>,
    docs: usize,
    total_len: u64,
}

#[derive(Debug, Clone, Default)]
struct Segment {
    /// Number of findings before this segment.
    base: usize,
    ids: Vec<FindingId>,
    lens: Vec<u32>,
    /// Term to `(finding within the segment, term frequency)`, in finding order.
    postings: HashMap<String, Vec<(u32, u32)>>,
}

impl Segment {
    /// One segment holding `parts` (consecutive, in order).
    fn merged(parts: &[Arc<Segment>]) -> Segment {
        let mut out = Segment { base: parts[0].base, ..Default::default() };
        for p in parts {
            let offset = out.ids.len() as u32;
            out.ids.extend_from_slice(&p.ids);
            out.lens.extend_from_slice(&p.lens);
            for (term, list) in &p.postings {
                out.postings
                    .entry(term.clone())
                    .or_default()
                    .extend(list.iter().map(|&(d, tf)| (d + offset, tf)));
            }
        }
        out
    }
}

thread_local! {
    /// Per-thread score accumulator, reused across searches (a room's worth of f64s).
    static SCORES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl KeywordIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of findings indexed.
    pub fn len(&self) -> usize {
        self.docs
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs == 0
    }

    /// Indexes a finding's content (findings are immutable, so each is added once).
    pub fn add(&mut self, id: FindingId, content: &str) {
        let mut tf: HashMap<String, u32> = HashMap::new();
        let mut len = 0u32;
        for t in tokens(content) {
            *tf.entry(t).or_default() += 1;
            len += 1;
        }
        let base = self.docs;
        let seg = Arc::make_mut(&mut self.open);
        if seg.ids.is_empty() {
            seg.base = base;
        }
        let doc = seg.ids.len() as u32;
        for (t, n) in tf {
            seg.postings.entry(t).or_default().push((doc, n));
        }
        seg.ids.push(id);
        seg.lens.push(len);
        self.docs += 1;
        self.total_len += u64::from(len);
        if seg.ids.len() == SEGMENT {
            self.sealed.push(std::mem::take(&mut self.open));
            self.merge();
        }
    }

    /// Indexes a stored finding, as an index built from the store must: an erased finding's
    /// notice is not searched, and the finding counts as one of no words, which is what
    /// [`remove`](Self::remove) leaves of it. So an index built after an erasure scores exactly
    /// as one that was there when it happened (every backend builds its indexes through this).
    pub fn add_stored(&mut self, id: FindingId, content: &str, erased: bool) {
        self.add(id, if erased { "" } else { content });
    }

    /// Takes an erased finding out: its terms no longer match, and it counts as an empty
    /// finding in the statistics (its number stays taken). Returns whether it was indexed.
    pub fn remove(&mut self, id: FindingId) -> bool {
        let in_open = self.open.ids.contains(&id);
        let seg = if in_open {
            Arc::make_mut(&mut self.open)
        } else {
            match self.sealed.iter_mut().find(|s| s.ids.contains(&id)) {
                Some(s) => Arc::make_mut(s),
                None => return false,
            }
        };
        let Some(doc) = seg.ids.iter().position(|d| *d == id) else { return false };
        let doc = doc as u32;
        seg.postings.retain(|_, list| {
            list.retain(|&(d, _)| d != doc);
            !list.is_empty()
        });
        self.total_len -= u64::from(std::mem::take(&mut seg.lens[doc as usize]));
        true
    }

    /// Writes the index as an image (see [`super::image`]) that [`read_image`](Self::read_image)
    /// turns back into an equal index without tokenising anything.
    pub fn write_image(&self, w: &mut ImageWriter) {
        w.u64(self.docs as u64);
        w.u64(self.total_len);
        w.count(self.sealed.len() + 1);
        for seg in self.segments() {
            w.u64(seg.base as u64);
            w.count(seg.ids.len());
            for id in &seg.ids {
                w.id(*id);
            }
            w.u32s(&seg.lens);
            w.count(seg.postings.len());
            for (term, list) in &seg.postings {
                w.str(term);
                w.count(list.len());
                for &(doc, tf) in list {
                    w.u32(doc);
                    w.u32(tf);
                }
            }
        }
    }

    /// The index an image holds, or `None` when the image is not one that
    /// [`write_image`](Self::write_image) wrote (short, or inconsistent: a posting past its
    /// segment, segments out of order, counts that do not add up).
    pub fn read_image(r: &mut ImageReader<'_>) -> Option<Self> {
        let docs = usize::try_from(r.u64()?).ok()?;
        let total_len = r.u64()?;
        let n = r.count(8)?;
        let mut segments = Vec::with_capacity(n);
        let mut next = 0usize;
        for _ in 0..n {
            let base = usize::try_from(r.u64()?).ok()?;
            let count = r.count(16)?;
            let ids = (0..count).map(|_| r.id()).collect::<Option<Vec<_>>>()?;
            let lens = r.u32s()?;
            // Every sealed segment holds findings and starts where the one before it ended; the
            // open one may be empty (just after a segment was sealed), and then its base is
            // not used.
            let sealed = segments.len() + 1 < n;
            if lens.len() != count || (sealed && count == 0) || (count > 0 && base != next) {
                return None;
            }
            if count > 0 {
                next = base + count;
            }
            let terms = r.count(16)?;
            let mut postings = HashMap::with_capacity(terms);
            for _ in 0..terms {
                let term = r.str()?.to_owned();
                let len = r.count(8)?;
                let mut list = Vec::with_capacity(len);
                for _ in 0..len {
                    let (doc, tf) = (r.u32()?, r.u32()?);
                    if doc as usize >= count {
                        return None;
                    }
                    list.push((doc, tf));
                }
                postings.insert(term, list);
            }
            segments.push(Segment { base, ids, lens, postings });
        }
        let open = segments.pop()?;
        let total: u64 =
            segments.iter().chain(std::iter::once(&open)).flat_map(|s| &s.lens).map(|&l| u64::from(l)).sum();
        if next != docs || total != total_len {
            return None;
        }
        Some(Self {
            sealed: segments.into_iter().map(Arc::new).collect(),
            open: Arc::new(open),
            docs,
            total_len,
        })
    }

    /// Merges the last [`FAN_IN`] sealed segments while they are of one size (below the cap).
    fn merge(&mut self) {
        loop {
            let n = self.sealed.len();
            if n < FAN_IN {
                return;
            }
            let size = self.sealed[n - 1].ids.len();
            if size * FAN_IN > MAX_SEGMENT || !self.sealed[n - FAN_IN..].iter().all(|s| s.ids.len() == size) {
                return;
            }
            let merged = Segment::merged(&self.sealed[n - FAN_IN..]);
            self.sealed.truncate(n - FAN_IN);
            self.sealed.push(Arc::new(merged));
        }
    }

    fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.sealed.iter().map(|s| &**s).chain(std::iter::once(&*self.open))
    }

    /// The id of the finding numbered `doc`.
    fn id(&self, doc: usize) -> FindingId {
        if !self.open.ids.is_empty() && doc >= self.open.base {
            return self.open.ids[doc - self.open.base];
        }
        let seg = &self.sealed[self.sealed.partition_point(|s| s.base <= doc) - 1];
        seg.ids[doc - seg.base]
    }

    /// Adds one term's BM25 contribution to the scores of the findings in its posting lists.
    fn accumulate(
        &self,
        lists: &[(&Segment, &[(u32, u32)])],
        idf: f64,
        avg: f64,
        scores: &mut [f64],
        touched: &mut Vec<u32>,
    ) {
        for &(seg, list) in lists {
            let lens = &seg.lens;
            for &(doc, tf) in list {
                let tf = f64::from(tf);
                let norm = K1 * (1.0 - B + B * f64::from(lens[doc as usize]) / avg);
                let at = seg.base + doc as usize;
                if scores[at] == 0.0 {
                    touched.push(at as u32);
                }
                scores[at] += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
    }

    /// The `limit` best findings containing at least one query term, and the sum of every
    /// distinct query term's idf.
    pub fn search(&self, query: &str, limit: usize) -> KeywordSearch {
        let terms = keyword_terms(query);
        let n = self.docs as u64;
        if terms.is_empty() || n == 0 {
            let ideal = terms.iter().map(|_| bm25_idf(n, 0)).sum();
            return KeywordSearch { hits: Vec::new(), ideal };
        }
        let avg = self.total_len as f64 / n as f64;
        let mut ideal = 0.0;
        // Per term: its posting lists in every segment, and its document frequency.
        let mut informative = Vec::new();
        let mut floored = Vec::new();
        for t in &terms {
            let lists: Vec<(&Segment, &[(u32, u32)])> =
                self.segments().filter_map(|s| s.postings.get(t).map(|l| (s, l.as_slice()))).collect();
            let df: u64 = lists.iter().map(|(_, l)| l.len() as u64).sum();
            let idf = bm25_idf(n, df);
            ideal += idf;
            if lists.is_empty() {
                continue;
            }
            if idf <= 1e-6 { floored.push((lists, idf)) } else { informative.push((lists, idf)) }
        }
        SCORES.with_borrow_mut(|scores| {
            scores.clear();
            scores.resize(self.docs, 0.0);
            let mut touched: Vec<u32> = Vec::new();
            for (lists, idf) in &informative {
                self.accumulate(lists, *idf, avg, scores, &mut touched);
            }
            if touched.len() < limit {
                for (lists, idf) in &floored {
                    self.accumulate(lists, *idf, avg, scores, &mut touched);
                }
            }
            let mut best = Best::new(limit);
            for &d in &touched {
                best.push(scores[d as usize], d);
            }
            let hits = best
                .into_sorted()
                .into_iter()
                .map(|(score, doc)| KeywordHit { finding_id: self.id(doc as usize), score })
                .collect();
            KeywordSearch { hits, ideal }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rare_terms_outrank_common_ones_and_ties_keep_insertion_order() {
        let mut ix = KeywordIndex::new();
        let ids: Vec<FindingId> = (0..6).map(|_| FindingId::generate()).collect();
        ix.add(ids[0], "the database refused connections");
        ix.add(ids[1], "the cache was cold");
        ix.add(ids[2], "the queue backed up");
        ix.add(ids[3], "the cache was cold");
        ix.add(ids[4], "the disk filled up");
        ix.add(ids[5], "the deploy rolled back");
        let r = ix.search("database cache", 10);
        assert_eq!(r.hits[0].finding_id, ids[0], "`database` is in one row, `cache` in two");
        assert_eq!(r.hits[1].finding_id, ids[1]);
        assert_eq!(r.hits[2].finding_id, ids[3]);
        // `the` is in every row: its idf is floored, so on its own it matches every row weakly
        // (as FTS5 does), and next to informative terms it is not read at all.
        assert_eq!(ix.search("the", 10).hits.len(), 6);
        assert!(ix.search("the", 10).hits.iter().all(|h| h.score < 1e-5));
        assert_eq!(ix.search("the database", 1).hits.len(), 1);
        let ideal = bm25_idf(6, 1) + bm25_idf(6, 2);
        assert!((r.ideal - ideal).abs() < 1e-12);
    }

    #[test]
    fn an_identifier_is_found_in_a_room_of_one_or_two_findings() {
        // With N <= 2 every idf is floored (ln((N - n + 0.5) / (n + 0.5)) <= 0).
        let mut ix = KeywordIndex::new();
        let a = FindingId::generate();
        ix.add(a, "deploy d-7f3a2 rolled out orders-db pool change");
        assert_eq!(ix.search("d-7f3a2", 10).hits.iter().map(|h| h.finding_id).collect::<Vec<_>>(), [a]);
        let b = FindingId::generate();
        ix.add(b, "checkout latency rose at 09:41");
        let hits = ix.search("orders-db", 10).hits;
        assert_eq!(
            hits.iter().map(|h| h.finding_id).collect::<Vec<_>>(),
            [a],
            "only the finding that names it"
        );
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    /// Across segment boundaries, and in a clone taken mid-way (a search's snapshot), scores and
    /// order are those of one flat index, and later adds never show in the snapshot.
    #[test]
    fn segments_and_snapshots_score_like_one_flat_index() {
        let words = ["cache", "pool", "orders-db", "timeout", "deploy", "retry", "latency"];
        let mut ix = KeywordIndex::new();
        let mut ids = Vec::new();
        for i in 0..(3 * SEGMENT * FAN_IN + 17) {
            let id = FindingId::generate();
            ids.push(id);
            let text = format!("{} {} {} {i}", words[i % 7], words[(i * 3) % 7], words[(i * 5 + 1) % 7]);
            ix.add(id, &text);
        }
        let snapshot = ix.clone();
        let later = FindingId::generate();
        ix.add(later, "zebra crossing timeout");
        assert_eq!(snapshot.len(), 3 * SEGMENT * FAN_IN + 17);
        assert!(snapshot.sealed.len() < 3 * FAN_IN, "full segments are merged");
        assert_eq!(ix.len(), 3 * SEGMENT * FAN_IN + 18);
        let r = snapshot.search("orders-db timeout", 5);
        assert_eq!(r.hits.len(), 5);
        assert!(r.hits.windows(2).all(|w| w[0].score >= w[1].score));
        // An exact number: finding 1543 is unique, wherever its segment.
        let one = snapshot.search("1543", 10);
        assert_eq!(one.hits.iter().map(|h| h.finding_id).collect::<Vec<_>>(), [ids[1543]]);
        // The later add is in the original only.
        assert_eq!(ix.search("zebra", 10).hits.iter().map(|h| h.finding_id).collect::<Vec<_>>(), [later]);
        assert!(snapshot.search("zebra", 10).hits.is_empty());
    }

    /// A finding erased before the index was built counts as one erased after it was: same
    /// scores, same ideal, for every query.
    #[test]
    fn an_index_built_after_an_erasure_scores_as_one_that_saw_it() {
        let texts = ["orders-db pool exhausted", "orders-db timeout", "cache cold", "orders-db pool 502"];
        let ids: Vec<FindingId> = texts.iter().map(|_| FindingId::generate()).collect();
        let (mut saw, mut built) = (KeywordIndex::new(), KeywordIndex::new());
        for (i, t) in texts.iter().enumerate() {
            saw.add(ids[i], t);
            built.add_stored(ids[i], t, i == 1);
        }
        saw.remove(ids[1]);
        for q in ["orders-db", "timeout", "pool 502", "cache"] {
            let (a, b) = (saw.search(q, 10), built.search(q, 10));
            assert_eq!(a.ideal, b.ideal, "{q}");
            let hits = |r: &KeywordSearch| r.hits.iter().map(|h| (h.finding_id, h.score)).collect::<Vec<_>>();
            assert_eq!(hits(&a), hits(&b), "{q}");
        }
        assert!(built.search("timeout", 10).hits.is_empty());
    }

    /// An index read back from its image answers every query as the original did, takes an
    /// erasure and further adds as the original would, and a damaged image is refused.
    #[test]
    fn an_index_read_from_its_image_searches_like_the_original() {
        let words = ["cache", "pool", "orders-db", "timeout", "deploy", "retry", "latency"];
        let mut ix = KeywordIndex::new();
        let mut ids = Vec::new();
        for i in 0..(SEGMENT * FAN_IN + SEGMENT + 40) {
            let id = FindingId::generate();
            ids.push(id);
            ix.add(id, &format!("{} {} {i}", words[i % 7], words[(i * 3) % 7]));
        }
        ix.remove(ids[77]);
        let mut w = ImageWriter::new();
        ix.write_image(&mut w);
        let bytes = w.into_bytes();
        let mut r = ImageReader::new(&bytes);
        let mut back = KeywordIndex::read_image(&mut r).expect("the image reads back");
        assert!(r.is_empty());
        let same = |a: &KeywordIndex, b: &KeywordIndex, q: &str| {
            let (x, y) = (a.search(q, 20), b.search(q, 20));
            assert_eq!(x.ideal, y.ideal, "{q}");
            assert_eq!(
                x.hits.iter().map(|h| (h.finding_id, h.score)).collect::<Vec<_>>(),
                y.hits.iter().map(|h| (h.finding_id, h.score)).collect::<Vec<_>>(),
                "{q}"
            );
        };
        for q in ["orders-db timeout", "77", "4500", "cache pool latency", "nothing-here"] {
            same(&ix, &back, q);
        }
        assert!(back.search("77", 5).hits.is_empty(), "an erased finding stays out");
        for i in 0..SEGMENT {
            let id = FindingId::generate();
            ix.add(id, &format!("zebra {i}"));
            back.add(id, &format!("zebra {i}"));
        }
        ix.remove(ids[3000]);
        back.remove(ids[3000]);
        assert_eq!(back.sealed.len(), ix.sealed.len(), "merges go on as in the original");
        for q in ["zebra 12", "orders-db timeout", "3000"] {
            same(&ix, &back, q);
        }
        // Damaged: cut short, or a posting pointing past its segment.
        assert!(KeywordIndex::read_image(&mut ImageReader::new(&bytes[..bytes.len() - 1])).is_none());
        let mut bad = ImageWriter::new();
        bad.u64(1);
        bad.u64(1);
        bad.count(1);
        bad.count(0);
        bad.count(1);
        bad.id(ids[0]);
        bad.u32s(&[1]);
        bad.count(1);
        bad.str("cache");
        bad.count(1);
        bad.u32(5);
        bad.u32(1);
        assert!(KeywordIndex::read_image(&mut ImageReader::new(&bad.into_bytes())).is_none());
    }
}
