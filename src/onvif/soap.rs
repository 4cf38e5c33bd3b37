//! SOAP over HTTP to a camera: the envelope, the WS-Security UsernameToken with its
//! password digest (ONVIF Profile S), and one POST with ceilings on its time and on the bytes
//! of its answer.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use sha1::{Digest, Sha1};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::{Failure, xml};
use crate::limits;

/// A camera user, and the camera's clock against the box's (seconds, camera minus box): the
/// digest's creation time must be the camera's, or it refuses a correct password.
pub struct Credentials<'a> {
    pub user: &'a str,
    pub password: &'a str,
    pub skew_s: i64,
}

/// `YYYY-MM-DDThh:mm:ssZ` for a Unix time.
pub fn utc_text(unix_s: i64) -> String {
    let (days, rem) = (unix_s.div_euclid(86_400), unix_s.rem_euclid(86_400));
    let (y, m, d) = crate::clock::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The password digest: base64(SHA-1(nonce ‖ created ‖ password)).
pub fn digest(nonce: &[u8], created: &str, password: &str) -> String {
    let mut h = Sha1::new();
    h.update(nonce);
    h.update(created.as_bytes());
    h.update(password.as_bytes());
    BASE64.encode(h.finalize())
}

/// The `wsse:Security` header for `who` at the box's `now_s`, with `nonce`.
pub fn security(who: &Credentials, now_s: i64, nonce: &[u8; 16]) -> String {
    let created = utc_text(now_s + who.skew_s);
    format!(
        concat!(
            r#"<wsse:Security s:mustUnderstand="1" xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd""#,
            r#" xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd">"#,
            "<wsse:UsernameToken><wsse:Username>{user}</wsse:Username>",
            r#"<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest">{digest}</wsse:Password>"#,
            r#"<wsse:Nonce EncodingType="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary">{nonce}</wsse:Nonce>"#,
            "<wsu:Created>{created}</wsu:Created></wsse:UsernameToken></wsse:Security>"
        ),
        user = xml::escape(who.user),
        digest = digest(nonce, &created, who.password),
        nonce = BASE64.encode(nonce),
        created = created,
    )
}

/// A SOAP 1.2 envelope around `body`, with `header` (WS-Security) if any.
pub fn envelope(header: Option<&str>, body: &str) -> String {
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tds="http://www.onvif.org/ver10/device/wsdl""#,
            r#" xmlns:trt="http://www.onvif.org/ver10/media/wsdl" xmlns:tt="http://www.onvif.org/ver10/schema">"#,
            "<s:Header>{}</s:Header><s:Body>{}</s:Body></s:Envelope>"
        ),
        header.unwrap_or(""),
        body
    )
}

/// What a request answered: its status, whether it asks for HTTP authentication, and its
/// bytes.
async fn post(url: &url::Url, action: &str, envelope: String) -> Result<(u16, bool, Vec<u8>), Failure> {
    let host = url.host_str().ok_or_else(|| Failure::Unreachable("the address has no host".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(80);
    let stream = match TcpStream::connect((host, port)).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Failure::Refused(format!("nothing listens on port {port}")));
        }
        Err(e) => return Err(Failure::Unreachable(e.to_string())),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Failure::NotOnvif(e.to_string()))?;
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
    let request = http::Request::post(path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, format!(r#"application/soap+xml; charset=utf-8; action="{action}""#))
        .header(http::header::USER_AGENT, concat!("KeepPeek/", env!("CARGO_PKG_VERSION")))
        .body(Full::new(bytes::Bytes::from(envelope)))
        .map_err(|e| Failure::NotOnvif(e.to_string()))?;
    // The connection is driven beside the exchange and ends once the sender is dropped.
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(|e| Failure::NotOnvif(e.to_string()))?;
        let status = response.status().as_u16();
        let challenged = response.headers().contains_key(http::header::WWW_AUTHENTICATE);
        let body =
            Limited::new(response.into_body(), limits::ONVIF_RESPONSE_MAX_BYTES).collect().await.map_err(|e| {
                Failure::NotOnvif(if e.is::<http_body_util::LengthLimitError>() {
                    format!(
                        "an answer longer than {} bytes (ONVIF_RESPONSE_MAX_BYTES)",
                        limits::ONVIF_RESPONSE_MAX_BYTES
                    )
                } else {
                    e.to_string()
                })
            })?;
        Ok::<_, Failure>((status, challenged, body.to_bytes().to_vec()))
    };
    let (answer, _) = tokio::join!(exchange, conn);
    answer
}

/// Calls `operation` (its SOAP action is `namespace/operation`) at `url` with `body`, and
/// gives the text of the answer's envelope once it is not a fault.
pub async fn call(
    url: &url::Url,
    namespace: &str,
    operation: &'static str,
    who: Option<&Credentials<'_>>,
    now_s: i64,
    body: &str,
) -> Result<String, Failure> {
    call_with(url, namespace, operation, who, now_s, body, |_| String::new()).await
}

/// [`call`] with more headers: `headers(action)` gives them (WS-Addressing's, for the
/// events service).
pub async fn call_with(
    url: &url::Url,
    namespace: &str,
    operation: &'static str,
    who: Option<&Credentials<'_>>,
    now_s: i64,
    body: &str,
    headers: impl FnOnce(&str) -> String,
) -> Result<String, Failure> {
    let action = format!("{namespace}/{operation}");
    let mut header = headers(&action);
    if let Some(w) = who {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("the OS random source");
        header.push_str(&security(w, now_s, &nonce));
    }
    let header = (!header.is_empty()).then_some(header);
    let sent = post(url, &action, envelope(header.as_deref(), body));
    let (status, challenged, bytes) = timeout(Duration::from_millis(limits::ONVIF_REQUEST_TIMEOUT_MS), sent)
        .await
        .map_err(|_| Failure::Timeout(operation))??;
    answer(operation, status, challenged, &bytes)
}

/// The text of an answer to `operation` with HTTP `status`, or what it means when it is not
/// a plain answer: an HTTP authentication challenge or a fault about credentials, another
/// fault (the camera's reason), or not SOAP at all.
pub fn answer(operation: &'static str, status: u16, challenged: bool, bytes: &[u8]) -> Result<String, Failure> {
    if status == 401 && challenged {
        return Err(Failure::Credentials);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Failure::NotOnvif(format!("HTTP {status}, not UTF-8 text")))?;
    let not_soap = |why: String| Failure::NotOnvif(format!("HTTP {status}, {why}"));
    let doc = xml::parse(text).map_err(not_soap)?;
    let body = xml::body(&doc).map_err(|w| not_soap(w.to_string()))?;
    if let Some((codes, reason)) = xml::fault(body) {
        let refused = ["NotAuthorized", "FailedAuthentication", "InvalidSecurity", "FailedCheck"];
        if codes.iter().any(|c| refused.contains(&c.as_str())) {
            return Err(Failure::Credentials);
        }
        let mut why = if reason.is_empty() { codes.join(" / ") } else { reason };
        // At most 200 bytes, cut at a character (Rust 1.89 has no `floor_char_boundary`).
        let mut cut = why.len().min(200);
        while !why.is_char_boundary(cut) {
            cut -= 1;
        }
        why.truncate(cut);
        return Err(Failure::Device(operation, why));
    }
    if !(200..300).contains(&status) {
        return Err(not_soap("no fault in its envelope".into()));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest of the ONVIF core specification's example (§5.12.2.1 of its
    /// Programmer's Guide): nonce, time and password give the published digest.
    #[test]
    fn the_digest_is_the_specifications() {
        let nonce = BASE64.decode("LKqI6G/AikKCQrN0zqZFlg==").unwrap();
        assert_eq!(digest(&nonce, "2010-09-16T07:50:45Z", "userpassword"), "tuOSpGlFlIXsozq4HFNeeGeFLEI=");
    }

    #[test]
    fn the_created_time_is_the_cameras() {
        let who = Credentials { user: "a<b", password: "p", skew_s: 3600 };
        let header = security(&who, 1_764_800_000, &[7; 16]);
        assert!(header.contains("<wsu:Created>2025-12-03T23:13:20Z</wsu:Created>"), "{header}");
        assert!(header.contains("<wsse:Username>a&lt;b</wsse:Username>"));
        assert!(!header.contains(">p<"), "the password itself is never sent");
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn answers_are_sorted() {
        let fault = |sub: &str| {
            format!(
                r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body><s:Fault><s:Code><s:Value>s:Sender</s:Value>
                <s:Subcode><s:Value>{sub}</s:Value></s:Subcode></s:Code><s:Reason><s:Text>nope</s:Text></s:Reason></s:Fault></s:Body></s:Envelope>"#
            )
        };
        assert_eq!(answer("X", 400, false, fault("ter:NotAuthorized").as_bytes()), Err(Failure::Credentials));
        assert_eq!(answer("X", 500, false, fault("wsse:FailedAuthentication").as_bytes()), Err(Failure::Credentials));
        assert_eq!(
            answer("X", 500, false, fault("ter:ActionNotSupported").as_bytes()),
            Err(Failure::Device("X", "nope".into()))
        );
        // HTTP Digest cameras challenge; a web server that refuses does not speak ONVIF.
        assert_eq!(answer("X", 401, true, b""), Err(Failure::Credentials));
        assert!(matches!(answer("X", 401, false, br#"{"code":"unauthorized"}"#), Err(Failure::NotOnvif(_))));
        assert!(matches!(answer("X", 404, false, b"<html>no</html>"), Err(Failure::NotOnvif(_))));
        assert!(matches!(answer("X", 200, false, b"\xff\xfe"), Err(Failure::NotOnvif(_))));
        let ok = r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body/></s:Envelope>"#;
        assert_eq!(answer("X", 200, false, ok.as_bytes()).unwrap(), ok);
    }
}
