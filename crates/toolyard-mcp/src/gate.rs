//! The HTTP front door's gate: the bearer token, and the cookie that keeps a client's session.
//!
//! - **Token.** With a token configured, every request must carry `Authorization: Bearer TOKEN`
//!   or gets 401. Tokens are compared as BLAKE3 digests, whose equality is constant-time, so
//!   neither the content nor the length of the token leaks through timing.
//! - **Client session.** Protocol 2026-07-28 has no sessions (every request stands alone), yet a
//!   client's reads must license its own edits and no one else's. Each client without the cookie
//!   gets a random one (`toolyard_session`, HttpOnly, SameSite=Strict); a client that keeps
//!   cookies (the Python SDK's httpx does) stays one session, and two clients never share one.

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

/// What the gate checks.
#[derive(Clone, Default)]
pub struct Gate {
    token: Option<blake3::Hash>,
}

impl Gate {
    /// A gate that requires `token` when given.
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token: token.map(|t| blake3::hash(t.as_bytes())),
        }
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
             was started with (TOOLYARD_HTTP_TOKEN or TOOLYARD_HTTP_TOKEN_FILE)\n",
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
    let existing = session_cookie(req.headers());
    let session = existing
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    req.extensions_mut().insert(ClientSession(session.clone()));
    let mut response = next.run(req).await;
    if existing.is_none() {
        let cookie = format!("{SESSION_COOKIE}={session}; Path=/mcp; HttpOnly; SameSite=Strict");
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

/// The session cookie's value when it is one the gate could have made (32 hex digits).
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
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
        let id = "0123456789abcdef0123456789abcdef";
        let h = headers(&[("cookie", &format!("a=b; {SESSION_COOKIE}={id}; c=d"))]);
        assert_eq!(session_cookie(&h).as_deref(), Some(id));
        let forged = headers(&[("cookie", &format!("{SESSION_COOKIE}=../../x"))]);
        assert_eq!(session_cookie(&forged), None);
    }
}
