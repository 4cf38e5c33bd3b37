//! GRUB's environment block, where the A/B boot state lives (`images/grub.cfg` reads it).
//!
//! The block is a file of a fixed size (1024 bytes as `grub-editenv create` makes it): the
//! line `# GRUB Environment Block`, `NAME=VALUE` lines, then `#` to the end. GRUB's
//! `save_env` rewrites it in place and so does [`write`]: the file keeps its size and its
//! clusters on the FAT partition, which is what GRUB needs to write it again at the next
//! boot. Written by hand because no crate reads this format; it is twenty lines.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::limits::GRUBENV_MAX_BYTES;

const HEADER: &str = "# GRUB Environment Block\n";

/// A root slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    pub fn parse(s: &str) -> Option<Slot> {
        match s {
            "a" => Some(Slot::A),
            "b" => Some(Slot::B),
            _ => None,
        }
    }
}

/// The boot state: which slot GRUB tries first, and per slot whether it passed its health
/// check (`ok`) and whether it may boot once while on trial (`try_once`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootEnv {
    pub order: [Slot; 2],
    pub ok: [bool; 2],
    pub try_once: [bool; 2],
}

impl Default for BootEnv {
    /// What a new image holds, and what GRUB assumes of a missing or damaged block.
    fn default() -> Self {
        BootEnv { order: [Slot::A, Slot::B], ok: [true, false], try_once: [false, false] }
    }
}

fn index(slot: Slot) -> usize {
    match slot {
        Slot::A => 0,
        Slot::B => 1,
    }
}

impl BootEnv {
    pub fn ok(&self, slot: Slot) -> bool {
        self.ok[index(slot)]
    }

    pub fn set_ok(&mut self, slot: Slot, v: bool) {
        self.ok[index(slot)] = v;
    }

    pub fn try_once(&self, slot: Slot) -> bool {
        self.try_once[index(slot)]
    }

    pub fn set_try_once(&mut self, slot: Slot, v: bool) {
        self.try_once[index(slot)] = v;
    }

    /// The slot GRUB boots next, by the rules of `images/grub.cfg` (without the side
    /// effect of clearing TRY).
    pub fn next_boot(&self) -> Slot {
        self.order.into_iter().find(|&s| self.ok(s) || self.try_once(s)).unwrap_or(Slot::A)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GrubEnvError {
    #[error("the boot environment {0}: {1}")]
    Io(String, std::io::Error),
    #[error("the boot environment is more than {GRUBENV_MAX_BYTES} bytes")]
    TooLarge(u64),
    #[error("the boot environment does not start with `# GRUB Environment Block`")]
    NoHeader,
    #[error("the boot environment's variable {0} is `{1}`: {2}")]
    Bad(&'static str, String, &'static str),
    #[error("the boot environment is full: {0} bytes of variables in a block of {1}")]
    Full(usize, usize),
}

/// Reads the boot state from a block's bytes. Unknown variables are left alone (GRUB and
/// people may add their own); missing ones take the defaults.
pub fn parse(bytes: &[u8]) -> Result<BootEnv, GrubEnvError> {
    let text = bytes.strip_prefix(HEADER.as_bytes()).ok_or(GrubEnvError::NoHeader)?;
    let mut env = BootEnv::default();
    for line in text.split(|&b| b == b'\n') {
        if line.first() == Some(&b'#') || line.is_empty() {
            continue;
        }
        let line = String::from_utf8_lossy(line);
        let Some((name, value)) = line.split_once('=') else { continue };
        let flag = |name: &'static str| match value {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(GrubEnvError::Bad(name, value.into(), "not 0 or 1")),
        };
        match name {
            "ORDER" => {
                let slots: Vec<Option<Slot>> = value.split(' ').map(Slot::parse).collect();
                env.order = match slots[..] {
                    [Some(first), Some(second)] if first != second => [first, second],
                    _ => return Err(GrubEnvError::Bad("ORDER", value.into(), "not `a b` or `b a`")),
                };
            }
            "A_OK" => env.ok[0] = flag("A_OK")?,
            "B_OK" => env.ok[1] = flag("B_OK")?,
            "A_TRY" => env.try_once[0] = flag("A_TRY")?,
            "B_TRY" => env.try_once[1] = flag("B_TRY")?,
            _ => {}
        }
    }
    Ok(env)
}

/// The block's bytes for `env`, padded to `size`, keeping variables other than ours.
pub fn render(env: &BootEnv, previous: &[u8], size: usize) -> Result<Vec<u8>, GrubEnvError> {
    let bit = |b: bool| if b { '1' } else { '0' };
    let mut out = String::from(HEADER);
    out.push_str(&format!("ORDER={} {}\n", env.order[0].name(), env.order[1].name()));
    out.push_str(&format!("A_OK={}\nB_OK={}\n", bit(env.ok[0]), bit(env.ok[1])));
    out.push_str(&format!("A_TRY={}\nB_TRY={}\n", bit(env.try_once[0]), bit(env.try_once[1])));
    let rest = previous.strip_prefix(HEADER.as_bytes()).unwrap_or_default();
    for line in rest.split(|&b| b == b'\n') {
        let ours = ["ORDER=", "A_OK=", "B_OK=", "A_TRY=", "B_TRY="].iter().any(|p| line.starts_with(p.as_bytes()));
        if line.is_empty() || line[0] == b'#' || ours {
            continue;
        }
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    if out.len() > size {
        return Err(GrubEnvError::Full(out.len(), size));
    }
    let mut bytes = out.into_bytes();
    bytes.resize(size, b'#');
    Ok(bytes)
}

/// Reads the block at `path`.
pub fn read(path: &Path) -> Result<(BootEnv, Vec<u8>), GrubEnvError> {
    let bytes =
        super::read_capped(path, GRUBENV_MAX_BYTES).map_err(|e| GrubEnvError::Io(path.display().to_string(), e))?;
    if bytes.len() > GRUBENV_MAX_BYTES {
        return Err(GrubEnvError::TooLarge(bytes.len() as u64));
    }
    Ok((parse(&bytes)?, bytes))
}

/// The size `grub-editenv create` gives a block, and a damaged one is written anew at.
const BLOCK_BYTES: usize = 1024;

/// Rewrites the block at `path` in place (same size, same clusters) and syncs it. A block
/// that is damaged (no header, a bad value, past its ceiling) is written anew at 1024 bytes:
/// GRUB boots the factory state from such a block, and keeppeek must be able to mend it.
pub fn write(path: &Path, env: &BootEnv) -> Result<(), GrubEnvError> {
    let previous = match read(path) {
        Ok((_, bytes)) => bytes,
        Err(e @ GrubEnvError::Io(..)) => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, "the boot environment is damaged: writing it anew");
            Vec::new()
        }
    };
    let size = if previous.is_empty() { BLOCK_BYTES } else { previous.len() };
    let bytes = render(env, &previous, size)?;
    let io = |e| GrubEnvError::Io(path.display().to_string(), e);
    let mut file = OpenOptions::new().write(true).open(path).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.set_len(size as u64).map_err(io)?;
    file.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(vars: &str) -> Vec<u8> {
        let mut b = format!("{HEADER}{vars}").into_bytes();
        b.resize(1024, b'#');
        b
    }

    #[test]
    fn reads_what_grub_editenv_writes_and_keeps_foreign_variables() {
        let b = block("ORDER=b a\nA_OK=1\nB_OK=0\nA_TRY=0\nB_TRY=1\nsaved_entry=x\n");
        let env = parse(&b).unwrap();
        assert_eq!(env.order, [Slot::B, Slot::A]);
        assert_eq!((env.ok(Slot::A), env.ok(Slot::B)), (true, false));
        assert_eq!((env.try_once(Slot::A), env.try_once(Slot::B)), (false, true));
        assert_eq!(env.next_boot(), Slot::B);
        let mut next = env;
        next.set_try_once(Slot::B, false);
        assert_eq!(next.next_boot(), Slot::A, "a slot whose one try is spent falls back");
        let out = render(&next, &b, 1024).unwrap();
        assert_eq!(out.len(), 1024);
        assert_eq!(parse(&out).unwrap(), next);
        assert!(String::from_utf8_lossy(&out).contains("\nsaved_entry=x\n"));
    }

    #[test]
    fn an_empty_block_is_the_factory_state_and_damage_is_named() {
        assert_eq!(parse(&block("")).unwrap(), BootEnv::default());
        assert!(matches!(parse(b"garbage"), Err(GrubEnvError::NoHeader)));
        for (vars, name) in [("ORDER=a a\n", "ORDER"), ("ORDER=c\n", "ORDER"), ("B_OK=yes\n", "B_OK")] {
            match parse(&block(vars)) {
                Err(GrubEnvError::Bad(n, _, _)) => assert_eq!(n, name),
                other => panic!("{vars}: {other:?}"),
            }
        }
        let huge = block(&format!("x={}\n", "y".repeat(1000)));
        assert!(matches!(render(&BootEnv::default(), &huge, 1024), Err(GrubEnvError::Full(..))));
    }

    #[test]
    fn a_block_past_its_ceiling_is_refused_and_writes_keep_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grubenv");
        std::fs::write(&path, vec![b'#'; GRUBENV_MAX_BYTES + 1]).unwrap();
        assert!(matches!(read(&path), Err(GrubEnvError::TooLarge(_))));
        std::fs::write(&path, block("")).unwrap();
        let mut env = BootEnv::default();
        env.order = [Slot::B, Slot::A];
        env.set_try_once(Slot::B, true);
        write(&path, &env).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1024);
        assert_eq!(read(&path).unwrap().0, env);
        // Damaged blocks (garbage, or past the ceiling) are written anew; a missing one is an
        // error (the ESP is not where it should be).
        for damaged in [vec![b'x'; 1024], vec![b'#'; GRUBENV_MAX_BYTES + 1], Vec::new()] {
            std::fs::write(&path, damaged).unwrap();
            write(&path, &env).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 1024);
            assert_eq!(read(&path).unwrap().0, env);
        }
        assert!(matches!(write(&dir.path().join("none"), &env), Err(GrubEnvError::Io(..))));
    }
}
