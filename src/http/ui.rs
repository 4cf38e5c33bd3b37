//! The browser UI (`ui-static/`), built into the binary so a box on a LAN with no internet
//! serves it as it is. Each file has an ETag (a hash of its bytes): browsers revalidate and
//! get `304 Not Modified` when nothing changed.

use std::sync::OnceLock;

use http::{HeaderMap, Response, StatusCode, header};
use sha2::{Digest, Sha256};

use super::{Reply, full};

/// (path, bytes, content type)
const FILES: [(&str, &[u8], &str); 3] = [
    ("/", include_bytes!("../../ui-static/index.html"), "text/html; charset=utf-8"),
    ("/app.js", include_bytes!("../../ui-static/app.js"), "text/javascript; charset=utf-8"),
    ("/style.css", include_bytes!("../../ui-static/style.css"), "text/css; charset=utf-8"),
];

fn etags() -> &'static [String; 3] {
    static TAGS: OnceLock<[String; 3]> = OnceLock::new();
    TAGS.get_or_init(|| {
        FILES.map(|(_, bytes, _)| {
            let d = Sha256::digest(bytes);
            format!("\"{}\"", d[..8].iter().map(|b| format!("{b:02x}")).collect::<String>())
        })
    })
}

/// The UI file at `path`, if it is one.
pub fn file(path: &str, headers: &HeaderMap) -> Option<Reply> {
    let i = FILES.iter().position(|(p, _, _)| *p == path || (path == "/index.html" && *p == "/"))?;
    let (_, bytes, content_type) = FILES[i];
    let etag = &etags()[i];
    let fresh = headers.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut r = Response::new(if fresh { full("") } else { full(bytes) });
    if fresh {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    if let Ok(v) = header::HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    Some(r)
}
