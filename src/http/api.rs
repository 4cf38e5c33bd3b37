//! The routes: who may call what, and the account API.
//!
//! Without credentials only `/healthz`, the UI's files (the login page), setup
//! (`/api/setup`) and login answer. Everything
//! else needs a session cookie or a bearer token with the route's scope; a request with a
//! session cookie that changes state must also carry the session's CSRF token in
//! `x-csrf-token`, and an `Origin` header, when present, must name this host.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use http::request::Parts;
use http::{HeaderMap, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::parse::{Credentials, NewToken, NewUser};
use super::{Ctx, Reply, error, full, media, metrics, parse, text};
use crate::auth::{AuthError, Principal, Role, scope};
use crate::limits;

const SESSION_COOKIE: &str = "kp_session";

pub(super) fn json_reply(status: StatusCode, value: serde_json::Value) -> Reply {
    let mut r = Response::new(full(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

fn with_cookie(mut r: Reply, value: &str, max_age_s: u64) -> Reply {
    let cookie = format!("{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}");
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn auth_error(e: AuthError) -> Reply {
    match e {
        AuthError::Invalid(m) => error(StatusCode::BAD_REQUEST, "invalid", &m),
        AuthError::BadCredentials => error(StatusCode::UNAUTHORIZED, "bad_credentials", &e.to_string()),
        AuthError::RateLimited { retry_after_s } => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &e.to_string());
            r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(retry_after_s));
            r
        }
        AuthError::Full(..) => error(StatusCode::SERVICE_UNAVAILABLE, "full", &e.to_string()),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string()),
    }
}

/// Reads a body of at most `max` bytes: 413 past it.
pub(super) async fn read_body(body: Incoming, ctx: &Ctx, max: usize) -> Result<bytes::Bytes, Reply> {
    match Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            ctx.stats.body_too_large.fetch_add(1, Ordering::Relaxed);
            let message = format!("the request body is over {} KiB", max >> 10);
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message))
        }
        Err(_) => Err(error(StatusCode::BAD_REQUEST, "bad_body", "the request body could not be read")),
    }
}

/// Reads a small JSON body: 413 past [`limits::HTTP_SMALL_BODY_MAX_BYTES`], 400 if it is not
/// the expected JSON.
pub(super) async fn read_json<T: for<'de> Deserialize<'de>>(body: Incoming, ctx: &Ctx) -> Result<T, Reply> {
    let bytes = read_body(body, ctx, limits::HTTP_SMALL_BODY_MAX_BYTES as usize).await?;
    serde_json::from_slice(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, "bad_json", &e.to_string()))
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| parse::cookie(v, name).map(str::to_string))
}

fn principal(headers: &HeaderMap, ctx: &Ctx) -> Option<Principal> {
    if let Some(bearer) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()?.strip_prefix("Bearer ")) {
        return ctx.auth.bearer(bearer.trim());
    }
    ctx.auth.session(&cookie(headers, SESSION_COOKIE)?)
}

/// The CSRF and Origin checks for a state-changing request made with a session cookie.
fn csrf_ok(headers: &HeaderMap, csrf: &str) -> bool {
    let token_ok = headers.get("x-csrf-token").is_some_and(|v| v.as_bytes() == csrf.as_bytes());
    let origin_ok = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
            origin.split_once("://").is_some_and(|(_, h)| h == host)
        }
    };
    token_ok && origin_ok
}

/// Routes one admitted request.
pub(super) async fn route(parts: Parts, body: Incoming, ctx: &Ctx, peer: SocketAddr) -> Reply {
    let path = parts.uri.path().to_string();
    let method = parts.method.clone();
    match (&method, path.as_str()) {
        (&Method::GET | &Method::HEAD, "/healthz") => return text("ok\n".into(), "text/plain; charset=utf-8"),
        // The UI's files are the login page: they answer without credentials.
        (&Method::GET, p) if !p.starts_with("/api/") => {
            if let Some(r) = super::ui::file(p, &parts.headers) {
                return r;
            }
        }
        (&Method::GET, "/api/setup") => {
            return match ctx.auth.setup_needed() {
                Ok(needed) => json_reply(StatusCode::OK, json!({ "needed": needed })),
                Err(e) => auth_error(e),
            };
        }
        (&Method::POST, "/api/setup") => return setup(body, ctx, peer).await,
        (&Method::POST, "/api/login") => return login(body, ctx, peer).await,
        _ => {}
    }
    let Some(who) = principal(&parts.headers, ctx) else {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated", "log in or send a bearer token");
    };
    if let Principal::User { csrf, .. } = &who
        && !matches!(method, Method::GET | Method::HEAD)
        && !csrf_ok(&parts.headers, csrf)
    {
        return error(StatusCode::FORBIDDEN, "csrf", "missing or wrong x-csrf-token, or a foreign Origin");
    }
    let need = |s: u8| -> Option<Reply> {
        (!who.can(s)).then(|| error(StatusCode::FORBIDDEN, "forbidden", "this credential may not do that"))
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["metrics"]) => need(scope::METRICS).unwrap_or_else(|| {
            text(metrics::render(&ctx.stats, &ctx.media), "text/plain; version=0.0.4; charset=utf-8")
        }),
        (&Method::GET, ["api", "cameras"]) => need(scope::VIEW).unwrap_or_else(|| media::cameras(ctx)),
        (&Method::GET, ["api", "streams", camera, kind, what]) => {
            if let Some(r) = need(scope::VIEW) {
                return r;
            }
            let stream = format!("{camera}/{kind}");
            match *what {
                "recordings" => media::recordings(ctx, &parts, &stream),
                "coverage" => media::coverage(ctx, &parts, &stream),
                "export.mp4" => match media::range(&parts) {
                    Ok((from, to)) => media::export(ctx, &parts, &stream, from, to),
                    Err(r) => r,
                },
                "export.m3u8" => media::playlist(ctx, &parts, &stream),
                _ => error(StatusCode::NOT_FOUND, "not_found", "no such route"),
            }
        }
        (&Method::DELETE, ["api", "streams", camera, kind, "recordings"]) => match need(scope::ADMIN) {
            Some(r) => r,
            None => media::delete_range(ctx, &parts, &format!("{camera}/{kind}")).await,
        },
        (&Method::GET, ["api", "streams", camera, kind, "exports", name]) => {
            if let Some(r) = need(scope::VIEW) {
                return r;
            }
            match media::range_in_name(name) {
                Ok((from, to)) => media::export(ctx, &parts, &format!("{camera}/{kind}"), from, to),
                Err(r) => r,
            }
        }
        (&Method::POST, ["api", "whep", camera, kind]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::live::whep_open(ctx, &who, peer, camera, kind, body).await,
        },
        (&Method::DELETE, ["api", "whep", "sessions", id]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::live::whep_close(ctx, &who, id).await,
        },
        (&Method::POST, ["api", "events"]) => match need(scope::EVENTS_WRITE) {
            Some(r) => r,
            None => super::events::intake(ctx, &who, &parts, body).await,
        },
        (&Method::GET, ["api", "events"]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::events::search(ctx, &parts).await,
        },
        (&Method::GET, ["api", "events", id]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::events::revisions(ctx, &parts, id).await,
        },
        (&Method::GET, ["api", "events", id, "keyframe"]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::events::keyframe(ctx, id).await,
        },
        (&Method::GET, ["api", "events", id, "snapshot"]) => match need(scope::VIEW) {
            Some(r) => r,
            None => super::events::snapshot(ctx, &parts, id).await,
        },
        (&Method::GET, ["api", "system"]) => need(scope::VIEW).unwrap_or_else(|| super::system::status(ctx)),
        (&Method::POST, ["api", "system", "update"]) => match need(scope::ADMIN) {
            Some(r) => r,
            None => super::system::update(ctx, &parts, body).await,
        },
        (&Method::POST, ["api", "system", "reboot"]) => {
            need(scope::ADMIN).unwrap_or_else(|| super::system::reboot(ctx))
        }
        (&Method::POST, ["api", "system", "factory-reset"]) => match need(scope::ADMIN) {
            Some(r) => r,
            None => super::system::factory_reset(ctx, body).await,
        },
        (&Method::GET, ["api", "system", "support-bundle"]) => match need(scope::ADMIN) {
            Some(r) => r,
            None => super::system::support_bundle(ctx).await,
        },
        (&Method::GET, ["api", "me"]) => match &who {
            Principal::User { name, role, csrf, .. } => {
                json_reply(StatusCode::OK, json!({ "user": name, "role": role.name(), "csrf": csrf }))
            }
            Principal::Token { id, scopes } => {
                json_reply(StatusCode::OK, json!({ "token": id, "scopes": scope_names(*scopes) }))
            }
        },
        (&Method::POST, ["api", "logout"]) => match &who {
            Principal::User { session, .. } => {
                ctx.auth.end_session(session);
                if let Some(w) = &ctx.media.webrtc {
                    w.close_login(*session).await;
                }
                with_cookie(json_reply(StatusCode::OK, json!({})), "", 0)
            }
            Principal::Token { .. } => error(StatusCode::BAD_REQUEST, "no_session", "a token has no session to end"),
        },
        (&Method::GET, ["api", "users"]) => need(scope::ADMIN).unwrap_or_else(|| match ctx.auth.catalog().users() {
            Ok(users) => {
                let list: Vec<_> = users
                    .into_iter()
                    .map(|(n, r)| json!({ "username": n, "role": Role::from_code(r).map_or("?", Role::name) }))
                    .collect();
                json_reply(StatusCode::OK, json!(list))
            }
            Err(e) => auth_error(e.into()),
        }),
        (&Method::POST, ["api", "users"]) => {
            if let Some(r) = need(scope::ADMIN) {
                return r;
            }
            let u: NewUser = match read_json(body, ctx).await {
                Ok(u) => u,
                Err(r) => return r,
            };
            let role = match u.role.as_str() {
                "admin" => Role::Admin,
                "viewer" => Role::Viewer,
                _ => return error(StatusCode::BAD_REQUEST, "invalid", "role is admin or viewer"),
            };
            match ctx.auth.put_user(&u.username, &u.password, role).await {
                Ok(()) => {
                    ctx.auth.end_sessions_of(&u.username);
                    json_reply(StatusCode::CREATED, json!({ "username": u.username, "role": role.name() }))
                }
                Err(e) => auth_error(e),
            }
        }
        (&Method::DELETE, ["api", "users", name]) => {
            if let Some(r) = need(scope::ADMIN) {
                return r;
            }
            match ctx.auth.catalog().delete_user(name) {
                Ok(true) => {
                    ctx.auth.end_sessions_of(name);
                    if let Some(w) = &ctx.media.webrtc {
                        w.close_principal(format!("user:{name}")).await;
                    }
                    json_reply(StatusCode::OK, json!({}))
                }
                Ok(false) => error(StatusCode::NOT_FOUND, "not_found", "no such user"),
                Err(e) => auth_error(e.into()),
            }
        }
        (&Method::GET, ["api", "tokens"]) => need(scope::ADMIN).unwrap_or_else(|| match ctx.auth.catalog().tokens() {
            Ok(tokens) => {
                let list: Vec<_> = tokens
                    .into_iter()
                    .map(|(id, name, scopes, created)| {
                        json!({ "id": id, "name": name, "scopes": scope_names(scopes), "created_us": created })
                    })
                    .collect();
                json_reply(StatusCode::OK, json!(list))
            }
            Err(e) => auth_error(e.into()),
        }),
        (&Method::POST, ["api", "tokens"]) => {
            if let Some(r) = need(scope::ADMIN) {
                return r;
            }
            let t: NewToken = match read_json(body, ctx).await {
                Ok(t) => t,
                Err(r) => return r,
            };
            let mut bits = 0;
            for s in &t.scopes {
                match scope::NAMES.iter().find(|(n, _)| n == s) {
                    Some((_, b)) => bits |= b,
                    None => return error(StatusCode::BAD_REQUEST, "invalid", &format!("unknown scope {s}")),
                }
            }
            match ctx.auth.create_token(&t.name, bits) {
                Ok((id, token)) => json_reply(StatusCode::CREATED, json!({ "id": id, "token": token })),
                Err(e) => auth_error(e),
            }
        }
        (&Method::DELETE, ["api", "tokens", id]) => {
            if let Some(r) = need(scope::ADMIN) {
                return r;
            }
            match id.parse::<u64>().map(|id| ctx.auth.catalog().delete_token(id)) {
                Ok(Ok(true)) => json_reply(StatusCode::OK, json!({})),
                Ok(Ok(false)) | Err(_) => error(StatusCode::NOT_FOUND, "not_found", "no such token"),
                Ok(Err(e)) => auth_error(e.into()),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such route"),
    }
}

fn scope_names(bits: u8) -> Vec<&'static str> {
    scope::NAMES.iter().filter(|(_, b)| bits & b != 0).map(|(n, _)| *n).collect()
}

async fn setup(body: Incoming, ctx: &Ctx, peer: SocketAddr) -> Reply {
    let c: Credentials = match read_json(body, ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let _one_at_a_time = ctx.auth.setup_lock.lock().await;
    match ctx.auth.setup_needed() {
        Ok(true) => {}
        Ok(false) => return error(StatusCode::FORBIDDEN, "setup_done", "an admin exists: log in"),
        Err(e) => return auth_error(e),
    }
    if !ctx.auth.setup_allowed(peer.ip(), c.setup_token.as_deref()) {
        return error(
            StatusCode::FORBIDDEN,
            "setup_token",
            "setup from another machine needs the setup token from the log",
        );
    }
    if let Err(e) = ctx.auth.put_user(&c.username, &c.password, Role::Admin).await {
        return auth_error(e);
    }
    login_reply(ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::CREATED)
}

async fn login(body: Incoming, ctx: &Ctx, peer: SocketAddr) -> Reply {
    let c: Credentials = match read_json(body, ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    login_reply(ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::OK)
}

fn login_reply(r: Result<(String, String, Role), AuthError>, status: StatusCode) -> Reply {
    match r {
        Ok((cookie, csrf, role)) => with_cookie(
            json_reply(status, json!({ "csrf": csrf, "role": role.name() })),
            &cookie,
            limits::AUTH_SESSION_LIFETIME_S,
        ),
        Err(e) => auth_error(e),
    }
}
