//! `toolyard serve`: the MCP server front door (stdio by default, streamable HTTP with --http).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use crate::Common;

/// Options of `toolyard serve`.
#[derive(Args)]
#[command(after_help = HTTP_HELP)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8080; port 0 picks a free one and
    /// the address is printed on stderr) at the path /mcp, instead of stdio. Clients must send
    /// a bearer token: see below.
    #[arg(long)]
    pub http: Option<String>,
    /// With --http on a loopback address: take requests without a token. Every local process
    /// can then use this server, sandboxed commands of other Toolyard servers included (they
    /// could write into this workspace through it).
    #[arg(long, requires = "http")]
    pub trust_every_local_process: bool,
    /// Over stdio: the read-tracking session to use instead of a fresh one per connection, so
    /// clients that start a server per tool call (LangChain's MCP adapter) keep one read ledger
    /// and undo history: a read in one connection lets an edit in the next. The same name as
    /// `toolyard call --session` shares with the CLI.
    #[arg(long, conflicts_with = "http")]
    pub session: Option<String>,
}

/// The token's part of `toolyard serve --help`.
const HTTP_HELP: &str = "\
HTTP token: every request to `serve --http` must carry `Authorization: Bearer TOKEN`.
  TOKEN is the first line of the file TOOLYARD_HTTP_TOKEN_FILE names, else TOOLYARD_HTTP_TOKEN
  (at least 16 characters, e.g. `openssl rand -hex 32`). With neither, the server makes a random
  token and prints it on stderr, on the line `toolyard: HTTP bearer token: TOKEN`, before the
  line with its address. Keep a token file where commands cannot read it (a directory in
  [sandbox] deny_read). --trust-every-local-process serves loopback without a token.";

/// Run the MCP server until the client goes away (stdio) or a signal stops it (HTTP).
pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    if args.common.inline {
        eprintln!(
            "toolyard: serving inline: nothing is sandboxed; commands run with your full access \
             to files and network, and only the file tools' paths are confined to the workspace"
        );
    }
    let rt = crate::runtime()?;
    let result = rt.block_on(async {
        // Built inside the runtime: the router spawns its runner tasks on it.
        let dispatcher = Arc::new(crate::dispatcher(&args.common)?);
        let served = match &args.http {
            None => toolyard_mcp::serve_stdio_as(dispatcher.clone(), args.session.clone())
                .await
                .context("the MCP server over stdio failed"),
            Some(addr) => {
                serve_http(dispatcher.clone(), addr, args.trust_every_local_process).await
            }
        };
        // Pods a remote link placed go with the server.
        dispatcher.shutdown().await;
        served
    });
    // A call still running when the client left must not keep the process alive: its runner is
    // killed on drop, and blocked reader threads are not waited for.
    rt.shutdown_timeout(Duration::from_millis(500));
    result.map(|()| ExitCode::SUCCESS)
}

async fn serve_http(
    dispatcher: Arc<toolyard_dispatch::Dispatcher>,
    addr: &str,
    trust_all: bool,
) -> Result<()> {
    let port_only = addr.strip_prefix(':').unwrap_or(addr);
    if port_only.parse::<u16>().is_ok() {
        anyhow::bail!(
            "--http needs HOST:PORT, not only a port: use --http 127.0.0.1:{port_only} (loopback) \
             or --http 0.0.0.0:{port_only} with a token (see TOOLYARD_HTTP_TOKEN_FILE)"
        );
    }
    let configured = http_token()?;
    if configured.is_some() && trust_all {
        anyhow::bail!(
            "--trust-every-local-process asks for no token, but TOOLYARD_HTTP_TOKEN_FILE or \
             TOOLYARD_HTTP_TOKEN sets one: drop the flag or unset the variable"
        );
    }
    // Loopback is reachable by every local process, sandboxed commands of the net lane
    // included: a token unless the user said they trust them all.
    // Off loopback a token must be configured (the server refuses to start without one).
    let loopback = tokio::net::lookup_host(addr)
        .await
        .map(|mut all| all.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    let (token, made) = match configured {
        Some(t) => (Some(t), false),
        None if trust_all || !loopback => (None, false),
        None => (Some(random_token()?), true),
    };
    let gate = toolyard_mcp::Gate::new(token.as_deref());
    let server = toolyard_mcp::HttpServer::bind_with(dispatcher, addr, gate).await?;
    let local = server.local_addr()?;
    // stderr, not stdout: scripts and tests read the token and the chosen port from here.
    if let (Some(token), true) = (&token, made) {
        eprintln!("toolyard: HTTP bearer token: {token}");
        eprintln!(
            "toolyard: clients must send `Authorization: Bearer <token>` (set \
             TOOLYARD_HTTP_TOKEN_FILE to choose a lasting token; see `toolyard serve --help`)"
        );
    } else if token.is_none() {
        eprintln!(
            "toolyard: serving without a token (--trust-every-local-process): every process of \
             this machine, sandboxed commands included, can use this server"
        );
    }
    eprintln!("toolyard: serving MCP on http://{local}/mcp");
    let stop = server.shutdown_token();
    tokio::spawn(async move {
        signalled().await;
        stop.cancel();
    });
    server
        .run()
        .await
        .context("the MCP server over HTTP failed")
}

/// The bearer token HTTP clients must send: the first line of the file named by
/// `TOOLYARD_HTTP_TOKEN_FILE`, else `TOOLYARD_HTTP_TOKEN`. Never a command-line argument, which
/// any local user could read in `ps`.
fn http_token() -> Result<Option<String>> {
    if let Some(path) = std::env::var_os("TOOLYARD_HTTP_TOKEN_FILE") {
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read the HTTP token file {} (TOOLYARD_HTTP_TOKEN_FILE)",
                std::path::Path::new(&path).display()
            )
        })?;
        let token = text.lines().next().unwrap_or("").trim().to_string();
        anyhow::ensure!(
            token.len() >= 16,
            "the HTTP token in {} is shorter than 16 characters; use a long random one, e.g. \
             `openssl rand -hex 32`",
            std::path::Path::new(&path).display()
        );
        return Ok(Some(token));
    }
    match std::env::var("TOOLYARD_HTTP_TOKEN") {
        Ok(token) if token.trim().len() >= 16 => Ok(Some(token.trim().to_string())),
        Ok(_) => anyhow::bail!(
            "TOOLYARD_HTTP_TOKEN is shorter than 16 characters; use a long random one, e.g. \
             `openssl rand -hex 32`"
        ),
        Err(_) => Ok(None),
    }
}

/// A fresh token: 32 bytes from the kernel's random source, in hex.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    let mut got = 0;
    while got < bytes.len() {
        // SAFETY: getrandom writes at most the given length into the buffer.
        let n = unsafe { libc::getrandom(bytes[got..].as_mut_ptr().cast(), bytes.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("cannot make a random HTTP token");
        }
        got += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Resolves on SIGINT or SIGTERM.
async fn signalled() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
