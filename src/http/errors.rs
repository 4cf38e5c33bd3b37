//! The one map from each room's errors to an HTTP status and a stable code.
//!
//! A room's error type knows nothing of HTTP; here each variant gets the status a client
//! acts on and the `code` it can match (the UI does), and its message is the error's own
//! text. A handler answers any of them with [`fail`]; whatever went wrong inside the box (the
//! catalog, the disk, a task that panicked) is a 500 with the room's name as its code.

use http::StatusCode;

use super::reply::{Reply, error, with_header};
use crate::auth::AuthError;
use crate::catalog::CatalogError;
use crate::events::IntakeError;
use crate::events::jpeg::JpegError;
use crate::events::keyframe::KeyframeError;
use crate::export::ExportError;
use crate::system::bundle::UpdateError;
use crate::webrtc::{OfferError, OpenError};

/// An error a client is told about.
pub(crate) trait Failure: std::fmt::Display {
    /// The status and the stable code.
    fn status(&self) -> (StatusCode, &'static str);

    /// Seconds after which a retry may succeed (`Retry-After`).
    fn retry_after_s(&self) -> Option<u64> {
        None
    }

    /// The request's field it is about, when it is about one (the UI shows the message
    /// next to that field).
    fn field(&self) -> Option<&'static str> {
        None
    }
}

/// The reply to `e`.
pub(crate) fn fail(e: &dyn Failure) -> Reply {
    let (status, code) = e.status();
    let r = match e.field() {
        Some(field) => super::reply::error_on(status, code, &e.to_string(), field),
        None => error(status, code, &e.to_string()),
    };
    match e.retry_after_s() {
        Some(s) => with_header(r, http::header::RETRY_AFTER, &s.to_string()),
        None => r,
    }
}

const INTERNAL: StatusCode = StatusCode::INTERNAL_SERVER_ERROR;
const UNAVAILABLE: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

impl Failure for AuthError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            AuthError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid"),
            AuthError::BadCredentials => (StatusCode::UNAUTHORIZED, "bad_credentials"),
            AuthError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            AuthError::Paused { .. } => (StatusCode::TOO_MANY_REQUESTS, "login_paused"),
            AuthError::Full(..) => (UNAVAILABLE, "full"),
            AuthError::LastAdmin => (StatusCode::CONFLICT, "last_admin"),
            AuthError::Busy(_) => (UNAVAILABLE, "busy"),
            AuthError::AddressBusy(_) => (StatusCode::TOO_MANY_REQUESTS, "logins_in_flight"),
            AuthError::Catalog(_) => (INTERNAL, "catalog"),
            AuthError::Hash(_) => (INTERNAL, "internal"),
        }
    }

    fn retry_after_s(&self) -> Option<u64> {
        match self {
            AuthError::RateLimited { retry_after_s } | AuthError::Paused { retry_after_s } => Some(*retry_after_s),
            AuthError::AddressBusy(_) => Some(1),
            _ => None,
        }
    }

    fn field(&self) -> Option<&'static str> {
        match self {
            AuthError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl Failure for CatalogError {
    fn status(&self) -> (StatusCode, &'static str) {
        (INTERNAL, "catalog")
    }
}

impl Failure for IntakeError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            IntakeError::Envelope(_) => (StatusCode::BAD_REQUEST, "bad_envelope"),
            IntakeError::Jpeg(JpegError::NotJpeg) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_jpeg"),
            IntakeError::Jpeg(_) => (StatusCode::BAD_REQUEST, "bad_snapshot"),
            IntakeError::JpegTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "snapshot_too_large"),
            IntakeError::UnknownCamera(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_camera"),
            IntakeError::TooManyRevisions => (StatusCode::CONFLICT, "too_many_revisions"),
            IntakeError::Busy => (UNAVAILABLE, "busy"),
            IntakeError::Storage(_) => (INTERNAL, "storage"),
        }
    }
}

impl Failure for KeyframeError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            KeyframeError::NoEvent => (StatusCode::NOT_FOUND, "not_found"),
            KeyframeError::NothingRecorded | KeyframeError::NothingKept => (StatusCode::NOT_FOUND, "nothing_recorded"),
            KeyframeError::Catalog(_) => (INTERNAL, "catalog"),
            KeyframeError::Io { .. } | KeyframeError::Read { .. } | KeyframeError::Missing { .. } => {
                (INTERNAL, "storage")
            }
        }
    }
}

impl Failure for ExportError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            ExportError::Empty | ExportError::NoStream(_) => (StatusCode::NOT_FOUND, "nothing_recorded"),
            ExportError::TooLong => (StatusCode::BAD_REQUEST, "export_too_long"),
            ExportError::Catalog(_) => (INTERNAL, "catalog"),
            ExportError::Io { .. } | ExportError::Read { .. } => (INTERNAL, "storage"),
        }
    }
}

impl Failure for crate::archive::ArchiveError {
    fn status(&self) -> (StatusCode, &'static str) {
        use crate::archive::ArchiveError as E;
        match self {
            E::Walk(_) => (StatusCode::BAD_REQUEST, "archive_too_much"),
            E::S3(e) if e.kind() == crate::archive::s3::Kind::Missing => (StatusCode::NOT_FOUND, "not_in_archive"),
            E::S3(_) | E::Manifest { .. } => (StatusCode::BAD_GATEWAY, "archive_unreadable"),
            E::Catalog(_) => (INTERNAL, "catalog"),
            E::File { .. } => (INTERNAL, "storage"),
        }
    }
}

impl Failure for OpenError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            OpenError::Offer(OfferError::NoCodec(_)) => (StatusCode::NOT_ACCEPTABLE, "no_codec"),
            OpenError::Offer(_) => (StatusCode::BAD_REQUEST, "bad_offer"),
            OpenError::Principal(..) | OpenError::Address(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_sessions"),
            OpenError::Server(_) => (UNAVAILABLE, "server_full"),
            OpenError::NotLive => (UNAVAILABLE, "not_live"),
            OpenError::NoStream => (StatusCode::NOT_FOUND, "not_found"),
            OpenError::Stopped => (UNAVAILABLE, "stopping"),
            OpenError::Busy(_) => (UNAVAILABLE, "busy"),
        }
    }
}

impl Failure for UpdateError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            UpdateError::NotFirmware => (StatusCode::CONFLICT, "not_firmware"),
            UpdateError::Busy => (StatusCode::CONFLICT, "update_busy"),
            UpdateError::OnTrial => (StatusCode::CONFLICT, "on_trial"),
            UpdateError::Malformed(_) => (StatusCode::BAD_REQUEST, "bad_bundle"),
            UpdateError::Truncated(_) => (StatusCode::BAD_REQUEST, "truncated_bundle"),
            UpdateError::Signature(_) => (StatusCode::UNPROCESSABLE_ENTITY, "bad_signature"),
            UpdateError::WrongBoard { .. } => (StatusCode::CONFLICT, "wrong_board"),
            UpdateError::Downgrade { .. } => (StatusCode::CONFLICT, "downgrade"),
            UpdateError::TooLarge(..) => (StatusCode::PAYLOAD_TOO_LARGE, "bundle_too_large"),
            UpdateError::Corrupt { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "corrupt_bundle"),
            UpdateError::Read(_) => (StatusCode::BAD_REQUEST, "upload_failed"),
            UpdateError::System(_) => (INTERNAL, "storage"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_keeps_its_code_and_a_limit_its_retry_after() {
        let r = fail(&AuthError::RateLimited { retry_after_s: 42 });
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[http::header::RETRY_AFTER], "42");
        assert_eq!(fail(&AuthError::AddressBusy(4)).headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(fail(&IntakeError::Busy).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(fail(&ExportError::Empty).headers().get(http::header::RETRY_AFTER).is_none());
    }

    #[test]
    fn a_refused_field_is_named_in_the_answer() {
        let body = |e: &AuthError| {
            let r = fail(e);
            let bytes =
                futures::executor::block_on(http_body_util::BodyExt::collect(r.into_body())).unwrap().to_bytes();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        let v = body(&crate::auth::check_password("short").unwrap_err());
        assert_eq!((v["code"].as_str(), v["field"].as_str()), (Some("invalid"), Some("password")), "{v}");
        assert_eq!(body(&crate::auth::check_name("Ann!").unwrap_err())["field"], "username");
        assert!(body(&AuthError::BadCredentials).get("field").is_none(), "a wrong password names no field");
    }

    /// The codes a refused update bundle is answered with, by the kind of refusal the
    /// bundle's own tests see for each way a bundle can be wrong.
    #[test]
    fn each_refused_bundle_has_its_code() {
        let (s, v) = (String::new, || ("1".to_string(), "2".to_string()));
        let cases = [
            (UpdateError::Signature(s()), "bad_signature"),
            (UpdateError::WrongBoard { bundle: v().0, running: v().1 }, "wrong_board"),
            (UpdateError::Downgrade { bundle: v().0, running: v().1 }, "downgrade"),
            (UpdateError::TooLarge(2, 1), "bundle_too_large"),
            (UpdateError::Truncated(s()), "truncated_bundle"),
            (UpdateError::Corrupt { got: v().0, want: v().1 }, "corrupt_bundle"),
            (UpdateError::Malformed(s()), "bad_bundle"),
        ];
        for (e, code) in cases {
            assert_eq!(e.status().1, code, "{e}");
        }
    }
}
