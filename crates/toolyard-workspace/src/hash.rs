//! Content hashes: staleness is judged by content, not by timestamps.

use std::io::Read;

/// A file content's hash (BLAKE3, hex).
pub type ContentHash = String;

/// The hash of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> ContentHash {
    blake3::hash(bytes).to_hex().to_string()
}

/// The hash of everything `reader` yields, read in chunks (large files stay out of memory).
pub fn hash_reader(mut reader: impl Read) -> std::io::Result<ContentHash> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().to_hex().to_string())
}
