//! Single sign-on over HTTP: `GET /api/oidc/providers` (the login page's buttons),
//! `GET /api/oidc/{id}/login` (a sign-in sent to its provider, with a cookie binding it to
//! this browser) and `GET /api/oidc/callback` (the provider's return: a session, or the
//! login page with what failed). See [`crate::oidc`].

use http::request::Parts;
use http::{HeaderMap, StatusCode, header};
use serde_json::json;

use super::Ctx;
use super::reply::{Reply, error, json, with_header};

/// The cookie binding a sign-in to the browser that started it: `SameSite=Lax`, so the
/// provider's redirect back (a top-level navigation from its site) carries it.
const BINDING_COOKIE: &str = "kp_oidc";

/// The box as this request reached it: `https://host:port` (none when the host is not one).
pub(super) fn origin(headers: &HeaderMap, https: bool) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let scheme = if https { "https" } else { "http" };
    let origin = format!("{scheme}://{host}");
    let parsed = url::Url::parse(&origin).ok()?;
    (parsed.path() == "/" && parsed.query().is_none() && parsed.username().is_empty()).then_some(origin)
}

fn redirect(to: &str) -> Reply {
    let mut r = error(StatusCode::SEE_OTHER, "redirect", "go on");
    r.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    with_header(r, header::LOCATION, to)
}

/// The login page with `message` (in the address's fragment, which is never sent anywhere).
fn back_to_login(message: &str) -> Reply {
    let text: String = message.chars().take(400).collect();
    let encoded = url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
    redirect(&format!("/#/login?sso_error={encoded}"))
}

/// `GET /api/oidc/providers`
pub(super) fn providers(ctx: &Ctx) -> Reply {
    let list: Vec<_> =
        ctx.services.oidc.list().into_iter().map(|(id, name)| json!({ "id": id, "name": name })).collect();
    json(StatusCode::OK, json!(list))
}

/// `GET /api/oidc/{id}/login`
pub(super) async fn start(ctx: &Ctx, headers: &HeaderMap, id: &str, https: bool) -> Reply {
    let Some(origin) = origin(headers, https) else {
        return error(StatusCode::BAD_REQUEST, "bad_host", "the request names no host to come back to");
    };
    match ctx.services.oidc.start(id, &format!("{origin}/api/oidc/callback")).await {
        Ok((to, binding)) => {
            let secure = if https { "; Secure" } else { "" };
            let max_age = crate::limits::OIDC_LOGIN_PENDING_S;
            let cookie = format!(
                "{BINDING_COOKIE}={binding}; HttpOnly; SameSite=Lax; Path=/api/oidc; Max-Age={max_age}{secure}"
            );
            with_header(redirect(&to), header::SET_COOKIE, &cookie)
        }
        Err(e) => {
            tracing::warn!("single sign-on refused: {e}");
            back_to_login(&e.to_string())
        }
    }
}

/// `GET /api/oidc/callback?code=…&state=…` (or the provider's `error`).
pub(super) async fn callback(ctx: &Ctx, parts: &Parts, https: bool) -> Reply {
    let mut code = None;
    let mut state = None;
    let mut said = None;
    let mut description = None;
    for (k, v) in url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "code" => code = Some(v.into_owned()),
            "state" => state = Some(v.into_owned()),
            "error" => said = Some(v.into_owned()),
            "error_description" => description = Some(v.into_owned()),
            _ => {}
        }
    }
    if let Some(e) = said {
        let reason = description.map_or(e.clone(), |d| format!("{e}: {d}"));
        return back_to_login(&format!("the provider refused the sign-in: {reason}"));
    }
    let (Some(code), Some(state)) = (code, state) else {
        return back_to_login("the provider sent no code back");
    };
    let binding = super::accounts::cookie(&parts.headers, BINDING_COOKIE);
    let signed = match ctx.services.oidc.finish(&state, &code, binding.as_deref()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("single sign-on refused: {e}");
            return back_to_login(&e.to_string());
        }
    };
    tracing::info!(provider = %signed.provider, user = %signed.display, role = signed.role.name(), "signed in by a provider");
    let sso = crate::auth::SsoLogin { provider: signed.provider, display: signed.display, id_token: signed.id_token };
    let login = ctx.auth.open_sso_session(&signed.name, signed.role, sso);
    let made = super::accounts::login_reply(ctx, Ok(login), StatusCode::OK, https).await;
    // The session's cookie, and the browser on to the UI; the binding is spent.
    let mut r = redirect("/#/live");
    for v in made.headers().get_all(header::SET_COOKIE) {
        r.headers_mut().append(header::SET_COOKIE, v.clone());
    }
    let secure = if https { "; Secure" } else { "" };
    let spent = format!("{BINDING_COOKIE}=; HttpOnly; SameSite=Lax; Path=/api/oidc; Max-Age=0{secure}");
    if let Ok(v) = header::HeaderValue::from_str(&spent) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}
