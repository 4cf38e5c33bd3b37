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
use serde::Deserialize;
use serde_json::json;

use super::parse::{Credentials, NewToken, NewUser};
use super::{Ctx, Reply, RequestBody, error, full, media, metrics, parse, text};
use crate::auth::{AuthError, Login, Principal, Role, same, scope};
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
        AuthError::LastAdmin => error(StatusCode::CONFLICT, "last_admin", &e.to_string()),
        AuthError::Busy(_) => error(StatusCode::SERVICE_UNAVAILABLE, "busy", &e.to_string()),
        AuthError::AddressBusy(_) => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "logins_in_flight", &e.to_string());
            r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(1));
            r
        }
        e => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string()),
    }
}

/// Reads a body of at most `max` bytes: 413 past it, 408 when it did not arrive in time (the
/// socket guard leaves that answer to the handler reading the body), 400 when it broke off.
pub(super) async fn read_body(body: RequestBody, ctx: &Ctx, max: usize) -> Result<bytes::Bytes, Reply> {
    match Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            ctx.stats.body_too_large.fetch_add(1, Ordering::Relaxed);
            let message = format!("the request body is over {} KiB", max >> 10);
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message))
        }
        Err(e) if timed_out(&*e) => Err(request_timeout()),
        Err(_) => Err(error(StatusCode::BAD_REQUEST, "bad_body", "the request body could not be read")),
    }
}

/// True when `e`, or an error under it, is the socket guard's read deadline.
pub(super) fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return true;
        }
        at = e.source();
    }
    false
}

/// The `408` for a body that did not arrive in time; the connection ends with it.
pub(super) fn request_timeout() -> Reply {
    super::closing(error(StatusCode::REQUEST_TIMEOUT, "request_timeout", "the request body did not arrive in time"))
}

/// True when the request says its body is JSON (`application/json`, any parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| parse::is_mime(v, "application/json"))
}

/// Reads a small JSON body: 415 unless it is declared `application/json` (so that no page
/// elsewhere can post it as a "simple" form or text request), 413 past
/// [`limits::HTTP_SMALL_BODY_MAX_BYTES`], 400 if it is not the expected JSON.
pub(super) async fn read_json<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: RequestBody,
    ctx: &Ctx,
) -> Result<T, Reply> {
    if !is_json(headers) {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not_json",
            "send the body as content-type: application/json",
        ));
    }
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

/// The `Origin` check: absent (not a browser's cross-site request), or this box as the
/// browser reached it, scheme and all (`http://` + `Host`; the box serves plain HTTP).
fn origin_ok(headers: &HeaderMap) -> bool {
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        None => true,
        Some(Ok(origin)) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
            origin.strip_prefix("http://").is_some_and(|h| !host.is_empty() && h.eq_ignore_ascii_case(host))
        }
        Some(Err(_)) => false,
    }
}

/// The CSRF and Origin checks for a state-changing request made with a session cookie.
fn csrf_ok(headers: &HeaderMap, csrf: &str) -> bool {
    let token_ok = headers.get("x-csrf-token").is_some_and(|v| same(v.as_bytes(), csrf.as_bytes()));
    token_ok && origin_ok(headers)
}

/// Routes one admitted request.
pub(super) async fn route(parts: Parts, body: RequestBody, ctx: &Ctx, peer: SocketAddr) -> Reply {
    let path = parts.uri.path().to_string();
    // HEAD is GET without the body (hyper leaves the body out).
    let method = if parts.method == Method::HEAD { Method::GET } else { parts.method.clone() };
    match (&method, path.as_str()) {
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
        (&Method::POST, "/api/setup") => return setup(&parts.headers, body, ctx, peer).await,
        (&Method::POST, "/api/login") => return login(&parts.headers, body, ctx, peer).await,
        _ => {}
    }
    let Some(who) = principal(&parts.headers, ctx) else {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated", "log in or send a bearer token");
    };
    if let Principal::User { csrf, .. } = &who
        && method != Method::GET
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
            None => {
                let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
                super::live::whep_open(ctx, &who, peer, camera, kind, content_type, body).await
            }
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
            None => super::system::factory_reset(ctx, &parts.headers, body).await,
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
            let u: NewUser = match read_json(&parts.headers, body, ctx).await {
                Ok(u) => u,
                Err(r) => return r,
            };
            let role = match u.role.as_str() {
                "admin" => Role::Admin,
                "viewer" => Role::Viewer,
                _ => return error(StatusCode::BAD_REQUEST, "invalid", "role is admin or viewer"),
            };
            match ctx.auth.put_user(&u.username, &u.password, role).await {
                Ok(ended) => {
                    closed_sessions(ctx, &ended).await;
                    json_reply(StatusCode::CREATED, json!({ "username": u.username, "role": role.name() }))
                }
                Err(e) => auth_error(e),
            }
        }
        (&Method::DELETE, ["api", "users", name]) => {
            if let Some(r) = need(scope::ADMIN) {
                return r;
            }
            match ctx.auth.delete_user(name) {
                Ok(Some(ended)) => {
                    closed_sessions(ctx, &ended).await;
                    json_reply(StatusCode::OK, json!({}))
                }
                Ok(None) => error(StatusCode::NOT_FOUND, "not_found", "no such user"),
                Err(e) => auth_error(e),
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
            let t: NewToken = match read_json(&parts.headers, body, ctx).await {
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
            match id.parse::<u64>().map(|id| (id, ctx.auth.catalog().delete_token(id))) {
                Ok((id, Ok(true))) => {
                    // What the token opened closes with it.
                    if let Some(w) = &ctx.media.webrtc {
                        w.close_principal(Principal::Token { id, scopes: 0 }.name()).await;
                    }
                    json_reply(StatusCode::OK, json!({}))
                }
                Ok((_, Ok(false))) | Err(_) => error(StatusCode::NOT_FOUND, "not_found", "no such token"),
                Ok((_, Err(e))) => auth_error(e.into()),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such route"),
    }
}

fn scope_names(bits: u8) -> Vec<&'static str> {
    scope::NAMES.iter().filter(|(_, b)| bits & b != 0).map(|(n, _)| *n).collect()
}

async fn setup(headers: &HeaderMap, body: RequestBody, ctx: &Ctx, peer: SocketAddr) -> Reply {
    if let Some(r) = foreign_origin(headers) {
        return r;
    }
    let c: Credentials = match read_json(headers, body, ctx).await {
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
    ctx.auth.setup_done();
    login_reply(ctx, ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::CREATED).await
}

async fn login(headers: &HeaderMap, body: RequestBody, ctx: &Ctx, peer: SocketAddr) -> Reply {
    if let Some(r) = foreign_origin(headers) {
        return r;
    }
    let c: Credentials = match read_json(headers, body, ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    login_reply(ctx, ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::OK).await
}

/// A `403` when the request comes from a page of another site (login CSRF, lockouts posted
/// by a page a LAN user opens).
fn foreign_origin(headers: &HeaderMap) -> Option<Reply> {
    (!origin_ok(headers)).then(|| error(StatusCode::FORBIDDEN, "foreign_origin", "this request came from another site"))
}

async fn login_reply(ctx: &Ctx, r: Result<Login, AuthError>, status: StatusCode) -> Reply {
    match r {
        Ok(login) => {
            closed_sessions(ctx, &login.ended).await;
            with_cookie(
                json_reply(status, json!({ "csrf": login.csrf, "role": login.role.name() })),
                &login.cookie,
                limits::AUTH_SESSION_LIFETIME_S,
            )
        }
        Err(e) => auth_error(e),
    }
}

/// Sessions that ended: what they opened (live views) closes too.
async fn closed_sessions(ctx: &Ctx, ended: &[crate::auth::SessionKey]) {
    if let Some(w) = &ctx.media.webrtc {
        for session in ended {
            w.close_login(*session).await;
        }
    }
}
