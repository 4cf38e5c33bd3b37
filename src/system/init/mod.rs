//! `keeppeek init`: PID 1 on the box, started by the initramfs (`images/initramfs-init`)
//! with the data partition on `/data` and the EFI system partition on `/boot`.
//!
//! It mounts what the kernel does not, lays the data partition out on first boot (and
//! performs a factory reset asked for at the last boot), brings the network up (busybox
//! `udhcpc` on the LAN, the box's own address on the camera port, no forwarding), feeds the hardware watchdog, and runs `keeppeek run` under supervision:
//! restarted with growing pauses when it exits, killed and restarted when its `/healthz`
//! stops answering. A firmware on trial (just updated) is marked good once `/healthz`
//! answers; if it has not within [`INIT_TRIAL_DEADLINE_S`] or keeps crashing, the box
//! restarts and GRUB boots the previous slot. SIGTERM or SIGINT (Ctrl-Alt-Del) reboot,
//! SIGUSR1 or SIGUSR2 power off: keeppeek is stopped first (it flushes its recordings),
//! everything else is ended, the disks are synced and unmounted.
//!
//! Each concern has one file. This one holds [`main`], the boot's order, and the boot's A/B
//! bookkeeping (the firmware's description, and whether it is on trial); the others:
//! - `sys.rs`: every system call, each a small safe function (all of init's `unsafe`).
//! - `mounts.rs`: the file systems mounted at the start, the data partition checked and
//!   grown, the disks unmounted at the end.
//! - `config.rs`: the data partition laid out on first boot or after a factory reset, and
//!   which config keeppeek runs with (the user's or the board's preset).
//! - `watchdog.rs`: the hardware watchdog, armed, fed, disarmed.
//! - `policy.rs`: the decisions, pure functions of state and time tested without a process:
//!   when to start, check, kill or give up on keeppeek, and how long each wait lasts.
//! - `supervise.rs`: the loop that carries them out for keeppeek and `udhcpc`, and the
//!   signals that end it; `health.rs`: the `/healthz` probe; `log.rs`: keeppeek's output.
//! - `network.rs`: no forwarding between interfaces, and the camera port up.
//! - `shutdown.rs`: the way down, in its order.

mod config;
mod health;
mod log;
mod mounts;
mod network;
mod policy;
mod shutdown;
mod supervise;
mod sys;
mod watchdog;

use std::path::Path;

use tracing::{error, info};

pub use self::config::{CONFIG_PATH, CONFIG_PROBLEM_PATH, config_to_run, prepare_data};
pub use self::health::{health_addr, healthy};
pub use self::log::RotatingLog;
pub use self::policy::{AfterCheck, Next, Policy, backoff_s, network_wait_over, stop_wait_over};
use super::{Slot, System};
use crate::limits::INIT_TRIAL_DEADLINE_S;

/// What ends the main loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Halt {
    Reboot,
    PowerOff,
}

/// Runs as PID 1. Never returns: the box reboots or powers off.
pub fn main(slot: Slot) -> ! {
    sys::console();
    mounts::mount_system();
    sys::set_hostname("keeppeek");
    // Ctrl-Alt-Del then sends init SIGINT, a clean reboot, instead of resetting at once.
    sys::reboot(libc::RB_DISABLE_CAD);
    // Before any thread starts, so that every thread inherits the mask.
    sys::block_signals();
    info!(slot = slot.name(), "keeppeek init");
    mounts::data_partition();
    if let Err(e) = prepare_data(Path::new("/data"), Path::new(config::PRESET_PATH)) {
        error!(error = %e, "preparing the data partition");
    }
    let (system, on_trial) = firmware();
    network::prepare(Path::new(CONFIG_PATH));
    let net_if = system.as_ref().map(|s| s.firmware.net_if.clone()).filter(|n| !n.is_empty());
    let mut watchdog = watchdog::Watchdog::open();
    let halt = supervise::supervise(&mut watchdog, system.as_ref(), on_trial, net_if.as_deref());
    shutdown::shutdown(halt, &mut watchdog)
}

/// The running firmware's description (None outside an image), and whether it is on trial,
/// with this boot recorded.
fn firmware() -> (Option<System>, bool) {
    let system = match System::discover(Path::new("/")) {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            error!("no /etc/keeppeek/firmware.toml: A/B bookkeeping is off");
            None
        }
        Err(e) => {
            error!(error = %e, "reading the firmware's description");
            None
        }
    };
    let on_trial = match system.as_ref().map(|s| s.on_boot()) {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            error!(error = %e, "boot bookkeeping");
            false
        }
        None => false,
    };
    if on_trial {
        info!(deadline_s = INIT_TRIAL_DEADLINE_S, "this firmware is on trial: it must answer /healthz");
    }
    (system, on_trial)
}
