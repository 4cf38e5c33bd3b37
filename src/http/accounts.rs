//! Accounts over HTTP: who a request is (its session cookie or bearer token), the CSRF and
//! `Origin` checks, first-admin setup, login and logout, and the user and token API.
//!
//! Login and setup need no credential but refuse a foreign `Origin` and any body that is not
//! JSON, so that no page elsewhere can post them. A session's cookie is `HttpOnly` and
//! `SameSite=Strict`; a request with it that changes state also carries the session's CSRF
//! token in `x-csrf-token`.

use std::net::SocketAddr;

use http::{HeaderMap, StatusCode, header};
use serde_json::json;

use super::Ctx;
use super::errors::fail;
use super::parse::{self, Credentials, NewToken, NewUser};
use super::reply::{Reply, RequestBody, error, json, read_json, with_header};
use crate::auth::{AuthError, Login, Principal, Role, same, scope};
use crate::limits;

const SESSION_COOKIE: &str = "kp_session";

pub(super) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| parse::cookie(v, name).map(str::to_string))
}

/// Who sent the request: a bearer token, else a session cookie.
pub(super) fn principal(headers: &HeaderMap, ctx: &Ctx) -> Option<Principal> {
    if let Some(bearer) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()?.strip_prefix("Bearer ")) {
        return ctx.auth.bearer(bearer.trim());
    }
    ctx.auth.session(&cookie(headers, SESSION_COOKIE)?)
}

/// The `Origin` check: absent (not a browser's cross-site request), or this box as the
/// browser reached it, scheme and all (`http://` or, over HTTPS, `https://`, then `Host`).
fn origin_ok(headers: &HeaderMap, https: bool) -> bool {
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        None => true,
        Some(Ok(origin)) => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
            let scheme = if https { "https://" } else { "http://" };
            origin.strip_prefix(scheme).is_some_and(|h| !host.is_empty() && h.eq_ignore_ascii_case(host))
        }
        Some(Err(_)) => false,
    }
}

/// The CSRF and Origin checks for a state-changing request made with a session cookie.
pub(super) fn csrf_ok(headers: &HeaderMap, csrf: &str, https: bool) -> bool {
    let token_ok = headers.get("x-csrf-token").is_some_and(|v| same(v.as_bytes(), csrf.as_bytes()));
    token_ok && origin_ok(headers, https)
}

/// A `403` when the request comes from a page of another site (login CSRF, lockouts posted
/// by a page a LAN user opens).
fn foreign_origin(headers: &HeaderMap, https: bool) -> Option<Reply> {
    (!origin_ok(headers, https))
        .then(|| error(StatusCode::FORBIDDEN, "foreign_origin", "this request came from another site"))
}

/// The session cookie: `Secure` over HTTPS, so the browser never sends it in clear.
pub(super) fn with_cookie(r: Reply, value: &str, max_age_s: u64, https: bool) -> Reply {
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!("{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}{secure}");
    with_header(r, header::SET_COOKIE, &cookie)
}

fn scope_names(bits: u8) -> Vec<&'static str> {
    scope::NAMES.iter().filter(|(_, b)| bits & b != 0).map(|(n, _)| *n).collect()
}

/// `GET /api/setup`: whether the box still waits for its first admin.
pub(super) fn setup_status(ctx: &Ctx) -> Reply {
    match ctx.auth.setup_needed() {
        Ok(needed) => json(StatusCode::OK, json!({ "needed": needed })),
        Err(e) => fail(&e),
    }
}

/// `POST /api/setup`: the first admin, from this box itself or with the setup token.
pub(super) async fn setup(headers: &HeaderMap, body: RequestBody, ctx: &Ctx, peer: SocketAddr, https: bool) -> Reply {
    if let Some(r) = foreign_origin(headers, https) {
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
        Err(e) => return fail(&e),
    }
    if !ctx.auth.setup_allowed(peer.ip(), c.setup_token.as_deref()) {
        return error(
            StatusCode::FORBIDDEN,
            "setup_token",
            "setup from another machine needs the setup token from the log",
        );
    }
    if let Err(e) = ctx.auth.put_user(&c.username, &c.password, Role::Admin).await {
        return fail(&e);
    }
    ctx.auth.setup_done();
    login_reply(ctx, ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::CREATED, https).await
}

/// `POST /api/login`
pub(super) async fn login(headers: &HeaderMap, body: RequestBody, ctx: &Ctx, peer: SocketAddr, https: bool) -> Reply {
    if let Some(r) = foreign_origin(headers, https) {
        return r;
    }
    let c: Credentials = match read_json(headers, body, ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    login_reply(ctx, ctx.auth.login(peer.ip(), &c.username, &c.password).await, StatusCode::OK, https).await
}

pub(super) async fn login_reply(ctx: &Ctx, r: Result<Login, AuthError>, status: StatusCode, https: bool) -> Reply {
    match r {
        Ok(login) => {
            closed_sessions(ctx, &login.ended).await;
            with_cookie(
                json(status, json!({ "csrf": login.csrf, "role": login.role.name() })),
                &login.cookie,
                limits::AUTH_SESSION_LIFETIME_S,
                https,
            )
        }
        Err(e) => fail(&e),
    }
}

/// Sessions that ended: what they opened (live views) closes too.
async fn closed_sessions(ctx: &Ctx, ended: &[crate::auth::SessionKey]) {
    if let Some(w) = &ctx.services.webrtc {
        for session in ended {
            w.close_login(*session).await;
        }
    }
}

/// `GET /api/me`: who is signed in (a provider's person by the name the provider gave).
pub(super) fn me(ctx: &Ctx, who: &Principal) -> Reply {
    match who {
        Principal::User { name, role, csrf, session } => {
            let sso = ctx.auth.sso_of(session);
            let shown = sso.as_ref().map_or(name.as_str(), |s| s.display.as_str());
            let provider = sso.as_ref().map(|s| s.provider.clone());
            json(StatusCode::OK, json!({ "user": shown, "role": role.name(), "csrf": csrf, "provider": provider }))
        }
        Principal::Token { id, scopes } => json(StatusCode::OK, json!({ "token": id, "scopes": scope_names(*scopes) })),
    }
}

/// `POST /api/logout`: ends the session and what it opened.
/// A session a provider opened also gets the provider's end-session address (the UI goes
/// there next, so the provider's own session ends too), when the provider has one.
pub(super) async fn logout(ctx: &Ctx, who: &Principal, headers: &HeaderMap, https: bool) -> Reply {
    match who {
        Principal::User { session, .. } => {
            let sso = ctx.auth.end_session(session);
            if let Some(w) = &ctx.services.webrtc {
                w.close_login(*session).await;
            }
            let end_session = sso.and_then(|s| {
                let after = super::sso::origin(headers, https)? + "/";
                ctx.services.oidc.end_session_url(&s.provider, &s.id_token, &after)
            });
            with_cookie(json(StatusCode::OK, json!({ "end_session": end_session })), "", 0, https)
        }
        Principal::Token { .. } => error(StatusCode::BAD_REQUEST, "no_session", "a token has no session to end"),
    }
}

/// `GET /api/users`
pub(super) fn users(ctx: &Ctx) -> Reply {
    match ctx.auth.catalog().users() {
        Ok(users) => {
            let list: Vec<_> = users
                .into_iter()
                .map(|(n, r)| json!({ "username": n, "role": Role::from_code(r).map_or("?", Role::name) }))
                .collect();
            json(StatusCode::OK, json!(list))
        }
        Err(e) => fail(&e),
    }
}

/// `POST /api/users`: creates a user or changes one's password or role.
pub(super) async fn put_user(ctx: &Ctx, headers: &HeaderMap, body: RequestBody) -> Reply {
    let u: NewUser = match read_json(headers, body, ctx).await {
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
            json(StatusCode::CREATED, json!({ "username": u.username, "role": role.name() }))
        }
        Err(e) => fail(&e),
    }
}

/// `DELETE /api/users/{name}`
pub(super) async fn delete_user(ctx: &Ctx, name: &str) -> Reply {
    match ctx.auth.delete_user(name) {
        Ok(Some(ended)) => {
            closed_sessions(ctx, &ended).await;
            json(StatusCode::OK, json!({}))
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "not_found", "no such user"),
        Err(e) => fail(&e),
    }
}

/// `GET /api/tokens`
pub(super) fn tokens(ctx: &Ctx) -> Reply {
    match ctx.auth.catalog().tokens() {
        Ok(tokens) => {
            let list: Vec<_> = tokens
                .into_iter()
                .map(|(id, name, scopes, created)| {
                    json!({ "id": id, "name": name, "scopes": scope_names(scopes), "created_us": created })
                })
                .collect();
            json(StatusCode::OK, json!(list))
        }
        Err(e) => fail(&e),
    }
}

/// `POST /api/tokens`: the token is in this reply only.
pub(super) async fn create_token(ctx: &Ctx, headers: &HeaderMap, body: RequestBody) -> Reply {
    let t: NewToken = match read_json(headers, body, ctx).await {
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
        Ok((id, token)) => json(StatusCode::CREATED, json!({ "id": id, "token": token })),
        Err(e) => fail(&e),
    }
}

/// `DELETE /api/tokens/{id}`: what the token opened closes with it.
pub(super) async fn delete_token(ctx: &Ctx, id: &str) -> Reply {
    let Ok(id) = id.parse::<u64>() else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such token");
    };
    match ctx.auth.delete_token(id) {
        Ok(true) => {
            if let Some(w) = &ctx.services.webrtc {
                w.close_principal(Principal::Token { id, scopes: 0 }.name()).await;
            }
            json(StatusCode::OK, json!({}))
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "not_found", "no such token"),
        Err(e) => fail(&e),
    }
}
