//! A camera's streams read over ONVIF, given its device service and credentials: its clock
//! first (GetSystemDateAndTime, which needs no credentials, so the digests carry the camera's
//! time), then GetDeviceInformation, GetCapabilities (where its media service is),
//! GetProfiles and GetStreamUri for the largest and the smallest H.264/H.265 profile. Every
//! address it gives is taken at the host the box reached it at, without user information.

use std::time::Duration;

use roxmltree::Node;

use super::soap::{Credentials, call};
use super::{Failure, xml};
use crate::limits;

/// What the camera says it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Device {
    pub manufacturer: String,
    pub model: String,
    pub firmware: String,
    pub serial: String,
}

/// One media profile.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Profile {
    pub token: String,
    pub name: String,
    /// `H264`, `H265`, `JPEG`…, as the camera names its video encoding.
    pub codec: Option<String>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub fps: Option<f32>,
}

/// A camera's streams as its ONVIF services describe them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Streams {
    pub device: Device,
    /// The camera's clock minus the box's, in seconds (`None` when it did not say).
    pub clock_skew_s: Option<i64>,
    pub profiles: Vec<Profile>,
    /// The largest profile's RTSP address, and the smallest's when it is another.
    pub main: String,
    pub sub: Option<String>,
}

/// Reads the answer `text`'s body with `read`.
fn read<T>(text: &str, read: impl FnOnce(Node) -> Result<T, String>) -> Result<T, Failure> {
    let doc = xml::parse(text).map_err(Failure::NotOnvif)?;
    let body = xml::body(&doc).map_err(Failure::NotOnvif)?;
    read(body).map_err(Failure::NotOnvif)
}

/// The camera's UTC clock as a Unix time, from a GetSystemDateAndTime answer.
pub fn date_time(body: Node) -> Result<i64, String> {
    let utc = xml::find(body, xml::TT, "UTCDateTime").ok_or("no UTCDateTime")?;
    let number = |path: &[(&str, &str)]| -> Result<i64, String> {
        let t = xml::text_at(utc, path).ok_or("an incomplete UTCDateTime")?;
        t.parse::<i64>().map_err(|_| format!("{t:?} is not a number"))
    };
    let (y, mo, d) = (
        number(&[(xml::TT, "Date"), (xml::TT, "Year")])?,
        number(&[(xml::TT, "Date"), (xml::TT, "Month")])?,
        number(&[(xml::TT, "Date"), (xml::TT, "Day")])?,
    );
    let (h, mi, s) = (
        number(&[(xml::TT, "Time"), (xml::TT, "Hour")])?,
        number(&[(xml::TT, "Time"), (xml::TT, "Minute")])?,
        number(&[(xml::TT, "Time"), (xml::TT, "Second")])?,
    );
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&s)
    {
        return Err(format!("{y}-{mo}-{d} {h}:{mi}:{s} is not a time"));
    }
    Ok(crate::clock::days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + s)
}

/// The GetDeviceInformation answer.
pub fn device_information(body: Node) -> Result<Device, String> {
    let r = xml::child(body, xml::TDS, "GetDeviceInformationResponse").ok_or("no GetDeviceInformationResponse")?;
    let field = |name| xml::text_at(r, &[(xml::TDS, name)]).unwrap_or_default();
    Ok(Device {
        manufacturer: field("Manufacturer"),
        model: field("Model"),
        firmware: field("FirmwareVersion"),
        serial: field("SerialNumber"),
    })
}

/// The media service's address from a GetCapabilities answer, if it has one.
pub fn media_address(body: Node) -> Option<String> {
    let caps = xml::find(body, xml::TDS, "Capabilities")?;
    xml::text_at(caps, &[(xml::TT, "Media"), (xml::TT, "XAddr")]).filter(|x| !x.is_empty())
}

/// The GetProfiles answer, at most [`limits::ONVIF_PROFILES_MAX`] profiles.
pub fn profiles(body: Node) -> Result<Vec<Profile>, String> {
    let r = xml::child(body, xml::TRT, "GetProfilesResponse").ok_or("no GetProfilesResponse")?;
    let number = |n: Node, path: &[(&str, &str)]| xml::text_at(n, path).and_then(|t| t.parse::<f64>().ok());
    Ok(r.children()
        .filter(|c| xml::is(*c, xml::TRT, "Profiles"))
        .take(limits::ONVIF_PROFILES_MAX)
        .map(|p| {
            let video = xml::child(p, xml::TT, "VideoEncoderConfiguration");
            let dim = |name| {
                video
                    .and_then(|v| number(v, &[(xml::TT, "Resolution"), (xml::TT, name)]))
                    .filter(|n| (1.0..=65_535.0).contains(n))
                    .map(|n| n as u32)
            };
            Profile {
                token: p.attribute("token").unwrap_or("").chars().take(64).collect(),
                name: xml::text_at(p, &[(xml::TT, "Name")]).unwrap_or_default(),
                codec: video.and_then(|v| xml::text_at(v, &[(xml::TT, "Encoding")])),
                width: dim("Width"),
                height: dim("Height"),
                fps: video
                    .and_then(|v| number(v, &[(xml::TT, "RateControl"), (xml::TT, "FrameRateLimit")]))
                    .filter(|n| *n > 0.0 && *n <= 1000.0)
                    .map(|n| n as f32),
            }
        })
        .collect())
}

/// The address in a GetStreamUri answer.
pub fn stream_uri(body: Node) -> Result<String, String> {
    let r = xml::child(body, xml::TRT, "GetStreamUriResponse").ok_or("no GetStreamUriResponse")?;
    xml::text_at(r, &[(xml::TRT, "MediaUri"), (xml::TT, "Uri")])
        .filter(|u| !u.is_empty())
        .ok_or_else(|| "no MediaUri".into())
}

/// `address` taken at `host` (the host the box reached the camera at), without user
/// information (KeepPeek keeps credentials apart from addresses).
pub fn rehost(address: &str, host: &str, schemes: &[&str]) -> Result<url::Url, String> {
    let mut url = url::Url::parse(address).map_err(|e| format!("{address:?}: {e}"))?;
    if !schemes.contains(&url.scheme()) {
        return Err(format!("{address:?} is not {}", schemes.join(" or ")));
    }
    url.set_host(Some(host)).map_err(|e| format!("{address:?}: {e}"))?;
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok(url)
}

/// The profiles KeepPeek can record, largest first.
fn recordable(profiles: &[Profile]) -> Vec<&Profile> {
    let mut out: Vec<&Profile> = profiles
        .iter()
        .filter(|p| {
            !p.token.is_empty()
                && p.codec
                    .as_deref()
                    .is_some_and(|c| matches!(c.to_ascii_uppercase().as_str(), "H264" | "H265" | "HEVC"))
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(u64::from(p.width.unwrap_or(0)) * u64::from(p.height.unwrap_or(0))));
    out
}

/// Reads the streams of the camera whose device service is `device_url` as `user`, within
/// [`limits::ONVIF_QUERY_TIMEOUT_MS`]. `now_s` gives the box's Unix time.
pub async fn streams(
    device_url: &url::Url,
    user: &str,
    password: &str,
    now_s: impl Fn() -> i64,
) -> Result<Streams, Failure> {
    let all = Duration::from_millis(limits::ONVIF_QUERY_TIMEOUT_MS);
    tokio::time::timeout(all, streams_inner(device_url, user, password, now_s))
        .await
        .unwrap_or(Err(Failure::Timeout("all its requests")))
}

async fn streams_inner(
    device_url: &url::Url,
    user: &str,
    password: &str,
    now_s: impl Fn() -> i64,
) -> Result<Streams, Failure> {
    let host = device_url.host_str().ok_or_else(|| Failure::Unreachable("the address has no host".into()))?.to_string();
    // The clock first: the digests below carry the camera's time.
    let text = call(device_url, xml::TDS, "GetSystemDateAndTime", None, now_s(), "<tds:GetSystemDateAndTime/>").await;
    let clock_skew_s = match text {
        Ok(text) => read(&text, date_time).ok().map(|t| t - now_s()),
        // Some cameras want credentials even for their clock: carry on with the box's.
        Err(Failure::Credentials | Failure::Device(..)) => None,
        Err(e) => return Err(e),
    };
    let who = Credentials { user, password, skew_s: clock_skew_s.unwrap_or(0) };
    let text =
        call(device_url, xml::TDS, "GetDeviceInformation", Some(&who), now_s(), "<tds:GetDeviceInformation/>").await?;
    let device = read(&text, device_information)?;
    let body = "<tds:GetCapabilities><tds:Category>Media</tds:Category></tds:GetCapabilities>";
    let media = match call(device_url, xml::TDS, "GetCapabilities", Some(&who), now_s(), body).await {
        Ok(text) => read(&text, |b| Ok(media_address(b)))?,
        Err(Failure::Device(..)) => None,
        Err(e) => return Err(e),
    };
    let media = match media {
        Some(m) => rehost(&m, &host, &["http", "https"]).map_err(Failure::NotOnvif)?,
        None => device_url.clone(),
    };
    let text = call(&media, xml::TRT, "GetProfiles", Some(&who), now_s(), "<trt:GetProfiles/>").await?;
    let profiles = read(&text, profiles)?;
    let chosen = recordable(&profiles);
    let Some(largest) = chosen.first() else {
        let codecs: Vec<&str> = profiles.iter().filter_map(|p| p.codec.as_deref()).collect();
        return Err(Failure::NoStream(if codecs.is_empty() {
            "no video profile".into()
        } else {
            format!("its profiles are {}", codecs.join(", "))
        }));
    };
    let uri = |token: &str| {
        format!(
            concat!(
                "<trt:GetStreamUri><trt:StreamSetup><tt:Stream>RTP-Unicast</tt:Stream>",
                "<tt:Transport><tt:Protocol>RTSP</tt:Protocol></tt:Transport></trt:StreamSetup>",
                "<trt:ProfileToken>{}</trt:ProfileToken></trt:GetStreamUri>"
            ),
            xml::escape(token)
        )
    };
    let address = |text: String| -> Result<String, Failure> {
        let raw = read(&text, stream_uri)?;
        Ok(rehost(&raw, &host, &["rtsp"]).map_err(Failure::NotOnvif)?.to_string())
    };
    let main = address(call(&media, xml::TRT, "GetStreamUri", Some(&who), now_s(), &uri(&largest.token)).await?)?;
    let sub = match chosen.last().filter(|p| p.token != largest.token) {
        Some(p) => Some(address(call(&media, xml::TRT, "GetStreamUri", Some(&who), now_s(), &uri(&p.token)).await?)?),
        None => None,
    }
    .filter(|s| *s != main);
    Ok(Streams { device, clock_skew_s, profiles, main, sub })
}

/// Every reader above on one answer: what the fuzz target drives.
pub fn read_any(text: &str) {
    let _ = read(text, date_time);
    let _ = read(text, device_information);
    let _ = read(text, |b| Ok(media_address(b)));
    if let Ok(p) = read(text, profiles) {
        let _ = recordable(&p);
    }
    if let Ok(u) = read(text, stream_uri) {
        let _ = rehost(&u, "192.0.2.1", &["rtsp"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onvif::soap::call;

    fn envelope(body: &str) -> String {
        format!(
            r#"<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" xmlns:tds="http://www.onvif.org/ver10/device/wsdl"
               xmlns:trt="http://www.onvif.org/ver10/media/wsdl" xmlns:tt="http://www.onvif.org/ver10/schema"><env:Body>{body}</env:Body></env:Envelope>"#
        )
    }

    #[test]
    fn the_cameras_clock_is_read() {
        let text = envelope(
            "<tds:GetSystemDateAndTimeResponse><tds:SystemDateAndTime><tt:UTCDateTime>
             <tt:Time><tt:Hour>23</tt:Hour><tt:Minute>13</tt:Minute><tt:Second>20</tt:Second></tt:Time>
             <tt:Date><tt:Year>2025</tt:Year><tt:Month>12</tt:Month><tt:Day>3</tt:Day></tt:Date>
             </tt:UTCDateTime></tds:SystemDateAndTime></tds:GetSystemDateAndTimeResponse>",
        );
        assert_eq!(read(&text, date_time), Ok(1_764_803_600));
        let bad = text.replace("<tt:Month>12", "<tt:Month>13");
        assert!(matches!(read(&bad, date_time), Err(Failure::NotOnvif(_))));
    }

    #[test]
    fn profiles_are_read_and_chosen() {
        let profile = |token: &str, enc: &str, w: u32, h: u32| {
            format!(
                r#"<trt:Profiles token="{token}" fixed="true"><tt:Name>{token}</tt:Name><tt:VideoEncoderConfiguration token="v">
                   <tt:Encoding>{enc}</tt:Encoding><tt:Resolution><tt:Width>{w}</tt:Width><tt:Height>{h}</tt:Height></tt:Resolution>
                   <tt:RateControl><tt:FrameRateLimit>15</tt:FrameRateLimit></tt:RateControl></tt:VideoEncoderConfiguration></trt:Profiles>"#
            )
        };
        let text = envelope(&format!(
            "<trt:GetProfilesResponse>{}{}{}</trt:GetProfilesResponse>",
            profile("sub", "H264", 640, 360),
            profile("mjpeg", "JPEG", 320, 240),
            profile("main", "H265", 2560, 1440)
        ));
        let p = read(&text, profiles).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[2],
            Profile {
                token: "main".into(),
                name: "main".into(),
                codec: Some("H265".into()),
                width: Some(2560),
                height: Some(1440),
                fps: Some(15.0)
            }
        );
        let chosen: Vec<&str> = recordable(&p).iter().map(|p| p.token.as_str()).collect();
        assert_eq!(chosen, ["main", "sub"]);
        let many = envelope(&format!(
            "<trt:GetProfilesResponse>{}</trt:GetProfilesResponse>",
            profile("x", "H264", 1, 1).repeat(limits::ONVIF_PROFILES_MAX + 5)
        ));
        assert_eq!(read(&many, profiles).unwrap().len(), limits::ONVIF_PROFILES_MAX);
    }

    #[test]
    fn stream_addresses_are_taken_at_the_cameras_host_without_credentials() {
        let text = envelope(
            "<trt:GetStreamUriResponse><trt:MediaUri><tt:Uri>rtsp://admin:secret@192.168.0.64:554/Streaming/Channels/101?x=1</tt:Uri></trt:MediaUri></trt:GetStreamUriResponse>",
        );
        let raw = read(&text, stream_uri).unwrap();
        assert_eq!(
            rehost(&raw, "10.0.0.9", &["rtsp"]).unwrap().as_str(),
            "rtsp://10.0.0.9:554/Streaming/Channels/101?x=1"
        );
        assert!(rehost("http://a/b", "10.0.0.9", &["rtsp"]).is_err());
        assert!(rehost("not a url", "10.0.0.9", &["rtsp"]).is_err());
    }

    #[test]
    fn device_information_and_media_address() {
        let text = envelope(
            "<tds:GetDeviceInformationResponse><tds:Manufacturer>Acme</tds:Manufacturer><tds:Model>C1</tds:Model>
             <tds:FirmwareVersion>1.2</tds:FirmwareVersion><tds:SerialNumber>S9</tds:SerialNumber><tds:HardwareId>h</tds:HardwareId>
             </tds:GetDeviceInformationResponse>",
        );
        let d = read(&text, device_information).unwrap();
        assert_eq!(
            d,
            Device { manufacturer: "Acme".into(), model: "C1".into(), firmware: "1.2".into(), serial: "S9".into() }
        );
        let caps = envelope(
            "<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Media><tt:XAddr>http://192.168.0.64/onvif/Media</tt:XAddr></tt:Media></tds:Capabilities></tds:GetCapabilitiesResponse>",
        );
        assert_eq!(read(&caps, |b| Ok(media_address(b))).unwrap().as_deref(), Some("http://192.168.0.64/onvif/Media"));
    }

    /// A web server on loopback answering every request with what `reply` gives for the
    /// request's text, after `delay`.
    async fn server(delay: Duration, reply: fn(&str) -> String) -> url::Url {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}/onvif/device_service", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The whole request: the envelope ends it.
                    while !String::from_utf8_lossy(&got).contains("</s:Envelope>") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let body = reply(&String::from_utf8_lossy(&got));
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/soap+xml\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(body.as_bytes()).await;
                });
            }
        });
        url
    }

    fn clock(_: &str) -> String {
        envelope(
            "<tds:GetSystemDateAndTimeResponse><tds:SystemDateAndTime><tt:UTCDateTime><tt:Time><tt:Hour>1</tt:Hour><tt:Minute>0</tt:Minute>
             <tt:Second>0</tt:Second></tt:Time><tt:Date><tt:Year>2026</tt:Year><tt:Month>1</tt:Month><tt:Day>1</tt:Day></tt:Date></tt:UTCDateTime>
             </tds:SystemDateAndTime></tds:GetSystemDateAndTimeResponse>",
        )
    }

    #[tokio::test]
    async fn an_answer_past_its_ceiling_is_refused() {
        // Padded to exactly the ceiling: read. One byte more: refused.
        fn at(extra: usize) -> String {
            let text = clock("");
            let pad = limits::ONVIF_RESPONSE_MAX_BYTES - text.len() + extra;
            text.replace("<env:Body>", &format!("<env:Body>{}", " ".repeat(pad)))
        }
        let fits = server(Duration::ZERO, |_| at(0)).await;
        let text = call(&fits, xml::TDS, "GetSystemDateAndTime", None, 0, "<tds:GetSystemDateAndTime/>").await.unwrap();
        assert_eq!(text.len(), limits::ONVIF_RESPONSE_MAX_BYTES);
        let long = server(Duration::ZERO, |_| at(1)).await;
        let e =
            call(&long, xml::TDS, "GetSystemDateAndTime", None, 0, "<tds:GetSystemDateAndTime/>").await.unwrap_err();
        assert!(matches!(&e, Failure::NotOnvif(w) if w.contains("ONVIF_RESPONSE_MAX_BYTES")), "{e}");
    }

    /// Each request in time, all of them not: the whole read gives up at its ceiling.
    #[tokio::test]
    async fn a_camera_slow_at_every_request_is_given_up_on_in_all() {
        let each = Duration::from_millis(limits::ONVIF_REQUEST_TIMEOUT_MS * 9 / 10);
        let slow = server(each, |request| {
            if request.contains("GetSystemDateAndTime") {
                clock(request)
            } else {
                envelope(
                    "<tds:GetDeviceInformationResponse><tds:Model>M</tds:Model></tds:GetDeviceInformationResponse>",
                )
            }
        })
        .await;
        let started = std::time::Instant::now();
        let e = streams(&slow, "u", "p", || 1_767_229_200).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(e, Failure::Timeout("all its requests"));
        assert!(
            took >= Duration::from_millis(limits::ONVIF_QUERY_TIMEOUT_MS)
                && took < Duration::from_millis(limits::ONVIF_QUERY_TIMEOUT_MS + 1000),
            "{took:?}"
        );
    }
}
