//! Factory reset and the support bundle.
//!
//! A factory reset is asked for at run time (`keeppeek factory-reset`, the API, the UI)
//! and done by init at the next boot, before keeppeek opens anything on the data
//! partition: everything there goes but the firmware's own records (`system/`) and what
//! the user chose to keep: `config` (keeppeek.toml) and/or `recordings` (the catalog with
//! the recordings, events and snapshots, and so the accounts, which live in the catalog).
//!
//! The support bundle is a tar of what a person helping needs: the firmware's description,
//! the boot state, the last update, the config with its secrets replaced, the logs, memory
//! and mounts. It is built in memory, bounded by [`SUPPORT_BUNDLE_MAX_BYTES`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::read_small;
use crate::base::fs::{sync_dir, write_synced};
use crate::limits::{INIT_LOG_FILE_MAX_BYTES, SUPPORT_BUNDLE_MAX_BYTES, SYSTEM_STATE_MAX_BYTES};

/// What a factory reset keeps.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    #[serde(default)]
    pub keep: Vec<String>,
}

pub const KEEPABLE: [&str; 2] = ["config", "recordings"];

fn marker(data: &Path) -> PathBuf {
    data.join("system/factory-reset.json")
}

/// Records a factory reset for the next boot. Refuses an unknown choice.
pub fn request_factory_reset(data: &Path, req: &ResetRequest) -> Result<(), String> {
    if let Some(bad) = req.keep.iter().find(|k| !KEEPABLE.contains(&k.as_str())) {
        return Err(format!("cannot keep `{bad}`: the choices are {}", KEEPABLE.join(", ")));
    }
    let bytes = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    write_synced(&marker(data), &bytes).map_err(|e| format!("{}: {e}", marker(data).display()))
}

/// The folder of `data` that holds recordings and the catalog: the config's `data_dir`
/// when it is inside `data`, else `keeppeek`.
fn recordings_entry(data: &Path) -> Option<std::ffi::OsString> {
    let config = data.join("keeppeek.toml");
    let dir = crate::config::Config::load(&config).ok().map(|c| c.data_dir);
    let dir = dir.unwrap_or_else(|| data.join("keeppeek"));
    let rel = dir.strip_prefix(data).ok().or_else(|| dir.strip_prefix("/data").ok())?;
    rel.components().next().map(|c| c.as_os_str().to_owned())
}

/// Performs a factory reset asked for at the last boot, if any. Called by init before
/// keeppeek starts.
pub fn apply_factory_reset(data: &Path) -> std::io::Result<()> {
    let m = marker(data);
    if !m.exists() {
        return Ok(());
    }
    let req: ResetRequest =
        read_small(&m, SYSTEM_STATE_MAX_BYTES).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let keep_config = req.keep.iter().any(|k| k == "config");
    let keep_recordings = req.keep.iter().any(|k| k == "recordings");
    let recordings = recordings_entry(data);
    info!(keep = ?req.keep, "factory reset");
    for entry in std::fs::read_dir(data)? {
        let entry = entry?;
        let name = entry.file_name();
        let kept = name == "system"
            || name == "lost+found"
            || (keep_config && name == "keeppeek.toml")
            || (keep_recordings && Some(&name) == recordings.as_ref());
        if kept {
            continue;
        }
        let path = entry.path();
        let r = if entry.file_type()?.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        if let Err(e) = r {
            warn!(path = %path.display(), error = %e, "factory reset: cannot remove");
        }
    }
    std::fs::remove_file(&m)?;
    sync_dir(&data.join("system"))?;
    sync_dir(data)
}

/// The config's text with every secret replaced: values of keys that name a password,
/// secret, token or key, and credentials inside URLs. Text that does not parse is left
/// out whole rather than risk a secret.
pub fn redact_config(text: &str) -> String {
    fn walk(v: &mut toml::Value) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    let k = k.to_ascii_lowercase();
                    if ["password", "secret", "token", "key"].iter().any(|s| k.contains(s)) {
                        *v = toml::Value::String("<redacted>".into());
                    } else {
                        walk(v);
                    }
                }
            }
            toml::Value::Array(a) => a.iter_mut().for_each(walk),
            toml::Value::String(s) => {
                if let Ok(mut u) = url::Url::parse(s)
                    && (!u.username().is_empty() || u.password().is_some())
                {
                    let _ = u.set_username("redacted");
                    let _ = u.set_password(None);
                    *s = u.to_string();
                }
            }
            _ => {}
        }
    }
    match text.parse::<toml::Table>() {
        Ok(t) => {
            let mut v = toml::Value::Table(t);
            walk(&mut v);
            toml::to_string(&v).unwrap_or_else(|_| "# (the config could not be written back)\n".into())
        }
        Err(e) => format!("# the config does not parse ({}); left out\n", e.message()),
    }
}

/// A ustar archive written in memory, refusing to grow past its ceiling.
struct Tar {
    bytes: Vec<u8>,
}

impl Tar {
    fn add(&mut self, name: &str, body: &[u8]) {
        let need = 512 + body.len().div_ceil(512) * 512 + 1024;
        if self.bytes.len() + need > SUPPORT_BUNDLE_MAX_BYTES {
            let note = format!("{name}: left out, the bundle would pass {SUPPORT_BUNDLE_MAX_BYTES} bytes\n");
            if name != "TRUNCATED" && self.bytes.len() + 2048 + note.len() <= SUPPORT_BUNDLE_MAX_BYTES {
                self.add("TRUNCATED", note.as_bytes());
            }
            return;
        }
        let h = super::bundle::ustar_header(name, body.len() as u64, super::now_unix_s());
        self.bytes.extend_from_slice(&h);
        self.bytes.extend_from_slice(body);
        self.bytes.resize(self.bytes.len().div_ceil(512) * 512, 0);
    }

    fn finish(mut self) -> Vec<u8> {
        self.bytes.extend_from_slice(&[0u8; 1024]);
        self.bytes
    }
}

/// The support bundle of the box under `root` (`/` on the box), with the config at
/// `config` and the daemon's status as JSON.
pub fn support_bundle(root: &Path, config: &Path, status: &serde_json::Value) -> Vec<u8> {
    let mut tar = Tar { bytes: Vec::new() };
    let status = serde_json::to_vec_pretty(status).unwrap_or_default();
    tar.add("status.json", &status);
    let config_text = read_small(config, 256 << 10).map(|b| String::from_utf8_lossy(&b).into_owned());
    match config_text {
        Ok(t) => tar.add("keeppeek.toml", redact_config(&t).as_bytes()),
        Err(e) => tar.add("keeppeek.toml", format!("# {e}\n").as_bytes()),
    }
    let files: [(&str, &str, usize); 10] = [
        ("firmware.toml", "etc/keeppeek/firmware.toml", 4096),
        ("cmdline", "proc/cmdline", 4096),
        ("version", "proc/version", 4096),
        ("meminfo", "proc/meminfo", 16 << 10),
        ("mounts", "proc/mounts", 64 << 10),
        ("uptime", "proc/uptime", 4096),
        ("grubenv", "boot/EFI/keeppeek/grubenv", 4096),
        ("update.json", "data/system/update.json", SYSTEM_STATE_MAX_BYTES),
        ("log/keeppeek.log.1", "run/log/keeppeek.log.1", INIT_LOG_FILE_MAX_BYTES as usize),
        ("log/keeppeek.log", "run/log/keeppeek.log", INIT_LOG_FILE_MAX_BYTES as usize),
    ];
    for (name, rel, max) in files {
        if let Ok(b) = read_small(&root.join(rel), max) {
            if name.starts_with("log/") { tar.add(name, &redact_log(&b)) } else { tar.add(name, &b) }
        }
    }
    tar.finish()
}

/// The log with every `setup_token=…` value replaced: the token is for whoever is at the
/// box's console, not for whoever reads a bundle.
pub fn redact_log(log: &[u8]) -> Vec<u8> {
    const KEY: &[u8] = b"setup_token=";
    let mut out = Vec::with_capacity(log.len());
    let mut rest = log;
    while let Some(at) = rest.windows(KEY.len()).position(|w| w == KEY) {
        out.extend_from_slice(&rest[..at + KEY.len()]);
        out.extend_from_slice(b"<redacted>");
        rest = &rest[at + KEY.len()..];
        let value = rest.iter().position(|b| b.is_ascii_whitespace()).unwrap_or(rest.len());
        rest = &rest[value..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_token_never_reaches_the_bundles_log() {
        let log = b"INFO keeppeek: no admin yet setup_token=0123abcd\nINFO x setup_token=\"ff\" y\nend setup_token=";
        let out = String::from_utf8(redact_log(log)).unwrap();
        assert_eq!(
            out,
            "INFO keeppeek: no admin yet setup_token=<redacted>\nINFO x setup_token=<redacted> y\nend setup_token=<redacted>"
        );
    }

    #[test]
    fn secrets_never_reach_the_bundle() {
        let text = r#"
listen = "0.0.0.0:8080"
[[cameras]]
name = "front"
username = "admin"
password = "hunter2"
main = { url = "rtsp://admin:hunter2@192.0.2.1/s1" }
[auth]
setup_token = "abc"
"#;
        let out = redact_config(text);
        assert!(!out.contains("hunter2") && !out.contains("abc"), "{out}");
        assert!(out.contains("<redacted>") && out.contains("rtsp://redacted@192.0.2.1/s1"), "{out}");
        assert!(out.contains("0.0.0.0:8080"));
        let broken = redact_config("password = \"hunter2\"\n[[[");
        assert!(!broken.contains("hunter2") && broken.contains("does not parse"));
    }

    #[test]
    fn the_bundle_is_a_tar_with_the_redacted_config_and_stops_at_its_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("run/log")).unwrap();
        std::fs::write(root.join("run/log/keeppeek.log"), "INFO started\n").unwrap();
        let config = root.join("keeppeek.toml");
        std::fs::write(&config, "[[cameras]]\nname = \"a\"\npassword = \"hunter2\"\nmain = { url = \"rtsp://h/s\" }\n")
            .unwrap();
        let b = support_bundle(root, &config, &serde_json::json!({"firmware": false}));
        let listed = std::process::Command::new("tar")
            .arg("-t")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(&b)?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(listed.status.success());
        let names = String::from_utf8(listed.stdout).unwrap();
        assert_eq!(names, "status.json\nkeeppeek.toml\nlog/keeppeek.log\n");
        assert!(!String::from_utf8_lossy(&b).contains("hunter2"));
        // Logs at their ceiling twice over, and more: the bundle stops short of its own.
        let big = vec![b'x'; INIT_LOG_FILE_MAX_BYTES as usize];
        std::fs::write(root.join("run/log/keeppeek.log.1"), &big).unwrap();
        std::fs::write(root.join("run/log/keeppeek.log"), &big).unwrap();
        let b = support_bundle(root, &config, &serde_json::json!({}));
        assert!(b.len() <= SUPPORT_BUNDLE_MAX_BYTES);
        assert!(String::from_utf8_lossy(&b).contains("log/keeppeek.log: left out"));
    }

    #[test]
    fn a_factory_reset_keeps_only_what_was_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let fill = || {
            std::fs::create_dir_all(data.join("keeppeek/front")).unwrap();
            std::fs::write(data.join("keeppeek/catalog.redb"), "c").unwrap();
            std::fs::write(data.join("keeppeek.toml"), "data_dir = \"keeppeek\"\n").unwrap();
            std::fs::create_dir_all(data.join("system")).unwrap();
            std::fs::write(data.join("system/slots.json"), "{}").unwrap();
            std::fs::write(data.join("stray"), "s").unwrap();
        };
        fill();
        assert!(request_factory_reset(data, &ResetRequest { keep: vec!["accounts".into()] }).is_err());
        request_factory_reset(data, &ResetRequest { keep: vec!["recordings".into()] }).unwrap();
        apply_factory_reset(data).unwrap();
        assert!(data.join("keeppeek/catalog.redb").exists() && data.join("system/slots.json").exists());
        assert!(!data.join("keeppeek.toml").exists() && !data.join("stray").exists());
        assert!(!marker(data).exists());
        fill();
        request_factory_reset(data, &ResetRequest { keep: vec![] }).unwrap();
        apply_factory_reset(data).unwrap();
        assert!(!data.join("keeppeek").exists() && data.join("system/slots.json").exists());
        apply_factory_reset(data).unwrap();
    }
}
