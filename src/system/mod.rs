//! The box as firmware: which root slot is running, the A/B boot state, updates, factory
//! reset, the support bundle, and the init that runs as PID 1 (`images/` builds the image).
//!
//! Everything here takes a root folder: `/` on the box, a scratch folder in tests, which
//! hold the same files (`etc/keeppeek/firmware.toml`, `proc/cmdline`, `sys/class/block`,
//! `dev/`, `boot/EFI/keeppeek/grubenv`, `data/`). Not running from an image (no firmware
//! file) is a state of its own: the API says updates are for images.

pub mod bundle;
pub mod grow;
pub mod grubenv;
pub mod init;
pub mod support;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

pub use grubenv::{BootEnv, Slot};

use crate::base::fs::write_synced;
use crate::limits::{FIRMWARE_FILE_MAX_BYTES, SYSTEM_STATE_MAX_BYTES};

/// What a root slot is: written by `images/build.sh` into `etc/keeppeek/firmware.toml`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Firmware {
    pub version: String,
    pub board: String,
    #[serde(default)]
    pub kernel: String,
    pub slot_bytes: u64,
    #[serde(default)]
    pub net_if: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: {1}")]
    Bad(String, String),
    #[error(transparent)]
    Env(#[from] grubenv::GrubEnvError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SystemError + '_ {
    move |e| SystemError::Io(path.display().to_string(), e)
}

/// At most `max + 1` bytes of a file: one more than `max` says it is too large.
pub(crate) fn read_capped(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a small file whole, refusing one past `max` bytes.
pub(crate) fn read_small(path: &Path, max: usize) -> Result<Vec<u8>, SystemError> {
    let bytes = read_capped(path, max).map_err(io(path))?;
    if bytes.len() > max {
        return Err(SystemError::Bad(path.display().to_string(), format!("more than {max} bytes")));
    }
    Ok(bytes)
}

/// The last update's outcome, kept on the data partition (`data/system/update.json`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct UpdateRecord {
    /// `installed` (written, waiting for its one try), `good` (it booted and passed its
    /// health check), `rolled_back` (it did not: the previous slot booted again), `failed`
    /// (the install itself failed; nothing changed).
    pub result: String,
    pub slot: String,
    pub version: String,
    pub from_version: String,
    pub at_unix_s: u64,
    pub detail: String,
}

/// The versions each slot was last known to hold (`data/system/slots.json`): a slot's own
/// files say its version only while it is mounted, and only the running one is.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SlotVersions {
    pub a: Option<String>,
    pub b: Option<String>,
}

impl SlotVersions {
    pub fn get(&self, slot: Slot) -> Option<&String> {
        match slot {
            Slot::A => self.a.as_ref(),
            Slot::B => self.b.as_ref(),
        }
    }

    pub fn set(&mut self, slot: Slot, v: Option<String>) {
        match slot {
            Slot::A => self.a = v,
            Slot::B => self.b = v,
        }
    }
}

/// The running firmware: its root, what it is, which slot it booted from.
#[derive(Clone, Debug)]
pub struct System {
    root: PathBuf,
    pub firmware: Firmware,
    pub booted: Slot,
}

pub fn now_unix_s() -> u64 {
    (crate::clock::Clocks::wall_us(&crate::clock::RealClocks) / 1_000_000).max(0) as u64
}

impl System {
    /// The firmware under `root`, or `None` when this is not a KeepPeek image (no
    /// `etc/keeppeek/firmware.toml`).
    pub fn discover(root: &Path) -> Result<Option<System>, SystemError> {
        let file = root.join("etc/keeppeek/firmware.toml");
        if !file.exists() {
            return Ok(None);
        }
        let text = read_small(&file, FIRMWARE_FILE_MAX_BYTES)?;
        let text =
            String::from_utf8(text).map_err(|_| SystemError::Bad(file.display().to_string(), "not UTF-8".into()))?;
        let firmware: Firmware =
            toml::from_str(&text).map_err(|e| SystemError::Bad(file.display().to_string(), e.to_string()))?;
        let cmdline_path = root.join("proc/cmdline");
        let cmdline = read_small(&cmdline_path, 4096)?;
        let booted = String::from_utf8_lossy(&cmdline)
            .split_whitespace()
            .find_map(|a| a.strip_prefix("kp.slot=").and_then(Slot::parse))
            .ok_or_else(|| SystemError::Bad(cmdline_path.display().to_string(), "no kp.slot=a|b".into()))?;
        Ok(Some(System { root: root.to_owned(), firmware, booted }))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn grubenv_path(&self) -> PathBuf {
        self.root.join("boot/EFI/keeppeek/grubenv")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    fn state_dir(&self) -> PathBuf {
        self.root.join("data/system")
    }

    pub fn boot_env(&self) -> Result<BootEnv, SystemError> {
        Ok(grubenv::read(&self.grubenv_path())?.0)
    }

    pub fn write_boot_env(&self, env: &BootEnv) -> Result<(), SystemError> {
        Ok(grubenv::write(&self.grubenv_path(), env)?)
    }

    /// The block device of a slot, found by its GPT partition name (`kp-slot-a`): the
    /// kernel names it in `sys/class/block/*/uevent`.
    pub fn slot_device(&self, slot: Slot) -> Result<PathBuf, SystemError> {
        let want = format!("PARTNAME=kp-slot-{}", slot.name());
        let dir = self.root.join("sys/class/block");
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let uevent = entry.map_err(io(&dir))?.path().join("uevent");
            let Ok(text) = read_small(&uevent, 4096) else { continue };
            let text = String::from_utf8_lossy(&text);
            if text.lines().any(|l| l == want)
                && let Some(name) = text.lines().find_map(|l| l.strip_prefix("DEVNAME="))
            {
                return Ok(self.root.join("dev").join(name));
            }
        }
        Err(SystemError::Bad(dir.display().to_string(), format!("no partition named kp-slot-{}", slot.name())))
    }

    pub fn update_record(&self) -> Option<UpdateRecord> {
        let bytes = read_small(&self.state_dir().join("update.json"), SYSTEM_STATE_MAX_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn write_update_record(&self, r: &UpdateRecord) -> Result<(), SystemError> {
        let path = self.state_dir().join("update.json");
        let bytes = serde_json::to_vec_pretty(r).map_err(|e| SystemError::Bad("update.json".into(), e.to_string()))?;
        write_synced(&path, &bytes).map_err(io(&path))
    }

    pub fn slot_versions(&self) -> SlotVersions {
        read_small(&self.state_dir().join("slots.json"), SYSTEM_STATE_MAX_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn write_slot_versions(&self, v: &SlotVersions) -> Result<(), SystemError> {
        let path = self.state_dir().join("slots.json");
        let bytes = serde_json::to_vec_pretty(v).map_err(|e| SystemError::Bad("slots.json".into(), e.to_string()))?;
        write_synced(&path, &bytes).map_err(io(&path))
    }

    /// Bookkeeping at boot: notes the running slot's version, and when the slot GRUB was
    /// told to try first is not the one running, records the rollback and puts the
    /// running slot first again. Returns whether the running slot is on trial (it has not
    /// passed its health check yet).
    pub fn on_boot(&self) -> Result<bool, SystemError> {
        let mut versions = self.slot_versions();
        if versions.get(self.booted) != Some(&self.firmware.version) {
            versions.set(self.booted, Some(self.firmware.version.clone()));
            self.write_slot_versions(&versions)?;
        }
        let other = self.booted.other();
        let mut env = match self.boot_env() {
            Ok(env) => env,
            // Damaged (GRUB booted its factory state): mend it around the slot that runs.
            Err(SystemError::Env(e)) if !matches!(e, grubenv::GrubEnvError::Io(..)) => {
                warn!(error = %e, "the boot environment is damaged: writing it anew");
                let mut env = BootEnv { order: [self.booted, other], ..BootEnv::default() };
                env.set_ok(self.booted, true);
                env.set_ok(other, false);
                env.set_try_once(other, false);
                self.write_boot_env(&env)?;
                env
            }
            Err(e) => return Err(e),
        };
        if env.order[0] == other && !env.ok(other) {
            warn!(
                slot = other.name(),
                "the updated slot did not pass its health check: the previous firmware runs again"
            );
            if let Some(mut r) = self.update_record().filter(|r| r.result == "installed" && r.slot == other.name()) {
                r.result = "rolled_back".into();
                r.detail = format!(
                    "slot {} did not pass its health check; slot {} ({}) booted again",
                    other.name(),
                    self.booted.name(),
                    self.firmware.version
                );
                r.at_unix_s = now_unix_s();
                self.write_update_record(&r)?;
            }
            env.order = [self.booted, other];
            env.set_try_once(other, false);
            self.write_boot_env(&env)?;
        }
        Ok(!env.ok(self.booted))
    }

    /// The running slot passed its health check: GRUB boots it from now on.
    pub fn mark_good(&self) -> Result<(), SystemError> {
        let mut env = self.boot_env()?;
        if env.ok(self.booted) && env.order[0] == self.booted {
            return Ok(());
        }
        env.set_ok(self.booted, true);
        env.set_try_once(self.booted, false);
        env.order = [self.booted, self.booted.other()];
        self.write_boot_env(&env)?;
        if let Some(mut r) = self.update_record().filter(|r| r.result == "installed" && r.slot == self.booted.name()) {
            r.result = "good".into();
            r.detail = format!("slot {} ({}) passed its health check", self.booted.name(), self.firmware.version);
            r.at_unix_s = now_unix_s();
            self.write_update_record(&r)?;
        }
        info!(slot = self.booted.name(), version = %self.firmware.version, "firmware marked good");
        Ok(())
    }

    /// What the API shows: the running slot, both slots' versions and states, the next
    /// boot, the last update.
    pub fn status(&self) -> serde_json::Value {
        let env = self.boot_env();
        let versions = self.slot_versions();
        let slot = |s: Slot| {
            serde_json::json!({
                "version": versions.get(s),
                "good": env.as_ref().ok().map(|e| e.ok(s)),
                "on_trial": env.as_ref().ok().map(|e| e.try_once(s)),
            })
        };
        serde_json::json!({
            "firmware": true,
            "board": self.firmware.board,
            "version": self.firmware.version,
            "binary_version": env!("CARGO_PKG_VERSION"),
            "running_slot": self.booted.name(),
            "slots": { "a": slot(Slot::A), "b": slot(Slot::B) },
            "next_boot": env.as_ref().ok().map(|e| e.next_boot().name()),
            "boot_env_error": env.as_ref().err().map(|e| e.to_string()),
            "last_update": self.update_record(),
            "config_problem": read_small(&self.root.join("run/config-problem"), 64 << 10)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            "update_key": bundle::update_key_kind(),
            "data": crate::base::fs::disk_space(&self.data_dir())
                .map(|d| serde_json::json!({ "bytes": d.total_bytes, "free_bytes": d.free_bytes })),
        })
    }
}

/// What the daemon's API uses: the firmware (when running from an image), the root it was
/// found under, the config file (for the support bundle), and the flags that let one
/// update install and one support bundle be built at a time (the memory budget counts one
/// of each).
pub struct SystemApi {
    pub root: PathBuf,
    pub system: Option<System>,
    pub config_path: Option<PathBuf>,
    installing: std::sync::atomic::AtomicBool,
    bundling: std::sync::atomic::AtomicBool,
}

/// Held while an update installs or a support bundle is built; the next is refused.
pub struct Turn<'a>(&'a std::sync::atomic::AtomicBool);

fn take_turn(flag: &std::sync::atomic::AtomicBool) -> Option<Turn<'_>> {
    use std::sync::atomic::Ordering;
    flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok().then_some(Turn(flag))
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

impl SystemApi {
    pub fn new(root: PathBuf, config_path: Option<PathBuf>) -> SystemApi {
        let system = match System::discover(&root) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "this image's firmware description is unreadable: updates are off");
                None
            }
        };
        SystemApi { root, system, config_path, installing: Default::default(), bundling: Default::default() }
    }

    pub fn begin_install(&self) -> Option<Turn<'_>> {
        take_turn(&self.installing)
    }

    pub fn begin_support_bundle(&self) -> Option<Turn<'_>> {
        take_turn(&self.bundling)
    }

    pub fn status(&self) -> serde_json::Value {
        match &self.system {
            Some(s) => s.status(),
            None => serde_json::json!({
                "firmware": false,
                "binary_version": env!("CARGO_PKG_VERSION"),
                "update_key": bundle::update_key_kind(),
            }),
        }
    }

    /// Asks init (PID 1 on the box) to reboot: it stops keeppeek cleanly first.
    pub fn reboot(&self) -> Result<(), String> {
        self.can_reboot()?;
        // SAFETY: a signal to init; on the box init is keeppeek's own (`keeppeek init`).
        let r = unsafe { libc::kill(1, libc::SIGTERM) };
        if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error().to_string()) }
    }

    fn can_reboot(&self) -> Result<(), String> {
        if self.system.is_none() || self.root != Path::new("/") {
            return Err("not running from a KeepPeek image: nothing to reboot".into());
        }
        Ok(())
    }

    /// [`SystemApi::reboot`] half a second from now, so that the answer saying so is sent.
    pub fn reboot_soon(self: &std::sync::Arc<Self>) -> Result<(), String> {
        self.can_reboot()?;
        let me = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            if let Err(e) = me.reboot() {
                warn!(error = %e, "asking init to reboot");
            }
        });
        Ok(())
    }
}

/// Shapes a scratch root like a box's, for tests: firmware file, command line, boot
/// environment, two slot "devices" (files) named in a fake `sys/class/block`.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn fake_root(dir: &Path, version: &str, booted: Slot, slot_bytes: u64) {
        std::fs::create_dir_all(dir.join("etc/keeppeek")).unwrap();
        std::fs::write(
            dir.join("etc/keeppeek/firmware.toml"),
            format!("version = \"{version}\"\nboard = \"qemu-virt\"\nslot_bytes = {slot_bytes}\n"),
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::write(dir.join("proc/cmdline"), format!("console=ttyAMA0 kp.slot={}\n", booted.name())).unwrap();
        std::fs::create_dir_all(dir.join("boot/EFI/keeppeek")).unwrap();
        let mut env = format!("# GRUB Environment Block\nORDER=a b\nA_OK=1\nB_OK=0\nA_TRY=0\nB_TRY=0\n").into_bytes();
        env.resize(1024, b'#');
        std::fs::write(dir.join("boot/EFI/keeppeek/grubenv"), env).unwrap();
        std::fs::create_dir_all(dir.join("dev")).unwrap();
        for (n, s) in [(2, "a"), (3, "b")] {
            let sys = dir.join(format!("sys/class/block/vda{n}"));
            std::fs::create_dir_all(&sys).unwrap();
            std::fs::write(sys.join("uevent"), format!("MAJOR=254\nDEVNAME=vda{n}\nPARTN={n}\nPARTNAME=kp-slot-{s}\n"))
                .unwrap();
            let dev = std::fs::File::create(dir.join(format!("dev/vda{n}"))).unwrap();
            dev.set_len(slot_bytes).unwrap();
        }
        std::fs::create_dir_all(dir.join("data")).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::testing::fake_root;
    use super::*;

    #[test]
    fn a_trial_that_never_passes_is_recorded_as_rolled_back_and_a_good_one_as_good() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.1.0", Slot::A, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        assert_eq!(sys.slot_device(Slot::B).unwrap(), dir.path().join("dev/vda3"));
        assert!(!sys.on_boot().unwrap(), "the factory slot is not on trial");
        assert_eq!(sys.slot_versions().a.as_deref(), Some("0.1.0"));
        // An update to B was installed and its one try spent without passing: A boots.
        let mut env = sys.boot_env().unwrap();
        env.order = [Slot::B, Slot::A];
        sys.write_boot_env(&env).unwrap();
        let installed = UpdateRecord {
            result: "installed".into(),
            slot: "b".into(),
            version: "0.2.0".into(),
            from_version: "0.1.0".into(),
            ..Default::default()
        };
        sys.write_update_record(&installed).unwrap();
        assert!(!sys.on_boot().unwrap());
        assert_eq!(sys.update_record().unwrap().result, "rolled_back");
        assert_eq!(sys.boot_env().unwrap().order, [Slot::A, Slot::B]);
        // The same update tried again, and this time B boots and passes.
        let mut env = sys.boot_env().unwrap();
        env.order = [Slot::B, Slot::A];
        env.set_try_once(Slot::B, true);
        sys.write_boot_env(&env).unwrap();
        sys.write_update_record(&installed).unwrap();
        std::fs::write(dir.path().join("proc/cmdline"), "kp.slot=b").unwrap();
        std::fs::write(
            dir.path().join("etc/keeppeek/firmware.toml"),
            "version = \"0.2.0\"\nboard = \"qemu-virt\"\nslot_bytes = 1048576\n",
        )
        .unwrap();
        let sys = System::discover(dir.path()).unwrap().unwrap();
        assert!(sys.on_boot().unwrap(), "B is on trial");
        sys.mark_good().unwrap();
        let env = sys.boot_env().unwrap();
        assert!(env.ok(Slot::B) && env.ok(Slot::A));
        assert_eq!(env.next_boot(), Slot::B);
        assert_eq!(sys.update_record().unwrap().result, "good");
        assert_eq!(sys.slot_versions(), SlotVersions { a: Some("0.1.0".into()), b: Some("0.2.0".into()) });
    }

    #[test]
    fn a_damaged_boot_environment_is_mended_around_the_running_slot() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.2.0", Slot::B, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        std::fs::write(sys.grubenv_path(), vec![0u8; 1024]).unwrap();
        assert!(sys.boot_env().is_err());
        assert!(!sys.on_boot().unwrap(), "the slot that runs is the good one");
        let env = sys.boot_env().unwrap();
        assert_eq!((env.order, env.next_boot()), ([Slot::B, Slot::A], Slot::B));
        assert!(env.ok(Slot::B) && !env.ok(Slot::A));
    }

    #[test]
    fn not_an_image_and_a_bad_firmware_file_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        assert!(System::discover(dir.path()).unwrap().is_none());
        fake_root(dir.path(), "0.1.0", Slot::A, 1 << 20);
        std::fs::write(dir.path().join("proc/cmdline"), "console=ttyAMA0").unwrap();
        assert!(matches!(System::discover(dir.path()), Err(SystemError::Bad(_, m)) if m.contains("kp.slot")));
        std::fs::write(dir.path().join("etc/keeppeek/firmware.toml"), vec![b'#'; FIRMWARE_FILE_MAX_BYTES + 1]).unwrap();
        assert!(matches!(System::discover(dir.path()), Err(SystemError::Bad(_, m)) if m.contains("more than")));
    }

    #[test]
    fn a_state_file_past_its_ceiling_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.1.0", Slot::A, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        let mut r = UpdateRecord { result: "good".into(), ..Default::default() };
        sys.write_update_record(&r).unwrap();
        assert_eq!(sys.update_record().unwrap().result, "good");
        r.detail = "x".repeat(SYSTEM_STATE_MAX_BYTES);
        sys.write_update_record(&r).unwrap();
        assert!(sys.update_record().is_none());
    }
}
