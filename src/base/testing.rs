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

/// Runs every input of fuzz target `target`'s committed corpus (`fuzz/corpus/<target>`)
/// through `run`; returns how many there were.
pub fn replay_corpus(target: &str, run: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("the corpus under fuzz/") {
        // A file a running fuzzer removed as it minimizes is not an input.
        let Ok(input) = std::fs::read(e.expect("a corpus entry").path()) else { continue };
        run(&input);
        n += 1;
    }
    n
}
