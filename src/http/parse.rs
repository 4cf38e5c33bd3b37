//! The hand-written parsers of the HTTP edge, pure so they can be fuzzed (`fuzz/`): byte
//! ranges, time-range queries and names, cookies, and the JSON request bodies.

use serde::Deserialize;

/// What a `Range` header asks of a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// The whole body (`200`): no range this server serves as a part — another unit, several
    /// ranges, or a malformed one, which RFC 9110 § 14.2 lets a server ignore.
    Whole,
    /// One part (`206`): start, end exclusive, inside the body.
    Part(u64, u64),
    /// A well-formed single range outside the body (`416`).
    Unsatisfiable,
}

/// The range a `Range` header asks of a body of `len` bytes. The unit is case-insensitive.
pub fn byte_range(header: &str, len: u64) -> ByteRange {
    let header = header.trim();
    let Some(spec) = header.get(..6).filter(|unit| unit.eq_ignore_ascii_case("bytes=")).map(|_| &header[6..]) else {
        return ByteRange::Whole;
    };
    let number =
        |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u64>().ok()).flatten();
    let Some((a, b)) = spec.split_once('-').filter(|_| !spec.contains(',')) else { return ByteRange::Whole };
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = match (a, b) {
        ("", suffix) => match number(suffix) {
            None => return ByteRange::Whole,
            Some(n) => (len.saturating_sub(n), len),
        },
        (a, "") => match number(a) {
            None => return ByteRange::Whole,
            Some(start) => (start, len),
        },
        (a, b) => match (number(a), number(b)) {
            (Some(start), Some(last)) if last >= start => (start, last.saturating_add(1).min(len)),
            _ => return ByteRange::Whole,
        },
    };
    if start < end && start < len { ByteRange::Part(start, end) } else { ByteRange::Unsatisfiable }
}

/// `from_us` and `to_us` from a query string (unchecked).
pub fn range_query(query: &str) -> (Option<i64>, Option<i64>) {
    let mut from = None;
    let mut to = None;
    for kv in query.split('&') {
        match kv.split_once('=') {
            Some(("from_us", v)) => from = v.parse::<i64>().ok(),
            Some(("to_us", v)) => to = v.parse::<i64>().ok(),
            _ => {}
        }
    }
    (from, to)
}

/// `{from_us}-{to_us}.mp4`, the path of an HLS segment (unchecked).
pub fn range_name(name: &str) -> Option<(i64, i64)> {
    let (from, to) = name.strip_suffix(".mp4")?.split_once('-')?;
    Some((from.parse().ok()?, to.parse().ok()?))
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// Whether a `Content-Type` value names `mime` (any parameters, any case).
pub fn is_mime(content_type: &str, mime: &str) -> bool {
    content_type.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case(mime))
}

/// Whether an `Accept-Encoding` header takes gzip: a `gzip` (or `*`) coding whose weight is
/// not zero.
pub fn accepts_gzip(header: &str) -> bool {
    header.split(',').any(|coding| {
        let mut parts = coding.split(';');
        let name = parts.next().unwrap_or("").trim();
        let zero =
            parts.any(|p| p.trim().strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)));
        (name.eq_ignore_ascii_case("gzip") || name == "*") && !zero
    })
}

/// Whether an `If-None-Match` header names `etag` (strong or weak) or is `*`.
pub fn etag_matches(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

/// `POST /api/login` and `/api/setup`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    /// Setup from another machine: the token printed in the log.
    #[serde(default)]
    pub setup_token: Option<String>,
}

/// `POST /api/users`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub username: String,
    pub password: String,
    pub role: String,
}

/// `POST /api/tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    pub name: String,
    pub scopes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ranges() {
        use ByteRange::{Part, Unsatisfiable, Whole};
        assert_eq!(byte_range("bytes=0-99", 1000), Part(0, 100));
        assert_eq!(byte_range("BYTES=900-", 1000), Part(900, 1000), "the unit is case-insensitive");
        assert_eq!(byte_range(" Bytes=-100", 1000), Part(900, 1000));
        assert_eq!(byte_range("bytes=990-2000", 1000), Part(990, 1000));
        assert_eq!(byte_range("bytes=0-18446744073709551615", 10), Part(0, 10));
        for outside in ["bytes=1000-", "bytes=1000-1001", "bytes=-0"] {
            assert_eq!(byte_range(outside, 1000), Unsatisfiable, "{outside}");
        }
        // Several ranges, another unit, or a malformed one: the whole body.
        for whole in ["bytes=0-1,3-4", "items=0-1", "bytes=x-1", "bytes=-", "bytes=5-1", "bytes=+5-", "bytes"] {
            assert_eq!(byte_range(whole, 1000), Whole, "{whole}");
        }
    }

    #[test]
    fn content_types_by_their_mime_alone() {
        assert!(is_mime("application/json", "application/json"));
        assert!(is_mime(" Application/JSON ; charset=utf-8", "application/json"));
        assert!(!is_mime("text/plain", "application/json") && !is_mime("", "application/sdp"));
    }

    #[test]
    fn queries_names_and_cookies() {
        assert_eq!(range_query("from_us=5&to_us=9&x=1"), (Some(5), Some(9)));
        assert_eq!(range_query("from_us=a"), (None, None));
        assert_eq!(range_name("-5-9.mp4"), None);
        assert_eq!(range_name("5-9.mp4"), Some((5, 9)));
        assert_eq!(cookie("a=1; kp_session=abc", "kp_session"), Some("abc"));
        assert_eq!(cookie("kp_sessionx=1", "kp_session"), None);
    }

    #[test]
    fn encodings_and_etags() {
        for yes in ["gzip", "gzip, deflate, br", "br;q=1.0, GZIP;q=0.5", "*", "deflate, gzip;q=0.001"] {
            assert!(accepts_gzip(yes), "{yes}");
        }
        for no in ["", "br", "gzip;q=0", "gzip; q=0.0, br", "x-gzip-not"] {
            assert!(!accepts_gzip(no), "{no}");
        }
        assert!(etag_matches("\"a\", W/\"b\"", "\"b\""));
        assert!(etag_matches("*", "\"b\""));
        assert!(!etag_matches("\"a\"", "\"b\""));
    }
}
