//! The redactor over files of texts, as a write would redact them: one JSON object per line in,
//! the same object out with `out` (the text as it would be stored) and `set` (the file's stem).
//!
//! ```text
//! cargo run --release -p macp-examples --bin redact-jsonl -- macp-core/tests/redaction-*.jsonl > dump.jsonl
//! ```
//!
//! Each input line needs a `text`; every other field is passed through. This feeds
//! `scripts/redaction-classifier-experiment.py`, and is how to see what the built-in rules do to
//! a set of your own texts.

use std::io::Write as _;

use macp_core::redact::{Redactions, Redactor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redactor = Redactor::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: redact-jsonl FILE.jsonl...".into());
    }
    for path in files {
        let set = std::path::Path::new(&path)
            .file_stem()
            .and_then(|s| s.to_str())
            .map(|s| s.trim_start_matches("redaction-").to_owned())
            .unwrap_or_default();
        for (n, line) in std::fs::read_to_string(&path)?.lines().enumerate() {
            let mut row: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            let text = row["text"].as_str().ok_or_else(|| format!("{path}:{}: no `text`", n + 1))?;
            let stored = redactor.text(text, "content", &mut Redactions::default())?;
            row["out"] = stored.into();
            row["set"] = set.clone().into();
            serde_json::to_writer(&mut out, &row)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}
