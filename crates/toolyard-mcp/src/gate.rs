//! The HTTP front door's gate: the bearer token, and the cookie that keeps a client's session.
//!
//! - **Token.** With a token configured, every request must carry `Authorization: Bearer TOKEN`
//!   or gets 401. Tokens are compared as BLAKE3 digests, whose equality is constant-time, so
//!   neither the content nor the length of the token leaks through timing.
//! - **Client session.** Protocol 2026-07-28 has no sessions (every request stands alone), yet a
//!   client's reads must license its own edits and no one else's. Each client without the cookie
//!   gets a random one (`toolyard_session`, HttpOnly, SameSite=Strict); a client that keeps
//!   cookies (the Python SDK's httpx does) stays one session, and two clients never share one.
//!   The cookie is issued by this server and carries a MAC under a key made at start and never
//!   written anywhere: a cookie it did not issue is not taken (the client gets a fresh one).
//! - **Session names.** What names a client's session in the journal, the read ledger and the
//!   process table (`mcp-http-client-…` for a cookie, `mcp-http-…` for an `Mcp-Session-Id`) is a
//!   keyed hash of the cookie or id under the same key, so whoever reads the state database
//!   learns nothing they could present.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, SET_COOKIE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The cookie that carries a client's session id.
pub const SESSION_COOKIE: &str = "toolyard_session";

/// The session a request's client belongs to, as the gate found or made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSession(pub String);

/// The key of a request's `Mcp-Session-Id` (a keyed hash of it), as the gate found it: what
/// names that session's state instead of the id itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSessionKey(pub String);

/// What the gate checks.
#[derive(Clone)]
pub struct Gate {
    token: Option<blake3::Hash>,
    /// This server's key for cookie MACs and session names: random, made at start, kept only
    /// in memory (a restarted server issues fresh cookies).
    key: [u8; 32],
}

impl Default for Gate {
    fn default() -> Self {
        Self::new(None)
    }
}

/// Hex digits of a cookie's random id.
const COOKIE_ID_HEX: usize = 32;

impl Gate {
    /// A gate that requires `token` when given.
    pub fn new(token: Option<&str>) -> Self {
        // Two v4 UUIDs: 244 bits from the operating system's random source.
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            token: token.map(|t| blake3::hash(t.as_bytes())),
            key,
        }
    }

    /// `what`'s keyed hash under this server's key, in the domain `domain`.
    fn keyed(&self, domain: &str, what: &str) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(domain.as_bytes());
        h.update(&[0]);
        h.update(what.as_bytes());
        h.finalize()
    }

    /// A fresh cookie value: a random id and its MAC.
    fn issue(&self) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mac = self.keyed("cookie", &id).to_hex();
        format!("{id}{mac}")
    }

    /// The cookie's id when this server issued it (its MAC checks, in constant time).
    fn verify<'a>(&self, cookie: &'a str) -> Option<&'a str> {
        let (id, mac) = cookie.split_at_checked(COOKIE_ID_HEX)?;
        let mac = blake3::Hash::from_hex(mac).ok()?;
        // blake3::Hash's == is constant-time.
        (self.keyed("cookie", id) == mac).then_some(id)
    }

    /// The session name of the cookie id `id`: a keyed hash, never the id.
    fn cookie_session(&self, id: &str) -> String {
        self.keyed("client-session", id).to_hex()[..32].to_string()
    }

    /// The session name of an `Mcp-Session-Id`: a keyed hash, never the id.
    pub fn mcp_session_key(&self, id: &str) -> String {
        self.keyed("mcp-session", id).to_hex()[..32].to_string()
    }

    /// Whether a token is required.
    pub fn requires_token(&self) -> bool {
        self.token.is_some()
    }

    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        // blake3::Hash's == is constant-time.
        presented.is_some_and(|t| blake3::hash(t.as_bytes()) == *expected)
    }
}

/// The axum middleware: refuse what lacks the token, then find or make the client's session.
pub async fn admit(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    if !gate.admits(req.headers()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(WWW_AUTHENTICATE, "Bearer")],
            "401 Unauthorized: send `Authorization: Bearer <token>` with the token this server \
             was started with (TOOLYARD_HTTP_TOKEN_FILE or TOOLYARD_HTTP_TOKEN, else the one \
             `toolyard serve` printed on stderr when it started)\n",
        )
            .into_response();
    }
    // A request body is read whole by the transport: bound it as stdio bounds a line.
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > crate::stdio::MAX_LINE_BYTES as u64) {
        return too_large();
    }
    let req = req.map(|body| {
        axum::body::Body::new(http_body_util::Limited::new(
            body,
            crate::stdio::MAX_LINE_BYTES,
        ))
    });
    let mut req = req;
    // Only a cookie this server issued: anything else (forged, or from before a restart) is
    // replaced by a fresh one.
    let presented = session_cookie(req.headers());
    let issued = presented
        .as_deref()
        .and_then(|c| gate.verify(c).map(str::to_string));
    let (id, fresh) = match issued {
        Some(id) => (id, None),
        None => {
            let cookie = gate.issue();
            (cookie[..COOKIE_ID_HEX].to_string(), Some(cookie))
        }
    };
    req.extensions_mut()
        .insert(ClientSession(gate.cookie_session(&id)));
    let legacy = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| gate.mcp_session_key(v));
    if let Some(key) = legacy {
        req.extensions_mut().insert(McpSessionKey(key));
    }
    let mut response = next.run(req).await;
    if let Some(cookie) = fresh {
        let cookie = format!("{SESSION_COOKIE}={cookie}; Path=/mcp; HttpOnly; SameSite=Strict");
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}

fn too_large() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "413 Payload Too Large: a request body may hold at most {} bytes; send large file \
             contents in several calls\n",
            crate::stdio::MAX_LINE_BYTES
        ),
    )
        .into_response()
}

/// The session cookie's value when it has the form of one the gate makes (an id and a MAC, in
/// lowercase hex); whether the gate made it is [`Gate::verify`]'s to say.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| v.len() == COOKIE_ID_HEX + 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                *k,
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    #[test]
    fn the_token_must_match_exactly() {
        let gate = Gate::new(Some("s3cret"));
        assert!(gate.admits(&headers(&[("authorization", "Bearer s3cret")])));
        assert!(!gate.admits(&headers(&[("authorization", "Bearer s3cre")])));
        assert!(!gate.admits(&headers(&[("authorization", "Bearer s3cret2")])));
        assert!(!gate.admits(&headers(&[("authorization", "Basic s3cret")])));
        assert!(!gate.admits(&HeaderMap::new()));
        assert!(Gate::new(None).admits(&HeaderMap::new()));
    }

    #[test]
    fn only_a_well_formed_session_cookie_is_taken() {
        let id = "0123456789abcdef0123456789abcdef".repeat(3);
        let h = headers(&[("cookie", &format!("a=b; {SESSION_COOKIE}={id}; c=d"))]);
        assert_eq!(session_cookie(&h).as_deref(), Some(id.as_str()));
        let forged = headers(&[("cookie", &format!("{SESSION_COOKIE}=../../x"))]);
        assert_eq!(session_cookie(&forged), None);
        let short = headers(&[("cookie", &format!("{SESSION_COOKIE}={}", &id[..32]))]);
        assert_eq!(session_cookie(&short), None);
    }

    #[test]
    fn only_cookies_this_gate_issued_are_taken() {
        let gate = Gate::new(None);
        let cookie = gate.issue();
        let id = gate.verify(&cookie).expect("its own cookie");
        assert_eq!(id, &cookie[..COOKIE_ID_HEX]);
        // Another server's (or a restarted one's) cookie, and any edit of this one, are not.
        assert_eq!(Gate::new(None).verify(&cookie), None);
        let mut flipped = cookie.clone().into_bytes();
        flipped[3] = if flipped[3] == b'0' { b'1' } else { b'0' };
        assert_eq!(gate.verify(&String::from_utf8(flipped).unwrap()), None);
        let mut mac_edit = cookie.clone().into_bytes();
        let last = mac_edit.len() - 1;
        mac_edit[last] = if mac_edit[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(gate.verify(&String::from_utf8(mac_edit).unwrap()), None);
    }

    #[test]
    fn session_names_are_keyed_hashes_of_what_the_client_holds() {
        let (a, b) = (Gate::new(None), Gate::new(None));
        let id = "0123456789abcdef0123456789abcdef";
        let name = a.cookie_session(id);
        assert_eq!(name, a.cookie_session(id), "stable within one server");
        assert!(!name.contains(id));
        assert_ne!(
            name,
            b.cookie_session(id),
            "keyed: another key, another name"
        );
        assert_ne!(
            a.mcp_session_key(id),
            name,
            "cookie and Mcp-Session-Id domains differ"
        );
    }
}
