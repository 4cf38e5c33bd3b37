//! A network segment for the camera port's tests and benchmark: a namespace and a veth pair
//! into it, made with `ip` (iproute2, as root) and removed when dropped.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// A namespace and the veth pair into it: `box_side` here with `box_ip`/24, `camera_side`
/// there, up with nothing on it. Removed when dropped.
pub struct Segment {
    pub ns: String,
    pub box_side: String,
    pub camera_side: String,
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2), as root");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Segment {
    /// `tag` keeps names apart between tests (interface names are at most 15 bytes).
    pub fn new(tag: &str, box_ip: Ipv4Addr) -> Segment {
        let id = std::process::id() % 100_000;
        let s = Segment {
            ns: format!("kp-{tag}-{id}"),
            box_side: format!("kb{tag}{id}"),
            camera_side: format!("kc{tag}{id}"),
        };
        let _ = Command::new("ip").args(["netns", "del", &s.ns]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["link", "del", &s.box_side]).stderr(Stdio::null()).status();
        ip(&["netns", "add", &s.ns]);
        ip(&["link", "add", &s.box_side, "type", "veth", "peer", "name", &s.camera_side]);
        ip(&["link", "set", &s.camera_side, "netns", &s.ns]);
        ip(&["addr", "add", &format!("{box_ip}/24"), "dev", &s.box_side]);
        ip(&["link", "set", &s.box_side, "up"]);
        ip(&["-n", &s.ns, "link", "set", "lo", "up"]);
        ip(&["-n", &s.ns, "link", "set", &s.camera_side, "up"]);
        s
    }

    /// `program` run in the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        // Gone with the namespace, unless it was never moved there.
        let _ = Command::new("ip").args(["link", "del", &self.box_side]).stderr(Stdio::null()).status();
    }
}
