//! The file systems init mounts and unmounts. At the start: the kernel's (`/proc`, `/sys`)
//! and two in RAM (`/run`, `/tmp`); the data partition, which the initramfs mounted on
//! `/data`, is checked, stood in for by RAM when it is missing, and grown to the disk's end
//! (`grow.rs`) in a thread of its own. At the end: the disks (`/data`, `/boot`) unmounted,
//! or remounted read-only when they are busy.
//!
//! A mount that fails is logged and never stops the boot.

use std::path::Path;
use std::time::Instant;

use tracing::{error, info, warn};

use super::sys;

fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<()> {
    let _ = std::fs::create_dir_all(target);
    sys::mount(src, target, fstype, flags, data)
}

/// Whether `path` is a mount point (its device differs from its parent's).
fn is_mount_point(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), std::fs::metadata(format!("{path}/.."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Mounts `/proc`, `/sys`, `/run` and `/tmp`.
pub(super) fn mount_system() {
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
}

/// Checks that the data partition is on `/data` (RAM stands in when it is not) and starts
/// growing it. Called with init's signals blocked, which the growing thread inherits.
pub(super) fn data_partition() {
    if !is_mount_point("/data") {
        error!("the data partition is not mounted: recordings and settings live in RAM until it is repaired");
        let _ = mount("data", "/data", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, "mode=0755,size=64m");
        return;
    }
    // The first boot on a disk larger than the image grows the partition and its file
    // system, once. Online, beside everything else (signals stay blocked in this thread
    // too): growing into a TiB adds 8192 block groups (8.4 s under QEMU's emulated CPU),
    // and the box answers, records and feeds its watchdog meanwhile.
    let spawned = std::thread::Builder::new().name("kp-grow-data".into()).spawn(|| {
        let t = Instant::now();
        match crate::system::grow::grow_data(Path::new("/")) {
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

/// Unmounts the disks, or remounts read-only one that is busy.
pub(super) fn unmount_disks() {
    for target in ["/data", "/boot"] {
        if sys::unmount(target).is_err() {
            let _ = mount("", target, "", libc::MS_REMOUNT | libc::MS_RDONLY, "");
        }
    }
}
