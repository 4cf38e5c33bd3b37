//! The browser UI (`ui-static/`), built into the binary so a box on a LAN with no internet
//! serves it as it is. `build.rs` gzips each file once at build time; a browser that accepts
//! gzip gets those bytes as they are. Each variant has its own ETag (a hash of the file):
//! browsers revalidate (`Cache-Control: no-cache`) and get `304 Not Modified` when nothing
//! changed, so a reload costs a few hundred bytes.

use std::sync::OnceLock;

use http::{HeaderMap, Response, StatusCode, header};
use sha2::{Digest, Sha256};

use super::parse;
use super::reply::{Reply, full};

/// One file of `ui-static/`.
struct UiFile {
    path: &'static str,
    raw: &'static [u8],
    gzip: &'static [u8],
    content_type: &'static str,
}

const FILES: &[UiFile] = include!(concat!(env!("OUT_DIR"), "/ui/files.rs"));

/// (identity ETag, gzip ETag) of each file.
fn etags() -> &'static [(String, String)] {
    static TAGS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    TAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|f| {
                let d = Sha256::digest(f.raw);
                let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
                (format!("\"{hex}\""), format!("\"{hex}-gz\""))
            })
            .collect()
    })
}

/// The UI file at `path`, if it is one.
pub fn file(path: &str, headers: &HeaderMap) -> Option<Reply> {
    let path = if path == "/index.html" { "/" } else { path };
    let i = FILES.iter().position(|f| f.path == path)?;
    let f = &FILES[i];
    let gzip = headers.get_all(header::ACCEPT_ENCODING).iter().any(|v| v.to_str().is_ok_and(parse::accepts_gzip));
    let (etag, bytes) = if gzip { (&etags()[i].1, f.gzip) } else { (&etags()[i].0, f.raw) };
    let fresh =
        headers.get_all(header::IF_NONE_MATCH).iter().any(|v| v.to_str().is_ok_and(|v| parse::etag_matches(v, etag)));
    let mut r = Response::new(if fresh { full("") } else { full(bytes) });
    if fresh {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(f.content_type));
    if gzip {
        h.insert(header::CONTENT_ENCODING, header::HeaderValue::from_static("gzip"));
    }
    h.insert(header::VARY, header::HeaderValue::from_static("accept-encoding"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn every_ui_file_is_built_in_and_its_gzip_inflates_to_it() {
        assert!(FILES.iter().any(|f| f.path == "/"), "index.html is the root");
        for f in FILES {
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(f.gzip).read_to_end(&mut back).unwrap();
            assert_eq!(back, f.raw, "{}", f.path);
            if f.raw.len() > 2048 {
                assert!(f.gzip.len() * 2 < f.raw.len(), "{} compresses", f.path);
            }
        }
    }
}
