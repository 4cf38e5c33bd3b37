//! The config as `GET /api/config` shows it: the settings, a page of cameras and the
//! revision they are. A camera's password shows only as set or not; nothing else in the
//! config is secret.

use serde_json::{Value, json};

use super::{Camera, Config, Source};

/// A stream's address as people read it (`rtsp://…`, `file://…`, `built-in`).
pub fn address(s: &Source) -> String {
    match s {
        Source::Rtsp { url, .. } => url.to_string(),
        Source::File { path } => format!("file://{}", path.display()),
        Source::Builtin => "built-in".into(),
    }
}

/// A stream's RTP transport (`tcp`, `udp`), for RTSP streams.
pub fn transport(s: &Source) -> Option<String> {
    match s {
        Source::Rtsp { transport, .. } => Some(format!("{transport:?}").to_lowercase()),
        _ => None,
    }
}

fn source(s: &Source) -> Value {
    json!({ "url": address(s), "transport": transport(s) })
}

/// A camera as the snapshot shows it: its password only as set or not.
pub fn camera(c: &Camera) -> Value {
    json!({
        "name": c.name,
        "record": c.record.name(),
        "sub_record": c.sub.as_ref().map(|_| c.record_sub.name()),
        "pre_roll_s": c.pre_roll_ms / 1000,
        "post_roll_s": c.post_roll_ms / 1000,
        "keep_event_footage_days": c.keep_event_footage_days,
        "username": c.username,
        "password": if c.password.is_some() { "set" } else { "not set" },
        "main": source(&c.main),
        "sub": c.sub.as_ref().map(source),
        "frame_max_bytes": c.frame_max_bytes,
        "onvif": c.onvif.as_ref().map(|u| u.to_string()),
    })
}

pub fn settings(c: &Config) -> Value {
    json!({
        "listen": c.listen.map(|a| a.to_string()),
        "https": { "listen": c.https.map(|a| a.to_string()) },
        "oidc": c.oidc.iter().map(|p| json!({
            "id": p.id, "name": p.name, "issuer": p.issuer, "client_id": p.client_id,
            "client_secret": if p.client_secret.is_some() { "set" } else { "not set" },
            "role_claim": p.role_claim, "admin_values": p.admin_values, "viewer_values": p.viewer_values,
            "ca_pem": if p.ca_pem.is_some() { "set" } else { "not set" },
        })).collect::<Vec<_>>(),
        "mqtt": c.mqtt.as_ref().map(|m| json!({
            "host": m.host, "port": m.port, "tls": m.tls,
            "ca_pem": if m.ca_pem.is_some() { "set" } else { "not set" },
            "username": m.username,
            "password": if m.password.is_some() { "set" } else { "not set" },
            "prefix": m.prefix, "discovery_prefix": m.discovery_prefix, "client_id": m.client_id,
        })),
        "archive": c.archive.iter().map(|t| json!({
            "id": t.id, "endpoint": t.place.endpoint.as_str().trim_end_matches('/'), "region": t.place.region,
            "bucket": t.place.bucket, "prefix": t.prefix, "access_key": t.place.access_key,
            "secret_key": "set", "path_style": t.place.path_style,
            "ca_pem": if t.place.ca_pem.is_some() { "set" } else { "not set" },
            "max_kbit_s": t.max_kbit_s, "cameras": t.cameras, "streams": t.streams.name(),
            "what": if t.events_only { "events" } else { "all" }, "keep_days": t.keep_days,
            "before_delete": t.before_delete, "backlog_max_bytes": t.backlog_max_bytes,
        })).collect::<Vec<_>>(),
        "camera_port": c.camera_port.as_ref().map(|p| json!({
            "interface": p.interface, "address": format!("{}/{}", p.address, p.prefix),
            "pool": format!("{}-{}", p.pool.0, p.pool.1), "lease_time_s": p.lease_time_s,
            "router": p.router, "web": p.web,
        })),
        "flush_interval_s": c.flush_interval_s,
        "require_sane_clock": c.require_sane_clock,
        "ram_class_bytes": c.ram_class_bytes,
        "retention": {
            "stream_max_bytes": c.retention.stream_max_bytes,
            "total_max_bytes": c.retention.total_max_bytes,
            "held_max_percent": c.retention.held_max_percent,
        },
        "webrtc": { "port": c.webrtc.port, "loopback": c.webrtc.loopback },
        "preroll": { "stream_max_bytes": c.preroll.stream_max_bytes, "total_max_bytes": c.preroll.total_max_bytes },
        "pools": { "ingest_queues_max_bytes": c.pools.ingest_queues_max_bytes },
        "events": { "max_bytes": c.events_max_bytes },
    })
}

/// The page of `limit` cameras from `offset`, with the settings and revision `rev`.
pub fn page(c: &Config, rev: u64, offset: usize, limit: usize) -> Value {
    let cameras: Vec<Value> = c.cameras.iter().skip(offset).take(limit).map(camera).collect();
    let next = (offset + limit < c.cameras.len()).then_some(offset + limit);
    json!({ "rev": rev, "settings": settings(c), "cameras": cameras, "total": c.cameras.len(), "offset": offset, "next": next })
}
