//! The events API: intake from analysis services, search, an event's revisions and its
//! snapshot.

use std::convert::Infallible;

use bytes::Bytes;
use http::request::Parts;
use http::{StatusCode, header};
use serde_json::json;

use super::Ctx;
use super::errors::fail;
use super::reply::{
    Reply, RequestBody, content_type, declared_length, error, json, on_pool, read_body, with_header, with_type,
};
use crate::auth::Principal;
use crate::base::{StreamKey, StreamKind};
use crate::catalog::events::query_term;
use crate::catalog::events::{EventQuery, EventRecord};
use crate::events::IntakeError;
use crate::events::footage::{Footage, footage};
use crate::limits;

/// Why a body could not be split into an envelope and a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Neither JSON nor multipart.
    Unsupported,
    EnvelopeTooLarge,
    SnapshotTooLarge,
    Bad(String),
}

/// Splits an intake body: a JSON envelope alone (`application/json`), or
/// `multipart/form-data` with a part `event` (the envelope) and optionally a part
/// `snapshot` (the JPEG). Bounded by the body's own size, each part's ceiling, and the
/// framing around them (boundaries and part headers) by
/// [`limits::EVENT_MULTIPART_OVERHEAD_BYTES`].
pub async fn split_body(content_type: &str, body: Bytes) -> Result<(Bytes, Option<Bytes>), BodyError> {
    if super::parse::is_mime(content_type, "application/json") {
        if body.len() > limits::EVENT_ENVELOPE_MAX_BYTES {
            return Err(BodyError::EnvelopeTooLarge);
        }
        return Ok((body, None));
    }
    if !super::parse::is_mime(content_type, "multipart/form-data") {
        return Err(BodyError::Unsupported);
    }
    let boundary = multer::parse_boundary(content_type).map_err(|e| BodyError::Bad(e.to_string()))?;
    let limits = multer::SizeLimit::new()
        .whole_stream(limits::EVENT_INTAKE_BODY_MAX_BYTES as u64)
        .for_field("event", limits::EVENT_ENVELOPE_MAX_BYTES as u64)
        .for_field("snapshot", limits::EVENT_JPEG_MAX_BYTES as u64);
    let constraints = multer::Constraints::new().allowed_fields(vec!["event", "snapshot"]).size_limit(limits);
    let total = body.len();
    let stream = futures::stream::once(async move { Ok::<Bytes, Infallible>(body) });
    let mut parts = multer::Multipart::with_constraints(stream, boundary, constraints);
    let (mut event, mut snapshot) = (None, None);
    loop {
        let field = match parts.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return Err(multipart_error(e)),
        };
        let name = field.name().unwrap_or("").to_string();
        let bytes = field.bytes().await.map_err(multipart_error)?;
        let slot = if name == "event" { &mut event } else { &mut snapshot };
        if slot.replace(bytes).is_some() {
            return Err(BodyError::Bad(format!("two parts named {name}")));
        }
    }
    let event = event.ok_or_else(|| BodyError::Bad("no part named event (the envelope)".into()))?;
    let framing = total - event.len() - snapshot.as_ref().map_or(0, Bytes::len);
    if framing > limits::EVENT_MULTIPART_OVERHEAD_BYTES {
        return Err(BodyError::Bad(format!(
            "the multipart framing (boundaries and part headers) is over {} KiB",
            limits::EVENT_MULTIPART_OVERHEAD_BYTES >> 10
        )));
    }
    Ok((event, snapshot))
}

fn multipart_error(e: multer::Error) -> BodyError {
    match e {
        multer::Error::FieldSizeExceeded { field_name, .. } if field_name.as_deref() == Some("snapshot") => {
            BodyError::SnapshotTooLarge
        }
        multer::Error::FieldSizeExceeded { .. } => BodyError::EnvelopeTooLarge,
        other => BodyError::Bad(other.to_string()),
    }
}

/// `POST /api/events`: answers once the event is durable.
pub(super) async fn intake(ctx: &Ctx, who: &Principal, parts: &Parts, body: RequestBody) -> Reply {
    let events = &ctx.services.events;
    // A body that declares its length is held to it and takes that much of the uploads'
    // memory; one that does not takes the most a body may be.
    let declared = declared_length(&parts.headers);
    let max = declared.map_or(limits::EVENT_INTAKE_BODY_MAX_BYTES, |n| {
        usize::try_from(n).unwrap_or(usize::MAX).min(limits::EVENT_INTAKE_BODY_MAX_BYTES)
    });
    let _slot = match events.upload_slot(max) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let content_type = content_type(&parts.headers).to_string();
    let body = match read_body(body, ctx, max).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let (envelope, snapshot) = match split_body(&content_type, body).await {
        Ok(split) => split,
        Err(BodyError::Unsupported) => {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_body",
                "send application/json, or multipart/form-data with parts event and snapshot",
            );
        }
        Err(BodyError::SnapshotTooLarge) => return fail(&IntakeError::JpegTooLarge),
        Err(BodyError::EnvelopeTooLarge) => {
            let m =
                format!("the envelope is over {} bytes (EVENT_ENVELOPE_MAX_BYTES)", limits::EVENT_ENVELOPE_MAX_BYTES);
            return error(StatusCode::PAYLOAD_TOO_LARGE, "envelope_too_large", &m);
        }
        Err(BodyError::Bad(m)) => return error(StatusCode::BAD_REQUEST, "bad_body", &m),
    };
    match events.publish(&who.name(), &envelope, snapshot).await {
        Ok(a) => {
            let status = if a.replayed { StatusCode::OK } else { StatusCode::CREATED };
            let r = json(status, json!({ "id": a.id, "rev": a.rev, "replayed": a.replayed }));
            with_header(r, header::LOCATION, &format!("/api/events/{}", a.id))
        }
        Err(e) => fail(&e),
    }
}

/// An event as the API shows it: the envelope, where its snapshot and its keyframe are,
/// where playback of its recording starts (the camera's pre-roll before it), and what became
/// of its footage when asked.
fn event_json(ctx: &Ctx, r: &EventRecord, footage: Option<Footage>) -> serde_json::Value {
    let mut v = serde_json::to_value(&r.envelope).unwrap_or_default();
    let camera = &r.envelope.camera;
    let main = ctx.services.cameras.stream(&StreamKey::new(camera, StreamKind::Main));
    let pre_roll_us = main.as_ref().and_then(|s| s.recording.as_ref()).map_or(0, |w| i64::from(w.pre_roll_ms) * 1000);
    if let Some(o) = v.as_object_mut() {
        o.insert("keyframe".into(), json!(format!("/api/events/{}/keyframe", r.id)));
        o.insert(
            "play".into(),
            json!({ "stream": format!("{camera}/main"), "from_us": r.envelope.time() - pre_roll_us }),
        );
        o.insert("event".into(), json!(r.id));
        o.insert("rev".into(), json!(r.rev));
        o.insert("received_us".into(), json!(r.received_us));
        o.insert("from".into(), json!(r.principal));
        if let Some(f) = footage {
            o.insert("footage".into(), json!(f));
        }
        if let Some(h) = &r.hold {
            o.insert("hold".into(), json!(h));
        }
        if let Some(s) = &r.snapshot {
            o.insert(
                "snapshot".into(),
                json!({
                    "url": format!("/api/events/{}/snapshot?rev={}", r.id, r.rev),
                    "bytes": s.bytes, "width": s.width, "height": s.height,
                }),
            );
        }
    }
    v
}

/// The search a query string asks for: `camera`, `from_us`, `to_us`, `label` (repeated),
/// `q` (words), `limit`, `before` (`{time}_{id}` from the previous page's `next`).
fn query(q: &str) -> Result<EventQuery, String> {
    let mut out = EventQuery { from_us: 0, to_us: i64::MAX, limit: 50, ..EventQuery::default() };
    let number = |k: &str, v: &str| v.parse::<i64>().map_err(|_| format!("{k} is not a number"));
    for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
        match &*k {
            "camera" => out.camera = Some(v.into_owned()),
            "from_us" => out.from_us = number(&k, &v)?,
            "to_us" => out.to_us = number(&k, &v)?,
            "limit" => out.limit = number(&k, &v)?.clamp(1, limits::EVENT_SEARCH_RESULTS_MAX as i64) as usize,
            "label" => out.terms.push(format!("label:{}", query_term(&v))),
            // The words the index keeps (see `EventFields::terms`): shorter or longer ones
            // match nothing, so they are not asked for.
            "q" => out.terms.extend(crate::catalog::events::words(&v)),
            "before" => {
                let (t, id) = v.split_once('_').ok_or("before is {time}_{id}")?;
                out.before = Some((number("before", t)?, id.parse().map_err(|_| "before is {time}_{id}")?));
            }
            _ => return Err(format!("unknown parameter {k}")),
        }
        if out.terms.len() > limits::EVENT_TERMS_MAX {
            return Err(format!("at most {} terms (EVENT_TERMS_MAX)", limits::EVENT_TERMS_MAX));
        }
    }
    if out.from_us > out.to_us {
        return Err("from_us is after to_us".into());
    }
    Ok(out)
}

/// `GET /api/events?…`
pub(super) async fn search(ctx: &Ctx, parts: &Parts) -> Reply {
    let q = match query(parts.uri.query().unwrap_or("")) {
        Ok(q) => q,
        Err(m) => return error(StatusCode::BAD_REQUEST, "bad_query", &m),
    };
    let (catalog, holds) = (ctx.services.catalog.clone(), ctx.services.events.holds().clone());
    let found = on_pool(move || {
        let page = catalog.search_events(&q).map_err(|e| fail(&e))?;
        let now_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
        let of = |e| footage(&catalog, &holds, e, now_us).map_err(|e| fail(&e));
        let footage = page.events.iter().map(of).collect::<Result<Vec<_>, _>>()?;
        Ok((page, footage))
    });
    match found.await {
        Ok((page, footage)) => {
            let events: Vec<_> = page.events.iter().zip(footage).map(|(e, f)| event_json(ctx, e, Some(f))).collect();
            let next = page.next.map(|(t, id)| format!("{t}_{id}"));
            json(StatusCode::OK, json!({ "events": events, "next": next }))
        }
        Err(r) => r,
    }
}

/// Query parameter `key` as a revision number: none when absent, 400 when not a number.
fn revision_param(parts: &Parts, key: &str) -> Result<Option<u32>, Reply> {
    let found = url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()).find(|(k, _)| k == key);
    match found {
        None => Ok(None),
        Some((_, v)) => v
            .parse()
            .map(Some)
            .map_err(|_| error(StatusCode::BAD_REQUEST, "bad_query", &format!("{key} is not a revision number"))),
    }
}

fn event_id(id: &str) -> Result<u64, Reply> {
    id.parse().map_err(|_| error(StatusCode::NOT_FOUND, "not_found", "no such event"))
}

/// `GET /api/events/{id}[?after_rev=N]`: its revisions, oldest first, a page at a time
/// ([`limits::EVENT_REVISIONS_PAGE_MAX`]); `next_rev` continues.
pub(super) async fn revisions(ctx: &Ctx, parts: &Parts, id: &str) -> Reply {
    let id = match event_id(id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let after = match revision_param(parts, "after_rev") {
        Ok(after) => after.unwrap_or(0),
        Err(r) => return r,
    };
    let (catalog, holds) = (ctx.services.catalog.clone(), ctx.services.events.holds().clone());
    let limit = limits::EVENT_REVISIONS_PAGE_MAX;
    let found = on_pool(move || {
        let read = || -> Result<_, crate::catalog::CatalogError> {
            let revs = catalog.event_revisions(id, after, limit)?;
            let now_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
            let footage = catalog.event(id)?.map(|r| footage(&catalog, &holds, &r, now_us)).transpose()?;
            Ok((revs, footage))
        };
        read().map_err(|e| fail(&e))
    });
    match found.await {
        Ok((revs, _)) if revs.is_empty() && after == 0 => error(StatusCode::NOT_FOUND, "not_found", "no such event"),
        Ok((revs, footage)) => {
            let next = (revs.len() == limit).then(|| revs.last().map(|r| r.rev)).flatten();
            let list: Vec<_> = revs.iter().map(|e| event_json(ctx, e, None)).collect();
            json(StatusCode::OK, json!({ "revisions": list, "next_rev": next, "footage": footage }))
        }
        Err(r) => r,
    }
}

/// `GET /api/events/{id}/snapshot[?rev=N]`: the JPEG of a revision (the latest by default).
pub(super) async fn snapshot(ctx: &Ctx, parts: &Parts, id: &str) -> Reply {
    let id = match event_id(id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let rev = match revision_param(parts, "rev") {
        Ok(rev) => rev,
        Err(r) => return r,
    };
    let catalog = ctx.services.catalog.clone();
    let record = on_pool(move || {
        let found = match rev {
            Some(rev) => catalog.event_revision(id, rev),
            None => catalog.event(id),
        };
        found.map_err(|e| fail(&e))
    });
    let snap = match record.await {
        Ok(Some(r)) => r.snapshot,
        Ok(None) => return error(StatusCode::NOT_FOUND, "not_found", "no such event"),
        Err(r) => return r,
    };
    let Some(snap) = snap else {
        return error(StatusCode::NOT_FOUND, "no_snapshot", "that revision has no snapshot");
    };
    match tokio::fs::read(ctx.services.data_dir.join(&snap.path)).await {
        Ok(bytes) => {
            let mut r = with_type(StatusCode::OK, bytes, "image/jpeg");
            // A revision's snapshot never changes.
            let forever = header::HeaderValue::from_static("private, max-age=31536000, immutable");
            r.headers_mut().insert(header::CACHE_CONTROL, forever);
            r
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "storage", &format!("{}: {e}", snap.path)),
    }
}

/// `DELETE /api/events/{id}` (admin): the event, every revision and snapshot, and its hold
/// on its footage (the footage itself stays, to ordinary retention).
pub(super) async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Reply {
    let id = match event_id(id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match ctx.services.events.delete(id).await {
        Ok(Some(r)) => {
            tracing::info!(by = %who.name(), event = id, camera = %r.envelope.camera, held = r.hold.is_some(), "event deleted");
            json(StatusCode::OK, json!({ "deleted": id, "released_hold": r.hold.is_some() }))
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "not_found", "no such event"),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "storage", &e.to_string()),
    }
}

/// `GET /api/events/{id}/keyframe`: the picture recorded at or before the event, as a
/// one-frame MP4.
pub(super) async fn keyframe(ctx: &Ctx, id: &str) -> Reply {
    let id = match event_id(id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let (catalog, data_dir) = (ctx.services.catalog.clone(), ctx.services.data_dir.clone());
    let found = on_pool(move || {
        let at = crate::events::keyframe::resolve(&catalog, &data_dir, id).map_err(|e| fail(&e))?;
        crate::events::keyframe::read(&at).map_err(|e| fail(&e))
    });
    match found.await {
        Ok(mp4) => with_type(StatusCode::OK, mp4, "video/mp4"),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(ct: &str, body: &str) -> Result<(Bytes, Option<Bytes>), BodyError> {
        futures::executor::block_on(split_body(ct, Bytes::from(body.to_string())))
    }

    #[test]
    fn a_body_is_json_or_multipart_with_an_event_part() {
        let (e, s) = split("application/json; charset=utf-8", "{}").unwrap();
        assert_eq!((&e[..], s), (&b"{}"[..], None));
        let body = "--B\r\nContent-Disposition: form-data; name=\"event\"\r\n\r\n{\"camera\":\"a\"}\r\n\
                    --B\r\nContent-Disposition: form-data; name=\"snapshot\"; filename=\"s.jpg\"\r\n\
                    Content-Type: image/jpeg\r\n\r\nJPEG\r\n--B--\r\n";
        let (e, s) = split("multipart/form-data; boundary=B", body).unwrap();
        assert_eq!(&e[..], b"{\"camera\":\"a\"}");
        assert_eq!(s.as_deref(), Some(&b"JPEG"[..]));
        assert_eq!(split("image/jpeg", "x"), Err(BodyError::Unsupported));
        assert!(matches!(split("multipart/form-data", body), Err(BodyError::Bad(_))), "no boundary");
        let only_snapshot = "--B\r\nContent-Disposition: form-data; name=\"snapshot\"\r\n\r\nJPEG\r\n--B--\r\n";
        assert!(matches!(split("multipart/form-data; boundary=B", only_snapshot), Err(BodyError::Bad(_))));
        let other = "--B\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--B--\r\n";
        assert!(matches!(split("multipart/form-data; boundary=B", other), Err(BodyError::Bad(_))));
        let cut = &body[..body.len() - 10];
        assert!(split("multipart/form-data; boundary=B", cut).is_err());
    }

    #[test]
    fn a_snapshot_part_past_its_ceiling_is_named() {
        let big = "x".repeat(limits::EVENT_JPEG_MAX_BYTES + 1);
        let body = format!(
            "--B\r\nContent-Disposition: form-data; name=\"event\"\r\n\r\n{{}}\r\n\
             --B\r\nContent-Disposition: form-data; name=\"snapshot\"\r\n\r\n{big}\r\n--B--\r\n"
        );
        assert_eq!(split("multipart/form-data; boundary=B", &body), Err(BodyError::SnapshotTooLarge));
        let big = "x".repeat(limits::EVENT_ENVELOPE_MAX_BYTES + 1);
        let body = format!("--B\r\nContent-Disposition: form-data; name=\"event\"\r\n\r\n{big}\r\n--B--\r\n");
        assert_eq!(split("multipart/form-data; boundary=B", &body), Err(BodyError::EnvelopeTooLarge));
        // The framing has a ceiling of its own: a 60 KB file name is refused.
        let name = "f".repeat(60_000);
        let body = format!(
            "--B\r\nContent-Disposition: form-data; name=\"event\"; filename=\"{name}\"\r\n\r\n{{}}\r\n--B--\r\n"
        );
        assert!(
            matches!(split("multipart/form-data; boundary=B", &body), Err(BodyError::Bad(m)) if m.contains("framing"))
        );
        assert_eq!(split("application/json", &big), Err(BodyError::EnvelopeTooLarge));
    }

    /// What the `event_intake` fuzz target kept: every input splits, parses and checks or is
    /// refused, without a panic.
    #[test]
    fn the_event_intake_fuzz_corpus_is_answered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/event_intake");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let Some((kind, body)) = data.split_first() else { continue };
            let ct = if kind % 3 == 0 { "application/json" } else { "multipart/form-data; boundary=B" };
            if let Ok((envelope, snapshot)) = futures::executor::block_on(split_body(ct, Bytes::copy_from_slice(body)))
            {
                let _ = crate::events::envelope::parse(&envelope, 0);
                if let Some(s) = snapshot {
                    let _ = crate::events::jpeg::check(&s);
                }
            }
            let _ = crate::events::jpeg::check(body);
            n += 1;
        }
        assert!(n >= 3, "the corpus is under fuzz/");
    }

    #[test]
    fn search_queries_parse_with_their_ceilings() {
        let q = query("camera=front&label=Person&q=red+van&from_us=5&to_us=9&limit=1000&before=7_3").unwrap();
        assert_eq!(q.camera.as_deref(), Some("front"));
        assert_eq!(q.terms, ["label:person", "red", "van"]);
        assert_eq!((q.from_us, q.to_us, q.limit, q.before), (5, 9, limits::EVENT_SEARCH_RESULTS_MAX, Some((7, 3))));
        assert!(query("colour=red").is_err());
        assert!(query("from_us=9&to_us=5").is_err());
        assert!(query("before=7").is_err());
        let many = vec!["label=x"; limits::EVENT_TERMS_MAX + 1].join("&");
        assert!(query(&many).unwrap_err().contains("EVENT_TERMS_MAX"));
    }
}
