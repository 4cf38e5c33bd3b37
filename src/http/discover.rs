//! Finding cameras from the web face (admin only): a search of the LAN by WS-Discovery, each
//! camera found marked when the config already has it; and a camera's streams read over
//! ONVIF with its credentials, to fill the camera form before its probe.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use http::StatusCode;
use http::request::Parts;
use serde_json::json;

use super::Ctx;
use super::reply::{Reply, RequestBody, error, error_on, json};
use crate::auth::Principal;
use crate::limits;
use crate::onvif;

/// The cameras in the config, by the host their streams are at.
async fn configured(ctx: &Ctx) -> Vec<(String, Vec<String>)> {
    let Some(r) = ctx.services.config.as_deref() else { return Vec::new() };
    let current = r.file.lock().await;
    current
        .config
        .cameras
        .iter()
        .map(|c| {
            let hosts = [Some(&c.main), c.sub.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|s| match s {
                    crate::config::Source::Rtsp { url, .. } => {
                        url.host_str().map(|h| h.trim_matches(['[', ']']).to_string())
                    }
                    _ => None,
                })
                .collect();
            (c.name.clone(), hosts)
        })
        .collect()
}

/// `POST /api/cameras/discover`: the cameras that answer a WS-Discovery probe on the box's
/// interfaces within [`limits::DISCOVERY_WAIT_MS`], each with the config's camera at its
/// address, if any. One search at a time ([`limits::DISCOVERIES_RUNNING_MAX`]).
pub(super) async fn search(ctx: &Ctx, who: &Principal) -> Reply {
    let Ok(_permit) = ctx.searches.try_acquire() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "search_busy",
            "a search is running: its answer comes in a few seconds",
        );
    };
    ctx.services.config_stats.searches.fetch_add(1, Ordering::Relaxed);
    let found = onvif::discovery::search().await;
    let cameras = configured(ctx).await;
    let added =
        |a: &IpAddr| cameras.iter().find(|(_, hosts)| hosts.iter().any(|h| h.parse::<IpAddr>().ok() == Some(*a)));
    let list: Vec<_> = found
        .found
        .iter()
        .map(|f| {
            let mut v = serde_json::to_value(f).unwrap_or_default();
            v["added_as"] = json!(added(&f.address).map(|(name, _)| name));
            v
        })
        .collect();
    tracing::info!(by = %who.name(), found = list.len(), interfaces = found.interfaces.len(), left_out = found.left_out, "cameras searched for");
    json(
        StatusCode::OK,
        json!({ "found": list, "interfaces": found.interfaces, "left_out": found.left_out, "unreadable": found.unreadable,
                "waited_ms": limits::DISCOVERY_WAIT_MS }),
    )
}

/// What `POST /api/cameras/onvif` takes.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnvifRequest {
    /// The device service (`http://host[:port]/onvif/device_service`), or a host and port.
    address: String,
    username: String,
    password: String,
}

/// The device service an address names: a URL as is, or a host (and port) with ONVIF's
/// usual path.
fn device_url(address: &str) -> Result<url::Url, String> {
    let address = address.trim();
    if address.len() > limits::CAMERA_URL_MAX_BYTES {
        return Err(format!("longer than {} bytes (CAMERA_URL_MAX_BYTES)", limits::CAMERA_URL_MAX_BYTES));
    }
    let text =
        if address.contains("://") { address.to_string() } else { format!("http://{address}/onvif/device_service") };
    let url = url::Url::parse(&text).map_err(|e| format!("{address:?} is not an address: {e}"))?;
    if url.scheme() != "http" {
        return Err("KeepPeek speaks ONVIF over http:// on the LAN".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("put the user name and password in their own fields, not in the address".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the address has no host".into());
    }
    Ok(url)
}

/// `POST /api/cameras/onvif`: the camera's model, profiles and main and sub stream addresses
/// over ONVIF ([`onvif::device::streams`]), or why not (`ok: false`, a code, a message and
/// the field it is about). Shares [`limits::PROBES_RUNNING_MAX`] with the probes.
pub(super) async fn onvif(ctx: &Ctx, who: &Principal, parts: &Parts, body: RequestBody) -> Reply {
    let req: OnvifRequest = match super::reply::read_json(&parts.headers, body, ctx).await {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let url = match device_url(&req.address) {
        Ok(u) => u,
        Err(why) => return error_on(StatusCode::BAD_REQUEST, "invalid", &why, "address"),
    };
    for (field, v) in [("username", &req.username), ("password", &req.password)] {
        if v.len() > limits::CAMERA_CREDENTIAL_MAX_BYTES {
            let why =
                format!("longer than {} bytes (CAMERA_CREDENTIAL_MAX_BYTES)", limits::CAMERA_CREDENTIAL_MAX_BYTES);
            return error_on(StatusCode::BAD_REQUEST, "invalid", &why, field);
        }
    }
    let _place = match super::config::probe_place(ctx) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    ctx.services.config_stats.onvif_reads.fetch_add(1, Ordering::Relaxed);
    let now_s = || crate::clock::Clocks::wall_us(&crate::clock::RealClocks).div_euclid(1_000_000);
    let read = onvif::device::streams(&url, &req.username, &req.password, now_s).await;
    tracing::info!(by = %who.name(), device = %url, ok = read.is_ok(), "camera read over ONVIF");
    super::config::tried("streams", read.map_err(|f| (f.code(), f.to_string(), f.field())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_a_device_service() {
        assert_eq!(device_url("10.0.0.5").unwrap().as_str(), "http://10.0.0.5/onvif/device_service");
        assert_eq!(device_url(" 10.0.0.5:8000 ").unwrap().as_str(), "http://10.0.0.5:8000/onvif/device_service");
        assert_eq!(device_url("http://cam.lan/onvif/dev").unwrap().as_str(), "http://cam.lan/onvif/dev");
        assert!(device_url("http://u:p@cam.lan/").unwrap_err().contains("own fields"));
        assert!(device_url("https://cam.lan/").is_err());
        assert!(device_url("rtsp://cam.lan/").is_err());
        assert!(
            device_url(&"a".repeat(limits::CAMERA_URL_MAX_BYTES + 1)).unwrap_err().contains("CAMERA_URL_MAX_BYTES")
        );
    }
}
