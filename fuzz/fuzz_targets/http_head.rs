//! Whatever bytes a client sends on a connection — request heads, bodies, several pipelined
//! requests — go through the real connection code (the socket guard's deadlines, hyper with
//! KeepPeek's ceilings, the head checks, admission, auth and the routes) on an in-memory pipe.
//! An input that starts with `~P` and a pace byte is sent in pieces with pauses on a
//! simulated clock, maybe never closing, so slow heads, slow bodies and `Expect:
//! 100-continue` without a body reach their deadlines. The server must answer or close,
//! never panic or hang, answer in HTTP, never fail with a 500, and send nothing after a 408.

#![no_main]

use std::sync::OnceLock;

use keeppeek::http::fuzzing::{Server, check};
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
    let out = server().run(data);
    if let Err(e) = check(&out) {
        panic!("{e}");
    }
});
