//! Whatever bytes a client sends on a connection — request heads, bodies, several pipelined
//! requests — go through the real connection code (hyper with KeepPeek's ceilings, the head
//! checks, admission, auth and the routes) on an in-memory pipe. The server must answer or
//! close, never panic or hang, answer in HTTP, and never fail with a 500.

#![no_main]

use std::sync::OnceLock;

use keeppeek::http::fuzzing::Server;
use libfuzzer_sys::fuzz_target;

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("keeppeek-fuzz-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Server::new(&dir)
    })
}

fuzz_target!(|data: &[u8]| {
    let out = server().exchange(data);
    if out.is_empty() {
        return;
    }
    // An HTTP/1.0 request is answered in HTTP/1.0.
    let version_ok = out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 ");
    assert!(version_ok, "{:?}", String::from_utf8_lossy(&out[..out.len().min(64)]));
    let status = &out[9..12.min(out.len())];
    assert_ne!(status, b"500", "{}", String::from_utf8_lossy(&out[..out.len().min(512)]));
});
