//! JSON-RPC 2.0 messages with the base protocol's `Content-Length` framing.

use std::io::{self, BufRead, Write};

use serde_json::Value;

/// The largest message read: past this a server is taken as broken.
const MAX_MESSAGE: usize = 64 << 20;

/// Write one message, framed.
pub fn write_message(w: &mut impl Write, v: &Value) -> io::Result<()> {
    let body = serde_json::to_vec(v).map_err(io::Error::other)?;
    write!(w, "Content-Length: {}\r\n\r\n", body.len())?;
    w.write_all(&body)?;
    w.flush()
}

/// Read one message; `None` at end of stream.
pub fn read_message(r: &mut impl BufRead) -> io::Result<Option<Value>> {
    let mut length: Option<usize> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            if length.is_some() {
                break;
            }
            // Blank lines before a header: tolerated.
            continue;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("bad header `{header}`"))
            })?);
        }
    }
    let n = length.unwrap_or(0);
    if n > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {n} bytes is over the {MAX_MESSAGE}-byte limit"),
        ));
    }
    let mut body = vec![0; n];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_the_framing() {
        let mut buf = Vec::new();
        let v = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": "é"});
        write_message(&mut buf, &v).unwrap();
        write_message(&mut buf, &v).unwrap();
        let mut r = io::BufReader::new(buf.as_slice());
        assert_eq!(read_message(&mut r).unwrap(), Some(v.clone()));
        assert_eq!(read_message(&mut r).unwrap(), Some(v));
        assert_eq!(read_message(&mut r).unwrap(), None);
    }

    #[test]
    fn a_truncated_body_is_an_error_not_a_hang() {
        let mut r = io::BufReader::new(&b"Content-Length: 10\r\n\r\n{}"[..]);
        assert!(read_message(&mut r).is_err());
    }
}
