//! The box as firmware over HTTP: `GET /api/system` (running slot, both versions, the last
//! update), `POST /api/system/update` (a bundle, streamed to the inactive slot),
//! `POST /api/system/reboot`, `POST /api/system/factory-reset` and
//! `GET /api/system/support-bundle`, and the HTTPS certificate: `GET /api/system/https`
//! (what it is, for anyone signed in to check their browser's warning), `POST` (an admin's
//! own certificate chain and key) and `DELETE` (the box's own again). All but the two `GET`s
//! are for admins.

use http::request::Parts;
use http::{StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use tracing::info;

use super::Ctx;
use super::errors::fail;
use super::reply::{
    Reply, RequestBody, error, json, on_pool, read_json, request_timeout, timed_out, with_header, with_type,
};
use crate::limits::{UPDATE_BODY_MAX_BYTES, UPDATE_UPLOAD_CHUNKS_MAX};
use crate::system::bundle::{self, UpdateError};
use crate::system::support;

fn query_flag(parts: &Parts, name: &str) -> bool {
    url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
        .any(|(k, v)| k == name && (v == "1" || v == "true"))
}

pub(super) fn status(ctx: &Ctx) -> Reply {
    let mut status = ctx.services.system.status();
    if let Some(o) = status.as_object_mut() {
        o.insert("wear".into(), wear(&ctx.services));
    }
    json(StatusCode::OK, status)
}

/// Bytes written to flash since keeppeek started, by what wrote them, and as much a day at
/// that pace: the recordings, the catalog (with what storing events and the early flushes
/// for events took of it) and the events' snapshots.
pub(super) fn wear(services: &super::Services) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    let uptime_us = crate::clock::Clocks::mono_us(&crate::clock::RealClocks) - services.wear.started_mono_us;
    let recording = services.wear.recording_bytes.load(Relaxed);
    let catalog = services.catalog.writes.bytes();
    let snapshots = services.events.stats.snapshot_bytes.load(Relaxed);
    let early = services.flusher.early_flush_bytes.load(Relaxed);
    let total = recording + catalog + snapshots;
    let per_day = |b: u64| (b as f64 * 86_400e6 / uptime_us.max(1) as f64) as u64;
    serde_json::json!({
        "since_us": uptime_us,
        "recording_bytes": recording,
        "catalog_bytes": catalog,
        "catalog_syncs": services.catalog.writes.syncs.load(Relaxed),
        "event_catalog_bytes": services.catalog.writes.event_bytes.load(Relaxed),
        "event_snapshot_bytes": snapshots,
        "early_flushes": services.flusher.early_flushes.load(Relaxed),
        "early_flush_bytes": early,
        "early_flush_share": if total > 0 { early as f64 / total as f64 } else { 0.0 },
        "per_day": {
            "recording_bytes": per_day(recording),
            "catalog_bytes": per_day(catalog),
            "event_snapshot_bytes": per_day(snapshots),
            "total_bytes": per_day(total),
        },
    })
}

/// Reads an upload as a blocking `Read` fed by the async side through a bounded channel.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upload_waits_for_the_slot_once_its_chunks_are_queued() {
        let (tx, rx) = tokio::sync::mpsc::channel(UPDATE_UPLOAD_CHUNKS_MAX);
        for i in 0..UPDATE_UPLOAD_CHUNKS_MAX {
            tx.try_send(Ok(bytes::Bytes::from(vec![i as u8; 3]))).unwrap();
        }
        assert!(tx.try_send(Ok(bytes::Bytes::new())).is_err(), "full: the connection is not read further");
        drop(tx);
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut ChannelReader { rx, current: bytes::Bytes::new() }, &mut all).unwrap();
        assert_eq!(all.len(), 3 * UPDATE_UPLOAD_CHUNKS_MAX);
    }
}

/// `POST /api/system/update[?force=1][&reboot=1]`: the bundle is the body.
pub(super) async fn update(ctx: &Ctx, parts: &Parts, mut body: RequestBody) -> Reply {
    let api = ctx.services.system.clone();
    if api.system.is_none() {
        return fail(&UpdateError::NotFirmware);
    }
    let force = query_flag(parts, "force");
    let reboot = query_flag(parts, "reboot");
    let (tx, rx) = tokio::sync::mpsc::channel(UPDATE_UPLOAD_CHUNKS_MAX);
    let worker = {
        let api = api.clone();
        tokio::task::spawn_blocking(move || {
            let Some(_guard) = api.begin_install() else { return Err(UpdateError::Busy) };
            let Some(system) = api.system.as_ref() else { return Err(UpdateError::NotFirmware) };
            let mut reader = ChannelReader { rx, current: bytes::Bytes::new() };
            bundle::install(system, &mut reader, force)
        })
    };
    // Feed the installer until the body ends, it stops reading (a refusal), or the body
    // passes its ceiling.
    let mut received: u64 = 0;
    let mut late = false;
    while let Some(frame) = body.frame().await {
        let item = match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => {
                    received += d.len() as u64;
                    if received > UPDATE_BODY_MAX_BYTES {
                        let _ = tx.send(Err(std::io::Error::other("the upload passed UPDATE_BODY_MAX_BYTES"))).await;
                        break;
                    }
                    Ok(d)
                }
                Err(_) => continue,
            },
            Err(e) => {
                late = timed_out(&*e);
                Err(std::io::Error::other(e.to_string()))
            }
        };
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break;
        }
    }
    drop(tx);
    let result = match worker.await {
        Ok(r) => r,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string()),
    };
    if late {
        // The socket guard leaves this answer to the handler reading the body.
        return request_timeout();
    }
    // A refusal before the body ended: read the rest (discarding it, within the body's
    // ceiling and the listener's read timeout) so the client, still sending, gets the
    // answer instead of a reset connection.
    if result.is_err() && received <= UPDATE_BODY_MAX_BYTES {
        while let Some(Ok(frame)) = body.frame().await {
            received += frame.data_ref().map_or(0, |d| d.len() as u64);
            if received > UPDATE_BODY_MAX_BYTES {
                break;
            }
        }
    }
    match result {
        Ok(done) => {
            info!(slot = done.slot.name(), version = %done.version, reboot, "update installed over HTTP");
            let mut answer = json!({
                "installed": true,
                "slot": done.slot.name(),
                "version": done.version,
                "bytes": done.bytes,
                "rebooting": false,
            });
            if reboot {
                answer["rebooting"] = json!(api.reboot_soon().is_ok());
            }
            json(StatusCode::OK, answer)
        }
        Err(e) => fail(&e),
    }
}

pub(super) fn reboot(ctx: &Ctx) -> Reply {
    match ctx.services.system.reboot_soon() {
        Ok(()) => json(StatusCode::ACCEPTED, json!({ "rebooting": true })),
        Err(m) => error(StatusCode::CONFLICT, "not_firmware", &m),
    }
}

/// `POST /api/system/factory-reset` with `{"keep": ["config", "recordings"]}` (either, both or
/// none): done at the next boot, which follows at once.
pub(super) async fn factory_reset(ctx: &Ctx, headers: &http::HeaderMap, body: RequestBody) -> Reply {
    let req: support::ResetRequest = match read_json(headers, body, ctx).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let Some(api) = Some(&ctx.services.system).filter(|s| s.system.is_some()) else {
        return error(StatusCode::CONFLICT, "not_firmware", "a factory reset is for a KeepPeek box");
    };
    let data = api.system.as_ref().map(|s| s.data_dir()).unwrap_or_default();
    if let Err(m) = support::request_factory_reset(&data, &req) {
        return error(StatusCode::BAD_REQUEST, "invalid", &m);
    }
    let rebooting = api.reboot_soon().is_ok();
    json(StatusCode::ACCEPTED, json!({ "keep": req.keep, "rebooting": rebooting }))
}

/// `GET /api/system/support-bundle`: a tar, secrets redacted.
pub(super) async fn support_bundle(ctx: &Ctx) -> Reply {
    let api = ctx.services.system.clone();
    let made = on_pool(move || {
        let Some(_turn) = api.begin_support_bundle() else {
            return Err(error(StatusCode::SERVICE_UNAVAILABLE, "busy", "a support bundle is being made: try again"));
        };
        let config = api.config_path.clone().unwrap_or_default();
        Ok(support::support_bundle(&api.root, &config, &api.status()))
    });
    match made.await {
        Ok(bytes) => {
            let r = with_type(StatusCode::OK, bytes, "application/x-tar");
            let name = format!("attachment; filename=\"keeppeek-support-{}.tar\"", crate::system::now_unix_s());
            with_header(r, header::CONTENT_DISPOSITION, &name)
        }
        Err(r) => r,
    }
}

/// An upload's JSON: the certificate chain and the key, each PEM, with room for the JSON's
/// escapes.
pub(super) const HTTPS_UPLOAD_BODY_MAX_BYTES: u64 = 2 * (crate::limits::TLS_UPLOAD_MAX_BYTES as u64 + (8 << 10));

/// What the certificate served says, for the UI (`enabled: false` without an HTTPS port).
fn https_json(serving: Option<&crate::tls::Serving>) -> serde_json::Value {
    use crate::tls::cert::utc;
    let Some(s) = serving else { return json!({ "enabled": false }) };
    json!({
        "enabled": true,
        "source": s.source.name(),
        "fingerprint": s.info.fingerprint(),
        "pin": s.info.pin(),
        "subject": s.info.subject,
        "issuer": s.info.issuer,
        "names": s.info.names.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "not_before": utc(s.info.not_before_s),
        "not_after": utc(s.info.not_after_s),
        "not_after_us": s.info.not_after_s.saturating_mul(1_000_000),
        "made_because": s.made_because,
    })
}

/// `GET /api/system/mqtt`: whether a broker is set, the connection's state, the outbox.
pub(super) fn mqtt(ctx: &Ctx) -> Reply {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &ctx.services.mqtt;
    let config = m.config();
    let outbox = ctx.services.catalog.outbox_state().unwrap_or_default();
    let s = &m.stats;
    json(
        StatusCode::OK,
        serde_json::json!({
            "configured": config.is_some(),
            "broker": config.as_ref().map(|c| format!("{}:{}", c.host, c.port)),
            "tls": config.as_ref().is_some_and(|c| c.tls),
            "connected": s.connected.load(Relaxed),
            "connects": s.connects.load(Relaxed),
            "last_error": s.last_error.lock().expect("lock").clone(),
            "events_sent": s.events_sent.load(Relaxed),
            "events_acked": s.events_acked.load(Relaxed),
            "outbox_waiting": outbox.waiting,
            "outbox_dropped": outbox.dropped,
        }),
    )
}

/// `GET /api/system/archive`: each archive target's state, what it uploaded, and its
/// backlog (the bytes and recordings waiting, the oldest's start).
pub(super) fn archive(ctx: &Ctx) -> Reply {
    json(StatusCode::OK, serde_json::json!({ "targets": ctx.services.archive.status() }))
}

/// `GET /api/system/camera-port`: the camera port's settings, why it does not serve (while
/// it does not), its DHCP and SNTP servers' counts and leases, and the cameras plugged into
/// it (or unplugged) with what they said over ONVIF and RTSP.
pub(super) async fn camera_port(ctx: &Ctx) -> Reply {
    json(StatusCode::OK, serde_json::to_value(ctx.services.camera_port.status().await).unwrap_or_default())
}

/// `GET /api/system/camera-events`: each camera whose own events are followed (ONVIF), by
/// name: `subscribing`, `subscribed` or `failed` with why, its detections that became events
/// and those dropped.
pub(super) fn camera_events(ctx: &Ctx) -> Reply {
    use crate::onvif::subscribe::Status;
    use std::sync::atomic::Ordering::Relaxed;
    let cameras: Vec<_> = ctx
        .services
        .camera_events
        .all()
        .iter()
        .map(|f| {
            let (state, error) = match &*f.status.borrow() {
                Status::Subscribing => ("subscribing", None),
                Status::Subscribed => ("subscribed", None),
                Status::Failed(why) => ("failed", Some(why.clone())),
            };
            serde_json::json!({
                "camera": f.camera,
                "state": state,
                "error": error,
                "events": f.events.load(Relaxed),
                "dropped": f.dropped.load(Relaxed),
            })
        })
        .collect();
    json(StatusCode::OK, serde_json::json!({ "cameras": cameras }))
}

/// `GET /api/system/https`
pub(super) fn https(ctx: &Ctx) -> Reply {
    let serving = ctx.services.tls.as_ref().map(|t| t.current());
    json(StatusCode::OK, https_json(serving.as_deref()))
}

fn no_https() -> Reply {
    error(StatusCode::CONFLICT, "https_off", "this box has no HTTPS port (set [https] listen in its config)")
}

fn tls_failed(e: crate::tls::TlsError) -> Reply {
    match e {
        crate::tls::TlsError::Cert(e) => error(StatusCode::BAD_REQUEST, "certificate", &e.to_string()),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, "storage", &e.to_string()),
    }
}

fn wall_now() -> (i64, bool) {
    let wall_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
    (wall_us / 1_000_000, crate::clock::is_sane(wall_us))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Upload {
    certificate: String,
    key: String,
}

/// `POST /api/system/https`: `{certificate, key}`, PEM; checked (they match, the chain
/// parses in order, the names fit the host this request came to), stored and served from the
/// next handshake on.
pub(super) async fn https_upload(ctx: &Ctx, headers: &http::HeaderMap, body: RequestBody) -> Reply {
    use crate::limits::TLS_UPLOAD_MAX_BYTES;
    let Some(tls) = ctx.services.tls.clone() else { return no_https() };
    let up: Upload = match super::reply::read_json_max(headers, body, ctx, HTTPS_UPLOAD_BODY_MAX_BYTES as usize).await {
        Ok(u) => u,
        Err(r) => return r,
    };
    for (field, pem) in [("certificate", &up.certificate), ("key", &up.key)] {
        if pem.len() > TLS_UPLOAD_MAX_BYTES {
            let message = format!("the {field} file is over {} KiB (TLS_UPLOAD_MAX_BYTES)", TLS_UPLOAD_MAX_BYTES >> 10);
            return super::reply::error_on(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &message, field);
        }
    }
    let Some(host) = super::reply::request_host(headers) else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_host",
            "the request names no host to check the certificate against",
        );
    };
    let asked = crate::tls::Name::reached_as(host);
    let done = on_pool(move || {
        let (now_s, sane) = wall_now();
        tls.upload(up.certificate.as_bytes(), up.key.as_bytes(), &asked, now_s, sane).map_err(tls_failed)
    })
    .await;
    match done {
        Ok(serving) => json(StatusCode::OK, https_json(Some(&serving))),
        Err(r) => r,
    }
}

/// `DELETE /api/system/https`: the box's own certificate again.
pub(super) async fn https_reset(ctx: &Ctx) -> Reply {
    let Some(tls) = ctx.services.tls.clone() else { return no_https() };
    let done = on_pool(move || {
        let (now_s, sane) = wall_now();
        tls.remove_upload(&crate::tls::addresses(), now_s, sane).map_err(tls_failed)
    })
    .await;
    match done {
        Ok(serving) => json(StatusCode::OK, https_json(Some(&serving))),
        Err(r) => r,
    }
}
