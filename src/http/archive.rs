//! The archive API: what each target's bucket holds (every box that writes into it, its
//! streams and days), a stream's archived recordings over a range, an archived range as
//! one MP4 read from the bucket with range requests, as a local export is read from disk,
//! and a camera's archived events with their snapshots.
//!
//! `box` names the box by its prefix (the target's own prefix when it is left out), `stream`
//! as `camera/kind`; times are UTC µs as elsewhere. Reading the bucket waits on the network:
//! a range is at most [`limits::ARCHIVE_READ_DAYS_MAX`] days of manifests, and an export holds
//! one of the [`limits::EXPORTS_RUNNING_MAX`] export slots, as a local one does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use http::request::Parts;
use serde_json::json;

use super::Ctx;
use super::errors::fail;
use super::media::{range, serve_export};
use super::reply::{self, Reply, error, on_pool};
use crate::archive::read::Reader;
use crate::base::StreamKey;
use crate::export::Export;
use crate::limits;

/// The last few archived exports planned ([`limits::ARCHIVE_PLANS_KEPT`], each for
/// [`limits::ARCHIVE_PLAN_KEEP_MS`]): a `<video>` asks for one range after another of the
/// same export, and each plan reads every fragment's header from the bucket.
pub struct Plans<T = Arc<Export>>(Mutex<VecDeque<(String, Instant, T)>>);

impl<T> Default for Plans<T> {
    fn default() -> Self {
        Plans(Mutex::default())
    }
}

impl<T: Clone> Plans<T> {
    fn get(&self, key: &str, now: Instant) -> Option<T> {
        let mut plans = self.0.lock().expect("lock");
        plans.retain(|(_, at, _)| now.duration_since(*at) < Duration::from_millis(limits::ARCHIVE_PLAN_KEEP_MS));
        plans.iter().find(|(k, _, _)| k == key).map(|(_, _, ex)| ex.clone())
    }

    fn put(&self, key: String, ex: T, now: Instant) {
        let mut plans = self.0.lock().expect("lock");
        if plans.len() == limits::ARCHIVE_PLANS_KEPT {
            plans.pop_front();
        }
        plans.push_back((key, now, ex));
    }
}

/// A slot to read a bucket, or the answer that none is free.
fn slot(ctx: &Ctx) -> Result<tokio::sync::SemaphorePermit<'_>, Reply> {
    ctx.archive_reads.try_acquire().map_err(|_| {
        let message =
            format!("{} reads of the archive are running: try again shortly", limits::ARCHIVE_READS_RUNNING_MAX);
        error(StatusCode::SERVICE_UNAVAILABLE, "archive_busy", &message)
    })
}

/// `GET /api/archive`: each target with the boxes in its bucket (`?boxes=0`: only the
/// targets, without reading the buckets).
pub async fn list(ctx: &Ctx, parts: &Parts) -> Reply {
    let walk = !parts.uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "boxes=0"));
    let _slot = match walk.then(|| slot(ctx)).transpose() {
        Ok(s) => s,
        Err(r) => return r,
    };
    let mut targets = Vec::new();
    for id in ctx.services.archive.ids() {
        let Some((reader, own)) = ctx.services.archive.reader(&id) else { continue };
        if !walk {
            targets.push(json!({ "id": id, "prefix": own }));
            continue;
        }
        match reader.boxes().await {
            Ok(boxes) => targets.push(json!({ "id": id, "prefix": own, "boxes": boxes })),
            Err(e) => targets.push(json!({ "id": id, "prefix": own, "boxes": [], "error": e.to_string() })),
        }
    }
    reply::json(StatusCode::OK, json!({ "targets": targets }))
}

/// What a request names: the target's reader, the box's prefix, the stream, the range.
struct Asked {
    reader: Reader,
    prefix: String,
    stream: StreamKey,
    from_us: i64,
    to_us: i64,
}

fn asked(ctx: &Ctx, parts: &Parts, target: &str) -> Result<Asked, Reply> {
    let Some((reader, own)) = ctx.services.archive.reader(target) else {
        return Err(error(StatusCode::NOT_FOUND, "not_found", "no such archive target"));
    };
    let (from_us, to_us) = range(parts)?;
    let (mut prefix, mut stream) = (own, None);
    for (k, v) in url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match &*k {
            "box" if crate::config::archive::prefix_ok(&v) => prefix = v.into_owned(),
            "box" => return Err(error(StatusCode::BAD_REQUEST, "bad_box", "a box is its prefix: a/b, no . or ..")),
            "stream" => stream = StreamKey::parse(&v).filter(|k| crate::config::camera_name_ok(&k.camera)),
            _ => {}
        }
    }
    let Some(stream) = stream else {
        return Err(error(StatusCode::BAD_REQUEST, "bad_stream", "give stream=camera/kind (main or sub)"));
    };
    Ok(Asked { reader, prefix, stream, from_us, to_us })
}

/// `GET /api/archive/{target}/recordings?box&stream&from_us&to_us`: the archived recordings
/// overlapping the range, by start.
pub async fn recordings(ctx: &Ctx, parts: &Parts, target: &str) -> Reply {
    let a = match asked(ctx, parts, target) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let _slot = match slot(ctx) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match a.reader.runs(&a.prefix, &a.stream.name(), a.from_us, a.to_us).await {
        Ok(runs) => reply::json(
            StatusCode::OK,
            json!({ "target": target, "box": a.prefix, "stream": a.stream.name(), "recordings": runs }),
        ),
        Err(e) => fail(&e),
    }
}

/// `GET /api/archive/{target}/export.mp4?box&stream&from_us&to_us`: the archived range as
/// one MP4, with byte ranges.
pub async fn export(ctx: &Ctx, parts: &Parts, target: &str) -> Reply {
    let a = match asked(ctx, parts, target) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let Ok(permit) = ctx.exports.clone().try_acquire_owned() else {
        let message = format!("{} exports are running: try again shortly", limits::EXPORTS_RUNNING_MAX);
        return error(StatusCode::SERVICE_UNAVAILABLE, "exports_busy", &message);
    };
    let key = format!("{target} {} {} {} {}", a.prefix, a.stream.name(), a.from_us, a.to_us);
    let ex = match ctx.archive_plans.get(&key, Instant::now()) {
        Some(ex) => ex,
        None => {
            let _slot = match slot(ctx) {
                Ok(s) => s,
                Err(r) => return r,
            };
            let pieces = match a.reader.pieces(&a.prefix, &a.stream.name(), a.from_us, a.to_us).await {
                Ok(p) => p,
                Err(e) => return fail(&e),
            };
            let (from, to) = (a.from_us, a.to_us);
            // The plan reads each fragment's header from the bucket: blocking, on the pool.
            let planned =
                on_pool(move || Export::plan_pieces(pieces.into_iter().map(Ok), from, to).map_err(|e| fail(&e))).await;
            match planned {
                Ok(ex) => {
                    let ex = Arc::new(ex);
                    ctx.archive_plans.put(key, ex.clone(), Instant::now());
                    ex
                }
                Err(r) => return r,
            }
        }
    };
    let name = ex.file_name(&a.stream);
    serve_export(parts, ex, &name, permit)
}

/// The box (its prefix, the target's own when left out) and the camera a request names.
fn box_and_camera(parts: &Parts, own: String) -> Result<(String, String), Reply> {
    let (mut prefix, mut camera) = (own, None);
    for (k, v) in url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match &*k {
            "box" if crate::config::archive::prefix_ok(&v) => prefix = v.into_owned(),
            "box" => return Err(error(StatusCode::BAD_REQUEST, "bad_box", "a box is its prefix: a/b, no . or ..")),
            "camera" if crate::config::camera_name_ok(&v) => camera = Some(v.into_owned()),
            _ => {}
        }
    }
    let camera = camera
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "bad_camera", "give camera=<its name: a-z, 0-9, - and _>"))?;
    Ok((prefix, camera))
}

/// `GET /api/archive/{target}/events?box&camera&from_us&to_us`: the camera's archived events
/// whose moment is within the range, by moment.
pub async fn events(ctx: &Ctx, parts: &Parts, target: &str) -> Reply {
    let Some((reader, own)) = ctx.services.archive.reader(target) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such archive target");
    };
    let asked = range(parts).and_then(|r| Ok((r, box_and_camera(parts, own)?)));
    let ((from_us, to_us), (prefix, camera)) = match asked {
        Ok(a) => a,
        Err(r) => return r,
    };
    let _slot = match slot(ctx) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match reader.events(&prefix, &camera, from_us, to_us).await {
        Ok(events) => {
            reply::json(StatusCode::OK, json!({ "target": target, "box": prefix, "camera": camera, "events": events }))
        }
        Err(e) => fail(&e),
    }
}

/// `GET /api/archive/{target}/snapshot.jpg?box&camera&day&event`: an archived event's
/// snapshot (its key is made of these, so nothing else in the bucket can be read here).
pub async fn snapshot(ctx: &Ctx, parts: &Parts, target: &str) -> Reply {
    let Some((reader, own)) = ctx.services.archive.reader(target) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such archive target");
    };
    let (prefix, camera) = match box_and_camera(parts, own) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let (mut day, mut event) = (None, None);
    for (k, v) in url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match &*k {
            "day" if crate::archive::is_day(&v) => day = Some(v.into_owned()),
            "event" => event = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    let (Some(day), Some(event)) = (day, event) else {
        return error(StatusCode::BAD_REQUEST, "bad_event", "give day=YYYY-MM-DD and event=<its id>");
    };
    let _slot = match slot(ctx) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match reader.snapshot(&prefix, &camera, &day, event).await {
        Ok(bytes) => {
            let mut r = reply::with_type(StatusCode::OK, bytes.to_vec(), "image/jpeg");
            // A later revision is stored over it: kept a short while only.
            let short = http::HeaderValue::from_static("private, max-age=60");
            r.headers_mut().insert(http::header::CACHE_CONTROL, short);
            r
        }
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_kept_for_a_while_and_only_the_last_few() {
        let plans: Plans<u32> = Plans::default();
        let t0 = Instant::now();
        for i in 0..=limits::ARCHIVE_PLANS_KEPT as u32 {
            plans.put(i.to_string(), i, t0);
        }
        assert_eq!(plans.get("0", t0), None, "the oldest went past ARCHIVE_PLANS_KEPT");
        assert_eq!(plans.get("1", t0), Some(1));
        let later = t0 + Duration::from_millis(limits::ARCHIVE_PLAN_KEEP_MS);
        assert_eq!(plans.get("1", later), None, "and each for ARCHIVE_PLAN_KEEP_MS");
    }

    #[test]
    fn reads_of_the_archive_past_their_ceiling_are_refused_as_busy() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx::bare(dir.path());
        let held: Vec<_> = (0..limits::ARCHIVE_READS_RUNNING_MAX).map(|_| slot(&ctx).ok().unwrap()).collect();
        let Err(refused) = slot(&ctx) else { panic!("a read past the ceiling is refused") };
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        assert!(slot(&ctx).is_ok());
    }
}
