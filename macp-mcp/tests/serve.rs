//! Stopping the HTTP server: a request that reached the process before the stop is answered,
//! whether its connection was still in the kernel's queue or accepted and not yet read.
//! These are what a load balancer reports as 502s during a rolling replacement.
//!
//! The count of requests in flight is one for the process: each test holds [`ONE_AT_A_TIME`].

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use macp_mcp::serve::{FIRST_REQUEST_WAIT, serve};

/// The tests of this file one at a time, so that each sees only its own requests in flight.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A router that answers `GET /` with `ok`, `GET /mcp` with `mcp` after 300 ms, and `GET /slow`
/// (a long poll) with `slow` after 1.5 s.
fn app() -> axum::Router {
    use axum::routing::get;
    let after = |ms, body| {
        move || async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            body
        }
    };
    axum::Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/mcp", get(after(300, "mcp")))
        .route("/slow", get(after(1500, "slow")))
}

/// Sends `GET /` on `stream` and reads the whole answer (the server closes after it).
fn get(stream: std::net::TcpStream) -> std::io::Result<String> {
    get_path(stream, "/")
}

/// Sends `GET path` on `stream` and reads the whole answer.
fn get_path(mut stream: std::net::TcpStream, path: &str) -> std::io::Result<String> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes())?;
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
    let _one = ONE_AT_A_TIME.lock().await;
    let (addr, stop, task, closed) = start().await;
    // The kernel completes the connection; the server's task does not run until this one
    // awaits, so the connection is still in the listener's queue when the stop comes.
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stop.send(()).unwrap();
    tokio::task::yield_now().await;
    let in_flight = closed.await.unwrap();
    assert_eq!(in_flight, 1, "the queued connection is counted in flight at the close");
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
    let _one = ONE_AT_A_TIME.lock().await;
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
    let _one = ONE_AT_A_TIME.lock().await;
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
    let _one = ONE_AT_A_TIME.lock().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_half_read_when_the_wait_ends_is_answered() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (addr, stop, task, closed) = start().await;
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    closed.await.unwrap();
    // The rest of its head comes after the first request's wait: it is answered, not dropped.
    tokio::time::sleep(FIRST_REQUEST_WAIT + Duration::from_millis(300)).await;
    let answer = tokio::task::spawn_blocking(move || {
        slow.write_all(b"host: localhost\r\n\r\n")?;
        slow.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut answer = String::new();
        slow.read_to_string(&mut answer)?;
        Ok::<_, std::io::Error>(answer)
    })
    .await
    .unwrap()
    .expect("the half-read request is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_requests_to_the_mcp_endpoint_are_waited_for() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (addr, stop, task, closed) = start().await;
    let (mcp, slow) =
        (std::net::TcpStream::connect(addr).unwrap(), std::net::TcpStream::connect(addr).unwrap());
    let mcp = tokio::task::spawn_blocking(move || get_path(mcp, "/mcp"));
    let slow = tokio::task::spawn_blocking(move || get_path(slow, "/slow"));
    // Both heads read and being answered when the stop comes.
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.send(()).unwrap();
    // A long poll of the web view would hold the stop for its whole wait; cancelling MCP
    // sessions does not touch it.
    assert_eq!(closed.await.unwrap(), 1, "the /mcp request is in flight, the long poll is not counted");
    let mcp = mcp.await.unwrap().expect("the /mcp request is answered");
    assert!(mcp.starts_with("HTTP/1.1 200") && mcp.ends_with("mcp"), "{mcp}");
    assert_eq!(macp_mcp::http::requests_in_flight(), 0, "nothing in flight once it is answered");
    // And the long poll is still answered: the stop waits for every answer under way.
    let slow = slow.await.unwrap().expect("the long poll is answered");
    assert!(slow.starts_with("HTTP/1.1 200") && slow.ends_with("slow"), "{slow}");
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge_is_served() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (addr, stop, task, _closed) = start().await;
    let answer = tokio::task::spawn_blocking(move || {
        let mut h2 = std::net::TcpStream::connect(addr)?;
        h2.set_read_timeout(Some(Duration::from_secs(5)))?;
        // The client preface and an empty SETTINGS frame.
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")?;
        let mut head = [0u8; 9];
        h2.read_exact(&mut head)?;
        Ok::<_, std::io::Error>(head)
    })
    .await
    .unwrap()
    .expect("the server answers the HTTP/2 preface");
    assert_eq!(head_type(&answer), 4, "the server's first frame is its SETTINGS: {answer:?}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the server stops").unwrap();
}

/// The type of an HTTP/2 frame, from its nine-byte header.
fn head_type(head: &[u8; 9]) -> u8 {
    head[3]
}
