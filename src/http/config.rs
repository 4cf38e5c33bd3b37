//! The config from the web face (admin only): the snapshot, paged, with no secret in it;
//! plans of change sets; applying one, which rewrites the file and reconfigures the running
//! box ([`crate::daemon::Reconfig`]); and the revisions, each of which a rollback plans
//! back to.

use std::sync::atomic::Ordering;

use http::StatusCode;
use http::request::Parts;
use serde_json::{Value, json};

use super::Ctx;
use super::errors::fail;
use super::health::page;
use super::reply::{Reply, RequestBody, content_type, error, error_on, json, on_pool, read_body};
use crate::auth::Principal;
use crate::config::change::ChangeSet;
use crate::config::file::PlanError;
use crate::daemon::{ApplyError, Reconfig};
use crate::limits;

fn reconfig(ctx: &Ctx) -> Result<&Reconfig, Reply> {
    ctx.services.config.as_deref().ok_or_else(|| {
        error(
            StatusCode::CONFLICT,
            "no_config_file",
            "this box runs without a config file (the demo): nothing to change",
        )
    })
}

/// `GET /api/config?offset&limit`: the settings, a page of cameras (at most
/// [`limits::CONFIG_PAGE_CAMERAS_MAX`]) and the revision they are.
pub(super) async fn snapshot(ctx: &Ctx, parts: &Parts) -> Reply {
    let r = match reconfig(ctx) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let (offset, limit) = match page(parts.uri.query().unwrap_or(""), limits::CONFIG_PAGE_CAMERAS_MAX) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_page", &e),
    };
    let current = r.file.lock().await;
    json(StatusCode::OK, crate::config::snapshot::page(&current.config, current.rev, offset, limit))
}

/// The config file and the change set a request sends: JSON, at most
/// [`limits::CONFIG_CHANGE_SET_MAX_BYTES`].
async fn change_set<'c>(ctx: &'c Ctx, parts: &Parts, body: RequestBody) -> Result<(&'c Reconfig, ChangeSet), Reply> {
    let r = reconfig(ctx)?;
    if !super::parse::is_mime(content_type(&parts.headers), "application/json") {
        return Err(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_json", "send the change set as application/json"));
    }
    let bytes = read_body(body, ctx, limits::CONFIG_CHANGE_SET_MAX_BYTES as usize).await?;
    let set =
        ChangeSet::decode(&bytes).map_err(|(field, why)| error_on(StatusCode::BAD_REQUEST, "invalid", &why, &field))?;
    Ok((r, set))
}

fn refused(ctx: &Ctx, e: PlanError) -> Reply {
    let stats = &ctx.services.config_stats;
    match e {
        PlanError::Conflict { base, current } => {
            stats.conflicts.fetch_add(1, Ordering::Relaxed);
            error_on(
                StatusCode::CONFLICT,
                "stale_base",
                &format!("the config changed since revision {base}: it is at revision {current} now; plan again"),
                "base",
            )
        }
        PlanError::Refused(field, why) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            error_on(StatusCode::BAD_REQUEST, "invalid", &why, &field)
        }
        PlanError::Catalog(e) => fail(&e),
    }
}

/// `POST /api/config/plan`: what a change set would do; nothing is written.
pub(super) async fn plan(ctx: &Ctx, who_: &Principal, parts: &Parts, body: RequestBody) -> Reply {
    let (r, set) = match change_set(ctx, parts, body).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    ctx.services.config_stats.plans.fetch_add(1, Ordering::Relaxed);
    let current = r.file.lock().await;
    match r.file.plan(&current, &set) {
        Ok(p) => {
            tracing::info!(by = %who_.name(), base = current.rev, changes = p.diff.len(), "config planned");
            super::reply::with_type(StatusCode::OK, p.answer().to_string(), "application/json")
        }
        Err(e) => refused(ctx, e),
    }
}

/// `POST /api/config/apply`: plans the change set again on the current revision (409 when
/// it is not the set's base), writes the file and its revision, and reconfigures the box:
/// only the cameras the plan names stop and start; a setting that cannot change while the
/// box runs restarts keeppeek once the answer is sent.
pub(super) async fn apply(ctx: &Ctx, who_: &Principal, parts: &Parts, body: RequestBody) -> Reply {
    let (r, set) = match change_set(ctx, parts, body).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    match r.apply(&set, who_.name()).await {
        Ok(a) => {
            ctx.services.config_stats.applies.fetch_add(1, Ordering::Relaxed);
            json(StatusCode::OK, json!({ "rev": a.rev, "plan": a.answer, "restarting": a.restarting }))
        }
        Err(ApplyError::Plan(e)) => refused(ctx, e),
        Err(ApplyError::NotWritten(why)) => error(StatusCode::INTERNAL_SERVER_ERROR, "not_written", &why),
        Err(ApplyError::Stopping) => error(StatusCode::SERVICE_UNAVAILABLE, "stopping", "the box is stopping"),
        Err(ApplyError::NotApplied { rev, why }) => {
            ctx.services.config_stats.applies.fetch_add(1, Ordering::Relaxed);
            error(StatusCode::INTERNAL_SERVER_ERROR, "not_applied", &format!("revision {rev} is written but {why}"))
        }
    }
}

/// `GET /api/config/revisions`: the kept revisions, newest first: who, when, what.
pub(super) async fn revisions(ctx: &Ctx) -> Reply {
    let r = match reconfig(ctx) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let (rev, unrecorded) = {
        let current = r.file.lock().await;
        (current.rev, crate::config::file::ConfigFile::unrecorded(&current))
    };
    // Up to CONFIG_REVISIONS_MAX whole files: read on the blocking pool.
    let catalog = ctx.services.catalog.clone();
    let kept = match on_pool(move || catalog.config_revisions().map_err(|e| fail(&e))).await {
        Ok(kept) => kept,
        Err(reply) => return reply,
    };
    let list: Vec<Value> = unrecorded
        .iter()
        .chain(&kept)
        .map(|x| json!({ "rev": x.rev, "time_us": x.time_us, "by": x.by, "summary": x.summary, "current": x.rev == rev }))
        .collect();
    json(StatusCode::OK, json!({ "revisions": list }))
}

/// What `POST /api/cameras/probe` takes.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProbeRequest {
    url: String,
    transport: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// `POST /api/cameras/probe`: tries a camera before it is added ([`crate::ingest::probe`]);
/// 200 with what it sends (`ok: true`) or why not (`ok: false`, a code, a message and the
/// form field it is about). At most [`limits::PROBES_RUNNING_MAX`] at once.
pub(super) async fn probe(ctx: &Ctx, who: &Principal, parts: &Parts, body: RequestBody) -> Reply {
    let req: ProbeRequest = match super::reply::read_json(&parts.headers, body, ctx).await {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let url = match crate::config::rtsp_url(&req.url) {
        Ok(u) => u,
        Err(why) => return error_on(StatusCode::BAD_REQUEST, "invalid", &why, "url"),
    };
    let transport = match req.transport.as_deref() {
        None | Some("tcp") => crate::config::Transport::Tcp,
        Some("udp") => crate::config::Transport::Udp,
        Some(_) => return error_on(StatusCode::BAD_REQUEST, "invalid", "transport is tcp or udp", "transport"),
    };
    for (field, v) in [("username", &req.username), ("password", &req.password)] {
        if v.as_ref().is_some_and(|v| v.len() > limits::CAMERA_CREDENTIAL_MAX_BYTES) {
            let why =
                format!("longer than {} bytes (CAMERA_CREDENTIAL_MAX_BYTES)", limits::CAMERA_CREDENTIAL_MAX_BYTES);
            return error_on(StatusCode::BAD_REQUEST, "invalid", &why, field);
        }
    }
    let _place = match probe_place(ctx) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    ctx.services.config_stats.probes.fetch_add(1, Ordering::Relaxed);
    let credentials = req.username.as_deref().zip(req.password.as_deref());
    let found = crate::ingest::probe::probe(&url, transport, credentials).await;
    tracing::info!(by = %who.name(), url = %url, ok = found.is_ok(), "camera probed");
    tried("found", found.map_err(|f| (f.code(), f.to_string(), f.field())))
}

/// One of the [`limits::PROBES_RUNNING_MAX`] places of camera probes and ONVIF reads, or 503.
pub(super) fn probe_place(ctx: &Ctx) -> Result<tokio::sync::SemaphorePermit<'_>, Reply> {
    ctx.probes.try_acquire().map_err(|_| {
        let why = format!("{} probes are running: try again in a few seconds", limits::PROBES_RUNNING_MAX);
        error(StatusCode::SERVICE_UNAVAILABLE, "probes_busy", &why)
    })
}

/// 200 with what a camera was found to be (`ok: true`, under `key`), or why not (`ok:
/// false`, a code, a message and the form field it is about).
pub(super) fn tried(key: &str, outcome: Result<impl serde::Serialize, (&str, String, &str)>) -> Reply {
    match outcome {
        Ok(found) => json(StatusCode::OK, json!({ "ok": true, key: found })),
        Err((code, message, field)) => {
            json(StatusCode::OK, json!({ "ok": false, "code": code, "message": message, "field": field }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Camera, Config, Source};

    /// A page of cameras at every field's ceiling stays under 64 KiB.
    #[test]
    fn a_page_of_the_largest_cameras_is_under_64_kib() {
        let mut config = Config::demo("/data".into(), ([127, 0, 0, 1], 8080).into());
        let url = |tag: &str| {
            let mut u = format!("rtsp://{tag}.example/");
            u.push_str(&"p".repeat(limits::CAMERA_URL_MAX_BYTES - u.len()));
            url::Url::parse(&u).unwrap()
        };
        let transport = crate::config::Transport::Tcp;
        config.cameras = (0..limits::CONFIG_PAGE_CAMERAS_MAX)
            .map(|i| Camera {
                name: format!("{i:0>32}"),
                // Control characters are escaped as six bytes each in JSON.
                username: Some("\u{1}".repeat(limits::CAMERA_CREDENTIAL_MAX_BYTES)),
                password: Some("x".into()),
                main: Source::Rtsp { url: url("main"), transport },
                sub: Some(Source::Rtsp { url: url("sub"), transport }),
                ..config.cameras[0].clone()
            })
            .collect();
        let page = crate::config::snapshot::page(&config, u64::MAX, 0, limits::CONFIG_PAGE_CAMERAS_MAX);
        let bytes = page.to_string().len();
        assert!(bytes <= 64 << 10, "{bytes} bytes");
    }
}
