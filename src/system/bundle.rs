//! Update bundles: read as a stream, checked, written to the inactive slot in constant
//! memory, verified on the device, and only then made bootable for one try.
//!
//! A bundle (`tools/make-bundle.sh`) is a ustar archive of exactly three members, in order:
//! `manifest.json`, `manifest.json.minisig` (a minisign Ed25519 signature of the manifest)
//! and `rootfs.squashfs` (the slot). The manifest names the format, firmware version,
//! board, slot size, payload size and the payload's SHA-256, so the signature covers the
//! slot too. Nothing is written until the signature, board, version and sizes pass; the
//! inactive slot is marked unbootable before its first byte is written, so a cut or a
//! corrupt payload leaves the running slot, and what boots next, as they were.
//!
//! The archive reader is written here: three fixed members of a strict ustar subset are a
//! few header fields, and a general tar reader (long names, pax records, sparse files)
//! would have to be fenced in to the same subset.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::{Slot, System, SystemError, UpdateRecord, now_unix_s};
use crate::limits::{BUNDLE_MANIFEST_MAX_BYTES, BUNDLE_SIGNATURE_MAX_BYTES, BUNDLE_WRITE_CHUNK_BYTES};

/// The development key (`images/keys/development.pub`): public in the repository. A release
/// build names its own with `KEEPPEEK_UPDATE_PUBKEY` (the key's base64 line).
const DEVELOPMENT_KEY: &str = "RWQ0mJQlqbsOoVapVF5n2JUQOcAD/orEMsVR9Zzb6jr9MSLzWnQ2OrLH";

fn update_key() -> &'static str {
    option_env!("KEEPPEEK_UPDATE_PUBKEY").unwrap_or(DEVELOPMENT_KEY)
}

/// `development` when bundles signed with the repository's key are trusted, else `release`.
pub fn update_key_kind() -> &'static str {
    if update_key() == DEVELOPMENT_KEY { "development" } else { "release" }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub version: String,
    pub board: String,
    pub slot_bytes: u64,
    pub payload_bytes: u64,
    pub payload_sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("this is not a KeepPeek image: updates are installed on a box")]
    NotFirmware,
    #[error("an update is being installed already")]
    Busy,
    #[error(
        "the running firmware has not passed its health check yet: installing now would overwrite the only firmware known to work"
    )]
    OnTrial,
    #[error("not a KeepPeek bundle: {0}")]
    Malformed(String),
    #[error("the bundle ends early ({0})")]
    Truncated(String),
    #[error("the bundle's signature does not verify against this firmware's update key: {0}")]
    Signature(String),
    #[error("the bundle is for board {bundle}, this box is {running}")]
    WrongBoard { bundle: String, running: String },
    #[error("the bundle holds version {bundle}, not newer than the running {running} (force to install it anyway)")]
    Downgrade { bundle: String, running: String },
    #[error("the bundle's slot is {0} bytes, the slot holds {1}")]
    TooLarge(u64, u64),
    #[error("the slot's SHA-256 is {got}, the manifest says {want}")]
    Corrupt { got: String, want: String },
    #[error("reading the upload: {0}")]
    Read(std::io::Error),
    #[error(transparent)]
    System(#[from] SystemError),
}

const BLOCK: usize = 512;

/// One member's header: its name and size, after the strict checks.
fn member_header(r: &mut impl Read, want: &str) -> Result<u64, UpdateError> {
    let mut h = [0u8; BLOCK];
    read_exact(r, &mut h, want)?;
    if h.iter().all(|&b| b == 0) {
        return Err(UpdateError::Truncated(format!("no {want}")));
    }
    let field = |range: std::ops::Range<usize>| {
        let f = &h[range];
        let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        &f[..end]
    };
    if &h[257..263] != b"ustar\0" {
        return Err(UpdateError::Malformed("not a ustar archive".into()));
    }
    let stored: u32 =
        octal(field(148..156)).ok_or_else(|| UpdateError::Malformed("bad header checksum field".into()))? as u32;
    let sum: u32 =
        h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { b' ' as u32 } else { b as u32 }).sum();
    if stored != sum {
        return Err(UpdateError::Malformed(format!("header checksum mismatch at {want}")));
    }
    if !field(345..500).is_empty() || field(0..100) != want.as_bytes() {
        let name = String::from_utf8_lossy(field(0..100)).chars().take(100).collect::<String>();
        return Err(UpdateError::Malformed(format!("expected member {want}, found `{name}`")));
    }
    if !matches!(h[156], b'0' | 0) {
        return Err(UpdateError::Malformed(format!("{want} is not a regular file")));
    }
    octal(field(124..136)).ok_or_else(|| UpdateError::Malformed(format!("bad size of {want}")))
}

/// The header of one regular file in a ustar archive (the support bundle writes these; the
/// reader above takes them). The name is cut at 99 bytes.
pub(crate) fn ustar_header(name: &str, size: u64, mtime_s: u64) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    let n = name.len().min(99);
    h[..n].copy_from_slice(&name.as_bytes()[..n]);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{:011o}\0", size.min(0o77777777777)).as_bytes());
    h[136..148].copy_from_slice(format!("{:011o}\0", mtime_s.min(0o77777777777)).as_bytes());
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn octal(f: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(f).ok()?.trim_matches(|c| c == ' ' || c == '\0');
    if s.is_empty() || s.len() > 11 {
        return None;
    }
    u64::from_str_radix(s, 8).ok()
}

fn read_exact(r: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), UpdateError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => UpdateError::Truncated(format!("in {what}")),
        _ => UpdateError::Read(e),
    })
}

/// A small member, whole, and the padding after it.
fn small_member(r: &mut impl Read, name: &str, max: usize) -> Result<Vec<u8>, UpdateError> {
    let size = member_header(r, name)?;
    if size > max as u64 {
        return Err(UpdateError::Malformed(format!("{name} is {size} bytes, more than {max}")));
    }
    let mut body = vec![0u8; size as usize];
    read_exact(r, &mut body, name)?;
    skip_padding(r, size, name)?;
    Ok(body)
}

fn skip_padding(r: &mut impl Read, size: u64, what: &str) -> Result<(), UpdateError> {
    let pad = (BLOCK - (size % BLOCK as u64) as usize) % BLOCK;
    let mut p = [0u8; BLOCK];
    read_exact(r, &mut p[..pad], what)
}

/// A bundle up to its payload: the manifest and signature read whole, the payload's size
/// from its header (the reader is left at the payload's first byte).
#[derive(Debug)]
pub struct Head {
    pub manifest: Vec<u8>,
    pub signature: Vec<u8>,
    pub payload_bytes: u64,
}

pub fn read_head(r: &mut impl Read) -> Result<Head, UpdateError> {
    let manifest = small_member(r, "manifest.json", BUNDLE_MANIFEST_MAX_BYTES)?;
    let signature = small_member(r, "manifest.json.minisig", BUNDLE_SIGNATURE_MAX_BYTES)?;
    let payload_bytes = member_header(r, "rootfs.squashfs")?;
    Ok(Head { manifest, signature, payload_bytes })
}

/// Checks the signature and the manifest against the running firmware.
pub fn check_manifest(
    system: &System,
    manifest: &[u8],
    signature: &[u8],
    force: bool,
    slot_capacity: u64,
) -> Result<Manifest, UpdateError> {
    let key = minisign_verify::PublicKey::from_base64(update_key())
        .map_err(|e| UpdateError::Signature(format!("the built-in key does not decode: {e}")))?;
    let sig = std::str::from_utf8(signature)
        .ok()
        .and_then(|s| minisign_verify::Signature::decode(s).ok())
        .ok_or_else(|| UpdateError::Signature("the signature does not decode".into()))?;
    key.verify(manifest, &sig, false).map_err(|e| UpdateError::Signature(e.to_string()))?;
    let m: Manifest =
        serde_json::from_slice(manifest).map_err(|e| UpdateError::Malformed(format!("manifest.json: {e}")))?;
    if m.format != 1 {
        return Err(UpdateError::Malformed(format!("bundle format {} (this firmware reads format 1)", m.format)));
    }
    if m.board != system.firmware.board {
        return Err(UpdateError::WrongBoard { bundle: m.board, running: system.firmware.board.clone() });
    }
    let newer = match (semver::Version::parse(&m.version), semver::Version::parse(&system.firmware.version)) {
        (Ok(new), Ok(old)) => new > old,
        (Err(e), _) => return Err(UpdateError::Malformed(format!("version `{}`: {e}", m.version))),
        // A running version that is not semver (a development build): anything goes.
        (Ok(_), Err(_)) => true,
    };
    if !newer && !force {
        return Err(UpdateError::Downgrade { bundle: m.version, running: system.firmware.version.clone() });
    }
    if m.payload_bytes > slot_capacity || m.payload_bytes > m.slot_bytes {
        return Err(UpdateError::TooLarge(m.payload_bytes, slot_capacity.min(m.slot_bytes)));
    }
    if m.payload_sha256.len() != 64 || !m.payload_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UpdateError::Malformed("payload_sha256 is not 64 hex digits".into()));
    }
    Ok(m)
}

/// What an install did.
#[derive(Debug)]
pub struct Installed {
    pub slot: Slot,
    pub version: String,
    pub bytes: u64,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Installs a bundle read from `r` into the inactive slot and makes it boot once next.
/// The running slot and, until the last step, the boot order are never touched.
pub fn install(system: &System, r: &mut impl Read, force: bool) -> Result<Installed, UpdateError> {
    let result = install_inner(system, r, force);
    if let Err(e) = &result {
        warn!(error = %e, "update refused");
        let failed = UpdateRecord {
            result: "failed".into(),
            slot: system.booted.other().name().into(),
            version: String::new(),
            from_version: system.firmware.version.clone(),
            at_unix_s: now_unix_s(),
            detail: e.to_string(),
        };
        if let Err(e) = system.write_update_record(&failed) {
            warn!(error = %e, "recording the failed update");
        }
    }
    result
}

fn install_inner(system: &System, r: &mut impl Read, force: bool) -> Result<Installed, UpdateError> {
    let env = system.boot_env()?;
    if !env.ok(system.booted) {
        return Err(UpdateError::OnTrial);
    }
    let target = system.booted.other();
    let device = system.slot_device(target)?;
    let io = |e: std::io::Error| SystemError::Io(device.display().to_string(), e);
    let mut dev = std::fs::OpenOptions::new().read(true).write(true).open(&device).map_err(io)?;
    let capacity = dev.seek(SeekFrom::End(0)).map_err(io)?;

    let head = read_head(r)?;
    let m = check_manifest(system, &head.manifest, &head.signature, force, capacity)?;
    if head.payload_bytes != m.payload_bytes {
        let (size, said) = (head.payload_bytes, m.payload_bytes);
        return Err(UpdateError::Malformed(format!("rootfs.squashfs is {size} bytes, the manifest says {said}")));
    }

    // From here the inactive slot is written: first make sure nothing boots it.
    let mut env = env;
    env.set_ok(target, false);
    env.set_try_once(target, false);
    env.order = [system.booted, target];
    system.write_boot_env(&env)?;
    let mut versions = system.slot_versions();
    versions.set(target, None);
    system.write_slot_versions(&versions)?;
    info!(slot = target.name(), version = %m.version, bytes = m.payload_bytes, "writing the update");

    dev.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut buf = vec![0u8; BUNDLE_WRITE_CHUNK_BYTES];
    let mut hash = Sha256::new();
    let mut left = m.payload_bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        read_exact(r, &mut buf[..n], "rootfs.squashfs")?;
        hash.update(&buf[..n]);
        dev.write_all(&buf[..n]).map_err(io)?;
        left -= n as u64;
    }
    let got = hex(&hash.finalize());
    if !got.eq_ignore_ascii_case(&m.payload_sha256) {
        return Err(UpdateError::Corrupt { got, want: m.payload_sha256 });
    }
    dev.sync_all().map_err(io)?;
    // Read it back from the device, not the page cache: what boots is what is on flash.
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open.
    unsafe { libc::posix_fadvise(dev.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    dev.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut hash = Sha256::new();
    let mut left = m.payload_bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        dev.read_exact(&mut buf[..n]).map_err(io)?;
        hash.update(&buf[..n]);
        left -= n as u64;
    }
    let back = hex(&hash.finalize());
    if back != got {
        return Err(UpdateError::Corrupt { got: back, want: m.payload_sha256 });
    }

    // Verified: boot it next, once.
    env.set_try_once(target, true);
    env.order = [target, system.booted];
    system.write_boot_env(&env)?;
    versions.set(target, Some(m.version.clone()));
    system.write_slot_versions(&versions)?;
    system.write_update_record(&UpdateRecord {
        result: "installed".into(),
        slot: target.name().into(),
        version: m.version.clone(),
        from_version: system.firmware.version.clone(),
        at_unix_s: now_unix_s(),
        detail: format!("written to slot {} and verified; it boots once at the next restart", target.name()),
    })?;
    info!(slot = target.name(), version = %m.version, "update installed: it boots once at the next restart");
    Ok(Installed { slot: target, version: m.version, bytes: m.payload_bytes })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::testing::fake_root;
    use super::*;

    /// A bundle as `tools/make-bundle.sh` makes it, signed by `minisign` with `key`.
    pub fn make_bundle(dir: &std::path::Path, version: &str, board: &str, payload: &[u8], key: &str) -> Vec<u8> {
        let slot = dir.join("slot.bin");
        std::fs::write(&slot, payload).unwrap();
        let out = dir.join("b.bundle");
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = std::process::Command::new("bash")
            .arg(repo.join("tools/make-bundle.sh"))
            .args(["--slot", slot.to_str().unwrap(), "--version", version, "--board", board])
            .args(["--slot-bytes", "1048576", "--key", key, "--out", out.to_str().unwrap()])
            .status()
            .expect("running tools/make-bundle.sh (needs minisign)");
        assert!(status.success());
        std::fs::read(out).unwrap()
    }

    pub fn dev_key() -> String {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        repo.join("images/keys/development.key").display().to_string()
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_signed_bundle_lands_in_the_other_slot_and_boots_once() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.1.0", Slot::A, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        let p = payload(300_001);
        let b = make_bundle(dir.path(), "0.2.0", "qemu-virt", &p, &dev_key());
        let done = install(&sys, &mut &b[..], false).unwrap();
        assert_eq!((done.slot, done.version.as_str(), done.bytes), (Slot::B, "0.2.0", 300_001));
        assert_eq!(&std::fs::read(dir.path().join("dev/vda3")).unwrap()[..p.len()], &p[..]);
        let env = sys.boot_env().unwrap();
        assert_eq!(env.order, [Slot::B, Slot::A]);
        assert!(env.try_once(Slot::B) && !env.ok(Slot::B) && env.ok(Slot::A));
        assert_eq!(sys.update_record().unwrap().result, "installed");
        assert_eq!(sys.slot_versions().b.as_deref(), Some("0.2.0"));
    }

    #[test]
    fn bad_bundles_are_refused_and_leave_the_boot_order_alone() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.3.0", Slot::A, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        let p = payload(10_000);
        let good = make_bundle(dir.path(), "0.4.0", "qemu-virt", &p, &dev_key());
        let other_key = dir.path().join("other.key");
        let made = std::process::Command::new("minisign")
            .args(["-G", "-W", "-p"])
            .arg(dir.path().join("other.pub"))
            .arg("-s")
            .arg(&other_key)
            .output()
            .unwrap();
        assert!(made.status.success());
        let foreign = make_bundle(dir.path(), "0.4.0", "qemu-virt", &p, other_key.to_str().unwrap());
        let board = make_bundle(dir.path(), "0.4.0", "rpi4", &p, &dev_key());
        let old = make_bundle(dir.path(), "0.2.0", "qemu-virt", &p, &dev_key());
        let huge = make_bundle(dir.path(), "0.4.0", "qemu-virt", &payload((1 << 20) + 1), &dev_key());
        let mut corrupt = good.clone();
        let at = corrupt.windows(64).position(|w| w == &p[5000..5064]).unwrap() + 10;
        corrupt[at] ^= 1;
        let mut tampered = good.clone();
        let m = tampered.windows(5).position(|w| w == b"0.4.0").unwrap();
        tampered[m + 2] = b'9';
        type Refusal = fn(&UpdateError) -> bool;
        let cases: Vec<(&str, Vec<u8>, Refusal)> = vec![
            ("foreign key", foreign, |e| matches!(e, UpdateError::Signature(_))),
            ("tampered manifest", tampered, |e| matches!(e, UpdateError::Signature(_))),
            ("other board", board, |e| matches!(e, UpdateError::WrongBoard { .. })),
            ("older version", old, |e| matches!(e, UpdateError::Downgrade { .. })),
            ("same version", make_bundle(dir.path(), "0.3.0", "qemu-virt", &p, &dev_key()), |e| {
                matches!(e, UpdateError::Downgrade { .. })
            }),
            ("too large", huge, |e| matches!(e, UpdateError::TooLarge(..))),
            ("truncated", good[..good.len() / 2].to_vec(), |e| matches!(e, UpdateError::Truncated(_))),
            ("corrupt payload", corrupt, |e| matches!(e, UpdateError::Corrupt { .. })),
            ("not a bundle", b"hello".repeat(200), |e| matches!(e, UpdateError::Malformed(_))),
            ("empty", Vec::new(), |e| matches!(e, UpdateError::Truncated(_))),
        ];
        let before = sys.boot_env().unwrap();
        // Each refusal by its kind (the API's code for each kind: `http::errors`' tests).
        for (what, bytes, refusal) in cases {
            let err = install(&sys, &mut &bytes[..], false).unwrap_err();
            assert!(refusal(&err), "{what}: {err}");
            let env = sys.boot_env().unwrap();
            assert_eq!(env.next_boot(), Slot::A, "{what}: the running slot still boots");
            assert!(env.ok(Slot::A) && !env.try_once(Slot::B), "{what}");
            assert_eq!(sys.update_record().unwrap().result, "failed", "{what}");
        }
        assert_eq!(sys.boot_env().unwrap().order, before.order);
        // Forced, the older version goes in.
        let old = make_bundle(dir.path(), "0.2.0", "qemu-virt", &p, &dev_key());
        assert_eq!(install(&sys, &mut &old[..], true).unwrap().slot, Slot::B);
    }

    #[test]
    fn a_slot_on_trial_refuses_to_overwrite_the_one_that_works() {
        let dir = tempfile::tempdir().unwrap();
        fake_root(dir.path(), "0.2.0", Slot::B, 1 << 20);
        let sys = System::discover(dir.path()).unwrap().unwrap();
        let b = make_bundle(dir.path(), "0.3.0", "qemu-virt", &payload(1000), &dev_key());
        assert!(matches!(install(&sys, &mut &b[..], false), Err(UpdateError::OnTrial)));
    }

    /// What the `firmware` fuzz target kept: every input is read or refused without a panic,
    /// and a real bundle's head among them reads whole.
    #[test]
    fn the_firmware_fuzz_corpus_is_answered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/firmware");
        let (mut n, mut heads) = (0, 0);
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            heads += usize::from(read_head(&mut &data[..]).is_ok());
            if let Ok(env) = super::super::grubenv::parse(&data) {
                let _ = super::super::grubenv::render(&env, &data, data.len().max(1024));
            }
            let _ = super::super::support::redact_config(&String::from_utf8_lossy(&data));
            super::super::grow::fuzzing::check(&data);
            n += 1;
        }
        assert!(n >= 3 && heads >= 1, "the corpus is under fuzz/ ({n} inputs, {heads} heads)");
    }

    fn header(name: &str, size: usize) -> [u8; BLOCK] {
        ustar_header(name, size as u64, 0)
    }

    #[test]
    fn the_manifest_and_signature_members_stop_at_their_ceilings() {
        let at = |name: &str, max: usize, size: usize| {
            let mut archive = header(name, size).to_vec();
            archive.resize(BLOCK + size.div_ceil(BLOCK) * BLOCK, b' ');
            small_member(&mut &archive[..], name, max).map(|b| b.len())
        };
        assert_eq!(at("manifest.json", BUNDLE_MANIFEST_MAX_BYTES, BUNDLE_MANIFEST_MAX_BYTES).unwrap(), 4096);
        let err = at("manifest.json", BUNDLE_MANIFEST_MAX_BYTES, BUNDLE_MANIFEST_MAX_BYTES + 1).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        let sig = "manifest.json.minisig";
        assert_eq!(at(sig, BUNDLE_SIGNATURE_MAX_BYTES, BUNDLE_SIGNATURE_MAX_BYTES).unwrap(), 1024);
        assert!(at(sig, BUNDLE_SIGNATURE_MAX_BYTES, BUNDLE_SIGNATURE_MAX_BYTES + 1).is_err());
        // A header that lies about its checksum, names another member, or is not a file.
        let mut bad = header("manifest.json", 10);
        bad[0] = b'M';
        assert!(member_header(&mut &bad[..], "manifest.json").unwrap_err().to_string().contains("checksum"));
        let other = header("etc/passwd", 10);
        assert!(member_header(&mut &other[..], "manifest.json").unwrap_err().to_string().contains("etc/passwd"));
    }
}
