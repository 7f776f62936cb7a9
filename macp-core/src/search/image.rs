//! A compact binary image of an in-memory search index, for a backend that keeps its indexes
//! across restarts instead of rebuilding them from the store.
//!
//! Why: rebuilding a room's keyword index means tokenising every finding again (about a second
//! for 100,000 findings on two cores); reading an image back is a copy. The format is private to
//! one build: a backend must store a version of its own beside the image and discard an image it
//! did not write (this module checks lengths, never meaning). Integers are little-endian.

use crate::ids::FindingId;

/// Appends values to an image.
#[derive(Debug, Default)]
pub struct ImageWriter {
    buf: Vec<u8>,
}

impl ImageWriter {
    /// An empty image.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends a count or a length (as a `u64`).
    pub fn count(&mut self, n: usize) {
        self.u64(n as u64);
    }

    /// Appends raw bytes, length first.
    pub fn bytes(&mut self, b: &[u8]) {
        self.count(b.len());
        self.buf.extend_from_slice(b);
    }

    /// Appends a string, length first.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// Appends a finding id (16 bytes).
    pub fn id(&mut self, id: FindingId) {
        self.buf.extend_from_slice(&id.to_bytes());
    }

    /// Appends `u32`s, count first.
    pub fn u32s(&mut self, v: &[u32]) {
        self.count(v.len());
        for x in v {
            self.u32(*x);
        }
    }
}

/// Reads values back in the order they were written. Every read answers `None` once the image
/// is shorter than the value asks, so a damaged image is refused, never half-read into a panic.
#[derive(Debug)]
pub struct ImageReader<'a> {
    rest: &'a [u8],
}

impl<'a> ImageReader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// Reads a `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// Reads a `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// Reads a count that must fit in what is left, at `unit` bytes an item: a damaged length
    /// is refused before anything is allocated for it.
    pub fn count(&mut self, unit: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(unit.max(1))? <= self.rest.len()).then_some(n)
    }

    /// Reads raw bytes written by [`ImageWriter::bytes`].
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.count(1)?;
        self.take(n)
    }

    /// Reads a string written by [`ImageWriter::str`].
    pub fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// Reads a finding id.
    pub fn id(&mut self) -> Option<FindingId> {
        self.take(16).map(|b| FindingId::from_bytes(b.try_into().unwrap_or_default()))
    }

    /// Reads `u32`s written by [`ImageWriter::u32s`].
    pub fn u32s(&mut self) -> Option<Vec<u32>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_reads_back_what_was_written_and_refuses_a_short_one() {
        let id = FindingId::generate();
        let mut w = ImageWriter::new();
        w.u8(7);
        w.u64(u64::MAX);
        w.str("disk full");
        w.id(id);
        w.u32s(&[1, 2, 3]);
        let bytes = w.into_bytes();
        let mut r = ImageReader::new(&bytes);
        assert_eq!(r.u8(), Some(7));
        assert_eq!(r.u64(), Some(u64::MAX));
        assert_eq!(r.str(), Some("disk full"));
        assert_eq!(r.id(), Some(id));
        assert_eq!(r.u32s(), Some(vec![1, 2, 3]));
        assert!(r.is_empty());
        // Cut anywhere, the last value is refused rather than misread.
        for cut in 0..bytes.len() {
            let mut r = ImageReader::new(&bytes[..cut]);
            let whole = r.u8().is_some()
                && r.u64().is_some()
                && r.str().is_some()
                && r.id().is_some()
                && r.u32s().is_some();
            assert!(!whole, "an image cut at {cut} bytes read as whole");
        }
    }

    #[test]
    fn a_damaged_length_is_refused_before_allocating() {
        let mut w = ImageWriter::new();
        w.u64(u64::MAX / 2);
        let bytes = w.into_bytes();
        assert_eq!(ImageReader::new(&bytes).u32s(), None);
        assert_eq!(ImageReader::new(&bytes).bytes(), None);
    }
}
