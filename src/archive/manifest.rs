//! Manifests: what a bucket holds of one stream on one day, the archive's commit point. A
//! recording is in a manifest only once its object is stored and confirmed, and a manifest
//! is written after the objects it names, so no manifest names an object that is not there.
//!
//! A day's manifest comes in parts (`<prefix>/manifests/<camera>/<stream>/<day>/<part>.json`,
//! parts numbered from 0 in three digits), each rewritten whole as recordings are added,
//! until it reaches [`limits::ARCHIVE_MANIFEST_PART_BYTES`]; then the next part starts. So a
//! rewrite sends at most about that much, and a reader (the box's playback, `keeppeek
//! archive list`, another box) holds one part at a time.
//!
//! A camera's events have a manifest of their own per day, as a stream named
//! `<camera>/events`: each event's latest revision archived, with its snapshot's object
//! (`<prefix>/events/<camera>/<day>/<event id>.jpg`), written after the snapshot is stored.
//!
//! JSON, so any tool can read what a bucket holds. Each recording carries what playback and
//! export need to read a range of it with range requests: its fragments, each a `moof` and
//! `mdat` that starts at a keyframe (one fragment per GOP), as eight numbers: wall start
//! after the recording's (µs), wall duration (µs), media start (90 kHz), media duration
//! (90 kHz), first byte, bytes, frames, keyframes.

use serde::{Deserialize, Serialize};

use crate::catalog::FragmentRow;
use crate::catalog::events::{EventBox, EventRecord};
use crate::catalog::rows::RecordingRow;
use crate::limits;

/// The manifests' layout version.
pub const VERSION: u32 = 1;

/// What the manifests of a camera's events are named as a stream: `<camera>/events`.
pub const EVENTS: &str = "events";

/// The stream name of `camera`'s events' manifests.
pub fn events_stream(camera: &str) -> String {
    format!("{camera}/{EVENTS}")
}

/// One part of a stream's day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    /// The box that wrote it (its catalog's id) and its prefix.
    pub box_id: String,
    pub prefix: String,
    /// `camera/kind`.
    pub stream: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub part: u32,
    pub recordings: Vec<Entry>,
    /// Only in the manifests of a camera's events (`<camera>/events`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventEntry>,
}

/// One archived event: its latest revision when it was archived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEntry {
    /// Its id and revision on the box that took it.
    pub id: u64,
    pub rev: u32,
    pub time_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<i64>,
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    pub text: String,
    pub boxes: Vec<EventBox>,
    pub snapshot: Option<SnapshotEntry>,
}

/// An event's snapshot, stored as its own object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotEntry {
    pub key: String,
    pub bytes: u64,
    pub etag: String,
    pub width: u16,
    pub height: u16,
}

impl EventEntry {
    /// The entry of event revision `r`, its snapshot stored as `snapshot`.
    pub fn of(r: &EventRecord, snapshot: Option<SnapshotEntry>) -> EventEntry {
        let e = &r.envelope;
        EventEntry {
            id: r.id,
            rev: r.rev,
            time_us: e.time(),
            end_us: e.end_us,
            labels: e.labels.clone(),
            score: e.score,
            text: e.text.clone(),
            boxes: e.boxes.clone(),
            snapshot,
        }
    }
}

/// One archived recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its id on the box that recorded it.
    pub id: u64,
    pub key: String,
    pub bytes: u64,
    /// The object's ETag, as the server confirmed it.
    pub etag: String,
    pub codec: String,
    pub width: u16,
    pub height: u16,
    pub audio: Option<String>,
    pub wall_start_us: i64,
    pub wall_end_us: i64,
    pub media_duration_90k: u64,
    pub init_bytes: u64,
    pub frames: u64,
    pub fragments: Vec<[i64; 8]>,
}

impl Entry {
    /// The entry of recording `id` stored as `key` with `etag`, from its catalog rows.
    pub fn of(id: u64, key: String, etag: String, row: &RecordingRow, fragments: &[FragmentRow]) -> Entry {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Entry {
            id,
            key,
            bytes: row.bytes,
            etag,
            codec: row.codec.name().into(),
            width: row.width,
            height: row.height,
            audio: row.audio.map(|a| a.name().to_string()),
            wall_start_us: row.wall_start_us,
            wall_end_us: row.wall_end_us,
            media_duration_90k: row.media_duration_90k,
            init_bytes: row.init_bytes,
            frames: row.frames,
            fragments: fragments
                .iter()
                .map(|f| {
                    [
                        f.wall_start_us - row.wall_start_us,
                        f.wall_end_us - f.wall_start_us,
                        n(f.media_start_90k),
                        n(f.duration_90k),
                        n(f.start_byte),
                        n(f.end_byte.saturating_sub(f.start_byte)),
                        i64::from(f.frames),
                        i64::from(f.keyframes),
                    ]
                })
                .collect(),
        }
    }

    /// Its fragments as the catalog's rows, from the numbers kept.
    pub fn fragment_rows(&self) -> Vec<FragmentRow> {
        let u = |v: i64| u64::try_from(v).unwrap_or(0);
        self.fragments
            .iter()
            .map(|f| {
                let wall_start_us = self.wall_start_us.saturating_add(f[0]);
                FragmentRow {
                    wall_start_us,
                    wall_end_us: wall_start_us.saturating_add(f[1]),
                    media_start_90k: u(f[2]),
                    duration_90k: u(f[3]),
                    start_byte: u(f[4]),
                    end_byte: u(f[4]).saturating_add(u(f[5])),
                    frames: u32::try_from(f[6]).unwrap_or(0),
                    keyframes: u32::try_from(f[7]).unwrap_or(0),
                }
            })
            .collect()
    }
}

/// The key of part `part` of `stream`'s manifest of `day`.
pub fn key(prefix: &str, stream: &str, day: &str, part: u32) -> String {
    format!("{prefix}/manifests/{stream}/{day}/{part:03}.json")
}

/// The manifest as stored.
pub fn encode(m: &Manifest) -> Vec<u8> {
    serde_json::to_vec(m).unwrap_or_default()
}

/// A stored manifest read and checked: within [`limits::ARCHIVE_MANIFEST_MAX_BYTES`], this
/// version, every recording's key under its prefix, its fragments in order and within its
/// bytes; events only in an events manifest, each with its times in order and its
/// snapshot's key under the prefix.
pub fn decode(bytes: &[u8]) -> Result<Manifest, String> {
    if bytes.len() > limits::ARCHIVE_MANIFEST_MAX_BYTES {
        return Err(format!("a manifest over {} bytes", limits::ARCHIVE_MANIFEST_MAX_BYTES));
    }
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| format!("not a manifest: {e}"))?;
    if m.version != VERSION {
        return Err(format!("a manifest of version {}, not {VERSION}", m.version));
    }
    for field in [&m.box_id, &m.prefix, &m.stream, &m.day] {
        if field.len() > limits::ARCHIVE_FIELD_MAX_BYTES {
            return Err(format!("a manifest field over {} bytes", limits::ARCHIVE_FIELD_MAX_BYTES));
        }
    }
    let of_events = m.stream.rsplit('/').next() == Some(EVENTS);
    if of_events && !m.recordings.is_empty() || !of_events && !m.events.is_empty() {
        return Err("events only in a manifest of events, recordings only in a stream's".into());
    }
    for e in &m.events {
        let at = |why: &str| format!("event {}: {why}", e.id);
        if e.end_us.is_some_and(|end| end < e.time_us) {
            return Err(at("it ends before it starts"));
        }
        // As the intake takes them: numbers that are numbers (JSON has no infinity to
        // write back), within the event's ceilings.
        let finite = e.score.is_none_or(f32::is_finite)
            && e.boxes.iter().all(|b| [b.x, b.y, b.w, b.h].iter().chain(&b.score).all(|v| v.is_finite()));
        let within = e.labels.len() <= limits::EVENT_LABELS_MAX
            && e.boxes.len() <= limits::EVENT_BOXES_MAX
            && e.text.len() <= limits::EVENT_TEXT_MAX_BYTES;
        if !finite || !within {
            return Err(at("its score, boxes, labels or text are not as an event's can be"));
        }
        let key_ok = |k: &str| k.starts_with(&format!("{}/", m.prefix)) && k.len() <= limits::ARCHIVE_KEY_MAX_BYTES;
        if e.snapshot.as_ref().is_some_and(|s| !key_ok(&s.key) || s.bytes > limits::EVENT_JPEG_MAX_BYTES as u64) {
            return Err(at("its snapshot is not under the manifest's prefix or is too big"));
        }
    }
    for e in &m.recordings {
        let at = |why: &str| format!("recording {}: {why}", e.id);
        if !e.key.starts_with(&format!("{}/", m.prefix)) || e.key.len() > limits::ARCHIVE_KEY_MAX_BYTES {
            return Err(at("its key is not under the manifest's prefix"));
        }
        if e.wall_end_us < e.wall_start_us || e.init_bytes > e.bytes {
            return Err(at("its times or sizes do not add up"));
        }
        let (mut end, mut media) = (e.init_bytes, 0);
        for f in &e.fragments {
            let (first, len) = (f[4], f[5]);
            let fits = f.iter().all(|v| *v >= 0)
                && f[2] >= media
                && u64::try_from(first).is_ok_and(|first| first >= end)
                && u64::try_from(first.saturating_add(len)).is_ok_and(|last| last <= e.bytes);
            if !fits {
                return Err(at("a fragment out of order or past its bytes"));
            }
            end = u64::try_from(first.saturating_add(len)).unwrap_or(u64::MAX);
            media = f[2];
        }
    }
    Ok(m)
}

/// The fuzz target's harness (`fuzz/fuzz_targets/archive_manifest.rs`): whatever a bucket
/// holds under a manifest's key is read or refused, never a panic, and a manifest read is
/// written back as the same manifest.
pub fn fuzz(data: &[u8]) {
    if let Ok(m) = decode(data) {
        assert_eq!(decode(&encode(&m)).as_ref(), Ok(&m));
        for e in &m.recordings {
            for f in e.fragment_rows() {
                assert!(f.end_byte <= e.bytes && f.start_byte >= e.init_bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::Codec;

    fn row() -> RecordingRow {
        RecordingRow {
            stream_id: 1,
            run_id: 1,
            codec: Codec::H264,
            width: 640,
            height: 360,
            wall_start_us: 1_000_000,
            wall_end_us: 3_000_000,
            media_duration_90k: 180_000,
            bytes: 5_000,
            init_bytes: 1_000,
            frames: 30,
            fragments: 2,
            open: false,
            audio: None,
            path: "x".into(),
        }
    }

    fn frag(start_us: i64, start_byte: u64, end_byte: u64) -> FragmentRow {
        FragmentRow {
            wall_start_us: start_us,
            wall_end_us: start_us + 1_000_000,
            media_start_90k: (start_us as u64 - 1_000_000) * 9 / 100,
            duration_90k: 90_000,
            start_byte,
            end_byte,
            frames: 15,
            keyframes: 1,
        }
    }

    fn manifest(entries: Vec<Entry>) -> Manifest {
        Manifest {
            version: VERSION,
            box_id: "b".into(),
            prefix: "house".into(),
            stream: "porch/main".into(),
            day: "2026-12-06".into(),
            part: 0,
            recordings: entries,
            events: Vec::new(),
        }
    }

    #[test]
    fn an_entry_keeps_its_fragments_as_the_catalog_has_them() {
        let frags = [frag(1_000_000, 1_000, 3_000), frag(2_000_000, 3_000, 5_000)];
        let e = Entry::of(7, "house/porch/main/2026-12-06/0000000007.mp4".into(), "e".into(), &row(), &frags);
        assert_eq!(e.fragment_rows(), frags);
        let m = manifest(vec![e]);
        assert_eq!(decode(&encode(&m)).unwrap(), m);
    }

    #[test]
    fn manifests_that_do_not_add_up_are_refused() {
        let frags = [frag(1_000_000, 1_000, 3_000), frag(2_000_000, 3_000, 5_000)];
        let good = Entry::of(7, "house/x.mp4".into(), "e".into(), &row(), &frags);
        type Spoil = Box<dyn Fn(&mut Entry)>;
        let cases: [(&str, Spoil); 4] = [
            ("prefix", Box::new(|e| e.key = "elsewhere/x.mp4".into())),
            ("order", Box::new(|e| e.fragments.swap(0, 1))),
            ("past", Box::new(|e| e.fragments[1][5] = 3_000)),
            ("negative", Box::new(|e| e.fragments[0][4] = -1)),
        ];
        for (what, spoil) in cases {
            let mut e = good.clone();
            spoil(&mut e);
            assert!(decode(&encode(&manifest(vec![e]))).is_err(), "{what}");
        }
        let mut m = manifest(vec![good]);
        m.version = 2;
        assert!(decode(&encode(&m)).unwrap_err().contains("version"));
        let big = vec![b' '; limits::ARCHIVE_MANIFEST_MAX_BYTES + 1];
        assert!(decode(&big).unwrap_err().contains("over"));
    }

    fn event() -> EventEntry {
        EventEntry {
            id: 3,
            rev: 2,
            time_us: 1_500_000,
            end_us: Some(2_500_000),
            labels: vec!["person".into()],
            score: Some(0.75),
            text: "at the gate".into(),
            boxes: vec![EventBox { label: None, score: None, x: 0.1, y: 0.2, w: 0.3, h: 0.4 }],
            snapshot: Some(SnapshotEntry {
                key: "house/events/porch/2026-12-06/0000000003.jpg".into(),
                bytes: 900,
                etag: "\"e\"".into(),
                width: 640,
                height: 360,
            }),
        }
    }

    #[test]
    fn a_cameras_events_have_manifests_of_their_own() {
        let mut m = manifest(Vec::new());
        m.stream = events_stream("porch");
        m.events = vec![event(), EventEntry { id: 4, snapshot: None, end_us: None, score: None, ..event() }];
        assert_eq!(decode(&encode(&m)).unwrap(), m);
        type Spoil = Box<dyn Fn(&mut Manifest)>;
        let cases: [(&str, Spoil); 5] = [
            ("a stream's", Box::new(|m| m.stream = "porch/main".into())),
            (
                "with recordings",
                Box::new(|m| {
                    let frags = [frag(1_000_000, 1_000, 3_000)];
                    m.recordings = vec![Entry::of(7, "house/x.mp4".into(), "e".into(), &row(), &frags)];
                }),
            ),
            ("ends first", Box::new(|m| m.events[0].end_us = Some(0))),
            ("elsewhere", Box::new(|m| m.events[0].snapshot.as_mut().unwrap().key = "shed/x.jpg".into())),
            ("infinite", Box::new(|m| m.events[0].boxes[0].w = f32::INFINITY)),
        ];
        for (what, spoil) in cases {
            let mut bad = m.clone();
            spoil(&mut bad);
            assert!(decode(&encode(&bad)).is_err(), "{what}");
        }
    }

    #[test]
    fn the_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("archive_manifest", fuzz);
        assert!(n >= 2, "{n} inputs in the corpus");
    }
}
