//! `keeppeek init`: PID 1 on the box, started by the initramfs (`images/initramfs-init`)
//! with the data partition on `/data` and the EFI system partition on `/boot`.
//!
//! It mounts what the kernel does not, lays the data partition out on first boot (and
//! performs a factory reset asked for at the last boot), brings the network up (busybox
//! `udhcpc`), feeds the hardware watchdog, and runs `keeppeek run` under supervision:
//! restarted with growing pauses when it exits, killed and restarted when its `/healthz`
//! stops answering. A firmware on trial (just updated) is marked good once `/healthz`
//! answers; if it has not within [`INIT_TRIAL_DEADLINE_S`] or keeps crashing, the box
//! restarts and GRUB boots the previous slot. SIGTERM or SIGINT (Ctrl-Alt-Del) reboot,
//! SIGUSR1 or SIGUSR2 power off: keeppeek is stopped first (it flushes its recordings),
//! everything else is ended, the disks are synced and unmounted.

use std::ffi::CString;
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::{Slot, System};
use crate::limits::{
    INIT_CRASHES_ON_TRIAL_MAX, INIT_HEALTH_FAILURES_MAX, INIT_HEALTH_INTERVAL_S, INIT_HEALTH_STEP_TIMEOUT_S,
    INIT_LOG_FILE_MAX_BYTES, INIT_LOG_LINE_MAX_BYTES, INIT_LOOP_INTERVAL_S, INIT_NETWORK_WAIT_S,
    INIT_RESTART_BACKOFF_MAX_S, INIT_STOP_GRACE_S, INIT_TRIAL_DEADLINE_S, WATCHDOG_TIMEOUT_S,
};

pub const CONFIG_PATH: &str = "/data/keeppeek.toml";
/// The board's config preset in the root slot (copied to [`CONFIG_PATH`] on first boot).
const PRESET_PATH: &str = "/etc/keeppeek/keeppeek.toml";
/// Where init says why the user's config is not the one running (shown by `GET /api/system`).
pub const CONFIG_PROBLEM_PATH: &str = "/run/config-problem";
const LOG_PATH: &str = "/run/log/keeppeek.log";
const NETWORK_UP_PATH: &str = "/run/network-up";

/// What ends the main loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Halt {
    Reboot,
    PowerOff,
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<()> {
    let _ = std::fs::create_dir_all(target);
    let (src, target, fstype, data) = (cstr(src), cstr(target), cstr(fstype), cstr(data));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Whether `path` is a mount point (its device differs from its parent's).
fn is_mount_point(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), std::fs::metadata(format!("{path}/.."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Restart pauses after a crash: 1 s, doubling, at most [`INIT_RESTART_BACKOFF_MAX_S`].
pub fn backoff_s(crashes_in_a_row: u32) -> u64 {
    1u64.checked_shl(crashes_in_a_row.saturating_sub(1).min(16)).unwrap_or(u64::MAX).min(INIT_RESTART_BACKOFF_MAX_S)
}

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

/// A log file that starts over (keeping one previous file) past its ceiling.
pub struct RotatingLog {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    written: u64,
}

impl RotatingLog {
    pub fn new(path: &Path) -> RotatingLog {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok();
        let written = file.as_ref().and_then(|f| f.metadata().ok()).map(|m| m.len()).unwrap_or(0);
        RotatingLog { path: path.to_owned(), file, written }
    }

    pub fn write_line(&mut self, line: &[u8]) {
        if self.written + line.len() as u64 > INIT_LOG_FILE_MAX_BYTES {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            let _ = std::fs::rename(&self.path, old);
            self.file = std::fs::File::create(&self.path).ok();
            self.written = 0;
        }
        if let Some(f) = self.file.as_mut()
            && f.write_all(line).is_ok()
        {
            self.written += line.len() as u64;
        }
    }
}

/// Copies a child's output, line by line (each cut at [`INIT_LOG_LINE_MAX_BYTES`]), to the
/// console and the log file.
fn pump_log(out: impl Read + Send + 'static, log: std::sync::Arc<std::sync::Mutex<RotatingLog>>) {
    std::thread::spawn(move || {
        for_each_line(out, |line| {
            let _ = std::io::stderr().write_all(line);
            if let Ok(mut l) = log.lock() {
                l.write_line(line);
            }
        })
    });
}

/// Calls `f` with each line of `out` (newline included), a line longer than
/// [`INIT_LOG_LINE_MAX_BYTES`] being cut into pieces of that size.
fn for_each_line(out: impl Read, mut f: impl FnMut(&[u8])) {
    let mut r = std::io::BufReader::new(out);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match r.by_ref().take(INIT_LOG_LINE_MAX_BYTES as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        f(&line);
    }
}

/// The hardware watchdog, if the board has one: armed with [`WATCHDOG_TIMEOUT_S`] and fed
/// by the main loop. Left armed through a reboot (the reset is the reboot's fallback).
struct Watchdog(Option<std::fs::File>);

impl Watchdog {
    fn open() -> Watchdog {
        let Ok(f) = std::fs::OpenOptions::new().write(true).open("/dev/watchdog") else {
            info!("no hardware watchdog");
            return Watchdog(None);
        };
        let mut timeout: libc::c_int = WATCHDOG_TIMEOUT_S as libc::c_int;
        // WDIOC_SETTIMEOUT = _IOWR('W', 6, int)
        const WDIOC_SETTIMEOUT: libc::c_ulong = 0xC004_5706;
        use std::os::fd::AsRawFd;
        // SAFETY: the ioctl reads and writes one int we own.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), WDIOC_SETTIMEOUT as _, &mut timeout) };
        info!(timeout_s = timeout, set = r == 0, "hardware watchdog armed");
        Watchdog(Some(f))
    }

    fn feed(&mut self) {
        if let Some(f) = self.0.as_mut() {
            let _ = f.write_all(b"k");
        }
    }

    /// Disarms it (the magic close): for a power-off, which must not turn into a reset.
    fn disarm(&mut self) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(b"V");
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Starts a program with the signals init blocks unblocked again.
fn spawn(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    // SAFETY: between fork and exec only async-signal-safe calls: sigprocmask.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
}

fn console() {
    if let Ok(c) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/console") {
        use std::os::fd::IntoRawFd;
        let fd = c.into_raw_fd();
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            for target in 0..3 {
                libc::dup2(fd, target);
            }
            if fd > 2 {
                libc::close(fd);
            }
        }
    }
}

/// First boot, and factory reset: what `/data` holds before keeppeek starts.
pub fn prepare_data(data: &Path, preset: &Path) -> std::io::Result<()> {
    super::support::apply_factory_reset(data)?;
    std::fs::create_dir_all(data.join("system"))?;
    let config = data.join("keeppeek.toml");
    if !config.exists() {
        let text = std::fs::read(preset)?;
        crate::base::fs::write_synced(&config, &text)?;
        info!("first boot: the board's config written to {}", config.display());
    }
    Ok(())
}

/// Runs as PID 1. Never returns: the box reboots or powers off.
pub fn main(slot: Slot) -> ! {
    console();
    for (src, target, fs, flags, data) in [
        ("proc", "/proc", "proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, ""),
        ("sysfs", "/sys", "sysfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, ""),
        ("run", "/run", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, "mode=0755,size=32m"),
        ("tmp", "/tmp", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, "mode=1777,size=64m"),
    ] {
        if let Err(e) = mount(src, target, fs, flags, data) {
            error!(target, error = %e, "mount failed");
        }
    }
    // SAFETY: plain system calls with constant arguments.
    unsafe {
        libc::sethostname(c"keeppeek".as_ptr(), 8);
        libc::reboot(libc::RB_DISABLE_CAD);
        let set = signal_set();
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    info!(slot = slot.name(), "keeppeek init");
    if !is_mount_point("/data") {
        error!("the data partition is not mounted: recordings and settings live in RAM until it is repaired");
        let _ = mount("data", "/data", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, "mode=0755,size=64m");
    } else {
        // The first boot on a disk larger than the image grows the partition and its file
        // system, once. Online, beside everything else (signals stay blocked in this thread
        // too): growing into a TiB adds 8192 block groups (8.4 s under QEMU's emulated CPU),
        // and the box answers, records and feeds its watchdog meanwhile.
        let spawned = std::thread::Builder::new().name("kp-grow-data".into()).spawn(|| {
            let t = Instant::now();
            match super::grow::grow_data(Path::new("/")) {
                Ok(g) if g.bytes > g.was_bytes => info!(
                    from_mib = g.was_bytes >> 20,
                    to_mib = g.bytes >> 20,
                    took_ms = t.elapsed().as_millis() as u64,
                    "the data partition grew to the disk's end"
                ),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "the data partition was not grown"),
            }
        });
        if let Err(e) = spawned {
            warn!(error = %e, "the data partition was not grown");
        }
    }
    if let Err(e) = prepare_data(Path::new("/data"), Path::new(PRESET_PATH)) {
        error!(error = %e, "preparing the data partition");
    }
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
    let net_if = system.as_ref().map(|s| s.firmware.net_if.clone()).filter(|n| !n.is_empty());
    let mut watchdog = Watchdog::open();
    let halt = supervise(&mut watchdog, system.as_ref(), on_trial, net_if.as_deref());
    shutdown(halt, &mut watchdog)
}

struct Child {
    pid: libc::pid_t,
    started: Instant,
    /// Where its `/healthz` answers (from the config it runs with), if it has a web face.
    health: Option<SocketAddr>,
}

/// The config keeppeek runs with: the user's, unless it does not load or its memory budget
/// does not fit, in which case (outside a trial) the board's preset, so that the web face
/// stays reachable and says what is wrong. A firmware on trial gets no such help: failing
/// with the user's config must roll it back, not mark it good.
/// Why the preset runs is written to `problem_file` (removed when the user's config runs).
pub fn config_to_run(user: &Path, preset: &Path, on_trial: bool, problem_file: &Path) -> std::path::PathBuf {
    let problem = match crate::config::Config::load(user) {
        Ok(c) => {
            let b = crate::budget::compute(&c);
            (!b.fits()).then(|| format!("its memory budget does not fit this board:\n{b}"))
        }
        Err(e) => Some(e.to_string()),
    };
    match problem {
        Some(why) if !on_trial && preset.exists() => {
            error!(config = %user.display(), "the config cannot run ({why}); running the board's preset instead until it is fixed");
            let note = format!("{} cannot run, so the board's preset runs instead: {why}\n", user.display());
            let _ = std::fs::write(problem_file, note);
            preset.to_owned()
        }
        _ => {
            let _ = std::fs::remove_file(problem_file);
            user.to_owned()
        }
    }
}

fn start_keeppeek(log: &std::sync::Arc<std::sync::Mutex<RotatingLog>>, config: &Path) -> Option<Child> {
    let mut cmd = Command::new("/usr/bin/keeppeek");
    cmd.arg("run").arg("--config").arg(config).env("NO_COLOR", "1").stdin(Stdio::null());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    match spawn(&mut cmd) {
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
    spawn(&mut cmd).ok().map(|c| c.id() as libc::pid_t)
}

/// Whether init has waited for DHCP long enough: a lease, or [`INIT_NETWORK_WAIT_S`].
pub fn network_wait_over(waited: Duration, up: bool) -> bool {
    up || waited >= Duration::from_secs(INIT_NETWORK_WAIT_S)
}

/// Whether init has waited for keeppeek to stop long enough: it stopped, or
/// [`INIT_STOP_GRACE_S`] passed (it is then killed).
pub fn stop_wait_over(waited: Duration, running: bool) -> bool {
    !running || waited >= Duration::from_secs(INIT_STOP_GRACE_S)
}

/// What the supervisor does next, given the time and its child.
#[derive(Debug, PartialEq)]
pub enum Next {
    Wait,
    Start,
    CheckHealth,
    /// A firmware on trial failed it: restart into the previous slot.
    GiveUp(&'static str),
}

/// What a health check's result asks for.
#[derive(Debug, PartialEq)]
pub enum AfterCheck {
    Fine,
    /// The firmware on trial is healthy: mark it good.
    MarkGood,
    /// keeppeek stopped answering: kill it (it is started again).
    Kill,
}

/// The supervisor's decisions, apart from the system calls that carry them out.
pub struct Policy {
    on_trial: bool,
    boot: Instant,
    crashes: u32,
    restart_at: Option<Instant>,
    health_failures: u32,
    next_health: Instant,
}

impl Policy {
    pub fn new(on_trial: bool, now: Instant) -> Policy {
        Policy { on_trial, boot: now, crashes: 0, restart_at: Some(now), health_failures: 0, next_health: now }
    }

    pub fn on_trial(&self) -> bool {
        self.on_trial
    }

    /// keeppeek ended after running for `ran`: when to start it again.
    pub fn exited(&mut self, now: Instant, ran: Duration) -> Duration {
        if ran > Duration::from_secs(60) {
            self.crashes = 0;
        }
        self.crashes += 1;
        let pause = Duration::from_secs(backoff_s(self.crashes));
        self.restart_at = Some(now + pause);
        pause
    }

    pub fn started(&mut self, now: Instant) {
        self.restart_at = None;
        self.health_failures = 0;
        self.next_health = now + Duration::from_secs(1);
    }

    pub fn next(&mut self, now: Instant, running: bool) -> Next {
        if self.on_trial && self.crashes >= INIT_CRASHES_ON_TRIAL_MAX {
            return Next::GiveUp("the new firmware keeps crashing");
        }
        if self.on_trial && now.duration_since(self.boot) > Duration::from_secs(INIT_TRIAL_DEADLINE_S) {
            return Next::GiveUp("the new firmware did not pass its health check in time");
        }
        if !running {
            return if self.restart_at.is_some_and(|t| now >= t) { Next::Start } else { Next::Wait };
        }
        if now < self.next_health {
            return Next::Wait;
        }
        // Every second while on trial (to be marked good soon), then every interval.
        let every = if self.on_trial { 1 } else { INIT_HEALTH_INTERVAL_S };
        self.next_health = now + Duration::from_secs(every);
        Next::CheckHealth
    }

    pub fn checked(&mut self, ok: bool, running_for: Duration) -> AfterCheck {
        if ok {
            self.health_failures = 0;
            if self.on_trial {
                self.on_trial = false;
                return AfterCheck::MarkGood;
            }
            return AfterCheck::Fine;
        }
        // A start takes a moment; a firmware on trial has its deadline instead.
        if self.on_trial || running_for < Duration::from_secs(INIT_HEALTH_INTERVAL_S) {
            return AfterCheck::Fine;
        }
        self.health_failures += 1;
        if self.health_failures >= INIT_HEALTH_FAILURES_MAX {
            self.health_failures = 0;
            return AfterCheck::Kill;
        }
        AfterCheck::Fine
    }
}

fn supervise(watchdog: &mut Watchdog, system: Option<&System>, on_trial: bool, net_if: Option<&str>) -> Halt {
    let log = std::sync::Arc::new(std::sync::Mutex::new(RotatingLog::new(Path::new(LOG_PATH))));
    let set = signal_set();
    let mut dhcp = net_if.and_then(start_dhcp);
    // Give DHCP a moment to hand out an address (`images/udhcpc.script` marks it) before
    // keeppeek starts and dials its cameras; live view binds a later lease's address itself.
    let waited = Instant::now();
    while dhcp.is_some() && !network_wait_over(waited.elapsed(), Path::new(NETWORK_UP_PATH).exists()) {
        watchdog.feed();
        std::thread::sleep(Duration::from_millis(50));
    }
    info!(waited_ms = waited.elapsed().as_millis() as u64, up = Path::new(NETWORK_UP_PATH).exists(), "network");
    let mut child: Option<Child> = None;
    let mut policy = Policy::new(on_trial, Instant::now());
    let boot = Instant::now();
    loop {
        watchdog.feed();
        let timeout = libc::timespec { tv_sec: INIT_LOOP_INTERVAL_S as libc::time_t, tv_nsec: 0 };
        // SAFETY: waits for one of the blocked signals; `set` and `timeout` are ours.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        match sig {
            libc::SIGTERM | libc::SIGINT | libc::SIGHUP => {
                info!("reboot asked for");
                return Halt::Reboot;
            }
            libc::SIGUSR1 | libc::SIGUSR2 => {
                info!("power-off asked for");
                watchdog.disarm();
                return Halt::PowerOff;
            }
            _ => {}
        }
        // Reap every child that ended (PID 1 inherits the orphans too).
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status we own.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
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
                // Without a web face, running for an interval counts as healthy.
                let ok = match c.health {
                    Some(addr) => healthy(addr),
                    None => c.started.elapsed() > Duration::from_secs(INIT_HEALTH_INTERVAL_S),
                };
                match policy.checked(ok, c.started.elapsed()) {
                    AfterCheck::Fine => {}
                    AfterCheck::MarkGood => match system.map(|s| s.mark_good()) {
                        Some(Err(e)) => error!(error = %e, "marking the firmware good"),
                        _ => info!(after_ms = boot.elapsed().as_millis() as u64, "healthy: this firmware is good"),
                    },
                    AfterCheck::Kill => {
                        error!(failures = INIT_HEALTH_FAILURES_MAX, "keeppeek stopped answering /healthz: killing it");
                        // SAFETY: a signal to our own child.
                        unsafe { libc::kill(c.pid, libc::SIGKILL) };
                    }
                }
            }
        }
    }
}

/// Stops everything in order and reboots or powers off.
fn shutdown(halt: Halt, watchdog: &mut Watchdog) -> ! {
    info!(?halt, "stopping keeppeek (it flushes its recordings)");
    // SAFETY: signals to processes and a wait, with arguments we own.
    unsafe {
        // keeppeek first, alone: it gets the whole grace period to flush.
        let pids = pids_named("keeppeek");
        for &p in &pids {
            libc::kill(p, libc::SIGTERM);
        }
        let stopping = Instant::now();
        while !stop_wait_over(stopping.elapsed(), pids.iter().any(|&p| libc::kill(p, 0) == 0)) {
            // Fed while keeppeek flushes: a reset now would be a power cut.
            watchdog.feed();
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
            std::thread::sleep(Duration::from_millis(100));
        }
        libc::kill(-1, libc::SIGTERM);
        std::thread::sleep(Duration::from_secs(1));
        libc::kill(-1, libc::SIGKILL);
        libc::sync();
        for target in ["/data", "/boot"] {
            let t = cstr(target);
            if libc::umount2(t.as_ptr(), 0) != 0 {
                let _ = mount("", target, "", libc::MS_REMOUNT | libc::MS_RDONLY, "");
            }
        }
        libc::sync();
        info!(?halt, "halting");
        libc::reboot(if halt == Halt::Reboot { libc::RB_AUTOBOOT } else { libc::RB_POWER_OFF });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_that_cannot_run_falls_back_to_the_preset_except_on_trial() {
        let dir = tempfile::tempdir().unwrap();
        let (user, preset) = (dir.path().join("user.toml"), dir.path().join("preset.toml"));
        let problem = dir.path().join("config-problem");
        let good = "data_dir = \"k\"\nlisten = \"127.0.0.1:9\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n";
        std::fs::write(&preset, good).unwrap();
        std::fs::write(&user, good).unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), user);
        std::fs::write(&user, "data_dir = \"k\"\nbogus = 1\n").unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), preset, "a mistake: the preset runs");
        assert!(std::fs::read_to_string(&problem).unwrap().contains("bogus"), "and says why");
        assert_eq!(config_to_run(&user, &preset, true, &problem), user, "on trial: fail and roll back");
        // It loads, but needs more memory than a 64 MiB board has.
        std::fs::write(&user, format!("ram_class = \"64 MiB\"\n{good}")).unwrap();
        assert!(!crate::budget::compute(&crate::config::Config::load(&user).unwrap()).fits());
        assert_eq!(config_to_run(&user, &preset, false, &problem), preset, "over budget: the preset runs");
        std::fs::write(&user, good).unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), user);
        assert!(!problem.exists(), "fixed: the note goes");
    }

    #[test]
    fn waits_for_dhcp_and_for_keeppeek_to_stop_end_at_their_ceilings() {
        let s = Duration::from_secs;
        assert!(!network_wait_over(s(INIT_NETWORK_WAIT_S) - Duration::from_millis(1), false));
        assert!(network_wait_over(s(INIT_NETWORK_WAIT_S), false), "no lease: keeppeek starts anyway");
        assert!(network_wait_over(s(0), true));
        assert!(!stop_wait_over(s(INIT_STOP_GRACE_S) - Duration::from_millis(1), true));
        assert!(stop_wait_over(s(INIT_STOP_GRACE_S), true), "past its grace keeppeek is killed");
        assert!(stop_wait_over(s(0), false));
    }

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

    #[test]
    fn restart_pauses_grow_to_their_ceiling() {
        let pauses: Vec<u64> = (1..=8).map(backoff_s).collect();
        assert_eq!(&pauses[..5], &[1, 2, 4, 8, 16]);
        assert!(pauses.iter().all(|&p| p <= INIT_RESTART_BACKOFF_MAX_S));
        assert_eq!(backoff_s(1000), INIT_RESTART_BACKOFF_MAX_S);
    }

    #[test]
    fn a_firmware_on_trial_is_marked_good_once_healthy_and_given_up_on_crashes_or_the_deadline() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut p = Policy::new(true, t0);
        assert_eq!(p.next(t0, false), Next::Start);
        p.started(t0);
        assert_eq!(p.next(s(1), true), Next::CheckHealth);
        assert_eq!(p.checked(false, Duration::from_secs(1)), AfterCheck::Fine, "on trial a failure only waits");
        assert_eq!(p.next(s(2), true), Next::CheckHealth, "checked every second on trial");
        assert_eq!(p.checked(true, Duration::from_secs(2)), AfterCheck::MarkGood);
        assert!(!p.on_trial());
        assert_eq!(p.next(s(3), true), Next::CheckHealth, "the check booked while on trial");
        assert_eq!(p.checked(true, Duration::from_secs(3)), AfterCheck::Fine);
        assert_eq!(p.next(s(4), true), Next::Wait, "then every interval");
        assert_eq!(p.next(s(3 + INIT_HEALTH_INTERVAL_S), true), Next::CheckHealth);
        assert_eq!(p.checked(true, Duration::from_secs(20)), AfterCheck::Fine);
        assert_eq!(p.next(s(INIT_TRIAL_DEADLINE_S + 5), true), Next::CheckHealth, "a good firmware has no deadline");

        let mut p = Policy::new(true, t0);
        for n in 0..INIT_CRASHES_ON_TRIAL_MAX as u64 {
            assert_ne!(p.next(s(n * 40), false), Next::GiveUp(""), "crash {n}");
            p.started(s(n * 40));
            p.exited(s(n * 40 + 1), Duration::from_secs(1));
        }
        assert!(matches!(p.next(s(200), false), Next::GiveUp(w) if w.contains("crashing")));

        let mut p = Policy::new(true, t0);
        p.started(t0);
        assert_eq!(p.next(s(INIT_TRIAL_DEADLINE_S), true), Next::CheckHealth);
        assert!(matches!(p.next(s(INIT_TRIAL_DEADLINE_S + 1), true), Next::GiveUp(w) if w.contains("in time")));
    }

    #[test]
    fn a_hung_keeppeek_is_killed_after_its_failures_in_a_row_and_crashes_back_off() {
        let t0 = Instant::now();
        let mut p = Policy::new(false, t0);
        p.started(t0);
        let up = Duration::from_secs(INIT_HEALTH_INTERVAL_S);
        for _ in 1..INIT_HEALTH_FAILURES_MAX {
            assert_eq!(p.checked(false, up), AfterCheck::Fine);
        }
        assert_eq!(p.checked(true, up), AfterCheck::Fine, "one answer starts the count over");
        for _ in 1..INIT_HEALTH_FAILURES_MAX {
            assert_eq!(p.checked(false, up), AfterCheck::Fine);
        }
        assert_eq!(p.checked(false, up), AfterCheck::Kill);
        assert_eq!(p.checked(false, Duration::from_secs(1)), AfterCheck::Fine, "just started: not counted");
        // Crashes in a row back off; a long run starts the count over.
        let pauses: Vec<u64> = (0..3).map(|_| p.exited(t0, Duration::from_secs(1)).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4]);
        assert_eq!(p.exited(t0, Duration::from_secs(600)).as_secs(), 1);
        assert_eq!(p.next(t0, false), Next::Wait);
        assert_eq!(p.next(t0 + Duration::from_secs(1), false), Next::Start);
    }

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

    #[test]
    fn a_log_line_past_its_ceiling_is_cut() {
        let text = format!("short\n{}\nend", "x".repeat(INIT_LOG_LINE_MAX_BYTES + 10));
        let mut lines = Vec::new();
        for_each_line(text.as_bytes(), |l| lines.push(l.len()));
        assert_eq!(lines, [6, INIT_LOG_LINE_MAX_BYTES + 1, 11, 4]);
    }

    #[test]
    fn the_log_starts_over_past_its_ceiling_keeping_one_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log/keeppeek.log");
        let mut log = RotatingLog::new(&path);
        let line = vec![b'x'; 1000];
        let lines = INIT_LOG_FILE_MAX_BYTES as usize / 1000 + 5;
        for _ in 0..lines {
            log.write_line(&line);
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("log/keeppeek.log.1")).unwrap().len();
        assert!(old <= INIT_LOG_FILE_MAX_BYTES && now <= INIT_LOG_FILE_MAX_BYTES);
        assert_eq!(now + old, lines as u64 * 1000);
    }

    #[test]
    fn first_boot_writes_the_preset_and_leaves_a_users_config_alone() {
        let dir = tempfile::tempdir().unwrap();
        let preset = dir.path().join("preset.toml");
        std::fs::write(&preset, "listen = \"0.0.0.0:8080\"\n").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        prepare_data(&data, &preset).unwrap();
        assert_eq!(std::fs::read_to_string(data.join("keeppeek.toml")).unwrap(), "listen = \"0.0.0.0:8080\"\n");
        assert!(data.join("system").is_dir());
        let mine = "data_dir = \"keeppeek\"\nlisten = \"0.0.0.0:9000\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"2 GiB\"\n";
        std::fs::write(data.join("keeppeek.toml"), mine).unwrap();
        prepare_data(&data, &preset).unwrap();
        assert_eq!(std::fs::read_to_string(data.join("keeppeek.toml")).unwrap(), mine);
        assert_eq!(health_addr(&data.join("keeppeek.toml")), Some("127.0.0.1:9000".parse().unwrap()));
    }
}
