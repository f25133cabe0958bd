//! Content hashes: staleness is judged by content, not by timestamps.

use std::io::Read;

/// A file content's hash (BLAKE3, hex).
pub type ContentHash = String;

/// The hash of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> ContentHash {
    blake3::hash(bytes).to_hex().to_string()
}

/// The hash of everything `reader` yields, read in chunks (large files stay out of memory).
pub fn hash_reader(reader: impl Read) -> std::io::Result<ContentHash> {
    let mut hasher = blake3::Hasher::new();
    // Through a buffer on the stack: a heap buffer zeroed per call cost more than hashing a
    // small file.
    hasher.update_reader(reader)?;
    Ok(hasher.finalize().to_hex().to_string())
}
