//! Opaque, server-issued cursors.
//!
//! # How the updates cursor never skips and never repeats
//!
//! A finding's ULID is minted before its write commits, and writers run concurrently: writer A
//! can mint `01…A`, writer B mint a later `01…B` and commit first. A reader polling by ULID that
//! has already seen `01…B` would then skip `01…A` forever. So the cursor is not a ULID and not a
//! timestamp.
//!
//! Instead every room has a commit sequence. [`FindingStore::append_finding`] assigns each
//! finding `seq = previous highest seq + 1` *inside the same atomic write that stores it*, so
//! sequence numbers are gap-free and ordered by commit: when a reader can see `seq = n`, every
//! `seq < n` is already visible (SQLite assigns it inside the write transaction; the memory
//! store under its lock; a distributed store with a conditional write on the room's counter).
//! The updates cursor encodes the room and the highest `seq` the reader has been given; the next
//! call returns `seq > cursor` in `seq` order. Because there are no holes that could fill in
//! later, nothing is skipped; because the cursor only moves past what was returned, nothing is
//! repeated.
//!
//! Cursors are opaque to clients (base64url of a versioned record) and bound to their room and,
//! for filtered listings, to their filters: a cursor presented with another room or other
//! filters is refused with `invalid_input` rather than silently giving wrong pages.
//!
//! [`FindingStore::append_finding`]: crate::store::FindingStore::append_finding

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, Result};

const SEP: char = '\u{1f}';

/// Encodes a cursor of `kind` (a short tag such as `u1`) with its parts.
pub(crate) fn encode(kind: &str, parts: &[&str]) -> String {
    let mut raw = String::from(kind);
    for p in parts {
        raw.push(SEP);
        raw.push_str(p);
    }
    URL_SAFE_NO_PAD.encode(raw.as_bytes())
}

/// Decodes a cursor of `kind` into its parts, refusing anything else with advice for `field`.
pub(crate) fn decode(field: &str, kind: &str, cursor: &str, arity: usize) -> Result<Vec<String>> {
    let bad = || {
        Error::invalid(
            field,
            format!(
                "this {field} was not issued for this call; pass back exactly the {field} returned \
                 by the previous call with the same room and filters, or omit it to start over"
            ),
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).map_err(|_| bad())?;
    let raw = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut it = raw.split(SEP);
    if it.next() != Some(kind) {
        return Err(bad());
    }
    let parts: Vec<String> = it.map(str::to_owned).collect();
    if parts.len() != arity {
        return Err(bad());
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_kinds() {
        let c = encode("u1", &["room", "42"]);
        assert_eq!(decode("cursor", "u1", &c, 2).unwrap(), vec!["room", "42"]);
        assert!(decode("cursor", "t1", &c, 2).is_err());
        assert!(decode("cursor", "u1", &c, 3).is_err());
        assert!(decode("cursor", "u1", "not base64!", 2).is_err());
    }
}
