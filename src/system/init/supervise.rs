//! Supervision: the children init keeps running and the loop that carries out `policy.rs`'s
//! decisions for them. `udhcpc` on the board's interface, started again whenever it ends,
//! with keeppeek's first start waiting for a lease (at most [`INIT_NETWORK_WAIT_S`]); and
//! `keeppeek run`, with the config `config.rs` picks at each start, its output to the log,
//! checked on `/healthz` (`health.rs`), killed when hung and started again after a pause.
//!
//! The loop wakes at least every [`INIT_LOOP_INTERVAL_S`], feeding the watchdog, and at every
//! signal. It reaps every child that ended (PID 1 inherits the orphans too) and forgets
//! keeppeek's pid only when it reaps it, so a kill never reaches a recycled pid. It returns
//! how the box halts: asked for by a signal, or a firmware on trial given up on.
//!
//! [`INIT_NETWORK_WAIT_S`]: crate::limits::INIT_NETWORK_WAIT_S

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::config::{CONFIG_PATH, CONFIG_PROBLEM_PATH, PRESET_PATH, config_to_run};
use super::health::{health_addr, healthy};
use super::log::{LOG_PATH, RotatingLog, pump_log};
use super::policy::{AfterCheck, Next, Policy, network_wait_over};
use super::watchdog::Watchdog;
use super::{Halt, sys};
use crate::limits::{INIT_HEALTH_FAILURES_MAX, INIT_HEALTH_INTERVAL_S, INIT_LOOP_INTERVAL_S, INIT_TRIAL_DEADLINE_S};
use crate::system::System;

/// Made by `images/udhcpc.script` when a lease is bound.
const NETWORK_UP_PATH: &str = "/run/network-up";

/// The running keeppeek.
struct Child {
    pid: libc::pid_t,
    started: Instant,
    /// Where its `/healthz` answers (from the config it runs with), if it has a web face.
    health: Option<SocketAddr>,
}

impl Child {
    /// Without a web face, running for an interval counts as healthy.
    fn healthy(&self) -> bool {
        match self.health {
            Some(addr) => healthy(addr),
            None => self.started.elapsed() > Duration::from_secs(INIT_HEALTH_INTERVAL_S),
        }
    }
}

fn start_keeppeek(log: &Arc<Mutex<RotatingLog>>, config: &Path) -> Option<Child> {
    let mut cmd = Command::new("/usr/bin/keeppeek");
    cmd.arg("run").arg("--config").arg(config).env("NO_COLOR", "1").stdin(Stdio::null());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    match sys::spawn(&mut cmd) {
        Ok(mut c) => {
            if let Some(o) = c.stdout.take() {
                pump_log(o, log.clone());
            }
            if let Some(e) = c.stderr.take() {
                pump_log(e, log.clone());
            }
            info!(pid = c.id(), "keeppeek started");
            // init reaps its children itself (waitpid(-1)): the handle is not waited on.
            Some(Child { pid: c.id() as libc::pid_t, started: Instant::now(), health: health_addr(config) })
        }
        Err(e) => {
            error!(error = %e, "starting keeppeek");
            None
        }
    }
}

fn start_dhcp(net_if: &str) -> Option<libc::pid_t> {
    let _ = Command::new("/bin/ip").args(["link", "set", "lo", "up"]).status();
    let mut cmd = Command::new("/bin/udhcpc");
    cmd.args(["-f", "-S", "-i", net_if, "-s", "/etc/udhcpc.script", "-t", "0", "-T", "3"]).stdin(Stdio::null());
    sys::spawn(&mut cmd).ok().map(|c| c.id() as libc::pid_t)
}

/// Gives DHCP a moment to hand out an address before keeppeek starts and dials its cameras;
/// live view binds a later lease's address itself.
fn wait_for_network(watchdog: &mut Watchdog, dhcp_running: bool) {
    let waited = Instant::now();
    while dhcp_running && !network_wait_over(waited.elapsed(), Path::new(NETWORK_UP_PATH).exists()) {
        watchdog.feed();
        std::thread::sleep(Duration::from_millis(50));
    }
    info!(waited_ms = waited.elapsed().as_millis() as u64, up = Path::new(NETWORK_UP_PATH).exists(), "network");
}

/// Runs the children until the box is to halt, and says how.
pub(super) fn supervise(
    watchdog: &mut Watchdog,
    system: Option<&System>,
    on_trial: bool,
    net_if: Option<&str>,
) -> Halt {
    let log = Arc::new(Mutex::new(RotatingLog::new(Path::new(LOG_PATH))));
    let mut dhcp = net_if.and_then(start_dhcp);
    wait_for_network(watchdog, dhcp.is_some());
    let mut child: Option<Child> = None;
    let mut policy = Policy::new(on_trial, Instant::now());
    let boot = Instant::now();
    loop {
        watchdog.feed();
        match sys::wait_signal(Duration::from_secs(INIT_LOOP_INTERVAL_S)) {
            Some(libc::SIGTERM | libc::SIGINT | libc::SIGHUP) => {
                info!("reboot asked for");
                return Halt::Reboot;
            }
            Some(libc::SIGUSR1 | libc::SIGUSR2) => {
                info!("power-off asked for");
                watchdog.disarm();
                return Halt::PowerOff;
            }
            _ => {}
        }
        while let Some((pid, status)) = sys::reap() {
            if child.as_ref().is_some_and(|c| c.pid == pid) {
                let ran = child.take().map(|c| c.started.elapsed()).unwrap_or_default();
                let pause = policy.exited(Instant::now(), ran);
                warn!(status, ran_s = ran.as_secs(), pause_s = pause.as_secs(), "keeppeek ended; restarting");
            } else if dhcp == Some(pid) {
                dhcp = net_if.and_then(start_dhcp);
            }
        }
        match policy.next(Instant::now(), child.is_some()) {
            Next::Wait => {}
            Next::Start => {
                let (user, preset) = (Path::new(CONFIG_PATH), Path::new(PRESET_PATH));
                let config = config_to_run(user, preset, policy.on_trial(), Path::new(CONFIG_PROBLEM_PATH));
                child = start_keeppeek(&log, &config);
                policy.started(Instant::now());
            }
            Next::GiveUp(why) => {
                error!(deadline_s = INIT_TRIAL_DEADLINE_S, "{why}: restarting into the previous firmware");
                return Halt::Reboot;
            }
            Next::CheckHealth => {
                let Some(c) = child.as_ref() else { continue };
                match policy.checked(c.healthy(), c.started.elapsed()) {
                    AfterCheck::Fine => {}
                    AfterCheck::MarkGood => match system.map(|s| s.mark_good()) {
                        Some(Err(e)) => error!(error = %e, "marking the firmware good"),
                        _ => info!(after_ms = boot.elapsed().as_millis() as u64, "healthy: this firmware is good"),
                    },
                    AfterCheck::Kill => {
                        error!(failures = INIT_HEALTH_FAILURES_MAX, "keeppeek stopped answering /healthz: killing it");
                        sys::kill(c.pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{INIT_HEALTH_STEP_TIMEOUT_S, WATCHDOG_TIMEOUT_S};

    #[test]
    fn the_watchdog_is_fed_well_inside_its_timeout() {
        // The longest stretch of the main loop without a feed: the wait for a signal, then a
        // health check whose three steps each give up (the rest is a few system calls).
        let stretch = INIT_LOOP_INTERVAL_S + 3 * INIT_HEALTH_STEP_TIMEOUT_S;
        assert!(
            stretch * 3 <= WATCHDOG_TIMEOUT_S,
            "{stretch} s between feeds against a {WATCHDOG_TIMEOUT_S} s watchdog"
        );
    }
}
