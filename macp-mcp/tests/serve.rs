//! Stopping the HTTP server: a request that reached the process before the stop is answered,
//! whether its connection was still in the kernel's queue or accepted and not yet read.
//! These are what a load balancer reports as 502s during a rolling replacement.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use macp_mcp::serve::{FIRST_REQUEST_WAIT, serve};

/// A router that answers `GET /` with `ok`.
fn app() -> axum::Router {
    axum::Router::new().route("/", axum::routing::get(|| async { "ok" }))
}

/// Sends `GET /` on `stream` and reads the whole answer (the server closes after it).
fn get(mut stream: std::net::TcpStream) -> std::io::Result<String> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Serves `app()` on a free loopback port until the returned sender fires; the address, the
/// server's task, and a receiver told when the listener is closed (with the requests in flight
/// then).
async fn start() -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<usize>,
) {
    let listener = macp_mcp::http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(serve(
        listener,
        app(),
        async move {
            let _ = stop_rx.await;
        },
        move || {
            let _ = closed_tx.send(macp_mcp::http::requests_in_flight());
        },
    ));
    // Let the server reach its accept loop.
    tokio::time::sleep(Duration::from_millis(50)).await;
    (addr, stop_tx, task, closed_rx)
}

#[tokio::test(flavor = "current_thread")]
async fn a_connection_queued_when_the_stop_comes_is_answered() {
    let (addr, stop, task, closed) = start().await;
    // The kernel completes the connection; the server's task does not run until this one
    // awaits, so the connection is still in the listener's queue when the stop comes.
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stop.send(()).unwrap();
    tokio::task::yield_now().await;
    let in_flight = closed.await.unwrap();
    assert!(in_flight >= 1, "the queued connection's request is counted in flight at the close: {in_flight}");
    let answer = tokio::task::spawn_blocking(move || get(stream)).await.unwrap();
    let answer = answer.expect("the queued connection is answered, not reset");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
    // The listener is closed: a new connection is refused.
    assert!(std::net::TcpStream::connect(addr).is_err(), "the listener is closed after the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_connection_whose_request_comes_after_the_stop_is_answered() {
    let (addr, stop, task, closed) = start().await;
    let stream = std::net::TcpStream::connect(addr).unwrap();
    // The server accepts it (it runs on other threads), and has read nothing when the stop comes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    closed.await.unwrap();
    tokio::time::sleep(FIRST_REQUEST_WAIT / 4).await;
    let answer = tokio::task::spawn_blocking(move || get(stream)).await.unwrap();
    let answer = answer.expect("the accepted connection is answered, not dropped");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_does_not_hold_the_stop() {
    let (addr, stop, task, closed) = start().await;
    let mut silent = std::net::TcpStream::connect(addr).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = Instant::now();
    stop.send(()).unwrap();
    closed.await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
    let took = stopped.elapsed();
    assert!(took >= FIRST_REQUEST_WAIT, "the silent connection was given its wait: {took:?}");
    assert!(took < FIRST_REQUEST_WAIT + Duration::from_secs(2), "and no more: {took:?}");
    silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(silent.read_to_end(&mut rest).unwrap(), 0, "closed without an answer: nothing was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_between_requests_at_the_stop() {
    let (addr, stop, task, closed) = start().await;
    let mut kept = std::net::TcpStream::connect(addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    kept.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n").unwrap();
    let mut head = [0u8; 512];
    let n = kept.read(&mut head).unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head[..n]));
    let stopped = Instant::now();
    stop.send(()).unwrap();
    closed.await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
    assert!(
        stopped.elapsed() < FIRST_REQUEST_WAIT,
        "an idle connection is not waited for: {:?}",
        stopped.elapsed()
    );
}
