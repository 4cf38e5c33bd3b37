//! The data partition grows to the whole disk. An image is small (its data partition a few
//! hundred MiB) so that it flashes fast onto any card; the disk it lands on is larger. At
//! every boot, before keeppeek starts, init checks whether the data partition is the last one
//! and the disk has room after it; if so the GPT is rewritten with the partition reaching to
//! the disk's end (the backup table first, then the primary, each synced), the kernel is told
//! the partition's new size (`BLKPG_RESIZE_PARTITION`: it is mounted, so the table cannot be
//! re-read), and the mounted ext4 grows into it (`EXT4_IOC_RESIZE_FS`, what `resize2fs`
//! does online; busybox has no `resize2fs`). Each step finds its own work undone after a
//! power cut and does it at the next boot; a step with nothing to do costs a few reads.
//!
//! The partition table is read and written with `gptman`; what it reads is bounded first
//! (the primary header's entry count and size) so a damaged table is refused, not followed.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gptman::{GPTHeader, GPTPartitionEntry};

use crate::limits::GPT_PARTITION_ENTRIES_MAX;

/// The partition's end is rounded down to this: ext4 blocks and flash erase blocks fit it.
const ALIGN_BYTES: u64 = 1 << 20;
/// The size of one partition entry every tool writes (and the only one read here).
const ENTRY_BYTES: u32 = 128;

#[derive(Debug, thiserror::Error)]
pub enum GrowError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("the partition table: {0}")]
    Table(#[from] gptman::Error),
    #[error("{0}")]
    Refused(String),
}

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> GrowError + '_ {
    move |e| GrowError::Io(what.display().to_string(), e)
}

fn disk_io(e: std::io::Error) -> GrowError {
    GrowError::Io("the disk".into(), e)
}

fn refused(why: impl Into<String>) -> GrowError {
    GrowError::Refused(why.into())
}

/// Both copies of a partition table as they are to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    pub primary: GPTHeader,
    pub backup: GPTHeader,
    pub entries: Vec<GPTPartitionEntry>,
}

/// What a disk's table needs for the partition to reach the disk's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// It does already, and the backup table is whole at the disk's end.
    Done { end_lba: u64 },
    /// Write these tables: the partition then ends at `end_lba` (it ended at `was_end_lba`).
    Write { tables: Box<Tables>, end_lba: u64, was_end_lba: u64 },
}

/// The primary header (sector 1) and its entries, checked: signature, revision, size and
/// CRC (by `gptman`), then this module's bounds before a single entry is read.
pub fn read_primary(
    disk: &mut (impl Read + Seek),
    sector_bytes: u64,
) -> Result<(GPTHeader, Vec<GPTPartitionEntry>), GrowError> {
    disk.seek(SeekFrom::Start(sector_bytes)).map_err(disk_io)?;
    let header = GPTHeader::read_from(disk)?;
    check_header(&header, 1)?;
    let entries = header.read_partitions(disk, sector_bytes)?;
    Ok((header, entries))
}

fn check_header(h: &GPTHeader, at_lba: u64) -> Result<(), GrowError> {
    if h.primary_lba != at_lba {
        return Err(refused(format!("the header at sector {at_lba} says it is at {}", h.primary_lba)));
    }
    // The primary's entries follow it; the backup's precede it (checked against the primary).
    if at_lba == 1 && h.partition_entry_lba != 2 {
        return Err(refused(format!("the primary entries at sector {} (not 2)", h.partition_entry_lba)));
    }
    if h.number_of_partition_entries == 0 || h.number_of_partition_entries > GPT_PARTITION_ENTRIES_MAX {
        return Err(refused(format!(
            "{} partition entries (at most {GPT_PARTITION_ENTRIES_MAX} are read)",
            h.number_of_partition_entries
        )));
    }
    if h.size_of_partition_entry != ENTRY_BYTES {
        return Err(refused(format!("partition entries of {} bytes (not {ENTRY_BYTES})", h.size_of_partition_entry)));
    }
    Ok(())
}

/// Sectors a header's entries take.
fn entry_sectors(h: &GPTHeader, sector_bytes: u64) -> u64 {
    (u64::from(h.number_of_partition_entries) * u64::from(ENTRY_BYTES)).div_ceil(sector_bytes)
}

/// The backup table at `lba`, whole (its header and entries' CRCs) and laid out as every tool
/// lays it out: its entries just before it, pointing back at sector 1.
fn read_backup(
    disk: &mut (impl Read + Seek),
    sector_bytes: u64,
    lba: u64,
) -> Option<(GPTHeader, Vec<GPTPartitionEntry>)> {
    disk.seek(SeekFrom::Start(lba.checked_mul(sector_bytes)?)).ok()?;
    let b = GPTHeader::read_from(disk).ok()?;
    check_header(&b, lba).ok()?;
    if b.backup_lba != 1 || b.partition_entry_lba.checked_add(entry_sectors(&b, sector_bytes)) != Some(lba) {
        return None;
    }
    let entries = b.read_partitions(disk, sector_bytes).ok()?;
    Some((b, entries))
}

/// Whether the backup table at `lba` is whole and agrees with `primary`.
fn backup_agrees(disk: &mut (impl Read + Seek), sector_bytes: u64, lba: u64, primary: &GPTHeader) -> bool {
    read_backup(disk, sector_bytes, lba).is_some_and(|(b, _)| {
        b.number_of_partition_entries == primary.number_of_partition_entries
            && Some(b.partition_entry_lba) == primary.last_usable_lba.checked_add(1)
            && (b.first_usable_lba, b.last_usable_lba, b.disk_guid)
                == (primary.first_usable_lba, primary.last_usable_lba, primary.disk_guid)
            && b.partition_entry_array_crc32 == primary.partition_entry_array_crc32
    })
}

/// The backup table at the disk's last sector as the primary it stands for.
fn backup_as_primary(
    disk: &mut (impl Read + Seek),
    sector_bytes: u64,
    sectors: u64,
) -> Option<(GPTHeader, Vec<GPTPartitionEntry>)> {
    let lba = sectors.checked_sub(1)?;
    let (mut h, entries) = read_backup(disk, sector_bytes, lba)?;
    h.primary_lba = 1;
    h.backup_lba = lba;
    h.partition_entry_lba = 2;
    Some((h, entries))
}

/// Whether the protective MBR's one partition covers the disk (as far as its 32 bits can).
fn mbr_covers(disk: &mut (impl Read + Seek), sectors: u64) -> bool {
    let mut mbr = [0u8; 512];
    if disk.seek(SeekFrom::Start(0)).is_err() || disk.read_exact(&mut mbr).is_err() {
        return false;
    }
    let size = u32::from_le_bytes([mbr[458], mbr[459], mbr[460], mbr[461]]);
    mbr[450] == 0xee && mbr[510..] == [0x55, 0xaa] && u64::from(size) == (sectors - 1).min(u64::from(u32::MAX))
}

/// What partition `number` (1-based, as the kernel numbers them), which the kernel says
/// starts at `start_lba`, needs to reach the end of `disk`. Refused when it is not the last
/// partition, when it is not where the kernel says, or when the disk is smaller than its
/// table (an image written to a smaller card: nothing is touched).
pub fn plan(disk: &mut (impl Read + Seek), sector_bytes: u64, number: u32, start_lba: u64) -> Result<Plan, GrowError> {
    let disk_bytes = disk.seek(SeekFrom::End(0)).map_err(disk_io)?;
    let sectors = disk_bytes / sector_bytes;
    // A primary torn by a power cut while it was written: the backup (written first, synced)
    // stands in, and the primary is written again from it.
    let (header, mut entries, primary_whole) = match read_primary(disk, sector_bytes) {
        Ok((h, e)) => (h, e, true),
        Err(torn) => match backup_as_primary(disk, sector_bytes, sectors) {
            Some((h, e)) => (h, e, false),
            None => return Err(torn),
        },
    };
    let entry_sectors = entry_sectors(&header, sector_bytes);
    // The protective MBR, the primary header and entries, the backup entries and header.
    if sectors < 2 * entry_sectors + 3 {
        return Err(refused(format!("a disk of {sectors} sectors cannot hold its partition table")));
    }
    let backup_lba = sectors - 1;
    let last_usable = backup_lba - entry_sectors - 1;
    let index = (number as usize).checked_sub(1).filter(|i| *i < entries.len());
    let Some(index) = index else { return Err(refused(format!("no partition entry {number}"))) };
    let entry = &entries[index];
    if entry.is_unused() || entry.starting_lba != start_lba || entry.ending_lba < entry.starting_lba {
        return Err(refused(format!("partition {number} does not start at sector {start_lba} in the table")));
    }
    let others = entries.iter().enumerate().filter(|(i, e)| *i != index && e.is_used());
    if others.clone().any(|(_, e)| e.starting_lba >= entry.starting_lba) {
        return Err(refused(format!("partition {number} is not the last one on the disk")));
    }
    if others.clone().any(|(_, e)| e.ending_lba >= entry.starting_lba) {
        return Err(refused(format!("partition {number} overlaps another")));
    }
    if last_usable < header.last_usable_lba || entry.ending_lba > last_usable {
        return Err(refused(format!(
            "the disk ({sectors} sectors) is smaller than its partition table says: the image was written to a smaller disk"
        )));
    }
    let align = (ALIGN_BYTES / sector_bytes).max(1);
    let end_lba = ((last_usable + 1) / align * align).saturating_sub(1).max(entry.ending_lba);
    let was_end_lba = entry.ending_lba;
    if primary_whole
        && end_lba == was_end_lba
        && (header.backup_lba, header.last_usable_lba) == (backup_lba, last_usable)
        && backup_agrees(disk, sector_bytes, backup_lba, &header)
        && mbr_covers(disk, sectors)
    {
        return Ok(Plan::Done { end_lba });
    }
    entries[index].ending_lba = end_lba;
    let mut primary = header;
    primary.backup_lba = backup_lba;
    primary.last_usable_lba = last_usable;
    primary.update_partition_entry_array_crc32(&entries);
    primary.update_crc32_checksum();
    let mut backup = primary.clone();
    backup.primary_lba = backup_lba;
    backup.backup_lba = 1;
    backup.partition_entry_lba = last_usable + 1;
    backup.update_crc32_checksum();
    Ok(Plan::Write { tables: Box::new(Tables { primary, backup, entries }), end_lba, was_end_lba })
}

/// Writes `tables`: the backup at the disk's end first, then the primary, then a protective
/// MBR that covers the whole disk, calling `sync` after each. A power cut at any point leaves
/// a whole primary table (the old one, or the new one), which [`plan`] finishes next boot.
pub fn write_tables<D: Write + Seek>(
    disk: &mut D,
    sector_bytes: u64,
    tables: &Tables,
    mut sync: impl FnMut(&mut D) -> std::io::Result<()>,
) -> Result<(), GrowError> {
    let synced = |r: std::io::Result<()>| r.map_err(disk_io);
    tables.backup.clone().write_into(disk, sector_bytes, &tables.entries)?;
    synced(sync(disk))?;
    tables.primary.clone().write_into(disk, sector_bytes, &tables.entries)?;
    synced(sync(disk))?;
    gptman::GPT::write_protective_mbr_into(disk, sector_bytes)?;
    synced(sync(disk))
}

/// What [`grow_data`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grown {
    /// The partition's size before and after, in bytes (equal: it already filled the disk).
    pub was_bytes: u64,
    pub bytes: u64,
}

fn read_number(path: &Path) -> Result<u64, GrowError> {
    let bytes = super::read_small(path, 64).map_err(|e| refused(e.to_string()))?;
    String::from_utf8_lossy(&bytes).trim().parse().map_err(|_| refused(format!("{}: not a number", path.display())))
}

/// The data partition as the kernel sees it: its device folder in sysfs, its disk's.
struct Partition {
    number: u32,
    /// Start and size in the kernel's 512-byte sectors.
    start: u64,
    size: u64,
    disk_name: String,
    sector_bytes: u64,
}

fn data_partition(root: &Path, data: &Path) -> Result<Partition, GrowError> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(data).map_err(io(data))?.dev();
    let sys = root.join(format!("sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev)));
    let part =
        std::fs::canonicalize(&sys).map_err(|_| refused(format!("{} is not on a block device", data.display())))?;
    if !part.join("partition").exists() {
        return Err(refused(format!("{} is not on a partition", data.display())));
    }
    let disk = part.parent().map(PathBuf::from).ok_or_else(|| refused("a partition without a disk"))?;
    let disk_name = disk.file_name().and_then(|n| n.to_str()).ok_or_else(|| refused("a disk without a name"))?;
    let number = read_number(&part.join("partition"))?;
    Ok(Partition {
        number: u32::try_from(number).map_err(|_| refused("partition number out of range"))?,
        start: read_number(&part.join("start"))?,
        size: read_number(&part.join("size"))?,
        disk_name: disk_name.to_owned(),
        sector_bytes: read_number(&disk.join("queue/logical_block_size"))?,
    })
}

/// Grows the data partition (mounted at `root/data`) and its ext4 to the end of its disk.
pub fn grow_data(root: &Path) -> Result<Grown, GrowError> {
    let data = root.join("data");
    let p = data_partition(root, &data)?;
    if !(512..=65536).contains(&p.sector_bytes) || !p.sector_bytes.is_power_of_two() {
        return Err(refused(format!("sectors of {} bytes", p.sector_bytes)));
    }
    let device = root.join("dev").join(&p.disk_name);
    let mut disk = std::fs::OpenOptions::new().read(true).write(true).open(&device).map_err(io(&device))?;
    let start_lba = p.start * 512 / p.sector_bytes;
    let was_bytes = p.size * 512;
    let end_lba = match plan(&mut disk, p.sector_bytes, p.number, start_lba)? {
        Plan::Done { end_lba } => end_lba,
        Plan::Write { tables, end_lba, .. } => {
            write_tables(&mut disk, p.sector_bytes, &tables, |d| d.sync_data())?;
            end_lba
        }
    };
    let bytes = (end_lba + 1 - start_lba) * p.sector_bytes;
    if bytes > was_bytes {
        resize_partition(&disk, p.number, p.start * 512, bytes).map_err(io(&device))?;
    }
    // The file system: a no-op when it fills the partition already.
    let dir = std::fs::File::open(&data).map_err(io(&data))?;
    resize_ext4(&dir, bytes).map_err(io(&data))?;
    Ok(Grown { was_bytes, bytes })
}

/// `BLKPG_RESIZE_PARTITION` from `linux/blkpg.h`: the kernel's view of a partition's size,
/// changed while it is in use.
fn resize_partition(disk: &std::fs::File, number: u32, start_bytes: u64, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct BlkpgPartition {
        start: i64,
        length: i64,
        pno: i32,
        devname: [u8; 64],
        volname: [u8; 64],
    }
    #[repr(C)]
    struct BlkpgIoctlArg {
        op: i32,
        flags: i32,
        datalen: i32,
        data: *mut libc::c_void,
    }
    const BLKPG: u32 = 0x1269;
    const BLKPG_RESIZE_PARTITION: i32 = 3;
    let too_big = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let mut part = BlkpgPartition {
        start: i64::try_from(start_bytes).map_err(|_| too_big())?,
        length: i64::try_from(bytes).map_err(|_| too_big())?,
        pno: i32::try_from(number).map_err(|_| too_big())?,
        devname: [0; 64],
        volname: [0; 64],
    };
    let mut arg = BlkpgIoctlArg {
        op: BLKPG_RESIZE_PARTITION,
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as i32,
        data: (&raw mut part).cast(),
    };
    // SAFETY: the kernel reads `arg` and the partition it points to, both alive for the call.
    let r = unsafe { libc::ioctl(disk.as_raw_fd(), BLKPG as _, &raw mut arg) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// `EXT4_IOC_RESIZE_FS` (`_IOW('f', 16, __u64)`): the mounted file system grows to the
/// partition's size in its own blocks.
fn resize_ext4(dir: &std::fs::File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const EXT4_IOC_RESIZE_FS: u32 = 0x4008_6610;
    // SAFETY: statvfs fills the struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(dir.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let block = (st.f_frsize as u64).max(1024);
    let mut blocks: u64 = bytes / block;
    // SAFETY: the kernel reads one u64 we own.
    let r = unsafe { libc::ioctl(dir.as_raw_fd(), EXT4_IOC_RESIZE_FS as _, &raw mut blocks) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// A header's 92 bytes as they are on disk, whatever its fields say (`GPTHeader::write_into`
/// also writes as many entries as the header claims).
fn header_bytes(h: &GPTHeader) -> Vec<u8> {
    let mut raw = Vec::with_capacity(92);
    raw.extend_from_slice(&h.signature);
    raw.extend_from_slice(&h.revision);
    raw.extend_from_slice(&h.header_size.to_le_bytes());
    raw.extend_from_slice(&h.crc32_checksum.to_le_bytes());
    raw.extend_from_slice(&h.reserved);
    for v in [h.primary_lba, h.backup_lba, h.first_usable_lba, h.last_usable_lba] {
        raw.extend_from_slice(&v.to_le_bytes());
    }
    raw.extend_from_slice(&h.disk_guid);
    raw.extend_from_slice(&h.partition_entry_lba.to_le_bytes());
    for v in [h.number_of_partition_entries, h.size_of_partition_entry, h.partition_entry_array_crc32] {
        raw.extend_from_slice(&v.to_le_bytes());
    }
    raw
}

/// Disks for the `firmware` fuzz target and the replay of its corpus.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;
    use std::io::Cursor;

    struct Input<'a>(&'a [u8]);

    impl Input<'_> {
        fn u8(&mut self) -> Option<u8> {
            let (b, rest) = self.0.split_first()?;
            self.0 = rest;
            Some(*b)
        }
        fn u64(&mut self) -> u64 {
            let n = self.0.len().min(8);
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            u64::from_le_bytes(b)
        }
    }

    fn entry(n: u8, start: u64, end: u64) -> GPTPartitionEntry {
        GPTPartitionEntry {
            partition_type_guid: [n; 16],
            unique_partition_guid: [n.wrapping_add(100); 16],
            starting_lba: start,
            ending_lba: end,
            attribute_bits: 0,
            partition_name: "kp-data".into(),
        }
    }

    /// A disk with a whole GPT laid out as `data` says, then grown, then its header fields and
    /// entries changed as `data` says with the CRCs made right again (so the checks past the
    /// CRCs are reached). Returns the disk, a partition number and its start, to plan with.
    pub fn disk(data: &[u8]) -> (Cursor<Vec<u8>>, u32, u64) {
        let mut d = Input(data);
        // Small disks (at most 768 KiB): each input is fast, and every check is reached.
        let sectors = 68 + d.u64() % 512;
        let mut c = Cursor::new(vec![0u8; sectors as usize * 512]);
        let Ok(mut gpt) = gptman::GPT::new_from(&mut c, 512, [7; 16]) else { return (c, 1, 34) };
        let mut next = gpt.header.first_usable_lba;
        for i in 1..=1 + d.u8().unwrap_or(0) % 4 {
            let len = 1 + d.u64() % 256;
            if next + len > gpt.header.last_usable_lba {
                break;
            }
            gpt[u32::from(i)] = entry(i, next, next + len - 1);
            next += len + u64::from(d.u8().unwrap_or(0) % 8);
        }
        if gpt.write_into(&mut c).is_err() {
            return (c, 1, 34);
        }
        let grown = (sectors + d.u64() % 1024) as usize * 512;
        c.get_mut().resize(grown, 0);
        let Ok((mut h, mut entries)) = read_primary(&mut c, 512) else { return (c, 1, 34) };
        let number = 1 + u32::from(d.u8().unwrap_or(0) % 5);
        while let Some(field) = d.u8() {
            let v = d.u64();
            let e = (v % 128) as usize;
            match field % 8 {
                0 => h.backup_lba = v,
                1 => h.first_usable_lba = v,
                2 => h.last_usable_lba = v,
                3 => h.number_of_partition_entries = v as u32,
                4 => h.size_of_partition_entry = v as u32,
                5 => entries[e].starting_lba = d.u64(),
                6 => entries[e].ending_lba = d.u64(),
                _ => entries[e].partition_type_guid = [(v >> 8) as u8 & 1; 16],
            }
        }
        if h.number_of_partition_entries as usize == entries.len() && h.size_of_partition_entry == ENTRY_BYTES {
            h.update_partition_entry_array_crc32(&entries);
            let _ = h.clone().write_into(&mut c, 512, &entries);
        }
        h.update_crc32_checksum();
        c.set_position(512);
        let _ = c.write_all(&header_bytes(&h));
        let start = entries.get(number as usize - 1).map_or(0, |e| e.starting_lba);
        (c, number, start)
    }

    /// What the fuzz target asserts: planning answers or refuses; tables it writes read back,
    /// and planning again has nothing left to do.
    pub fn check(data: &[u8]) {
        let (mut c, number, start) = disk(data);
        if let Ok(Plan::Write { tables, end_lba, was_end_lba }) = plan(&mut c, 512, number, start) {
            assert!(end_lba >= was_end_lba && end_lba >= start);
            write_tables(&mut c, 512, &tables, |_| Ok(())).expect("writing to memory");
            assert_eq!(plan(&mut c, 512, number, start).expect("planned again"), Plan::Done { end_lba });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const SS: u64 = 512;
    const MIB: u64 = 1 << 20;

    /// A disk of `mib` MiB with an ESP and a data partition after it, as images/build.sh
    /// lays them out (1 MiB aligned).
    fn disk(mib: u64, data_mib: u64) -> Cursor<Vec<u8>> {
        let mut c = Cursor::new(vec![0u8; (mib * MIB) as usize]);
        let mut gpt = gptman::GPT::new_from(&mut c, SS, [7; 16]).unwrap();
        gpt.header.first_usable_lba = 2048;
        let part = |n: u8, start: u64, mib: u64| GPTPartitionEntry {
            partition_type_guid: [n; 16],
            unique_partition_guid: [n + 100; 16],
            starting_lba: start,
            ending_lba: start + mib * MIB / SS - 1,
            attribute_bits: 0,
            partition_name: if n == 1 { "kp-esp".into() } else { "kp-data".into() },
        };
        gpt[1] = part(1, 2048, 1);
        gpt[2] = part(2, 4096, data_mib);
        gpt.write_into(&mut c).unwrap();
        gptman::GPT::write_protective_mbr_into(&mut c, SS).unwrap();
        c
    }

    fn bigger(mut c: Cursor<Vec<u8>>, mib: u64) -> Cursor<Vec<u8>> {
        c.get_mut().resize((mib * MIB) as usize, 0);
        c
    }

    fn apply(c: &mut Cursor<Vec<u8>>) -> Plan {
        let p = plan(c, SS, 2, 4096).unwrap();
        if let Plan::Write { tables, .. } = &p {
            write_tables(c, SS, tables, |_| Ok(())).unwrap();
        }
        p
    }

    #[test]
    fn the_last_partition_grows_to_the_disks_end_and_both_tables_agree() {
        let mut c = bigger(disk(8, 2), 24);
        let Plan::Write { end_lba, was_end_lba, .. } = apply(&mut c) else { panic!("nothing to do") };
        assert_eq!(was_end_lba, 4096 + 2 * MIB / SS - 1);
        // 24 MiB less the backup table, rounded down to a MiB.
        assert_eq!(end_lba, 23 * MIB / SS - 1);
        // The primary and the backup read back whole, and say the same.
        let (primary, entries) = read_primary(&mut c, SS).unwrap();
        assert_eq!(entries[1].ending_lba, end_lba);
        assert_eq!(primary.backup_lba, 24 * MIB / SS - 1);
        assert!(backup_agrees(&mut c, SS, primary.backup_lba, &primary));
        let (a, b) = (entries[0].clone(), entries[1].partition_name.as_str().to_owned());
        assert_eq!((a.starting_lba, b.as_str()), (2048, "kp-data"));
        // Done means done: the next boot has nothing to do.
        assert_eq!(apply(&mut c), Plan::Done { end_lba });
        // gptman reads it too, from the primary.
        let gpt = gptman::GPT::read_from(&mut c, SS).unwrap();
        assert!(gpt.is_primary());
        assert_eq!(gpt[2].ending_lba, end_lba);
    }

    #[test]
    fn a_partition_that_reaches_the_disks_end_has_nothing_to_do() {
        // As build.sh lays an image out: the data partition ends at the last whole MiB
        // before the backup table.
        let mut c = disk(8, 5);
        assert!(apply(&mut c) == Plan::Done { end_lba: 7 * MIB / SS - 1 }, "the image as built is left alone");
    }

    #[test]
    fn a_power_cut_after_the_backup_is_finished_at_the_next_boot() {
        let mut c = bigger(disk(8, 2), 16);
        let Plan::Write { tables, end_lba, .. } = plan(&mut c, SS, 2, 4096).unwrap() else { panic!() };
        // The backup is written, then the power goes (the first sync never returns).
        let cut = write_tables(&mut c, SS, &tables, |_| Err(std::io::Error::other("power cut")));
        assert!(cut.is_err());
        // The old primary is whole: the box boots, and the next try writes the rest.
        let (primary, entries) = read_primary(&mut c, SS).unwrap();
        assert_eq!(entries[1].ending_lba, 4096 + 2 * MIB / SS - 1);
        assert_eq!(primary.backup_lba, 8 * MIB / SS - 1);
        assert!(matches!(apply(&mut c), Plan::Write { end_lba: e, .. } if e == end_lba));
        assert_eq!(apply(&mut c), Plan::Done { end_lba });
    }

    #[test]
    fn a_primary_torn_by_a_power_cut_is_written_again_from_the_backup() {
        let mut c = bigger(disk(8, 2), 16);
        let Plan::Write { end_lba, .. } = apply(&mut c) else { panic!("nothing to do") };
        // The primary's entries were half written when the power went.
        c.get_mut()[2 * SS as usize + 128 + 40] ^= 0xff;
        assert!(read_primary(&mut c, SS).is_err());
        assert!(matches!(apply(&mut c), Plan::Write { end_lba: e, .. } if e == end_lba));
        let (_, entries) = read_primary(&mut c, SS).unwrap();
        assert_eq!(entries[1].ending_lba, end_lba);
        assert!(apply(&mut c) == Plan::Done { end_lba });
        // Torn both ways: nothing to stand on, nothing is written.
        c.get_mut()[SS as usize + 30] ^= 0xff;
        let last = c.get_ref().len() - SS as usize;
        c.get_mut()[last + 30] ^= 0xff;
        assert!(matches!(plan(&mut c, SS, 2, 4096), Err(GrowError::Table(_))));
    }

    #[test]
    fn a_protective_mbr_left_at_the_old_size_is_written_again() {
        let mut c = bigger(disk(8, 2), 16);
        let Plan::Write { end_lba, .. } = apply(&mut c) else { panic!("nothing to do") };
        // The power went after the primary, before the MBR.
        c.get_mut()[458..462].copy_from_slice(&(8 * MIB as u32 / SS as u32 - 1).to_le_bytes());
        assert!(
            matches!(apply(&mut c), Plan::Write { end_lba: e, was_end_lba: w, .. } if e == end_lba && w == end_lba)
        );
        assert!(apply(&mut c) == Plan::Done { end_lba });
    }

    #[test]
    fn a_damaged_backup_is_written_again() {
        let mut c = bigger(disk(8, 2), 16);
        let Plan::Write { end_lba, .. } = apply(&mut c) else { panic!() };
        let last = c.get_ref().len() - SS as usize;
        c.get_mut()[last + 40] ^= 0xff;
        assert!(
            matches!(apply(&mut c), Plan::Write { end_lba: e, was_end_lba: w, .. } if e == end_lba && w == end_lba)
        );
        assert_eq!(apply(&mut c), Plan::Done { end_lba });
    }

    #[test]
    fn refuses_what_is_not_its_to_grow() {
        let mut c = bigger(disk(8, 2), 16);
        let why = |r: Result<Plan, GrowError>| r.unwrap_err().to_string();
        assert!(why(plan(&mut c, SS, 1, 2048)).contains("not the last"));
        assert!(why(plan(&mut c, SS, 2, 4000)).contains("does not start at sector 4000"));
        assert!(why(plan(&mut c, SS, 3, 0)).contains("does not start"), "an unused entry");
        assert!(why(plan(&mut c, SS, 0, 0)).contains("no partition entry 0"));
        assert!(why(plan(&mut c, SS, 129, 0)).contains("no partition entry 129"));
        // An image written to a smaller disk: its table reaches past the end; nothing is done.
        let mut small = disk(8, 5);
        small.get_mut().truncate((7 * MIB) as usize);
        assert!(why(plan(&mut small, SS, 2, 4096)).contains("smaller"));
        // No table at all.
        let mut blank = Cursor::new(vec![0u8; MIB as usize]);
        assert!(matches!(plan(&mut blank, SS, 2, 4096), Err(GrowError::Table(_))));
        // A tiny disk.
        let mut tiny = Cursor::new(vec![0u8; 4096]);
        assert!(plan(&mut tiny, SS, 2, 4096).is_err());
    }

    #[test]
    fn a_header_claiming_more_entries_than_the_ceiling_is_refused_before_reading_them() {
        for (count, size) in
            [(GPT_PARTITION_ENTRIES_MAX + 1, ENTRY_BYTES), (u32::MAX, ENTRY_BYTES), (128, 256), (0, 128)]
        {
            let mut c = bigger(disk(8, 2), 16);
            let (mut h, _) = read_primary(&mut c, SS).unwrap();
            h.number_of_partition_entries = count;
            h.size_of_partition_entry = size;
            h.update_crc32_checksum();
            // The header alone, with a valid CRC: `write_into` would also write entries.
            c.seek(SeekFrom::Start(SS)).unwrap();
            let raw = header_bytes(&h);
            c.write_all(&raw).unwrap();
            let e = plan(&mut c, SS, 2, 4096).unwrap_err().to_string();
            assert!(e.contains("entries"), "{count} x {size}: {e}");
        }
    }
}
