//! Serving the HTTP router on a listener, and stopping it without failing a request that reached
//! this process: what a rolling replacement behind a load balancer needs.
//!
//! `axum::serve(…).with_graceful_shutdown(…)` stops in a way a load balancer reports as 502s for
//! requests this process had already been sent:
//! - it drops the listener at once, and the kernel resets every connection it had completed for
//!   the listener and this process had not accepted yet;
//! - it shuts down a connection it accepted whose request has not arrived yet by dropping it
//!   (hyper-util's protocol detection is cancelled), and the client's request meets a reset.
//!
//! [`serve`] accepts the connections already completed before it closes the listener, and gives
//! each connection that has not sent its first request [`FIRST_REQUEST_WAIT`] to send it. Like
//! `axum::serve`, it speaks HTTP/1 and, to a client that opens with the HTTP/2 preface, HTTP/2.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use crate::http::{InFlight, Listener};

/// How long after the stop a connection that has sent nothing yet is kept open for its first
/// request. A client sends its request right after connecting; this covers a busy machine.
pub const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `stop` completes, then stops gracefully. Completes when every
/// connection has closed.
///
/// At the stop:
/// 1. Every connection the kernel has completed for the listener is accepted, then the listener is
///    closed: later connections are refused, which a load balancer retries elsewhere. (A handshake
///    completing between the last accept and the close is still reset: the kernel has no way to
///    stop completing handshakes while keeping its queue.)
/// 2. Every connection finishes the request it is answering, and is then closed. A connection that
///    has not sent its first request gets [`FIRST_REQUEST_WAIT`] to send it, and is then closed.
///    Kept-alive connections between requests are closed at once.
/// 3. `closed` is called after step 1. From then on [`crate::http::requests_in_flight`] counts
///    what cancelling MCP sessions would cut: each connection until its first request's head has
///    been read (from the moment it was accepted), and each request to `/mcp` from its head until
///    its answer is whole (a stream, once it has started). The caller can wait for it to reach
///    zero before ending long-lived streams (MCP sessions), which never end by themselves. (A
///    request on a kept-alive connection whose head is still being read at the stop is closed
///    unanswered, as hyper does for an idle connection; clients retry it.)
pub async fn serve(
    listener: Listener,
    app: axum::Router,
    stop: impl Future<Output = ()>,
    closed: impl FnOnce(),
) {
    // Each connection's task holds a receiver: it says when to stop, and `stopping.closed()`
    // says when every connection is done.
    let (stopping, stop_rx) = watch::channel(false);
    let mut listener = listener;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            // The stop first: a connection ready at the same time is accepted below, counted.
            biased;
            () = &mut stop => break,
            // Waits out accept errors (running out of file descriptors) as axum does.
            (io, _) = axum::serve::Listener::accept(&mut listener) => connection(io, app.clone(), stop_rx.clone()),
        }
    }
    // No await from here to the close: the queue is read to its end and closed right after.
    let mut drained = 0usize;
    match listener.into_inner().into_std() {
        Ok(tcp) => {
            // `into_std` leaves the listener non-blocking: `accept` says WouldBlock when the
            // kernel's queue is empty.
            loop {
                match tcp.accept() {
                    Ok((io, _)) => match io.set_nonblocking(true).and_then(|()| TcpStream::from_std(io)) {
                        Ok(io) => {
                            drained += 1;
                            crate::http::set_nodelay(&io);
                            connection(io, app.clone(), stop_rx.clone());
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot serve a connection accepted at the stop")
                        }
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if is_connection_error(&e) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot accept the connections queued at the stop");
                        break;
                    }
                }
            }
            drop(tcp);
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the connections queued at the stop"),
    }
    tracing::info!(accepted_at_stop = drained, "no longer accepting connections");
    // The connections first, so that an idle kept-alive one is closed before the caller starts
    // waiting for the requests in flight.
    stopping.send_replace(true);
    closed();
    drop(stop_rx);
    stopping.closed().await;
}

/// Serves one connection on a task of its own until it closes, or until the stop has let it
/// finish (see [`serve`]).
fn connection(io: TcpStream, app: axum::Router, mut stop: watch::Receiver<bool>) {
    let first =
        Arc::new(FirstRequest { in_flight: Mutex::new(Some(InFlight::enter())), came: Notify::new() });
    let service = {
        let first = first.clone();
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            // A request to the MCP endpoint counts from its head until its answer's head, and the
            // endpoint's own layer counts it from reading its body until its answer is whole. The
            // other routes are not waited for: the web view's long polls would hold the stop, and
            // cancelling MCP sessions does not touch them.
            let arrived = (req.uri().path() == "/mcp").then(InFlight::enter);
            // The connection's own count ends when its first request has come (after the
            // request's own, so that the count never drops to zero in between).
            drop(first.take());
            let answer = app.clone().oneshot(req.map(axum::body::Body::new));
            async move {
                let answer = answer.await;
                drop(arrived);
                answer
            }
        })
    };
    tokio::spawn(async move {
        // HTTP/1, and HTTP/2 when a client opens with its preface (h2c), as `axum::serve` serves.
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => return log_end(r),
            _ = stop.wait_for(|s| *s) => {}
        }
        // A connection told to shut down before it has read its first request is dropped (the
        // protocol's detection is cancelled, and HTTP/1 closes a connection that has read
        // nothing): the first request is waited for before telling it, for a while.
        if first.waiting() {
            tokio::select! {
                r = conn.as_mut() => return log_end(r),
                () = first.came.notified() => {}
                () = tokio::time::sleep(FIRST_REQUEST_WAIT) => {}
            }
        }
        // Closed at once if it has still read nothing (closing a connection that carries no
        // request loses nothing); a request it is reading or answering is finished first.
        conn.as_mut().graceful_shutdown();
        log_end(conn.await)
    });
}

/// A connection's first request: the connection counts in flight from its acceptance until that
/// request's head has been read.
struct FirstRequest {
    in_flight: Mutex<Option<InFlight>>,
    /// Told when the first request has come.
    came: Notify,
}

impl FirstRequest {
    /// The first request's count, the first time (then `None`).
    fn take(&self) -> Option<InFlight> {
        let taken = self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).take();
        if taken.is_some() {
            self.came.notify_one();
        }
        taken
    }

    /// Whether the first request has yet to come.
    fn waiting(&self) -> bool {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

fn log_end(r: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Errors of one connection that `accept` reports, after which the listener is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}
