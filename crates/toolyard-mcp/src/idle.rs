//! Idle ends for HTTP clients' cookie sessions.
//!
//! Protocol 2026-07-28 has no session to close: a client's session is its cookie (see
//! [`crate::gate`]), and nothing says when the client is gone. A cookie session with no request
//! for `[processes] idle_timeout_s` is taken as ended, and its processes are killed, as when a
//! stdio connection closes. A call still running keeps its session alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use toolyard_dispatch::Dispatcher;

/// The cookie sessions seen: each one's last request and its calls in flight.
pub(crate) struct CookieSessions {
    seen: Mutex<HashMap<String, (Instant, usize)>>,
    idle: Duration,
}

/// A call in flight: its session cannot idle out until this is dropped.
pub(crate) struct InFlight {
    sessions: Arc<CookieSessions>,
    session: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut seen = self.sessions.lock();
        if let Some((last, busy)) = seen.get_mut(&self.session) {
            *last = Instant::now();
            *busy = busy.saturating_sub(1);
        }
    }
}

impl CookieSessions {
    /// Sessions that end after `idle` without a request.
    pub(crate) fn new(idle: Duration) -> Arc<Self> {
        Arc::new(Self {
            seen: Mutex::default(),
            idle,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, usize)>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of `session` begins.
    pub(crate) fn begin(self: &Arc<Self>, session: &str) -> InFlight {
        let mut seen = self.lock();
        let entry = seen
            .entry(session.to_string())
            .or_insert((Instant::now(), 0));
        entry.0 = Instant::now();
        entry.1 += 1;
        InFlight {
            sessions: self.clone(),
            session: session.to_string(),
        }
    }

    /// The sessions idle at `now`, forgotten here (a later request starts them afresh).
    fn take_idle(&self, now: Instant) -> Vec<String> {
        let mut seen = self.lock();
        let idle: Vec<String> = seen
            .iter()
            .filter(|(_, (last, busy))| *busy == 0 && now.duration_since(*last) >= self.idle)
            .map(|(s, _)| s.clone())
            .collect();
        for s in &idle {
            seen.remove(s);
        }
        idle
    }
}

/// End idle sessions' processes until `stop` is cancelled.
pub(crate) async fn reap(
    sessions: Arc<CookieSessions>,
    dispatcher: Arc<Dispatcher>,
    stop: CancellationToken,
) {
    // Often enough that a session ends within a second of its idle time.
    let mut tick = tokio::time::interval(sessions.idle.min(Duration::from_secs(1)));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {
                for s in sessions.take_idle(Instant::now()) {
                    tracing::info!(session = %s, "HTTP client session idle: killing its processes");
                    dispatcher.end_session(&s).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_idles_only_with_no_call_in_flight() {
        let s = CookieSessions::new(Duration::from_secs(10));
        let start = Instant::now();
        let call = s.begin("a");
        drop(s.begin("b"));
        assert_eq!(
            s.take_idle(start + Duration::from_secs(11)),
            vec!["b".to_string()]
        );
        drop(call);
        // Its call ended just now: not idle until a whole idle time after that.
        let ended = Instant::now();
        assert!(s.take_idle(ended + Duration::from_secs(9)).is_empty());
        assert_eq!(
            s.take_idle(ended + Duration::from_secs(11)),
            vec!["a".to_string()]
        );
    }
}
