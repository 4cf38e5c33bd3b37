//! The way down, in its order: keeppeek alone first, with up to [`INIT_STOP_GRACE_S`] to
//! flush its recordings and stop, the watchdog fed meanwhile; then every other process asked
//! to end and, a second later, killed; the disks synced, unmounted (or remounted read-only)
//! and synced again; last the reboot or power-off.
//!
//! It never returns: should reboot(2) fail, init waits for ever (on a reboot the watchdog,
//! left armed, then resets the box).
//!
//! [`INIT_STOP_GRACE_S`]: crate::limits::INIT_STOP_GRACE_S

use std::time::{Duration, Instant};

use tracing::info;

use super::policy::stop_wait_over;
use super::watchdog::Watchdog;
use super::{Halt, mounts, sys};

/// Stops everything in order and reboots or powers off.
pub(super) fn shutdown(halt: Halt, watchdog: &mut Watchdog) -> ! {
    info!(?halt, "stopping keeppeek (it flushes its recordings)");
    // keeppeek first, alone: it gets the whole grace period to flush.
    let pids = pids_named("keeppeek");
    for &p in &pids {
        sys::kill(p, libc::SIGTERM);
    }
    let stopping = Instant::now();
    while !stop_wait_over(stopping.elapsed(), pids.iter().any(|&p| sys::kill(p, 0))) {
        // Fed while keeppeek flushes: a reset now would be a power cut.
        watchdog.feed();
        while sys::reap().is_some() {}
        std::thread::sleep(Duration::from_millis(100));
    }
    sys::kill(-1, libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(1));
    sys::kill(-1, libc::SIGKILL);
    sys::sync();
    mounts::unmount_disks();
    sys::sync();
    info!(?halt, "halting");
    sys::reboot(if halt == Halt::Reboot { libc::RB_AUTOBOOT } else { libc::RB_POWER_OFF });
    // reboot(2) does not return when it works.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The processes whose command name is `name` (from /proc).
fn pids_named(name: &str) -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let me = std::process::id() as libc::pid_t;
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
        if pid == me {
            continue;
        }
        if let Ok(comm) = std::fs::read_to_string(e.path().join("comm"))
            && comm.trim_end() == name
        {
            out.push(pid);
        }
    }
    out
}
