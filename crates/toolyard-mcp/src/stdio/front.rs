//! The stdio front door: what the transport's own threads answer without rmcp's tasks and
//! their hand-offs between threads. A `ping` of an `initialize` session, and a `tools/call` of
//! a tool the dispatcher places inline in this process ([`toolyard_dispatch::Dispatcher::is_prompt`]: a read, a
//! listing, a small edit or write), go through [`crate::server::answer_call`], the one
//! `tools/call` path rmcp's handler takes too: a front-answered call is cancelled by a
//! `notifications/cancelled` naming it (and then gets no response, as the MCP specification
//! says), and its progress reports go out as `notifications/progress` before its answer, exactly
//! as rmcp sends them. Everything else goes on to rmcp.
//!
//! It exists for speed: a read over stdio costs one thread wake-up here, against the
//! hand-offs between rmcp's reader, handler and writer tasks (docs/architecture.md has the
//! figures).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetMeta, ProgressNotification,
    ProgressNotificationParam, ProtocolVersion, RequestId, ServerJsonRpcMessage,
    ServerNotification, ServerResult,
};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    Fd, LineRead, Out, PIPE_BYTES, RawIds, Verdict, judge, pump_replies, read_line_capped, too_long,
};
use crate::PROTOCOL_VERSIONS;
use crate::server::{ToolyardServer, answer_call};

/// What the transport's own threads answer, without rmcp.
pub(crate) trait Front: Send + Sync + 'static {
    /// Whether `message` is one this answers; `alone` when no other line is waiting.
    fn takes(&self, message: &ClientJsonRpcMessage, alone: bool) -> bool;
    /// The answer to a message [`Front::takes`]; `call` is how it is cancelled and where its
    /// notifications go.
    fn answer(&self, message: ClientJsonRpcMessage, call: &Answering<'_>) -> ServerJsonRpcMessage;
}

/// What the door gives a request it answers.
pub(crate) struct Answering<'a> {
    /// Cancelled by a `notifications/cancelled` naming the request (its answer is then dropped).
    pub(crate) cancel: CancellationToken,
    out: &'a Out,
}

impl Answering<'_> {
    /// Send `notification` now, ahead of the answer.
    pub(crate) fn notify(&self, notification: ServerNotification) {
        let message = ServerJsonRpcMessage::notification(notification);
        if let Err(e) = self.out.write_answer(message) {
            tracing::debug!(error = %e, "notification not delivered");
        }
    }
}

/// The requests the front is answering, by id, each with the token a `notifications/cancelled`
/// naming it cancels (rmcp keeps the same for the requests it answers).
#[derive(Default)]
struct Running(Mutex<HashMap<RequestId, CancellationToken>>);

impl Running {
    /// Hold `id` while it is answered; its token.
    fn start(&self, id: Option<&RequestId>) -> CancellationToken {
        let cancel = CancellationToken::new();
        if let (Some(id), Ok(mut running)) = (id, self.0.lock()) {
            running.insert(id.clone(), cancel.clone());
        }
        cancel
    }

    /// Whether `id`'s answer is owed: not when the client cancelled it meanwhile.
    fn finish(&self, id: Option<&RequestId>) -> bool {
        match (id, self.0.lock()) {
            (Some(id), Ok(mut running)) => running.remove(id).is_some(),
            _ => true,
        }
    }

    /// Cancel the request `message` names, when it is a cancellation of one being answered
    /// here; false for any other message (a cancellation of another request goes on to rmcp).
    fn cancels(&self, message: &ClientJsonRpcMessage) -> bool {
        let ClientJsonRpcMessage::Notification(note) = message else {
            return false;
        };
        let ClientNotification::CancelledNotification(cancelled) = &note.notification else {
            return false;
        };
        let Some(id) = &cancelled.params.request_id else {
            return false;
        };
        let Some(cancel) = self.0.lock().ok().and_then(|mut r| r.remove(id)) else {
            return false;
        };
        tracing::info!(%id, reason = ?cancelled.params.reason, "cancelled");
        cancel.cancel();
        true
    }
}

/// The guarded stdio transport over `input` and `output` (this process's stdin and stdout).
///
/// A *front thread* of its own reads `input`. Each line is judged; a message `front` takes (a
/// ping, a read of a file) is answered on that thread and written out at once: no hand-off
/// between threads, so such a call costs one wake-up. When more lines are already waiting (a
/// client with many calls in flight), it hands such messages to a few *call threads* instead,
/// so they are answered on every core. Every other message goes to rmcp, whose replies a
/// *writer thread* copies out. All of them write whole lines under one lock. Blocking reads
/// and writes happen only on these threads, never on the runtime's. Should a call on the front
/// thread not return (a file system that hangs), another front thread takes over the reading
/// after [`TAKE_OVER_AFTER`]: one stuck call never stops the others being answered.
///
/// Returns the reader and writer rmcp serves on, and the writer thread (join it after the
/// service ends, so the last replies reach stdout).
pub(crate) fn guarded(
    runtime: tokio::runtime::Handle,
    front: Arc<dyn Front>,
    input: Fd,
    output: Fd,
) -> std::io::Result<((DuplexStream, DuplexStream), std::thread::JoinHandle<()>)> {
    let out = Arc::new(Out {
        fd: Mutex::new(output),
        ids: RawIds::default(),
    });
    let (rmcp_in, feed) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, replies) = tokio::io::duplex(PIPE_BYTES);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(64);
    runtime.spawn(pump_replies(replies, lines_tx));
    let writer_out = out.clone();
    let writer = std::thread::Builder::new()
        .name("toolyard-stdout".into())
        .spawn(move || {
            while let Some(line) = lines_rx.blocking_recv() {
                if writer_out.write_line(&line).is_err() {
                    return;
                }
            }
        })?;
    let running = Arc::new(Running::default());
    let calls = CallThreads::start(front.clone(), out.clone(), running.clone())?;
    let door = Arc::new(Door {
        input: Mutex::new(std::io::BufReader::with_capacity(64 * 1024, input)),
        feed: Mutex::new(feed),
        out,
        runtime,
        front,
        running,
        calls: Some(calls),
        free: std::sync::atomic::AtomicUsize::new(1),
        all_busy_since: Mutex::new(None),
        ended: (Mutex::new(false), std::sync::Condvar::new()),
    });
    door.clone().spawn_reader()?;
    std::thread::Builder::new()
        .name("toolyard-watch".into())
        .spawn(move || door.watch())?;
    Ok(((rmcp_in, rmcp_out), writer))
}

/// How long every front thread may be inside a call before another one takes over reading.
pub(crate) const TAKE_OVER_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The front door: what its front threads share.
struct Door {
    input: Mutex<std::io::BufReader<Fd>>,
    feed: Mutex<DuplexStream>,
    out: Arc<Out>,
    runtime: tokio::runtime::Handle,
    front: Arc<dyn Front>,
    /// The requests being answered here, which a cancellation may name.
    running: Arc<Running>,
    calls: Option<CallThreads>,
    /// Front threads reading, not inside a call of their own.
    free: std::sync::atomic::AtomicUsize,
    /// Since when no front thread is free.
    all_busy_since: Mutex<Option<std::time::Instant>>,
    /// Whether the input ended, and the watcher's wake-up.
    ended: (Mutex<bool>, std::sync::Condvar),
}

impl Drop for Door {
    /// Every answer is out before rmcp's input ends (when `feed` drops), so before the server
    /// exits.
    fn drop(&mut self) {
        if let Some(calls) = self.calls.take() {
            calls.finish();
        }
    }
}

impl Door {
    fn spawn_reader(self: Arc<Self>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("toolyard-stdin".into())
            .spawn(move || self.read())
            .map(|_| ())
    }

    /// Read line by line until the input ends, answer what the front takes, hand the rest to
    /// rmcp; or stop after a call of its own, when another front thread has taken over.
    fn read(&self) {
        let mut line = Vec::new();
        loop {
            line.clear();
            let (read, alone) = {
                let Ok(mut input) = self.input.lock() else {
                    return self.end();
                };
                if self.has_ended() {
                    return;
                }
                let read = read_line_capped(&mut *input, &mut line);
                (read, input.buffer().is_empty())
            };
            let sent = match read {
                Ok(LineRead::Eof) => return self.end(),
                Ok(LineRead::TooLong) => self.out.write_value(&too_long(&line)),
                Ok(LineRead::Line) => match judge(&line, &self.out.ids) {
                    Verdict::Skip => continue,
                    Verdict::Reply(reply) => self.out.write_value(&reply),
                    // It cancels a request answered here: no answer, nothing for rmcp.
                    Verdict::Message(_, message) if self.running.cancels(&message) => Ok(()),
                    Verdict::Message(text, message) if self.front.takes(&message, alone) => {
                        drop(text);
                        // Held from now: a cancellation may come while it waits for a thread.
                        let cancel = self.running.start(request_id(&message));
                        match &self.calls {
                            Some(calls) if !alone && calls.idle() => calls.send(*message, cancel),
                            _ => match self.answer_here(*message, cancel) {
                                Ok(true) => Ok(()),
                                Ok(false) => return,
                                Err(e) => Err(e),
                            },
                        }
                    }
                    Verdict::Message(text, _) | Verdict::Forward(text) => self.forward(text),
                },
                Err(e) => {
                    tracing::debug!(error = %e, "stdin closed");
                    return self.end();
                }
            };
            if sent.is_err() {
                return self.end();
            }
        }
    }

    /// Answer `message` on this thread; `Ok(false)` when another front thread took over the
    /// reading meanwhile (this one then stops).
    fn answer_here(
        &self,
        message: ClientJsonRpcMessage,
        cancel: CancellationToken,
    ) -> std::io::Result<bool> {
        if self.free.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.set_all_busy(Some(std::time::Instant::now()));
        }
        let sent = reply(&*self.front, message, cancel, &self.out, &self.running);
        // Back to reading, unless another front thread reads now.
        let back = self
            .free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| {
                (f == 0).then_some(1)
            })
            .is_ok();
        if back {
            self.set_all_busy(None);
        }
        sent.map(|()| back)
    }

    fn set_all_busy(&self, since: Option<std::time::Instant>) {
        if let Ok(mut all_busy) = self.all_busy_since.lock() {
            *all_busy = since;
        }
    }

    /// Until the input ends: when every front thread has been inside a call for
    /// [`TAKE_OVER_AFTER`], start another.
    fn watch(self: Arc<Self>) {
        let (ended, wake) = &self.ended;
        let Ok(mut done) = ended.lock() else { return };
        while !*done {
            done = match wake.wait_timeout(done, TAKE_OVER_AFTER / 4) {
                Ok((done, _)) => done,
                Err(_) => return,
            };
            let stuck = self
                .all_busy_since
                .lock()
                .is_ok_and(|since| since.is_some_and(|t| t.elapsed() >= TAKE_OVER_AFTER));
            if stuck
                && self
                    .free
                    .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                self.set_all_busy(None);
                tracing::warn!(
                    "a call has held the stdio front thread for over {TAKE_OVER_AFTER:?}; \
                     another one reads on"
                );
                if self.clone().spawn_reader().is_err() {
                    return;
                }
            }
        }
    }

    fn has_ended(&self) -> bool {
        self.ended.0.lock().map_or(true, |done| *done)
    }

    /// The input ended (or cannot be read): every front thread and the watcher stop.
    fn end(&self) {
        if let Ok(mut done) = self.ended.0.lock() {
            *done = true;
        }
        self.ended.1.notify_all();
    }

    fn forward(&self, mut text: Vec<u8>) -> std::io::Result<()> {
        text.push(b'\n');
        let mut feed = self
            .feed
            .lock()
            .map_err(|_| std::io::ErrorKind::BrokenPipe)?;
        self.runtime.block_on(feed.write_all(&text))
    }
}

/// Threads that answer what the front takes while the front thread reads on.
struct CallThreads {
    queue: std::sync::mpsc::SyncSender<(ClientJsonRpcMessage, CancellationToken)>,
    /// How many of them wait for work.
    idle: Arc<std::sync::atomic::AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CallThreads {
    fn start(front: Arc<dyn Front>, out: Arc<Out>, running: Arc<Running>) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(256);
        let rx = Arc::new(Mutex::new(rx));
        let idle = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(2, 8) - 1);
        let mut threads = Vec::with_capacity(count);
        for _ in 0..count {
            let (front, out, rx, idle) = (front.clone(), out.clone(), rx.clone(), idle.clone());
            let running = running.clone();
            let thread = std::thread::Builder::new()
                .name("toolyard-call".into())
                .spawn(move || {
                    loop {
                        idle.fetch_add(1, Ordering::SeqCst);
                        let next = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        idle.fetch_sub(1, Ordering::SeqCst);
                        let Ok((message, cancel)) = next else { return };
                        if reply(&*front, message, cancel, &out, &running).is_err() {
                            return;
                        }
                    }
                })?;
            threads.push(thread);
        }
        Ok(Self {
            queue: tx,
            idle,
            threads,
        })
    }

    /// Answer what is queued, then stop.
    fn finish(self) {
        drop(self.queue);
        for thread in self.threads {
            let _ = thread.join();
        }
    }

    /// Whether one of them waits for work (else the front thread is better off answering).
    fn idle(&self) -> bool {
        self.idle.load(Ordering::SeqCst) > 0
    }

    fn send(
        &self,
        message: ClientJsonRpcMessage,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        self.queue
            .send((message, cancel))
            .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
    }
}

/// The id of `message`, when it is a request.
fn request_id(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(&request.id),
        _ => None,
    }
}

/// Answer `message` (held in `running` with `cancel`) on `out`; not when the client cancelled
/// it meanwhile: the MCP specification has the receiver of a cancellation send no response.
fn reply(
    front: &dyn Front,
    message: ClientJsonRpcMessage,
    cancel: CancellationToken,
    out: &Out,
    running: &Running,
) -> std::io::Result<()> {
    let id = request_id(&message).cloned();
    let answer = answer(front, message, &Answering { cancel, out });
    if running.finish(id.as_ref()) {
        out.write_answer(answer)
    } else {
        tracing::debug!(?id, "dropping the answer of a cancelled request");
        Ok(())
    }
}

/// `front`'s answer to `message`; a panic in the tool becomes an error answer to its request,
/// not a thread gone (the transport would stop reading, and the client wait for ever).
fn answer(
    front: &dyn Front,
    message: ClientJsonRpcMessage,
    call: &Answering<'_>,
) -> ServerJsonRpcMessage {
    let id = request_id(&message).cloned();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| front.answer(message, call)))
        .unwrap_or_else(|_| {
            ServerJsonRpcMessage::error(
                rmcp::ErrorData::internal_error(
                    "the call failed inside Toolyard (a bug: please report it); the server goes on",
                    None,
                ),
                id,
            )
        })
}

/// What the stdio transport's own threads answer without rmcp: a `ping` of a session opened by
/// `initialize`, and a call of a [prompt](toolyard_dispatch::Dispatcher::is_prompt) tool in either protocol era
/// (an `initialize` session, or a 2026-07-28 request whose metadata is complete). A call is
/// answered by [`answer_call`], as rmcp's handler answers it, and shaped for the request's era
/// as rmcp shapes it, without rmcp's tasks and their hand-offs between threads. Anything rmcp
/// would refuse (incomplete metadata, an unknown version) is left to rmcp, whose errors are the
/// reference.
pub(crate) struct Prompt {
    server: ToolyardServer,
    runtime: tokio::runtime::Handle,
}

/// The protocol era a request is answered in.
#[derive(PartialEq)]
enum Era {
    /// A session opened by `initialize`, before 2026-07-28.
    Initialized,
    /// A request carrying complete 2026-07-28 metadata.
    Inline,
}

impl Prompt {
    /// The front door of `server`'s connection; its calls block on `runtime`.
    pub(crate) fn new(server: ToolyardServer, runtime: tokio::runtime::Handle) -> Self {
        Self { server, runtime }
    }

    /// The era of a request with metadata `meta`, when it is one the front answers in.
    fn era(&self, meta: &rmcp::model::RequestMetaObject) -> Option<Era> {
        let inline = ProtocolVersion::V_2026_07_28;
        match meta.protocol_version() {
            None => {
                let negotiated = self.server.state.negotiated.get()?;
                (negotiated.as_str() < inline.as_str()).then_some(Era::Initialized)
            }
            Some(v) => (v.as_str() >= inline.as_str()
                && PROTOCOL_VERSIONS.contains(&v)
                && meta.missing_required_keys(&inline).is_empty())
            .then_some(Era::Inline),
        }
    }
}

impl Front for Prompt {
    fn takes(&self, message: &ClientJsonRpcMessage, alone: bool) -> bool {
        let ClientJsonRpcMessage::Request(request) = message else {
            return false;
        };
        let Some(era) = self.era(request.request.get_meta()) else {
            return false;
        };
        match &request.request {
            ClientRequest::PingRequest(_) => era == Era::Initialized,
            ClientRequest::CallToolRequest(call) => {
                #[cfg(feature = "conformance")]
                if self.server.shared.fixtures
                    && crate::fixtures::is_fixture_tool(&call.params.name)
                {
                    return false;
                }
                let args = call.params.arguments.as_ref();
                self.server
                    .shared
                    .dispatcher
                    .is_prompt(&call.params.name, args, alone)
            }
            _ => false,
        }
    }

    fn answer(&self, message: ClientJsonRpcMessage, call: &Answering<'_>) -> ServerJsonRpcMessage {
        let Some((request, id)) = message.into_request() else {
            return ServerJsonRpcMessage::error(
                McpError::internal_error("not a request: nothing to answer", None),
                None,
            );
        };
        let era = self.era(request.get_meta());
        let token = request.get_meta().get_progress_token();
        let mut result = match request {
            ClientRequest::CallToolRequest(request) => {
                // Progress goes out on this connection's writer, ahead of the answer.
                let progress = token.map(|token| {
                    let send = |param: ProgressNotificationParam| {
                        let note = ProgressNotification::new(param);
                        call.notify(ServerNotification::ProgressNotification(note));
                        std::future::ready(())
                    };
                    (token, send)
                });
                let answered = answer_call(
                    &self.server.shared,
                    self.server.session().to_string(),
                    request.params,
                    call.cancel.clone(),
                    progress,
                    None,
                );
                // On this thread (not a worker of the runtime): an inline call runs right here.
                ServerResult::from(self.runtime.block_on(answered))
            }
            _ => ServerResult::empty(()),
        };
        // What rmcp's handler does last, per era.
        if era == Some(Era::Inline) {
            result.fill_missing_cache_hints();
        } else {
            result.strip_result_type_for_legacy_peer();
        }
        ServerJsonRpcMessage::response(result, id)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use serde_json::{Value, json};

    use super::*;

    /// An `Out` that writes to a pipe; the pipe's other end.
    fn out_pipe() -> (Out, std::fs::File) {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let out = Out {
            fd: Mutex::new(Fd(std::fs::File::from(w))),
            ids: RawIds::default(),
        };
        (out, std::fs::File::from(r))
    }

    #[test]
    fn a_panicking_answer_is_an_error_to_its_request() {
        struct Panics;
        impl Front for Panics {
            fn takes(&self, _: &ClientJsonRpcMessage, _: bool) -> bool {
                true
            }
            fn answer(&self, _: ClientJsonRpcMessage, _: &Answering<'_>) -> ServerJsonRpcMessage {
                panic!("a tool bug")
            }
        }
        let line = br#"{"jsonrpc":"2.0","id":"q","method":"ping"}"#;
        let Verdict::Message(_, message) = judge(line, &RawIds::default()) else {
            panic!("a ping is a message");
        };
        let (out, _read) = out_pipe();
        let call = Answering {
            cancel: CancellationToken::new(),
            out: &out,
        };
        let reply = serde_json::to_value(answer(&Panics, *message, &call)).unwrap_or_default();
        assert_eq!(reply["id"], "q");
        assert_eq!(reply["error"]["code"], -32603);
    }

    /// Answers every request with an empty result; the one with id "stuck" only once released.
    struct Stuck(Mutex<std::sync::mpsc::Receiver<()>>);

    impl Front for Stuck {
        fn takes(&self, message: &ClientJsonRpcMessage, _: bool) -> bool {
            matches!(message, ClientJsonRpcMessage::Request(_))
        }
        fn answer(&self, message: ClientJsonRpcMessage, _: &Answering<'_>) -> ServerJsonRpcMessage {
            let Some((_, id)) = message.into_request() else {
                panic!("takes only requests");
            };
            if id.to_string() == "stuck" {
                let _ = self.0.lock().map(|released| released.recv());
            }
            ServerJsonRpcMessage::response(rmcp::model::ServerResult::empty(()), id)
        }
    }

    /// The ids of the answers on `out` within `wait`.
    fn answered(out: &std::fs::File, buf: &mut Vec<u8>, wait: std::time::Duration) -> Vec<String> {
        use std::os::fd::AsFd;
        let deadline = std::time::Instant::now() + wait;
        let mut chunk = [0u8; 4096];
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(
                out.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            if nix::poll::poll(&mut fds, ms).unwrap_or(0) == 0 {
                break;
            }
            match (&*out).read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.ends_with(b"\n") {
                break;
            }
        }
        let lines = std::mem::take(buf);
        lines
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
            .map(|v| v["id"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_never_returns_does_not_stop_the_others() {
        let (in_r, in_w) = nix::unistd::pipe().expect("pipe");
        let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
        let (release, released) = std::sync::mpsc::channel();
        let front: Arc<dyn Front> = Arc::new(Stuck(Mutex::new(released)));
        let input = Fd(std::fs::File::from(in_r));
        let output = Fd(std::fs::File::from(out_w));
        let (_transport, _writer) =
            guarded(tokio::runtime::Handle::current(), front, input, output).expect("transport");
        let mut to_server = std::fs::File::from(in_w);
        let from_server = std::fs::File::from(out_r);
        let mut buf = Vec::new();
        let send = |to: &mut std::fs::File, id: &str| {
            let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":\"ping\"}}\n");
            to.write_all(line.as_bytes()).expect("send");
        };
        // Alone, so the front thread answers it itself, and stays inside it.
        send(&mut to_server, "stuck");
        std::thread::sleep(std::time::Duration::from_millis(200));
        send(&mut to_server, "first");
        send(&mut to_server, "second");
        let wait = TAKE_OVER_AFTER * 10;
        let mut got = answered(&from_server, &mut buf, wait);
        if got.len() < 2 {
            got.extend(answered(&from_server, &mut buf, wait));
        }
        got.sort();
        assert_eq!(
            got,
            ["first", "second"],
            "answered while the stuck call still runs"
        );
        let _ = release.send(());
        assert_eq!(answered(&from_server, &mut buf, wait), ["stuck"]);
        send(&mut to_server, "after");
        assert_eq!(answered(&from_server, &mut buf, wait), ["after"]);
    }

    /// Every line `from` carries until it closes (or `wait` passes), parsed.
    fn all_lines(from: &std::fs::File, wait: std::time::Duration) -> Vec<Value> {
        use std::os::fd::AsFd;
        let deadline = std::time::Instant::now() + wait;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(
                from.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            if nix::poll::poll(&mut fds, ms).unwrap_or(0) == 0 {
                continue;
            }
            match (&*from).read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("not JSON ({e})")))
            .collect()
    }

    /// Answers "slow" only once its token is cancelled (then says so in `stopped`), anything
    /// else at once.
    #[derive(Default)]
    struct UntilCancelled {
        stopped: std::sync::atomic::AtomicBool,
    }

    impl Front for UntilCancelled {
        fn takes(&self, message: &ClientJsonRpcMessage, _: bool) -> bool {
            matches!(message, ClientJsonRpcMessage::Request(_))
        }
        fn answer(
            &self,
            message: ClientJsonRpcMessage,
            call: &Answering<'_>,
        ) -> ServerJsonRpcMessage {
            let Some((_, id)) = message.into_request() else {
                panic!("takes only requests");
            };
            if id.to_string() == "slow" {
                let deadline = std::time::Instant::now() + TAKE_OVER_AFTER * 30;
                while !call.cancel.is_cancelled() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                self.stopped
                    .store(call.cancel.is_cancelled(), Ordering::SeqCst);
            }
            ServerJsonRpcMessage::response(ServerResult::empty(()), id)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_request_stops_and_gets_no_answer_and_other_cancellations_reach_rmcp() {
        use tokio::io::AsyncBufReadExt;
        let (in_r, in_w) = nix::unistd::pipe().expect("pipe");
        let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
        let front = Arc::new(UntilCancelled::default());
        let input = Fd(std::fs::File::from(in_r));
        let output = Fd(std::fs::File::from(out_w));
        let runtime = tokio::runtime::Handle::current();
        let ((to_rmcp, from_rmcp), writer) =
            guarded(runtime, front.clone(), input, output).expect("transport");
        let mut to_server = std::fs::File::from(in_w);
        let from_server = std::fs::File::from(out_r);
        let mut send = |v: Value| {
            to_server
                .write_all(format!("{v}\n").as_bytes())
                .expect("send");
        };
        // Alone, so the front thread answers it itself; the cancellation is read by the thread
        // that takes over.
        send(json!({"jsonrpc": "2.0", "id": "slow", "method": "ping"}));
        std::thread::sleep(std::time::Duration::from_millis(100));
        send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "slow", "reason": "test"}}),
        );
        send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "not-here"}}),
        );
        send(json!({"jsonrpc": "2.0", "id": "after", "method": "ping"}));
        // The cancellation of a request the front does not hold goes on to rmcp (and only it).
        let mut rmcp_reads = tokio::io::BufReader::new(to_rmcp).lines();
        let forwarded = tokio::time::timeout(TAKE_OVER_AFTER * 30, rmcp_reads.next_line())
            .await
            .expect("a line for rmcp")
            .expect("read")
            .unwrap_or_default();
        let forwarded: Value = serde_json::from_str(&forwarded).unwrap_or_default();
        assert_eq!(forwarded["params"]["requestId"], "not-here", "{forwarded}");
        drop(to_server);
        drop(from_rmcp);
        let lines =
            tokio::task::spawn_blocking(move || all_lines(&from_server, TAKE_OVER_AFTER * 30))
                .await
                .expect("read");
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        let ids: Vec<&Value> = lines.iter().map(|l| &l["id"]).collect();
        assert_eq!(ids, [&json!("after")], "{lines:?}");
        assert!(
            front.stopped.load(Ordering::SeqCst),
            "the cancelled call saw its token cancelled"
        );
    }

    /// A front that takes every call, answering it as the stdio front door does (so a call
    /// that reports progress, which no prompt tool does, takes the front's path).
    struct EveryCall(Prompt);

    impl Front for EveryCall {
        fn takes(&self, message: &ClientJsonRpcMessage, _: bool) -> bool {
            matches!(message, ClientJsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::CallToolRequest(_)))
        }
        fn answer(
            &self,
            message: ClientJsonRpcMessage,
            call: &Answering<'_>,
        ) -> ServerJsonRpcMessage {
            self.0.answer(message, call)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_answered_by_the_front_sends_its_progress_with_the_token_before_its_answer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("mkdir");
        let mut config = toolyard_dispatch::DispatcherConfig::new(&ws);
        config.state_dir = Some(dir.path().join("state"));
        let dispatcher = toolyard_dispatch::Dispatcher::new(config).expect("dispatcher");
        let runtime = tokio::runtime::Handle::current();
        let server = ToolyardServer::new(Arc::new(dispatcher));
        let front = Arc::new(EveryCall(Prompt::new(server, runtime.clone())));
        let (in_r, in_w) = nix::unistd::pipe().expect("pipe");
        let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
        let input = Fd(std::fs::File::from(in_r));
        let output = Fd(std::fs::File::from(out_w));
        let (transport, writer) = guarded(runtime, front, input, output).expect("transport");
        let mut to_server = std::fs::File::from(in_w);
        // A token rmcp could not carry as sent: it must come back byte for byte.
        let token = "18446744073709551616";
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{{"name":"run_command","arguments":{{"command":"sleep 2.5; echo done"}},"_meta":{{"progressToken":{token}}}}}}}"#
        );
        to_server
            .write_all(format!("{call}\n").as_bytes())
            .expect("send");
        drop(to_server);
        drop(transport);
        let from_server = std::fs::File::from(out_r);
        let lines = tokio::task::spawn_blocking(move || {
            let mut raw = Vec::new();
            let _ = (&from_server).read_to_end(&mut raw);
            raw
        })
        .await
        .expect("read");
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        let text = String::from_utf8_lossy(&lines).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let (last, notes) = lines.split_last().expect("an answer");
        let answer: Value = serde_json::from_str(last).unwrap_or_default();
        assert_eq!(answer["id"], "p", "the answer comes last: {text}");
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert!(!notes.is_empty(), "progress before the answer: {text}");
        for note in notes {
            let v: Value = serde_json::from_str(note).unwrap_or_default();
            assert_eq!(v["method"], "notifications/progress", "{note}");
            assert!(v["params"]["progress"].is_number(), "{note}");
            assert!(
                note.contains(&format!(r#""progressToken":{token}"#)),
                "the token as sent: {note}"
            );
        }
    }
}
