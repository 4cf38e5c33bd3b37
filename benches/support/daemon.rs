//! The keeppeek binary run by a benchmark on a config of its own, stopped (SIGTERM, then
//! waited for) when the handle goes.

use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct Daemon(pub Child);

impl Daemon {
    /// `keeppeek run` on `dir/keeppeek.toml`; its log to `dir/keeppeek.log` when `log`.
    pub fn start(dir: &Path, log: bool) -> Daemon {
        let stderr =
            if log { Stdio::from(std::fs::File::create(dir.join("keeppeek.log")).unwrap()) } else { Stdio::null() };
        let child = Command::new(env!("CARGO_BIN_EXE_keeppeek"))
            .args(["run", "--config"])
            .arg(dir.join("keeppeek.toml"))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("starting keeppeek");
        Daemon(child)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}
