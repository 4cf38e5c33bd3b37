//! The media API: cameras with their live state, a stream's recordings (runs and gaps), its
//! coverage from the maintained summaries, and export of a time range as an MP4 file,
//! streamed from disk with byte ranges.
//!
//! Times are UTC µs in query parameters (`from_us`, `to_us`) and replies; a range is at most
//! [`limits::API_RANGE_MAX_US`] long, and lists at most [`limits::API_LIST_MAX`] long. Every
//! read of the catalog runs on the blocking pool, never on the runtime's threads.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::json;

use super::errors::fail;
use super::reply::{self, Body, Reply, error, on_pool, with_header};
use super::routes::StreamPath;
use super::{Ctx, parse};
use crate::base::StreamKey;
use crate::catalog::Catalog;
use crate::export::Export;
use crate::limits;

/// Six hours: the coverage view's bucket.
const COVERAGE_VIEW_BUCKET_US: i64 = 6 * 3_600_000_000;

/// `{from_us}-{to_us}.mp4`, the export path of an HLS segment.
pub fn range_in_name(name: &str) -> Result<(i64, i64), Reply> {
    let (from, to) =
        parse::range_name(name).ok_or_else(|| error(StatusCode::NOT_FOUND, "not_found", "no such export"))?;
    check_range(from, to)
}

/// A range from outside: inside the years the box can have recorded, ordered, and at most
/// [`limits::API_RANGE_MAX_US`] long (checked without arithmetic that could wrap).
fn check_range(from: i64, to: i64) -> Result<(i64, i64), Reply> {
    let window = 0..=limits::API_TIME_MAX_US;
    if !window.contains(&from) || !window.contains(&to) {
        return Err(error(StatusCode::BAD_REQUEST, "bad_range", "times are UTC µs from 1970 to 2200"));
    }
    if from >= to {
        return Err(error(StatusCode::BAD_REQUEST, "bad_range", "give from_us < to_us (UTC µs)"));
    }
    if to.checked_sub(from).is_none_or(|len| len > limits::API_RANGE_MAX_US) {
        return Err(error(StatusCode::BAD_REQUEST, "range_too_long", "the range is over 400 days"));
    }
    Ok((from, to))
}

/// `from_us` and `to_us` from the query: present, ordered, and not too far apart.
pub fn range(parts: &Parts) -> Result<(i64, i64), Reply> {
    match parse::range_query(parts.uri.query().unwrap_or("")) {
        (Some(f), Some(t)) => check_range(f, t),
        _ => Err(error(StatusCode::BAD_REQUEST, "bad_range", "give from_us < to_us (UTC µs)")),
    }
}

/// `GET /api/cameras`
pub fn cameras(ctx: &Ctx) -> Reply {
    let mut by_camera: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let streams = ctx.services.cameras.streams();
    for s in &streams {
        let st = s.state.snapshot();
        by_camera.entry(&s.key.camera).or_default().push(json!({
            "stream": s.key.kind.name(),
            "recorded": s.recording.is_some(),
            "record_mode": s.recording.as_ref().map_or("off", |r| r.mode.name()),
            "pre_roll_ms": s.recording.as_ref().map_or(0, |r| r.pre_roll_ms),
            "post_roll_ms": s.recording.as_ref().map_or(0, |r| r.post_roll_ms),
            "connected": st.connected,
            "codec": st.codec.map(|c| c.name()),
            "width": st.width,
            "height": st.height,
            "fps": st.fps,
            "bitrate_bps": st.bitrate_bps,
            "last_error": st.last_error,
            "audio": st.audio.map(|c| c.name()),
            "audio_frames": st.audio_frames_received,
            "audio_dropped": st.audio_dropped,
            "audio_last_error": st.audio_last_error,
        }));
    }
    let list: Vec<_> = by_camera.into_iter().map(|(c, streams)| json!({ "camera": c, "streams": streams })).collect();
    reply::json(StatusCode::OK, json!(list))
}

/// The catalog id of stream `key`, if it was ever recorded.
fn stream_id(catalog: &Catalog, key: &StreamKey) -> Result<u32, Reply> {
    match catalog.find_stream(key) {
        Ok(found) => found.ok_or_else(|| error(StatusCode::NOT_FOUND, "not_found", "no recordings of that stream")),
        Err(e) => Err(fail(&e)),
    }
}

/// What `read` finds of `stream` over the query's range in the catalog, on the blocking
/// pool; a bad range, a stream never recorded or a catalog error is the reply instead.
async fn read_range<T: Send + 'static>(
    ctx: &Ctx,
    parts: &Parts,
    stream: StreamPath<'_>,
    read: impl FnOnce(&Catalog, u32, i64, i64) -> Result<T, crate::catalog::CatalogError> + Send + 'static,
) -> Result<T, Reply> {
    let (from, to) = range(parts)?;
    let (key, catalog) = (stream.key(), ctx.services.catalog.clone());
    on_pool(move || read(&catalog, stream_id(&catalog, &key)?, from, to).map_err(|e| fail(&e))).await
}

/// `GET /api/streams/{camera}/{kind}/recordings?from_us&to_us`: runs and the gaps between.
pub async fn recordings(ctx: &Ctx, parts: &Parts, stream: StreamPath<'_>) -> Reply {
    let found = read_range(ctx, parts, stream, |c, id, from, to| c.runs(id, from, to, limits::API_LIST_MAX));
    let found = match found.await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let gaps: Vec<_> =
        found.runs.windows(2).map(|w| json!({ "from_us": w[0].end_us, "to_us": w[1].start_us })).collect();
    let runs: Vec<_> = found
        .runs
        .iter()
        .map(|r| json!({ "run": r.run_id, "start_us": r.start_us, "end_us": r.end_us, "bytes": r.bytes, "segments": r.segments }))
        .collect();
    reply::json(StatusCode::OK, json!({ "runs": runs, "gaps": gaps, "truncated": found.truncated }))
}

/// `GET /api/streams/{camera}/{kind}/coverage?from_us&to_us`: 6-hour buckets from the
/// maintained hourly summaries (never a scan of fragment rows).
pub async fn coverage(ctx: &Ctx, parts: &Parts, stream: StreamPath<'_>) -> Reply {
    let found =
        read_range(ctx, parts, stream, |c, id, from, to| c.coverage_view(id, from, to, COVERAGE_VIEW_BUCKET_US));
    let buckets = match found.await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let list: Vec<_> = buckets
        .into_iter()
        .map(|(start, b)| json!({ "start_us": start, "recorded_us": b.recorded_us, "bytes": b.bytes, "fragments": b.fragments }))
        .collect();
    reply::json(StatusCode::OK, json!({ "bucket_us": COVERAGE_VIEW_BUCKET_US, "buckets": list }))
}

/// `GET /api/streams/{camera}/{kind}/poster.mp4`: the stream's newest kept keyframe as a
/// one-frame MP4, the picture a live tile shows while it connects (or while the camera is
/// offline, its last).
pub async fn poster(ctx: &Ctx, stream: StreamPath<'_>) -> Reply {
    let (key, catalog, data_dir) = (stream.key(), ctx.services.catalog.clone(), ctx.services.data_dir.clone());
    let found = on_pool(move || {
        let at = crate::events::keyframe::latest(&catalog, &data_dir, &key).map_err(|e| fail(&e))?;
        crate::events::keyframe::read(&at).map_err(|e| fail(&e))
    });
    match found.await {
        Ok(mp4) => reply::with_type(StatusCode::OK, mp4, "video/mp4"),
        Err(r) => r,
    }
}

/// `GET /api/streams/{camera}/{kind}/export.m3u8?from_us&to_us`: an HLS VOD playlist of
/// the same export, one segment per fragment, each a byte range of `export.mp4` (so players
/// that speak HLS — Safari, VLC, ffmpeg — can seek without downloading the whole file).
pub async fn playlist(ctx: &Ctx, parts: &Parts, stream: StreamPath<'_>) -> Reply {
    let (from, to) = match range(parts) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let ex = match plan(ctx, stream, from, to).await {
        Ok(ex) => ex,
        Err(r) => return r,
    };
    let (init_len, segments) = ex.layout();
    let target_s = segments.iter().map(|s| s.2).max().unwrap_or(0).div_ceil(90_000).max(1);
    // The range goes in the path: HLS players judge a segment by its extension.
    let uri = format!("exports/{from}-{to}.mp4");
    let mut m3u8 = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-TARGETDURATION:{target_s}\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{init_len}@0\"\n"
    );
    for (offset, len, duration_90k) in segments {
        m3u8.push_str(&format!(
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{len}@{offset}\n{uri}\n",
            duration_90k as f64 / 90_000.0
        ));
    }
    m3u8.push_str("#EXT-X-ENDLIST\n");
    reply::text(m3u8, "application/vnd.apple.mpegurl")
}

/// The export of `stream` over `[from, to)`, planned from the catalog.
async fn plan(ctx: &Ctx, stream: StreamPath<'_>, from: i64, to: i64) -> Result<Export, Reply> {
    let (key, catalog, data_dir) = (stream.key(), ctx.services.catalog.clone(), ctx.services.data_dir.clone());
    on_pool(move || Export::plan(&catalog, &data_dir, &key, from, to).map_err(|e| fail(&e))).await
}

/// `DELETE /api/streams/{camera}/{kind}/recordings?from_us&to_us` (admin): deletes the
/// closed recordings wholly within the range; one that reaches outside it is kept whole.
pub async fn delete_range(ctx: &Ctx, parts: &Parts, stream: StreamPath<'_>) -> Reply {
    let (from, to) = match range(parts) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let key = stream.key();
    let catalog = ctx.services.catalog.clone();
    let id = match on_pool(move || stream_id(&catalog, &key)).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let recorder = ctx.services.recorder.clone();
    let done = tokio::task::spawn_blocking(move || recorder.delete_range(id, from, to)).await.ok().flatten();
    match done {
        Some((deleted, bytes, kept)) => {
            reply::json(StatusCode::OK, json!({ "deleted": deleted, "bytes": bytes, "kept": kept }))
        }
        None => error(StatusCode::SERVICE_UNAVAILABLE, "busy", "the recorder did not answer in time"),
    }
}

/// The request's byte range of a body of `len` bytes (none, or not text: the whole body).
fn byte_range(parts: &Parts, len: u64) -> parse::ByteRange {
    match parts.headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        None => parse::ByteRange::Whole,
        Some(v) => parse::byte_range(v, len),
    }
}

/// `GET /api/streams/{camera}/{kind}/export.mp4?from_us&to_us` (or
/// `…/exports/{from_us}-{to_us}.mp4`, the form HLS segments use): the range as one MP4,
/// streamed from the segment files in constant memory, with byte ranges.
pub async fn export(ctx: &Ctx, parts: &Parts, stream: StreamPath<'_>, from: i64, to: i64) -> Reply {
    // Held until the body is sent (or the client goes).
    let Ok(permit) = ctx.exports.clone().try_acquire_owned() else {
        let message = format!("{} exports are running: try again shortly", limits::EXPORTS_RUNNING_MAX);
        return error(StatusCode::SERVICE_UNAVAILABLE, "exports_busy", &message);
    };
    let ex = match plan(ctx, stream, from, to).await {
        Ok(ex) => Arc::new(ex),
        Err(r) => return r,
    };
    let name = ex.file_name(&stream.key());
    serve_export(parts, ex, &name, permit)
}

/// Sends export `ex` as `name`, the request's byte range of it; `permit` is held until the
/// body is sent.
pub(super) fn serve_export(
    parts: &Parts,
    ex: Arc<Export>,
    name: &str,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Reply {
    let len = ex.len_bytes;
    let (status, start, end) = match byte_range(parts, len) {
        parse::ByteRange::Whole => (StatusCode::OK, 0, len),
        parse::ByteRange::Part(s, e) => (StatusCode::PARTIAL_CONTENT, s, e),
        parse::ByteRange::Unsatisfiable => {
            let r = error(StatusCode::RANGE_NOT_SATISFIABLE, "bad_range", "one byte range within the file");
            return with_header(r, header::CONTENT_RANGE, &format!("bytes */{len}"));
        }
    };
    let mut r = Response::new(export_body(ex, start, end, permit));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("video/mp4"));
    h.insert(header::ACCEPT_RANGES, header::HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(end - start));
    let r = with_header(r, header::CONTENT_DISPOSITION, &format!("attachment; filename=\"{name}\""));
    if status == StatusCode::PARTIAL_CONTENT {
        return with_header(r, header::CONTENT_RANGE, &format!("bytes {start}-{}/{len}", end - 1));
    }
    r
}

/// Streams `[start, end)` of an export, one chunk at a time off the async runtime.
fn export_body(ex: Arc<Export>, start: u64, end: u64, permit: tokio::sync::OwnedSemaphorePermit) -> Body {
    let permit = Arc::new(permit);
    let stream = futures::stream::unfold(start, move |at| {
        let ex = ex.clone();
        let _running = permit.clone();
        async move {
            if at >= end {
                return None;
            }
            let want = ((end - at) as usize).min(limits::EXPORT_CHUNK_BYTES);
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; want];
                let n = ex.read_full_at(at, &mut buf).map_err(std::io::Error::other)?;
                buf.truncate(n);
                Ok::<_, std::io::Error>(buf)
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
            match read {
                Ok(buf) if buf.is_empty() => None,
                Ok(buf) => {
                    let n = buf.len() as u64;
                    Some((Ok(Frame::data(Bytes::from(buf))), at + n))
                }
                Err(e) => Some((Err(e), end)),
            }
        }
    });
    StreamBody::new(stream).boxed_unsync()
}
