//! Peers the unit tests share.

use std::time::Duration;

/// A peer on a loopback port that takes one connection and never answers (a camera, a
/// broker or a provider gone silent): its port. It holds the connection for an hour of
/// tokio's clock, which the tests that use it pause.
pub async fn silent_peer() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.expect("the connection");
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(s);
    });
    port
}
