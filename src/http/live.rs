//! WHEP signaling for live view: `POST /api/whep/{camera}/{kind}` with an SDP offer answers
//! `201 Created` with the SDP answer and the session's `Location`; `DELETE` on it ends the
//! session. Any WHEP client can watch; the engine is [`crate::webrtc`].

use std::net::SocketAddr;

use http::{Response, StatusCode, header};

use super::{Ctx, Reply, error, full};
use crate::auth::{Principal, scope};
use crate::limits;
use crate::webrtc::{OfferError, OpenError, Owner};

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
    camera: &str,
    kind: &str,
    parts_content_type: &str,
    body: super::RequestBody,
) -> Reply {
    if !super::parse::is_mime(parts_content_type, "application/sdp") {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_sdp", "send the offer as content-type: application/sdp");
    }
    let Some(webrtc) = &ctx.media.webrtc else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no_live_view", "live view is turned off ([webrtc] port = 0)");
    };
    let Some(stream) = ctx.media.streams.iter().position(|s| s.camera == camera && s.kind.name() == kind) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such stream");
    };
    let offer = match super::api::read_body(body, ctx, limits::WEBRTC_OFFER_MAX_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(offer) = String::from_utf8(offer.to_vec()) else {
        return error(StatusCode::BAD_REQUEST, "bad_offer", "the SDP offer is not UTF-8 text");
    };
    match webrtc.open(stream, offer, owner(who), peer.ip()).await {
        Ok((id, answer)) => {
            let mut r = Response::new(full(answer));
            *r.status_mut() = StatusCode::CREATED;
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/sdp"));
            if let Ok(v) = header::HeaderValue::from_str(&format!("/api/whep/sessions/{id}")) {
                h.insert(header::LOCATION, v);
            }
            r
        }
        Err(e) => {
            let message = e.to_string();
            let (status, code) = match e {
                OpenError::Offer(OfferError::NoCodec(_)) => (StatusCode::NOT_ACCEPTABLE, "no_codec"),
                OpenError::Offer(_) => (StatusCode::BAD_REQUEST, "bad_offer"),
                OpenError::Principal(..) | OpenError::Address(_) => {
                    (StatusCode::TOO_MANY_REQUESTS, "too_many_sessions")
                }
                OpenError::Server(_) => (StatusCode::SERVICE_UNAVAILABLE, "server_full"),
                OpenError::NotLive => (StatusCode::SERVICE_UNAVAILABLE, "not_live"),
                OpenError::NoStream => (StatusCode::NOT_FOUND, "not_found"),
                OpenError::Stopped => (StatusCode::SERVICE_UNAVAILABLE, "stopping"),
                OpenError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            };
            error(status, code, &message)
        }
    }
}

/// `DELETE /api/whep/sessions/{id}`: by its owner or an admin.
pub async fn whep_close(ctx: &Ctx, who: &Principal, id: &str) -> Reply {
    let Some(webrtc) = &ctx.media.webrtc else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such session");
    };
    let principal = (!who.can(scope::ADMIN)).then(|| owner(who).principal);
    match id.parse::<u64>() {
        Ok(id) if webrtc.close(id, principal).await => {
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::OK;
            r
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such session"),
    }
}
