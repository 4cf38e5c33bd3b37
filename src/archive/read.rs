//! Reading an archive: the boxes that write into a bucket and what each holds (from the
//! manifests' keys), a stream's archived recordings over a range (from its days'
//! manifests), and their bytes with range requests, so playback and export of an archived
//! range go as a local one does ([`crate::export::Export::plan_pieces`]); a camera's archived
//! events over a range, and their snapshots.
//!
//! It only reads: a box reads another box's archive as it reads its own. Every walk is
//! bounded: [`limits::ARCHIVE_READ_LISTS_MAX`] list requests, [`limits::ARCHIVE_BOXES_MAX`]
//! boxes, [`limits::ARCHIVE_READ_DAYS_MAX`] days and [`limits::ARCHIVE_READ_ENTRIES_MAX`]
//! recordings a read; one manifest part in memory at a time.

use std::sync::Arc;

use serde::Serialize;

use super::manifest::{self, Entry, EventEntry, Manifest};
use super::s3::{Bucket, S3Error};
use super::{ArchiveError, is_day, utc_day};
use crate::clock::SharedClocks;
use crate::export::{Piece, ReadAt};
use crate::limits;

/// A box that writes into the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BoxListing {
    /// Its prefix: every key it writes starts with it.
    pub prefix: String,
    pub streams: Vec<StreamDays>,
}

/// A stream of a box, and the days (UTC) its manifests describe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamDays {
    /// `camera/kind`.
    pub stream: String,
    pub days: Vec<String>,
}

/// One archived recording, as a timeline shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    pub id: u64,
    pub wall_start_us: i64,
    pub wall_end_us: i64,
    pub bytes: u64,
    pub codec: String,
    pub width: u16,
    pub height: u16,
}

/// A bucket, read.
#[derive(Clone)]
pub struct Reader {
    bucket: Arc<Bucket>,
    clocks: SharedClocks,
}

impl Reader {
    pub fn new(bucket: Arc<Bucket>, clocks: SharedClocks) -> Reader {
        Reader { bucket, clocks }
    }

    fn now(&self) -> i64 {
        self.clocks.wall_us()
    }

    /// The directories just below `dir`, counted against `lists`.
    async fn dirs(&self, dir: &str, lists: &mut usize) -> Result<Vec<String>, ArchiveError> {
        if *lists == 0 {
            return Err(ArchiveError::Walk(format!(
                "more than {} list requests under the bucket's root",
                limits::ARCHIVE_READ_LISTS_MAX
            )));
        }
        *lists -= 1;
        let now = || self.now();
        Ok(self.bucket.list_pages(dir, Some("/"), limits::ARCHIVE_LIST_PAGES_MAX, &now).await?.prefixes)
    }

    /// Every box in the bucket: each prefix (up to [`limits::ARCHIVE_PREFIX_LEVELS_MAX`]
    /// levels deep) that holds `manifests/`, with its streams and days.
    pub async fn boxes(&self) -> Result<Vec<BoxListing>, ArchiveError> {
        let mut lists = limits::ARCHIVE_READ_LISTS_MAX;
        let mut found = Vec::new();
        let mut level = vec![String::new()];
        // The root, then each level a prefix may have.
        for _ in 0..=limits::ARCHIVE_PREFIX_LEVELS_MAX {
            let mut next = Vec::new();
            for dir in &level {
                let below = self.dirs(dir, &mut lists).await?;
                if dir.is_empty() || !below.iter().any(|d| d.strip_prefix(dir.as_str()) == Some("manifests/")) {
                    next.extend(below);
                    continue;
                }
                if found.len() == limits::ARCHIVE_BOXES_MAX {
                    return Err(ArchiveError::Walk(format!("more than {} boxes", limits::ARCHIVE_BOXES_MAX)));
                }
                found.push(dir.trim_end_matches('/').to_string());
            }
            level = next;
        }
        let mut out = Vec::new();
        for prefix in found {
            let streams = self.streams_with(&prefix, &mut lists).await?;
            out.push(BoxListing { prefix, streams });
        }
        Ok(out)
    }

    /// The streams of the box at `prefix` and their days (a camera's events as the stream
    /// `<camera>/events`).
    async fn streams_with(&self, prefix: &str, lists: &mut usize) -> Result<Vec<StreamDays>, ArchiveError> {
        let root = format!("{prefix}/manifests/");
        let mut out = Vec::new();
        for camera in self.dirs(&root, lists).await? {
            for kind in self.dirs(&camera, lists).await? {
                let stream = kind.strip_prefix(root.as_str()).unwrap_or_default().trim_end_matches('/').to_string();
                let days = self
                    .dirs(&kind, lists)
                    .await?
                    .iter()
                    .filter_map(|d| Some(d.strip_prefix(kind.as_str())?.trim_end_matches('/').to_string()))
                    .filter(|d| is_day(d))
                    .collect();
                out.push(StreamDays { stream, days });
            }
        }
        Ok(out)
    }

    /// The recordings of `stream` (`camera/kind`) of the box at `prefix` that overlap
    /// `[from_us, to_us)`, by their start, each with its fragments.
    pub async fn recordings(
        &self,
        prefix: &str,
        stream: &str,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<Entry>, ArchiveError> {
        let mut out = Vec::new();
        self.each_recording(prefix, stream, (from_us, to_us), |e| out.push(e)).await?;
        Ok(out)
    }

    /// As [`Reader::recordings`], without their fragments (a timeline's runs).
    pub async fn runs(&self, prefix: &str, stream: &str, from_us: i64, to_us: i64) -> Result<Vec<Run>, ArchiveError> {
        let mut out = Vec::new();
        self.each_recording(prefix, stream, (from_us, to_us), |e| {
            out.push(Run {
                id: e.id,
                wall_start_us: e.wall_start_us,
                wall_end_us: e.wall_end_us,
                bytes: e.bytes,
                codec: e.codec,
                width: e.width,
                height: e.height,
            })
        })
        .await?;
        Ok(out)
    }

    /// Calls `found` with each recording of `stream` over the range, in order of start.
    async fn each_recording(
        &self,
        prefix: &str,
        stream: &str,
        range: (i64, i64),
        mut found: impl FnMut(Entry),
    ) -> Result<(), ArchiveError> {
        let (from_us, to_us) = range;
        let mut count = 0;
        let mut seen = std::collections::BTreeSet::new();
        let mut kept: Vec<Entry> = Vec::new();
        self.each_part(prefix, stream, range, |part| {
            let Some(m) = part else {
                // A day's entries are in order of id within a part; across parts and days,
                // by start: sorted once a day is read, handed on, and let go.
                kept.sort_by_key(|e| (e.wall_start_us, e.id));
                kept.drain(..).for_each(&mut found);
                return Ok(());
            };
            for e in m.recordings {
                if e.wall_end_us <= from_us || e.wall_start_us >= to_us || !seen.insert(e.id) {
                    continue;
                }
                count += 1;
                if count > limits::ARCHIVE_READ_ENTRIES_MAX {
                    return Err(too_many("recordings"));
                }
                kept.push(e);
            }
            Ok(())
        })
        .await
    }

    /// The events of `camera` of the box at `prefix` whose moment is within `[from_us,
    /// to_us)`, by moment, each as its latest revision archived.
    pub async fn events(
        &self,
        prefix: &str,
        camera: &str,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<EventEntry>, ArchiveError> {
        let mut by_id = std::collections::BTreeMap::<u64, EventEntry>::new();
        self.each_part(prefix, &manifest::events_stream(camera), (from_us, to_us), |part| {
            for e in part.map(|m| m.events).unwrap_or_default() {
                if e.time_us < from_us || e.time_us >= to_us || by_id.get(&e.id).is_some_and(|k| k.rev >= e.rev) {
                    continue;
                }
                by_id.insert(e.id, e);
                if by_id.len() > limits::ARCHIVE_READ_ENTRIES_MAX {
                    return Err(too_many("events"));
                }
            }
            Ok(())
        })
        .await?;
        let mut out: Vec<EventEntry> = by_id.into_values().collect();
        out.sort_by_key(|e| (e.time_us, e.id));
        Ok(out)
    }

    /// The snapshot of event `event` of `camera` of the box at `prefix`, of `day`.
    pub async fn snapshot(
        &self,
        prefix: &str,
        camera: &str,
        day: &str,
        event: u64,
    ) -> Result<bytes::Bytes, ArchiveError> {
        let key = super::event_key(prefix, camera, day, event);
        Ok(self.bucket.get(&key, None, limits::EVENT_JPEG_MAX_BYTES, self.now()).await?)
    }

    /// Calls `read` with each manifest part of `stream` over the days the range reaches,
    /// from the day before its start (a recording is under the day it starts), and with
    /// `None` after each day's parts.
    async fn each_part(
        &self,
        prefix: &str,
        stream: &str,
        (from_us, to_us): (i64, i64),
        mut read: impl FnMut(Option<Manifest>) -> Result<(), ArchiveError>,
    ) -> Result<(), ArchiveError> {
        const DAY_US: i64 = 86_400_000_000;
        let first = from_us.saturating_sub(DAY_US).div_euclid(DAY_US);
        let last = to_us.saturating_sub(1).div_euclid(DAY_US);
        let days = last.saturating_sub(first).saturating_add(1);
        if days > limits::ARCHIVE_READ_DAYS_MAX as i64 {
            return Err(ArchiveError::Walk(format!(
                "a range over {} days: ask for less",
                limits::ARCHIVE_READ_DAYS_MAX - 1
            )));
        }
        let now = || self.now();
        for d in first..=last {
            let day = utc_day(d.saturating_mul(DAY_US));
            let dir = format!("{prefix}/manifests/{stream}/{day}/");
            let parts = self.bucket.list_pages(&dir, None, limits::ARCHIVE_LIST_PAGES_MAX, &now).await?.objects;
            for part in parts.iter().filter(|o| o.key.ends_with(".json")) {
                let bytes = self.bucket.get(&part.key, None, limits::ARCHIVE_MANIFEST_MAX_BYTES, now()).await?;
                let m = manifest::decode(&bytes)
                    .map_err(|why| ArchiveError::Manifest { key: part.key.clone(), why: why.to_string() })?;
                if m.stream != stream || m.day != day || m.prefix != prefix {
                    return Err(ArchiveError::Manifest {
                        key: part.key.clone(),
                        why: "it names another box, stream or day than its key".into(),
                    });
                }
                read(Some(m))?;
            }
            read(None)?;
        }
        Ok(())
    }

    /// The pieces an export of `stream` over the range takes, read from the bucket.
    pub async fn pieces(
        &self,
        prefix: &str,
        stream: &str,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<Piece>, ArchiveError> {
        let entries = self.recordings(prefix, stream, from_us, to_us).await?;
        let handle = tokio::runtime::Handle::current();
        Ok(entries
            .into_iter()
            .map(|e| Piece {
                fragments: e.fragment_rows(),
                bytes: e.bytes,
                source: Arc::new(Object {
                    bucket: self.bucket.clone(),
                    key: e.key,
                    bytes: e.bytes,
                    clocks: self.clocks.clone(),
                    handle: handle.clone(),
                }),
            })
            .collect())
    }
}

/// The refusal of a range holding more than [`limits::ARCHIVE_READ_ENTRIES_MAX`] `what`.
fn too_many(what: &str) -> ArchiveError {
    ArchiveError::Walk(format!("more than {} {what} in the range: ask for less", limits::ARCHIVE_READ_ENTRIES_MAX))
}

/// An archived recording's object, read with range requests. Its reads block: they are made
/// on the blocking pool (an export's), driving the request on the runtime's handle.
struct Object {
    bucket: Arc<Bucket>,
    key: String,
    bytes: u64,
    clocks: SharedClocks,
    handle: tokio::runtime::Handle,
}

impl ReadAt for Object {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let last = offset.saturating_add(buf.len() as u64 - 1);
        if last >= self.bytes {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "past the object's end"));
        }
        let got =
            self.handle.block_on(self.bucket.get(&self.key, Some((offset, last)), buf.len(), self.clocks.wall_us()));
        let got = got.map_err(|e: S3Error| std::io::Error::other(e.to_string()))?;
        buf.copy_from_slice(&got);
        Ok(())
    }

    fn name(&self) -> String {
        self.key.clone()
    }

    fn window_bytes(&self) -> usize {
        limits::ARCHIVE_READ_WINDOW_BYTES
    }
}
