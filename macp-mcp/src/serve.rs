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
//! each connection that has not sent its first request [`FIRST_REQUEST_WAIT`] to send it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
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
/// 3. `closed` is called after step 1. From then on [`crate::http::requests_in_flight`] counts every
///    request this process will answer: each connection's first request from the moment it was
///    accepted, and every request from the moment its head is read. The caller can wait for it
///    to reach zero before ending long-lived streams (MCP sessions), which never end by themselves.
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
    closed();
    stopping.send_replace(true);
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
            // Every request counts from its head, so that reading its body is waited for too.
            let arrived = InFlight::enter();
            let first = first.take();
            let answer = app.clone().oneshot(req.map(axum::body::Body::new));
            async move {
                let answer = answer.await;
                drop((arrived, first));
                answer
            }
        })
    };
    tokio::spawn(async move {
        // HTTP/1 only, as axum is built (no `http2` feature).
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => return log_end(r),
            _ = stop.wait_for(|s| *s) => {}
        }
        // hyper closes a connection that has read nothing yet as soon as it is told to shut down
        // gracefully: the first request is waited for before telling it.
        if first.waiting() {
            tokio::select! {
                r = conn.as_mut() => return log_end(r),
                () = first.came.notified() => {}
                () = tokio::time::sleep(FIRST_REQUEST_WAIT) => {
                    if first.waiting() {
                        // Nothing came: closing a connection that carries no request loses nothing.
                        return;
                    }
                }
            }
        }
        conn.as_mut().graceful_shutdown();
        log_end(conn.await)
    });
}

/// A connection's first request: counted in flight from the connection's acceptance until the
/// request's answer has its head.
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

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Errors of one connection that `accept` reports, after which the listener is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}
