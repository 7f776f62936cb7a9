//! A BERT-uncased WordPiece tokenizer, equivalent to the `tokenizers` library's
//! `BertNormalizer` + `BertPreTokenizer` + `WordPiece` as configured for all-MiniLM-L6-v2.
//!
//! 1. Normalise: drop NUL, U+FFFD and control characters; map whitespace to a space; put
//!    spaces around CJK ideographs; NFD and drop non-spacing marks (accents); lowercase.
//! 2. Pre-tokenise: split on whitespace, and split every punctuation character off as its own
//!    word.
//! 3. WordPiece: greedy longest match from the start of each word, continuation pieces prefixed
//!    `##`; a word with an unmatchable part, or longer than 100 characters, becomes `[UNK]`.
//!
//! `tests/builtin_embedder.rs` checks the ids against ones the reference implementation produced.

use std::collections::HashMap;

use unicode_categories::UnicodeCategories;
use unicode_normalization::UnicodeNormalization;

/// Longest word WordPiece will split; longer words are `[UNK]`.
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary and the tokenizer over it.
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: HashMap<String, u32>,
    unk: u32,
}

impl WordPiece {
    /// From the vocabulary in id order (line `i` has id `i`).
    pub fn new(tokens: impl IntoIterator<Item = String>) -> Option<Self> {
        let vocab: HashMap<String, u32> =
            tokens.into_iter().enumerate().map(|(i, t)| (t, i as u32)).collect();
        let unk = *vocab.get("[UNK]")?;
        Some(Self { vocab, unk })
    }

    /// Number of tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.vocab.len()
    }

    /// Whether the vocabulary is empty (never, for a valid one).
    pub fn is_empty(&self) -> bool {
        self.vocab.is_empty()
    }

    /// The id of `[UNK]`.
    pub fn unk_id(&self) -> u32 {
        self.unk
    }

    /// Token ids of `text`, without special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let normalized = normalize(text);
        let mut ids = Vec::new();
        for word in pre_tokenize(&normalized) {
            self.word_piece(word, &mut ids);
        }
        ids
    }

    fn word_piece(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let start_len = out.len();
        let mut start = 0;
        let mut piece = String::with_capacity(word.len() + 2);
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                // Step back one character.
                end -= word[..end].chars().next_back().map_or(1, char::len_utf8);
            }
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(start_len);
                    out.push(self.unk);
                    return;
                }
            }
        }
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

// ASCII fast paths below give the same answers as the Unicode tables, which are binary searches.

fn is_control(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r');
    }
    c.is_other()
}

fn is_bert_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r') || c.is_whitespace()
}

fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    c.is_punctuation()
}

/// BERT normalisation (uncased, accents stripped, CJK spaced, control characters removed).
pub fn normalize(text: &str) -> String {
    let mut cleaned = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\0' || c == '\u{fffd}' || is_control(c) {
            continue;
        }
        if is_bert_whitespace(c) {
            cleaned.push(' ');
        } else if is_cjk(c) {
            cleaned.push(' ');
            cleaned.push(c);
            cleaned.push(' ');
        } else {
            cleaned.push(c);
        }
    }
    if cleaned.is_ascii() {
        // Decomposition and mark stripping change nothing in ASCII.
        cleaned.make_ascii_lowercase();
        return cleaned;
    }
    cleaned.nfd().filter(|c| !c.is_mark_nonspacing()).flat_map(char::to_lowercase).collect()
}

/// Splits on whitespace and isolates punctuation.
fn pre_tokenize(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for chunk in text.split(is_bert_whitespace).filter(|w| !w.is_empty()) {
        let mut start = 0;
        for (i, c) in chunk.char_indices() {
            if is_punctuation(c) {
                if start < i {
                    words.push(&chunk[start..i]);
                }
                words.push(&chunk[i..i + c.len_utf8()]);
                start = i + c.len_utf8();
            }
        }
        if start < chunk.len() {
            words.push(&chunk[start..]);
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> WordPiece {
        let toks =
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "db", "-", "1", "cafe", ".", "##s"];
        WordPiece::new(toks.iter().map(|s| s.to_string())).unwrap()
    }

    #[test]
    fn greedy_longest_match_with_continuations() {
        let v = vocab();
        assert_eq!(v.encode("unaffable"), vec![4, 5, 6]);
        assert_eq!(v.encode("DB-1."), vec![7, 8, 9, 11]);
        assert_eq!(v.encode("Café"), vec![10], "accents are stripped and case folded");
        assert_eq!(v.encode("unx"), vec![1], "an unmatchable word is one [UNK]");
        assert_eq!(v.encode(&"a".repeat(101)), vec![1]);
    }

    #[test]
    fn normalisation_spaces_cjk_and_drops_controls() {
        assert_eq!(normalize("a\u{0}b\u{7}c\td中e"), "abc d 中 e");
    }
}
