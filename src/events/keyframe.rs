//! An event's keyframe: the picture recorded at or just before the event, found through the
//! catalog (event → camera → stream → keyframe row → recording file and fragment offset)
//! and served as a one-frame MP4 (the file's init segment and a fragment holding only that
//! keyframe), which a browser shows like any video.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::base::{StreamKey, StreamKind};
use crate::catalog::{Catalog, CatalogError, Keyframe, RecordingRow};
use crate::limits;
use crate::media::fmp4::{SampleEntry, TrackRun, fragment_header_buffer, write_fragment_header};
use crate::media::fmp4_read::{ReadError, SegmentReader};

/// Why there is no keyframe to show.
#[derive(Debug, thiserror::Error)]
pub enum KeyframeError {
    #[error("no such event")]
    NoEvent,
    #[error("nothing recorded of the event's camera in the {} s up to it", limits::EVENT_KEYFRAME_BACK_MS / 1000)]
    NothingRecorded,
    #[error("nothing recorded of that stream")]
    NothingKept,
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Read { path: String, source: ReadError },
    #[error("{path}: no keyframe where the catalog says")]
    Missing { path: String },
}

/// Where an event's keyframe is: what the catalog alone tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyframeAt {
    pub path: PathBuf,
    /// The recording file's valid length.
    pub file_bytes: u64,
    /// The fragment that holds the keyframe.
    pub fragment_start_byte: u64,
    pub wall_us: i64,
}

/// Resolves event `id` to its keyframe's place: the camera's main stream (else its sub
/// stream), the last keyframe at or before the event.
pub fn resolve(catalog: &Catalog, data_dir: &Path, id: u64) -> Result<KeyframeAt, KeyframeError> {
    let event = catalog.event(id)?.ok_or(KeyframeError::NoEvent)?;
    let (row, kf) =
        find(catalog, &event.envelope.camera, event.envelope.time())?.ok_or(KeyframeError::NothingRecorded)?;
    Ok(KeyframeAt {
        path: data_dir.join(&row.path),
        file_bytes: row.bytes,
        fragment_start_byte: kf.fragment_start_byte,
        wall_us: kf.wall_us,
    })
}

/// `camera`'s last keyframe at or before `time_us` in a recording that reaches that time,
/// with its recording: the main stream's, else the sub stream's.
pub fn find(catalog: &Catalog, camera: &str, time_us: i64) -> Result<Option<(RecordingRow, Keyframe)>, CatalogError> {
    for kind in [StreamKind::Main, StreamKind::Sub] {
        let Some(stream_id) = catalog.find_stream(&StreamKey::new(camera, kind))? else { continue };
        let back_us = limits::EVENT_KEYFRAME_BACK_MS as i64 * 1000;
        let Some((rec, kf)) = catalog.keyframe_near(stream_id, time_us, back_us, 0)? else { continue };
        let Some(row) = catalog.recording(rec)? else { continue };
        // Only a recording that reaches the event's time shows it (not one that ended
        // before: its last picture is of something else).
        if row.wall_end_us < time_us {
            continue;
        }
        return Ok(Some((row, kf)));
    }
    Ok(None)
}

/// The newest keyframe kept of stream `key`: a camera's poster while its live view
/// connects, and its last picture while it is offline.
pub fn latest(catalog: &Catalog, data_dir: &Path, key: &StreamKey) -> Result<KeyframeAt, KeyframeError> {
    let stream_id = catalog.find_stream(key)?.ok_or(KeyframeError::NothingKept)?;
    let (rec, kf) = catalog.keyframe_near(stream_id, i64::MAX, i64::MAX, 0)?.ok_or(KeyframeError::NothingKept)?;
    let row = catalog.recording(rec)?.ok_or(KeyframeError::NothingKept)?;
    Ok(KeyframeAt {
        path: data_dir.join(&row.path),
        file_bytes: row.bytes,
        fragment_start_byte: kf.fragment_start_byte,
        wall_us: kf.wall_us,
    })
}

/// Reads the keyframe and makes its one-frame MP4.
pub fn read(k: &KeyframeAt) -> Result<Vec<u8>, KeyframeError> {
    let path = k.path.display().to_string();
    let io = |source| KeyframeError::Io { path: path.clone(), source };
    let read_err = |source| KeyframeError::Read { path: path.clone(), source };
    let mut file = File::open(&k.path).map_err(io)?;
    let (mut reader, init) = SegmentReader::open(&mut file, k.file_bytes).map_err(read_err)?;
    reader.seek_to(k.fragment_start_byte);
    let fragment = reader.next_fragment().map_err(read_err)?.ok_or(KeyframeError::Missing { path: path.clone() })?;
    let wall0 = fragment.wall_us.ok_or(KeyframeError::Missing { path: path.clone() })?;
    // The keyframe: the first sync sample at the catalog's time (a fragment cut by time
    // may start with other frames).
    let mut offset = fragment.data_start_byte;
    let mut at_90k = 0i64;
    let mut found = None;
    for s in fragment.samples.iter().take(limits::FRAGMENT_MAX_SAMPLES) {
        let wall = wall0 + crate::clock::ticks_90k_to_us(at_90k);
        if s.is_key && wall >= k.wall_us - 1_000 {
            found = Some((offset, s.size_bytes));
            break;
        }
        offset += u64::from(s.size_bytes);
        at_90k += i64::from(s.duration);
    }
    let (offset, size) = found.ok_or(KeyframeError::Missing { path: path.clone() })?;
    if size as usize > limits::FRAME_MAX_BYTES || offset + u64::from(size) > k.file_bytes {
        return Err(KeyframeError::Missing { path });
    }
    // The init segment is copied whole: a file whose boxes put it past its ceiling is not
    // one of ours.
    if init.end_byte > limits::INIT_SEGMENT_MAX_BYTES as u64 {
        return Err(KeyframeError::Missing { path });
    }
    let mut out = vec![0u8; init.end_byte as usize];
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.read_exact(&mut out).map_err(io)?;
    let mut head = fragment_header_buffer();
    let sample = [SampleEntry { duration: 3000, size_bytes: size, is_key: true }];
    let video = TrackRun { base_decode: 0, samples: &sample };
    let n = write_fragment_header(&mut head[..], 1, k.wall_us, video, None)
        .map_err(|_| KeyframeError::Missing { path: path.clone() })?;
    out.extend_from_slice(&head[..n]);
    let at = out.len();
    out.resize(at + size as usize, 0);
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    file.read_exact(&mut out[at..]).map_err(io)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::events::EventRecord;

    const WALL0: i64 = 1_800_000_000_000_000;

    fn event(cat: &Catalog, id: u64, camera: &str, time_us: i64) {
        let json = format!(r#"{{"camera":"{camera}","time_us":{time_us}}}"#);
        let envelope = crate::events::envelope::parse(json.as_bytes(), 0).unwrap();
        let r = EventRecord {
            id,
            rev: 1,
            principal: "token:1".into(),
            received_us: time_us,
            envelope,
            snapshot: None,
            hold: None,
        };
        cat.put_event(&r).unwrap();
    }

    #[test]
    fn a_streams_poster_is_its_newest_keyframe_and_a_stream_never_recorded_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        crate::record::testing::recording(&cat, dir.path(), "front/main", WALL0, 10);
        let front = StreamKey::new("front", StreamKind::Main);
        let id = cat.find_stream(&front).unwrap().unwrap();
        let newest = cat.keyframes(id, WALL0, WALL0 + 60_000_000).unwrap().last().unwrap().1.wall_us;
        let k = latest(&cat, dir.path(), &front).unwrap();
        assert_eq!(k.wall_us, newest);
        assert!(newest > WALL0, "more than one keyframe: {newest}");
        let mp4 = read(&k).unwrap();
        let (mut r, _) = SegmentReader::open(std::io::Cursor::new(&mp4), mp4.len() as u64).unwrap();
        assert!(r.next_fragment().unwrap().unwrap().samples[0].is_key);
        let back = StreamKey::new("back", StreamKind::Main);
        assert!(matches!(latest(&cat, dir.path(), &back), Err(KeyframeError::NothingKept)));
    }

    #[test]
    fn an_event_resolves_to_the_keyframe_at_or_before_it_and_reads_as_one_frame() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        crate::record::testing::recording(&cat, dir.path(), "front/main", WALL0, 10);
        event(&cat, 1, "front", WALL0 + 4_500_000);
        event(&cat, 2, "front", WALL0 - 1);
        event(&cat, 3, "back", WALL0 + 1_000_000);
        event(&cat, 4, "front", WALL0 + 30_000_000);
        let k = resolve(&cat, dir.path(), 1).unwrap();
        assert_eq!(k.wall_us, WALL0 + 4_000_000, "the keyframe at or before");
        let mp4 = read(&k).unwrap();
        // The init segment, then one fragment of one 40-byte sample.
        let (mut r, init) = SegmentReader::open(std::io::Cursor::new(&mp4), mp4.len() as u64).unwrap();
        let f = r.next_fragment().unwrap().unwrap();
        assert_eq!(f.samples.len(), 1);
        assert!(f.samples[0].is_key);
        assert_eq!(f.samples[0].size_bytes, 40);
        assert_eq!(f.wall_us, Some(WALL0 + 4_000_000));
        assert_eq!(init.width, 640);
        assert!(matches!(resolve(&cat, dir.path(), 2), Err(KeyframeError::NothingRecorded)), "before anything");
        assert!(matches!(resolve(&cat, dir.path(), 3), Err(KeyframeError::NothingRecorded)), "another camera");
        assert!(matches!(resolve(&cat, dir.path(), 4), Err(KeyframeError::NothingRecorded)), "after its end");
        assert!(matches!(resolve(&cat, dir.path(), 9), Err(KeyframeError::NoEvent)));
        // A keyframe further back than the ceiling is not the event's picture: a recording
        // whose only keyframe row is at its start, 70 s long.
        let stream_id = cat.stream_id(&StreamKey::new("side", StreamKind::Main)).unwrap();
        let row = crate::catalog::RecordingRow {
            stream_id,
            wall_start_us: WALL0,
            wall_end_us: WALL0 + 70_000_000,
            fragments: 1,
            open: false,
            ..crate::catalog::RecordingRow::for_test("recordings/side.mp4")
        };
        let keyframe = crate::catalog::Keyframe { wall_us: WALL0, fragment_start_byte: 0 };
        let batch = crate::catalog::Batch {
            recordings: vec![(50, row)],
            keyframes: vec![(stream_id, 50, keyframe)],
            ..Default::default()
        };
        cat.commit(&batch).unwrap();
        let back = limits::EVENT_KEYFRAME_BACK_MS as i64 * 1000;
        event(&cat, 5, "side", WALL0 + back);
        event(&cat, 6, "side", WALL0 + back + 1);
        assert_eq!(resolve(&cat, dir.path(), 5).unwrap().wall_us, WALL0);
        assert!(matches!(resolve(&cat, dir.path(), 6), Err(KeyframeError::NothingRecorded)));
    }
}
