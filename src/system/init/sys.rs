//! The system calls init makes, each a small safe function. All of init's `unsafe` lives here,
//! one call to a block with the reason it is sound beside it. No decisions: the callers say
//! what to call and when.
//!
//! The signals init handles itself ([`HANDLED_SIGNALS`]) are blocked in every thread
//! ([`block_signals`], before the first thread starts, so that each inherits the mask) and
//! taken only by the main loop's wait ([`wait_signal`]); the programs init starts get them
//! unblocked again ([`spawn`]).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

/// SIGCHLD wakes the loop to reap; SIGTERM, SIGINT (Ctrl-Alt-Del) and SIGHUP reboot; SIGUSR1
/// and SIGUSR2 power off.
const HANDLED_SIGNALS: [libc::c_int; 6] =
    [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGHUP];

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

fn result(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// mount(2), with the strings `mount -t fstype -o data src target` takes.
pub(super) fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<()> {
    let (src, target, fstype, data) = (cstr(src), cstr(target), cstr(fstype), cstr(data));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    result(unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) })
}

/// umount2(2) without flags.
pub(super) fn unmount(target: &str) -> std::io::Result<()> {
    let target = cstr(target);
    // SAFETY: the pointer is a NUL-terminated string that outlives the call.
    result(unsafe { libc::umount2(target.as_ptr(), 0) })
}

/// sethostname(2).
pub(super) fn set_hostname(name: &str) {
    // SAFETY: the pointer and length describe `name`, which outlives the call.
    unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
}

/// reboot(2) with one of its commands (`RB_AUTOBOOT`, `RB_POWER_OFF`, `RB_DISABLE_CAD`).
pub(super) fn reboot(cmd: libc::c_int) {
    // SAFETY: takes a plain integer; no memory is involved.
    unsafe { libc::reboot(cmd) };
}

/// sync(2): every file system's writes to its disk.
pub(super) fn sync() {
    // SAFETY: takes no arguments.
    unsafe { libc::sync() };
}

/// kill(2): whether the signal could be sent (with signal 0, whether `pid` is alive).
pub(super) fn kill(pid: libc::pid_t, signal: libc::c_int) -> bool {
    // SAFETY: takes plain integers; no memory is involved.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Reaps one child that ended, without waiting: its pid and wait status.
pub(super) fn reap() -> Option<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    // SAFETY: waitpid writes the status we own.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid, status))
}

fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: a sigset_t is plain integers, for which all zeroes is a value.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: initialises the set we own.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: adds a valid signal number to the set we own.
        unsafe { libc::sigaddset(&mut set, s) };
    }
    set
}

/// Blocks [`HANDLED_SIGNALS`] in this thread and every thread it starts after.
pub(super) fn block_signals() {
    let set = signal_set(&HANDLED_SIGNALS);
    // SAFETY: reads the set we own; the old mask is not asked for.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits at most `timeout` for one of [`HANDLED_SIGNALS`]: the signal, or None when none came.
pub(super) fn wait_signal(timeout: Duration) -> Option<libc::c_int> {
    let set = signal_set(&HANDLED_SIGNALS);
    let timeout = libc::timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: reads the set and the timeout we own; the signal's details are not asked for.
    let signal = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
    (signal > 0).then_some(signal)
}

/// Starts a program in a session of its own, with the signals init blocks unblocked again.
pub(super) fn spawn(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    // SAFETY: the hook runs between fork and exec and makes only async-signal-safe calls.
    unsafe { cmd.pre_exec(unblock_in_own_session) };
    cmd.spawn()
}

/// [`spawn`]'s hook, in the child between fork and exec: sigemptyset, sigprocmask and setsid
/// only, all async-signal-safe.
fn unblock_in_own_session() -> std::io::Result<()> {
    let empty = signal_set(&[]);
    // SAFETY: reads the set we own; the old mask is not asked for.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) };
    // SAFETY: takes no arguments.
    unsafe { libc::setsid() };
    Ok(())
}

/// Makes `/dev/console` this process's standard input, output and error.
pub(super) fn console() {
    let Ok(c) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/console") else { return };
    let fd = c.as_raw_fd();
    for target in 0..3 {
        // SAFETY: takes plain integers; `fd` is open, held by `c`.
        unsafe { libc::dup2(fd, target) };
    }
    if fd <= 2 {
        // It was opened onto a standard descriptor that was closed: that one stays open.
        let _ = c.into_raw_fd();
    }
}

/// Sets the hardware watchdog's timeout (WDIOC_SETTIMEOUT): the timeout the driver took,
/// which may differ from the one asked for.
pub(super) fn set_watchdog_timeout(dev: &File, timeout_s: libc::c_int) -> std::io::Result<libc::c_int> {
    // WDIOC_SETTIMEOUT = _IOWR('W', 6, int)
    const WDIOC_SETTIMEOUT: libc::c_ulong = 0xC004_5706;
    let mut timeout = timeout_s;
    // SAFETY: the ioctl reads and writes one int we own, on a descriptor `dev` holds open.
    result(unsafe { libc::ioctl(dev.as_raw_fd(), WDIOC_SETTIMEOUT as _, &mut timeout) })?;
    Ok(timeout)
}
