//! WHEP signaling for live view: `POST /api/whep/{camera}/{kind}` with an SDP offer answers
//! `201 Created` with the SDP answer and the session's `Location`; `DELETE` on it ends the
//! session. Any WHEP client can watch; the engine is [`crate::webrtc`].

use std::net::SocketAddr;

use http::{HeaderMap, StatusCode, header};

use super::Ctx;
use super::errors::fail;
use super::reply::{Reply, RequestBody, content_type, error, read_body, with_header, with_type};
use super::routes::StreamPath;
use crate::auth::{Principal, scope};
use crate::limits;
use crate::webrtc::Owner;

fn owner(who: &Principal) -> Owner {
    let login = match who {
        Principal::User { session, .. } => Some(*session),
        Principal::Token { .. } => None,
    };
    Owner { principal: who.name(), login, admin: who.can(scope::ADMIN) }
}

/// `POST /api/whep/{camera}/{kind}`
pub async fn whep_open(
    ctx: &Ctx,
    who: &Principal,
    peer: SocketAddr,
    path: StreamPath<'_>,
    headers: &HeaderMap,
    body: RequestBody,
) -> Reply {
    if !super::parse::is_mime(content_type(headers), "application/sdp") {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_sdp", "send the offer as content-type: application/sdp");
    }
    let Some(webrtc) = &ctx.services.webrtc else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no_live_view", "live view is turned off ([webrtc] port = 0)");
    };
    let Some(stream) = ctx.services.cameras.stream(&path.key()) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such stream");
    };
    let offer = match read_body(body, ctx, limits::WEBRTC_OFFER_MAX_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(offer) = String::from_utf8(offer.to_vec()) else {
        return error(StatusCode::BAD_REQUEST, "bad_offer", "the SDP offer is not UTF-8 text");
    };
    match webrtc.open(stream.key.clone(), offer, owner(who), peer.ip()).await {
        Ok((id, answer)) => {
            let r = with_type(StatusCode::CREATED, answer, "application/sdp");
            with_header(r, header::LOCATION, &format!("/api/whep/sessions/{id}"))
        }
        Err(e) => fail(&e),
    }
}

/// `DELETE /api/whep/sessions/{id}`: by its owner or an admin.
pub async fn whep_close(ctx: &Ctx, who: &Principal, id: &str) -> Reply {
    let Some(webrtc) = &ctx.services.webrtc else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such session");
    };
    let principal = (!who.can(scope::ADMIN)).then(|| owner(who).principal);
    match id.parse::<u64>() {
        Ok(id) if webrtc.close(id, principal).await => http::Response::new(super::reply::full("")),
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such session"),
    }
}
