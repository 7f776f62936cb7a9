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

use std::collections::HashMap;

use super::{bm25_idf, keyword_terms, top_k};
use crate::ids::FindingId;
use crate::store::{KeywordHit, KeywordSearch};

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Every token of `text` with repeats, tokenised like FTS5's unicode61.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).flat_map(keyword_terms)
}

/// Postings and lengths of one room's findings.
#[derive(Debug, Clone, Default)]
pub struct KeywordIndex {
    ids: Vec<FindingId>,
    lens: Vec<u32>,
    total_len: u64,
    postings: HashMap<String, Vec<(u32, u32)>>,
}

impl KeywordIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of findings indexed.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Indexes a finding's content (findings are immutable, so each is added once).
    pub fn add(&mut self, id: FindingId, content: &str) {
        let doc = self.ids.len() as u32;
        let mut tf: HashMap<String, u32> = HashMap::new();
        let mut len = 0u32;
        for t in tokens(content) {
            *tf.entry(t).or_default() += 1;
            len += 1;
        }
        for (t, n) in tf {
            self.postings.entry(t).or_default().push((doc, n));
        }
        self.ids.push(id);
        self.lens.push(len);
        self.total_len += u64::from(len);
    }

    /// The `limit` best findings containing at least one query term, and the sum of every
    /// distinct query term's idf.
    pub fn search(&self, query: &str, limit: usize) -> KeywordSearch {
        let terms = keyword_terms(query);
        let n = self.ids.len() as u64;
        if terms.is_empty() || n == 0 {
            let ideal = terms.iter().map(|_| bm25_idf(n, 0)).sum();
            return KeywordSearch { hits: Vec::new(), ideal };
        }
        let avg = self.total_len as f64 / n as f64;
        let mut ideal = 0.0;
        let mut scores: HashMap<u32, f64> = HashMap::new();
        let add = |scores: &mut HashMap<u32, f64>, list: &[(u32, u32)], idf: f64| {
            for &(doc, tf) in list {
                let tf = f64::from(tf);
                let norm = K1 * (1.0 - B + B * f64::from(self.lens[doc as usize]) / avg);
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        };
        let mut floored = Vec::new();
        for t in &terms {
            let list = self.postings.get(t);
            let df = list.map_or(0, Vec::len) as u64;
            let idf = bm25_idf(n, df);
            ideal += idf;
            let Some(list) = list else { continue };
            if idf <= 1e-6 {
                floored.push((list, idf));
            } else {
                add(&mut scores, list, idf);
            }
        }
        if scores.len() < limit {
            for (list, idf) in floored {
                add(&mut scores, list, idf);
            }
        }
        let mut ranked: Vec<(u32, f64)> = scores.into_iter().collect();
        let better = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        top_k(&mut ranked, limit, better);
        let hits = ranked
            .into_iter()
            .map(|(doc, score)| KeywordHit { finding_id: self.ids[doc as usize], score })
            .collect();
        KeywordSearch { hits, ideal }
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
