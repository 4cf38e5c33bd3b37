//! Start-up reconciliation of the catalog with the files on disk, before recording starts.
//!
//! 1. Files on the garbage list are deleted and unlisted.
//! 2. Every recording still marked open (the power went while it was written) is read past
//!    its last cataloged fragment: each whole, valid fragment found there is indexed (its
//!    wall time comes from its `prft`); the first torn or invalid one and everything after it
//!    is cut off. A recording left with no fragment is deleted.
//! 3. Files under `recordings/` that the catalog does not know are deleted through the
//!    garbage list.
//!
//! After this every file is an init segment plus whole fragments, every cataloged fragment
//! is inside its file, and no file is unknown.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::Path;

use tracing::{info, warn};

use crate::base::fs::sync_dir;
use crate::catalog::{Batch, Catalog, CatalogError, FragmentRow, Keyframe, Loss, RecordingRow};
use crate::clock::ticks_90k_to_us;
use crate::media::fmp4_read::{ReadError, SegmentReader};

/// Where recordings live under the data directory.
pub const RECORDINGS_DIR: &str = "recordings";

/// What recovery did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub garbage_deleted: usize,
    pub recordings_closed: usize,
    pub fragments_indexed: usize,
    pub bytes_cut: u64,
    pub recordings_dropped: usize,
    pub unknown_files_deleted: usize,
}

/// Why recovery could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("recovery: {path}: {source}")]
    Io { path: String, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RecoveryError + '_ {
    move |source| RecoveryError::Io { path: path.display().to_string(), source }
}

/// Reconciles the catalog and the data directory. A file that cannot be read or changed is
/// logged and left for the next start; only the catalog's own errors stop recovery, so one
/// bad file never keeps every camera from recording.
///
/// What an open recording lost (from its last whole fragment to `now_us`, the start's wall
/// time) is noted as lost to a power cut, so an event of that moment can say why it has no
/// footage. Before the clock is set `now_us` may be earlier: the span is then only a point.
pub fn recover(catalog: &Catalog, data_dir: &Path, now_us: i64) -> Result<Report, RecoveryError> {
    let mut report = Report::default();
    let mut batch = Batch::default();

    for rel in catalog.garbage()? {
        match remove(&data_dir.join(&rel)) {
            Ok(()) => {
                batch.garbage_done.push(rel);
                report.garbage_deleted += 1;
            }
            Err(e) => warn!("{e}; it stays on the garbage list"),
        }
    }

    let mut known = BTreeSet::new();
    // (stream, where its footage stops) of each recording the power cut short.
    let mut cut_short = Vec::new();
    for (id, row) in catalog.recordings()? {
        let path = data_dir.join(&row.path);
        if !row.open {
            match path.try_exists() {
                Ok(true) => {
                    // A closed file ends at its last fragment; a tail past it is a write
                    // that was never committed.
                    if let Err(e) = cut_tail(&path, row.bytes, &mut report) {
                        warn!("{e}");
                    }
                    known.insert(row.path);
                }
                Ok(false) => {
                    // Unlinked ahead of its rows on a full disk (or removed by hand).
                    warn!(recording = id, path = %row.path, "closed recording has no file; dropping its rows");
                    let row = catalog.delete_recording(id, Loss::DiskFull)?;
                    batch.garbage_done.push(row.path);
                    report.recordings_dropped += 1;
                }
                Err(e) => {
                    warn!(path = %path.display(), "cannot tell whether the file exists ({e}); leaving it");
                    known.insert(row.path);
                }
            }
            continue;
        }
        let rel = row.path.clone();
        let (stream_id, start_us) = (row.stream_id, row.wall_start_us);
        match recover_one(id, row, data_dir, &mut batch, &mut report) {
            Ok(true) => {
                let end_us = batch.recordings.last().map_or(start_us, |(_, r)| r.wall_end_us);
                cut_short.push((stream_id, end_us));
                known.insert(rel);
            }
            Ok(false) => {
                cut_short.push((stream_id, start_us));
                let row = catalog.delete_recording(id, Loss::PowerCut)?;
                match remove(&data_dir.join(&row.path)) {
                    Ok(()) => batch.garbage_done.push(row.path),
                    Err(e) => warn!("{e}; it stays on the garbage list"),
                }
                report.recordings_dropped += 1;
            }
            Err(e) => {
                warn!(recording = id, "cannot recover ({e}); leaving it open for the next start");
                known.insert(rel);
            }
        }
    }

    let root = data_dir.join(RECORDINGS_DIR);
    let mut unknown = Vec::new();
    if let Err(e) = walk(&root, data_dir, 0, &mut |rel| {
        if !known.contains(rel) {
            unknown.push(rel.to_string());
        }
    }) {
        warn!("cannot list every recording file ({e}); unknown files may remain until the next start");
    }
    for rel in unknown {
        catalog.add_garbage(&rel)?;
        match remove(&data_dir.join(&rel)) {
            Ok(()) => {
                batch.garbage_done.push(rel);
                report.unknown_files_deleted += 1;
            }
            Err(e) => warn!("{e}; it stays on the garbage list"),
        }
    }
    if !batch.is_empty() {
        catalog.commit(&batch)?;
    }
    for (stream_id, from_us) in cut_short {
        catalog.note_loss(stream_id, from_us, now_us, Loss::PowerCut)?;
    }
    if report != Report::default() {
        info!(?report, "recovered the catalog after an unclean stop");
    }
    Ok(report)
}

/// Cuts a file back to `len_bytes` if it is longer, durably.
fn cut_tail(path: &Path, len_bytes: u64, report: &mut Report) -> Result<(), RecoveryError> {
    let on_disk = std::fs::metadata(path).map_err(io_err(path))?.len();
    if on_disk > len_bytes {
        let f = File::options().write(true).open(path).map_err(io_err(path))?;
        f.set_len(len_bytes).map_err(io_err(path))?;
        f.sync_all().map_err(io_err(path))?;
        report.bytes_cut += on_disk - len_bytes;
    }
    Ok(())
}

/// Indexes the whole fragments past `row`'s last cataloged one and cuts the rest. Returns
/// whether the recording keeps any fragment (`false`: drop it). An I/O error leaves the
/// recording as it is.
fn recover_one(
    id: u64,
    mut row: RecordingRow,
    data_dir: &Path,
    batch: &mut Batch,
    report: &mut Report,
) -> Result<bool, RecoveryError> {
    let path = data_dir.join(&row.path);
    let file = match File::options().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let len_bytes = file.metadata().map_err(io_err(&path))?.len();
    let (mut reader, init) = match SegmentReader::open(&file, len_bytes) {
        Ok(r) => r,
        Err(ReadError::Io(e)) => return Err(io_err(&path)(e)),
        Err(e) if row.fragments > 0 => {
            // Committed fragments stay committed: close the row as it stands.
            warn!(path = %path.display(), "unreadable init segment, keeping the committed fragments: {e}");
            row.open = false;
            batch.recordings.push((id, row));
            report.recordings_closed += 1;
            return Ok(true);
        }
        Err(e) => {
            warn!(path = %path.display(), "unreadable init segment, dropping the file: {e}");
            return Ok(false);
        }
    };
    let mut valid_end = if row.fragments > 0 { row.bytes } else { init.end_byte };
    reader.seek_to(valid_end);
    loop {
        let frag = match reader.next_fragment() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                warn!(path = %path.display(), "cutting a torn fragment: {e}");
                break;
            }
        };
        let first_ok = row.fragments > 0 || frag.samples.first().is_some_and(|s| s.is_key);
        let (Some(wall_start_us), true, true) = (frag.wall_us, frag.sequence == row.fragments + 1, first_ok) else {
            warn!(path = %path.display(), "cutting a fragment out of sequence");
            break;
        };
        let duration_90k = frag.duration_90k();
        let fr = FragmentRow {
            wall_start_us,
            wall_end_us: wall_start_us + ticks_90k_to_us(duration_90k as i64),
            media_start_90k: frag.base_decode_90k,
            duration_90k,
            start_byte: frag.start_byte,
            end_byte: frag.end_byte,
            frames: frag.samples.len() as u32,
            keyframes: frag.samples.iter().filter(|s| s.is_key).count() as u32,
        };
        let mut offset_90k = 0i64;
        for s in &frag.samples {
            if s.is_key {
                batch.keyframes.push((
                    row.stream_id,
                    id,
                    Keyframe {
                        wall_us: wall_start_us + ticks_90k_to_us(offset_90k),
                        fragment_start_byte: frag.start_byte,
                    },
                ));
            }
            offset_90k += i64::from(s.duration);
        }
        row.fragments += 1;
        row.frames += u64::from(fr.frames);
        row.wall_end_us = fr.wall_end_us;
        row.media_duration_90k = fr.media_start_90k + fr.duration_90k;
        row.bytes = fr.end_byte;
        row.init_bytes = init.end_byte;
        valid_end = fr.end_byte;
        batch.fragments.push((id, row.fragments, fr));
        report.fragments_indexed += 1;
    }
    if row.fragments == 0 {
        return Ok(false);
    }
    if valid_end < len_bytes {
        file.set_len(valid_end).map_err(io_err(&path))?;
        report.bytes_cut += len_bytes - valid_end;
    }
    // Whatever was only in the page cache (a killed process, not a power cut) is made
    // durable before the rows that now point at it.
    file.sync_all().map_err(io_err(&path))?;
    row.open = false;
    batch.recordings.push((id, row));
    report.recordings_closed += 1;
    Ok(true)
}

fn remove(path: &Path) -> Result<(), RecoveryError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            if let Some(dir) = path.parent() {
                let _ = sync_dir(dir);
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Calls `f` with the data-relative path of every file under `dir`, three levels deep at
/// most (`recordings/<camera>/<stream>/<file>`).
pub(crate) fn walk(dir: &Path, data_dir: &Path, depth: usize, f: &mut dyn FnMut(&str)) -> Result<(), RecoveryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err(&path))?;
        if kind.is_dir() && depth < 2 {
            walk(&path, data_dir, depth + 1, f)?;
        } else if kind.is_file()
            && let Some(rel) = path.strip_prefix(data_dir).ok().and_then(|p| p.to_str())
        {
            f(rel);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Batch;

    const WALL0: i64 = 1_800_000_000_000_000;
    /// When the box starts again: an hour after the recordings.
    const T_NOW: i64 = WALL0 + 3_600_000_000;

    fn segment(n: u32) -> (Vec<u8>, Vec<(u64, u64)>) {
        crate::record::testing::segment(n, WALL0)
    }

    fn open_row(path: &str) -> RecordingRow {
        RecordingRow { wall_start_us: WALL0, wall_end_us: WALL0, ..RecordingRow::for_test(path) }
    }

    #[test]
    fn whole_fragments_past_the_catalog_are_indexed_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let cat = Catalog::open(&data.join("c.redb")).unwrap();
        let rel = "recordings/cam/main/a.mp4";
        let (id, mut row) = cat.begin_recording(open_row(""), |_| rel.into()).unwrap();
        let (mut bytes, bounds) = segment(3);
        // The catalog knows the first fragment only.
        row.fragments = 1;
        row.frames = 15;
        row.bytes = bounds[0].1;
        let first = FragmentRow {
            wall_start_us: WALL0,
            wall_end_us: WALL0 + 1_000_000,
            media_start_90k: 0,
            duration_90k: 90_000,
            start_byte: bounds[0].0,
            end_byte: bounds[0].1,
            frames: 15,
            keyframes: 1,
        };
        cat.commit(&Batch { fragments: vec![(id, 1, first)], recordings: vec![(id, row)], ..Batch::default() })
            .unwrap();
        // A fourth fragment was being written when the power went.
        let (torn, _) = segment(4);
        let whole_len = bytes.len();
        bytes.extend_from_slice(&torn[whole_len..whole_len + 100]);
        std::fs::create_dir_all(data.join("recordings/cam/main")).unwrap();
        std::fs::write(data.join(rel), &bytes).unwrap();
        // A file the catalog never knew, and an open recording whose file never appeared.
        std::fs::write(data.join("recordings/cam/main/stray.mp4"), b"junk").unwrap();
        cat.begin_recording(open_row(""), |_| "recordings/cam/main/never.mp4".into()).unwrap();

        let report = recover(&cat, data, T_NOW).unwrap();
        assert_eq!(
            report,
            Report {
                garbage_deleted: 0,
                recordings_closed: 1,
                fragments_indexed: 2,
                bytes_cut: 100,
                recordings_dropped: 1,
                unknown_files_deleted: 1,
            }
        );
        let recs = cat.recordings().unwrap();
        assert_eq!(recs.len(), 1);
        let (_, r) = &recs[0];
        assert!(!r.open);
        assert_eq!((r.fragments, r.frames, r.bytes), (3, 45, bounds[2].1));
        assert_eq!(r.wall_end_us, WALL0 + 3_000_000);
        assert_eq!(std::fs::metadata(data.join(rel)).unwrap().len(), bounds[2].1);
        let frags = cat.fragments(id).unwrap();
        assert_eq!(frags.len(), 3);
        assert_eq!(frags[2].1.wall_start_us, WALL0 + 2_000_000);
        assert_eq!(cat.keyframes(1, 0, i64::MAX).unwrap().len(), 2, "recovered keyframes indexed");
        assert!(!data.join("recordings/cam/main/stray.mp4").exists());
        // From the last whole fragment to the start, the footage is noted as lost to the cut
        // (and all of the recording whose file never appeared).
        assert_eq!(cat.loss_at(r.stream_id, WALL0 + 3_500_000).unwrap(), Some(Loss::PowerCut));
        assert_eq!(cat.loss_at(r.stream_id, T_NOW - 1).unwrap(), Some(Loss::PowerCut));
        assert!(cat.garbage().unwrap().is_empty());
        // Recovery is idempotent.
        assert_eq!(recover(&cat, data, T_NOW).unwrap(), Report::default());
    }

    #[test]
    fn a_recording_with_no_whole_fragment_is_dropped_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let cat = Catalog::open(&data.join("c.redb")).unwrap();
        let rel = "recordings/cam/main/b.mp4";
        cat.begin_recording(open_row(""), |_| rel.into()).unwrap();
        let (bytes, bounds) = segment(1);
        std::fs::create_dir_all(data.join("recordings/cam/main")).unwrap();
        std::fs::write(data.join(rel), &bytes[..bounds[0].1 as usize - 1]).unwrap();
        let report = recover(&cat, data, T_NOW).unwrap();
        assert_eq!(report.recordings_dropped, 1);
        assert!(cat.recordings().unwrap().is_empty());
        assert!(!data.join(rel).exists());
    }

    #[test]
    fn a_closed_recording_whose_file_is_gone_loses_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let mut row = open_row("");
        row.open = false;
        let (id, _) = cat.begin_recording(row, |_| "recordings/cam/main/gone.mp4".into()).unwrap();
        let report = recover(&cat, dir.path(), T_NOW).unwrap();
        assert_eq!(report.recordings_dropped, 1);
        assert!(cat.recordings().unwrap().is_empty());
        assert!(cat.fragments(id).unwrap().is_empty());
    }

    #[test]
    fn a_closed_file_longer_than_its_rows_is_cut_back() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let cat = Catalog::open(&data.join("c.redb")).unwrap();
        let (bytes, bounds) = segment(2);
        let mut row = open_row("");
        row.open = false;
        row.fragments = 1;
        row.bytes = bounds[0].1;
        cat.begin_recording(row, |_| "recordings/cam/main/c.mp4".into()).unwrap();
        std::fs::create_dir_all(data.join("recordings/cam/main")).unwrap();
        std::fs::write(data.join("recordings/cam/main/c.mp4"), &bytes).unwrap();
        let report = recover(&cat, data, T_NOW).unwrap();
        assert_eq!(report.bytes_cut, bounds[1].1 - bounds[0].1);
        assert_eq!(std::fs::metadata(data.join("recordings/cam/main/c.mp4")).unwrap().len(), bounds[0].1);
    }

    #[test]
    fn committed_fragments_survive_an_unreadable_init_segment() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let cat = Catalog::open(&data.join("c.redb")).unwrap();
        let (mut bytes, bounds) = segment(1);
        let mut row = open_row("");
        row.fragments = 1;
        row.bytes = bounds[0].1;
        let (id, _) = cat.begin_recording(row, |_| "recordings/cam/main/d.mp4".into()).unwrap();
        bytes[4..8].copy_from_slice(b"junk"); // the ftyp's type
        std::fs::create_dir_all(data.join("recordings/cam/main")).unwrap();
        std::fs::write(data.join("recordings/cam/main/d.mp4"), &bytes).unwrap();
        recover(&cat, data, T_NOW).unwrap();
        let recs = cat.recordings().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].0, id);
        assert!(!recs[0].1.open);
        assert!(data.join("recordings/cam/main/d.mp4").exists());
    }
}
