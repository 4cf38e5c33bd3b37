//! Who may call what: a request's [`Route`], its credential checked once against the
//! route's [`Access`], then its handler.
//!
//! Without credentials only `/healthz` (answered before this), the UI's files (the login
//! page), setup and login answer. Everything else needs a session cookie or a bearer token
//! with the route's scope; a request with a session cookie that changes state must also carry
//! the session's CSRF token in `x-csrf-token`, and an `Origin` header, when present, must name
//! this host ([`accounts`]).

use std::net::SocketAddr;

use http::request::Parts;
use http::{Method, StatusCode};

use super::reply::{Reply, RequestBody, error, text};
use super::routes::{Access, Route};
use super::{Ctx, accounts, archive, config, discover, events, health, live, media, metrics, sso, system, ui};
use crate::auth::Principal;

pub(super) async fn route(parts: Parts, body: RequestBody, ctx: &Ctx, peer: SocketAddr) -> Reply {
    let path = parts.uri.path().to_string();
    let route = match Route::parse(&parts.method, &path) {
        // A path outside `/api/` that is no file of the UI is no route either.
        Some(Route::UiFile(p)) => match ui::file(p, &parts.headers) {
            Some(r) => return r,
            None => None,
        },
        other => other,
    };
    let access = route.map_or(Access::Signed, |r| r.access());
    let https = parts.extensions.get::<super::OverHttps>().is_some();
    if access == Access::Anyone {
        return match route {
            Some(Route::SetupStatus) => accounts::setup_status(ctx),
            Some(Route::Setup) => accounts::setup(&parts.headers, body, ctx, peer, https).await,
            Some(Route::Login) => accounts::login(&parts.headers, body, ctx, peer, https).await,
            Some(Route::SsoProviders) => sso::providers(ctx),
            Some(Route::SsoStart(id)) => sso::start(ctx, &parts.headers, id, https).await,
            Some(Route::SsoCallback) => sso::callback(ctx, &parts, https).await,
            _ => not_found(),
        };
    }
    let Some(who) = accounts::principal(&parts.headers, ctx) else {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated", "log in or send a bearer token");
    };
    if let Principal::User { csrf, .. } = &who
        && !matches!(parts.method, Method::GET | Method::HEAD)
        && !accounts::csrf_ok(&parts.headers, csrf, https)
    {
        return error(StatusCode::FORBIDDEN, "csrf", "missing or wrong x-csrf-token, or a foreign Origin");
    }
    if let Access::Scope(s) = access
        && !who.can(s)
    {
        return error(StatusCode::FORBIDDEN, "forbidden", "this credential may not do that");
    }
    let Some(route) = route else { return not_found() };
    handle(route, &who, parts, body, ctx, peer).await
}

fn not_found() -> Reply {
    error(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// The handler of a route its caller may call.
async fn handle(
    route: Route<'_>,
    who: &Principal,
    parts: Parts,
    body: RequestBody,
    ctx: &Ctx,
    peer: SocketAddr,
) -> Reply {
    use Route::*;
    match route {
        Metrics => text(metrics::render(&ctx.stats, &ctx.services), "text/plain; version=0.0.4; charset=utf-8"),
        Cameras => media::cameras(ctx),
        Recordings(s) => media::recordings(ctx, &parts, s).await,
        Coverage(s) => media::coverage(ctx, &parts, s).await,
        Poster(s) => media::poster(ctx, s).await,
        Health => health::page_of_streams(ctx, &parts).await,
        ConfigSnapshot => config::snapshot(ctx, &parts).await,
        ConfigPlan => config::plan(ctx, who, &parts, body).await,
        ConfigApply => config::apply(ctx, who, &parts, body).await,
        ConfigRevisions => config::revisions(ctx).await,
        CameraProbe => config::probe(ctx, who, &parts, body).await,
        CameraDiscover => discover::search(ctx, who).await,
        CameraOnvif => discover::onvif(ctx, who, &parts, body).await,
        Export(s) => match media::range(&parts) {
            Ok((from, to)) => media::export(ctx, &parts, s, from, to).await,
            Err(r) => r,
        },
        ExportNamed(s, name) => match media::range_in_name(name) {
            Ok((from, to)) => media::export(ctx, &parts, s, from, to).await,
            Err(r) => r,
        },
        Playlist(s) => media::playlist(ctx, &parts, s).await,
        DeleteRecordings(s) => media::delete_range(ctx, &parts, s).await,
        WhepOpen(s) => live::whep_open(ctx, who, peer, s, &parts.headers, body).await,
        WhepClose(id) => live::whep_close(ctx, who, id).await,
        EventIntake => events::intake(ctx, who, &parts, body).await,
        EventSearch => events::search(ctx, &parts).await,
        EventRevisions(id) => events::revisions(ctx, &parts, id).await,
        EventKeyframe(id) => events::keyframe(ctx, id).await,
        EventSnapshot(id) => events::snapshot(ctx, &parts, id).await,
        EventDelete(id) => events::delete(ctx, who, id).await,
        System => system::status(ctx),
        SystemUpdate => system::update(ctx, &parts, body).await,
        SystemReboot => system::reboot(ctx),
        SystemFactoryReset => system::factory_reset(ctx, &parts.headers, body).await,
        SupportBundle => system::support_bundle(ctx).await,
        Https => system::https(ctx),
        HttpsUpload => system::https_upload(ctx, &parts.headers, body).await,
        HttpsReset => system::https_reset(ctx).await,
        Mqtt => system::mqtt(ctx),
        CameraEvents => system::camera_events(ctx),
        Archive => system::archive(ctx),
        CameraPort => system::camera_port(ctx).await,
        ArchiveList => archive::list(ctx, &parts).await,
        ArchiveRecordings(target) => archive::recordings(ctx, &parts, target).await,
        ArchiveExport(target) => archive::export(ctx, &parts, target).await,
        ArchiveEvents(target) => archive::events(ctx, &parts, target).await,
        ArchiveSnapshot(target) => archive::snapshot(ctx, &parts, target).await,
        Me => accounts::me(ctx, who),
        Logout => {
            accounts::logout(ctx, who, &parts.headers, parts.extensions.get::<super::OverHttps>().is_some()).await
        }
        Users => accounts::users(ctx),
        UserPut => accounts::put_user(ctx, &parts.headers, body).await,
        UserDelete(name) => accounts::delete_user(ctx, name).await,
        Tokens => accounts::tokens(ctx),
        TokenCreate => accounts::create_token(ctx, &parts.headers, body).await,
        TokenDelete(id) => accounts::delete_token(ctx, id).await,
        UiFile(_) | SetupStatus | Setup | Login | SsoProviders | SsoStart(_) | SsoCallback => not_found(),
    }
}
