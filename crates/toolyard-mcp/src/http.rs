//! Streamable HTTP: the MCP endpoint at `/mcp`, behind the gate (token, cookie sessions).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use toolyard_dispatch::Dispatcher;

use crate::{Gate, ServeError, Shared, ToolyardServer, gate, idle};

/// A streamable HTTP server bound to its address, not yet serving.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
    /// What ends idle cookie sessions while the server runs.
    reaper: (Arc<idle::CookieSessions>, Arc<Dispatcher>),
}

impl HttpServer {
    /// Bind `addr` (port 0 picks a free port) and prepare the MCP endpoint at `/mcp`, with no
    /// token: only a loopback address is accepted.
    pub async fn bind(dispatcher: Arc<Dispatcher>, addr: &str) -> Result<Self, ServeError> {
        Self::bind_with(dispatcher, addr, Gate::default()).await
    }

    /// [`HttpServer::bind`] behind `gate`. An address that is not loopback is refused unless
    /// the gate requires a token: anyone who can reach the port could otherwise run commands.
    pub async fn bind_with(
        dispatcher: Arc<Dispatcher>,
        addr: &str,
        gate: Gate,
    ) -> Result<Self, ServeError> {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Io {
                context: format!("cannot listen on {addr}"),
                source,
            })?;
        let bound = listener.local_addr().map_err(|source| ServeError::Io {
            context: format!("cannot read the address bound for {addr}"),
            source,
        })?;
        if !bound.ip().is_loopback() && !gate.requires_token() {
            return Err(ServeError::Unprotected(bound.to_string()));
        }
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared::new(dispatcher.clone(), true));
        let reaper = (shared.cookies.clone(), dispatcher);
        let mut config =
            StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
        if bound.ip().is_loopback() {
            // Host validation (loopback names only) is what stops DNS rebinding from a web page
            // reaching a local server that can run commands.
            let port = bound.port();
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
                .iter()
                .map(|h| h.to_string())
                .collect();
            hosts.extend(hosts.clone().into_iter().map(|h| format!("{h}:{port}")));
            config = config.with_allowed_hosts(hosts);
        } else {
            // Reached from other hosts under whatever name they use; the token is the guard (a
            // rebinding page cannot know it).
            config = config.disable_allowed_hosts();
        }
        let service = StreamableHttpService::new(
            move || Ok(ToolyardServer::with_shared(shared.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().nest_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(Arc::new(gate), gate::admit),
        );
        Ok(Self {
            listener,
            router,
            shutdown,
            reaper,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener.local_addr().map_err(|source| ServeError::Io {
            context: "cannot read the bound address".into(),
            source,
        })
    }

    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serve until the shutdown token is cancelled.
    pub async fn run(self) -> Result<(), ServeError> {
        let token = self.shutdown.clone();
        let (cookies, dispatcher) = self.reaper;
        tokio::spawn(idle::reap(cookies, dispatcher, token.child_token()));
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await
            .map_err(|source| ServeError::Io {
                context: "the HTTP server failed".into(),
                source,
            })
    }
}

/// Serve `dispatcher` over streamable HTTP at `http://ADDR/mcp` until `shutdown` is cancelled.
pub async fn serve_http(
    dispatcher: Arc<Dispatcher>,
    addr: &str,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let server = HttpServer::bind(dispatcher, addr).await?;
    let token = server.shutdown_token();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        token.cancel();
    });
    server.run().await
}
