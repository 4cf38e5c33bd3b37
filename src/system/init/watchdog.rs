//! The hardware watchdog, if the board has one: armed with [`WATCHDOG_TIMEOUT_S`] when init
//! opens it, so that a hung init resets the box.
//!
//! Lifecycle: [`Watchdog::open`] arms it; every loop of init that can last feeds it (the wait
//! for a DHCP lease, the supervision loop, the wait for keeppeek to stop), each well inside the
//! timeout (`supervise.rs` tests the longest stretch); a power-off disarms it
//! ([`Watchdog::disarm`]), a reboot leaves it armed (the reset is the reboot's fallback).

use std::io::Write;

use tracing::info;

use super::sys;
use crate::limits::WATCHDOG_TIMEOUT_S;

/// The watchdog's device, None on a board without one.
pub(super) struct Watchdog(Option<std::fs::File>);

impl Watchdog {
    /// Opens and arms it; a board without one gets a watchdog that does nothing.
    pub(super) fn open() -> Watchdog {
        let Ok(f) = std::fs::OpenOptions::new().write(true).open("/dev/watchdog") else {
            info!("no hardware watchdog");
            return Watchdog(None);
        };
        let (timeout_s, set) = match sys::set_watchdog_timeout(&f, WATCHDOG_TIMEOUT_S as libc::c_int) {
            Ok(t) => (t, true),
            Err(_) => (WATCHDOG_TIMEOUT_S as libc::c_int, false),
        };
        info!(timeout_s, set, "hardware watchdog armed");
        Watchdog(Some(f))
    }

    /// Starts its countdown over.
    pub(super) fn feed(&mut self) {
        if let Some(f) = self.0.as_mut() {
            let _ = f.write_all(b"k");
        }
    }

    /// Disarms it (the magic close): for a power-off, which must not turn into a reset.
    pub(super) fn disarm(&mut self) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(b"V");
        }
    }
}
