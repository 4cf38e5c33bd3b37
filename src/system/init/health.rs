//! keeppeek's health as init sees it: one `GET /healthz` that must answer 200, each step
//! (connect, send, read) given up on after [`INIT_HEALTH_STEP_TIMEOUT_S`] so that a hung
//! keeppeek cannot hold the loop that feeds the watchdog; and the address it goes to, read
//! from the config keeppeek runs with.
//!
//! What the result leads to (nothing, marking the firmware good, or a kill) is `policy.rs`'s.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::limits::INIT_HEALTH_STEP_TIMEOUT_S;

/// One `GET /healthz` on `addr`: true on a 200, each step within [`INIT_HEALTH_STEP_TIMEOUT_S`].
pub fn healthy(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(INIT_HEALTH_STEP_TIMEOUT_S)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(INIT_HEALTH_STEP_TIMEOUT_S)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(INIT_HEALTH_STEP_TIMEOUT_S)));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nhost: keeppeek\r\nconnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The address init checks: the config's listener, on loopback when it listens on all
/// addresses. None when there is no web face (health is then "still running").
pub fn health_addr(config: &Path) -> Option<SocketAddr> {
    let c = crate::config::Config::load(config).ok()?;
    let mut a = c.listen?;
    if a.ip().is_unspecified() {
        a.set_ip(if a.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
    }
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_a_200_from_healthz_and_nothing_else() {
        use std::net::TcpListener;
        let serve = |answer: &'static [u8]| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut req = [0u8; 256];
                let n = s.read(&mut req).unwrap();
                assert!(req[..n].starts_with(b"GET /healthz HTTP/1.1\r\n"));
                s.write_all(answer).unwrap();
            });
            addr
        };
        assert!(healthy(serve(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")));
        assert!(!healthy(serve(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")));
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert!(!healthy(closed));
    }
}
