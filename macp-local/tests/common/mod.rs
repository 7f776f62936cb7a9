//! Helpers shared by this crate's test binaries.

use std::path::Path;

/// Every place under `dir` holding `needle`: a path that names it, or a file whose bytes contain
/// it (database, WAL, artifact files alike). Read beneath the store's API, to check that an
/// erasure or a purge left nothing behind.
pub fn holding(dir: &Path, needle: &str) -> Vec<String> {
    fn walk(dir: &Path, needle: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.to_string_lossy().contains(needle) {
                out.push(format!("path {}", p.display()));
            }
            if p.is_dir() {
                walk(&p, needle, out);
            } else if std::fs::read(&p)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                out.push(format!("bytes of {}", p.display()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, needle, &mut out);
    out
}
