//! Cameras on the LAN, found by WS-Discovery (the 2005/04 draft ONVIF devices speak): a Probe
//! for NetworkVideoTransmitters sent to 239.255.255.250:3702 out of each IPv4 interface, the
//! unicast ProbeMatches read for [`limits::DISCOVERY_WAIT_MS`], at most
//! [`limits::DISCOVERY_DEVICES_MAX`] devices kept, each once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use percent_encoding::percent_decode_str;
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::xml;
use crate::limits;

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 255, 250), 3702);

/// Sent again after this long: UDP may lose the first probe (WS-Discovery repeats it too).
const REPEAT_AFTER_MS: u64 = 200;

/// Entries of one list (addresses, scopes, types) read from an answer.
const LIST_MAX: usize = 32;

/// The Probe with message id `id` (`urn:uuid:…`).
pub fn probe_message(id: &str) -> String {
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing""#,
            r#" xmlns:d="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:dn="http://www.onvif.org/ver10/network/wsdl">"#,
            r#"<s:Header><a:Action s:mustUnderstand="1">http://schemas.xmlsoap.org/ws/2005/04/discovery/Probe</a:Action>"#,
            "<a:MessageID>{}</a:MessageID>",
            "<a:ReplyTo><a:Address>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</a:Address></a:ReplyTo>",
            r#"<a:To s:mustUnderstand="1">urn:schemas-xmlsoap-org:ws:2005:04:discovery</a:To></s:Header>"#,
            "<s:Body><d:Probe><d:Types>dn:NetworkVideoTransmitter</d:Types></d:Probe></s:Body></s:Envelope>"
        ),
        id
    )
}

/// One ProbeMatch of an answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// What the answer relates to (the probe's message id), if it says.
    pub relates_to: Option<String>,
    /// The device's stable id (`urn:uuid:…`).
    pub endpoint: String,
    /// Its device service's addresses.
    pub xaddrs: Vec<String>,
    pub scopes: Vec<String>,
    /// Its types as `{namespace}local`.
    pub types: Vec<String>,
}

/// The ProbeMatches of one answer.
pub fn parse_matches(datagram: &[u8]) -> Result<Vec<Match>, String> {
    let text = std::str::from_utf8(datagram).map_err(|_| "not UTF-8 text")?;
    let doc = xml::parse(text)?;
    let root = doc.root_element();
    let relates_to = xml::child(root, xml::SOAP12, "Header")
        .or_else(|| xml::child(root, xml::SOAP11, "Header"))
        .and_then(|h| xml::child(h, xml::WSA, "RelatesTo"))
        .map(xml::text);
    let body = xml::body(&doc)?;
    let matches = xml::child(body, xml::WSD, "ProbeMatches").ok_or("not a ProbeMatches")?;
    let list = |n: Option<roxmltree::Node>| -> Vec<String> {
        n.map(|n| xml::text(n).split_whitespace().take(LIST_MAX).map(str::to_string).collect()).unwrap_or_default()
    };
    let mut out = Vec::new();
    for m in matches.children().filter(|c| xml::is(*c, xml::WSD, "ProbeMatch")).take(LIST_MAX) {
        let endpoint = xml::text_at(m, &[(xml::WSA, "EndpointReference"), (xml::WSA, "Address")]).unwrap_or_default();
        let types_node = xml::child(m, xml::WSD, "Types");
        // A type is a QName: its prefix is resolved where it is written.
        let types = list(types_node)
            .into_iter()
            .map(|q| match q.split_once(':') {
                Some((prefix, local)) => {
                    let ns = types_node.and_then(|n| n.lookup_namespace_uri(Some(prefix))).unwrap_or("");
                    format!("{{{ns}}}{local}")
                }
                None => format!("{{}}{q}"),
            })
            .collect();
        out.push(Match {
            relates_to: relates_to.clone(),
            endpoint,
            xaddrs: list(xml::child(m, xml::WSD, "XAddrs")),
            scopes: list(xml::child(m, xml::WSD, "Scopes")),
            types,
        });
    }
    Ok(out)
}

/// A camera found on the network.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// Its stable id (`urn:uuid:…`), or its address when it gives none.
    pub id: String,
    /// The address it answered from.
    pub address: IpAddr,
    /// Its device service, at the address it answered from.
    pub device_url: String,
    /// Its name and model, from its ONVIF scopes.
    pub name: Option<String>,
    pub hardware: Option<String>,
}

/// The value of the ONVIF scope `onvif://www.onvif.org/<kind>/<value>`, decoded.
fn scope(scopes: &[String], kind: &str) -> Option<String> {
    let prefix = format!("onvif://www.onvif.org/{kind}/");
    let raw = scopes.iter().find_map(|s| s.strip_prefix(&prefix))?;
    let value: String = percent_decode_str(raw).decode_utf8_lossy().chars().take(64).collect();
    (!value.is_empty()).then_some(value)
}

/// What a match from `from` says of the device: its device service is taken at the address
/// it answered from (a camera may list an address of another network, or none that works).
pub fn found(m: &Match, from: IpAddr) -> Option<Found> {
    let is_nvt = m.types.is_empty() || m.types.iter().any(|t| t == &format!("{{{}}}NetworkVideoTransmitter", xml::DN));
    if !is_nvt {
        return None;
    }
    let urls: Vec<url::Url> =
        m.xaddrs.iter().filter_map(|x| url::Url::parse(x).ok()).filter(|u| u.scheme() == "http").collect();
    let same = urls.iter().find(|u| u.host_str().and_then(|h| h.parse::<IpAddr>().ok()) == Some(from));
    let mut url = same.or(urls.first())?.clone();
    url.set_host(Some(&from.to_string())).ok()?;
    // Credentials never come from the network.
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    Some(Found {
        id: if m.endpoint.is_empty() { from.to_string() } else { m.endpoint.chars().take(128).collect() },
        address: from,
        device_url: url.to_string(),
        name: scope(&m.scopes, "name"),
        hardware: scope(&m.scopes, "hardware"),
    })
}

/// What a search found.
#[derive(Debug, Default, serde::Serialize)]
pub struct Search {
    pub found: Vec<Found>,
    /// The box's addresses it probed from.
    pub interfaces: Vec<Ipv4Addr>,
    /// Devices past [`limits::DISCOVERY_DEVICES_MAX`], and answers that were not read.
    pub left_out: usize,
    pub unreadable: usize,
}

impl Search {
    /// Keeps what `datagram` from `from` says, once per device, up to the ceiling.
    pub fn take(&mut self, id: &str, datagram: &[u8], from: IpAddr) {
        if datagram.len() > limits::DISCOVERY_DATAGRAM_MAX_BYTES {
            self.unreadable += 1;
            return;
        }
        let Ok(matches) = parse_matches(datagram) else {
            self.unreadable += 1;
            return;
        };
        for m in matches {
            if m.relates_to.as_deref().is_some_and(|r| r != id) {
                continue;
            }
            let Some(f) = found(&m, from) else { continue };
            if self.found.iter().any(|x| x.id == f.id) {
                continue;
            }
            if self.found.len() >= limits::DISCOVERY_DEVICES_MAX {
                self.left_out += 1;
                continue;
            }
            self.found.push(f);
        }
    }
}

/// The box's IPv4 addresses to probe from: every one but loopback's, at most
/// [`limits::DISCOVERY_INTERFACES_MAX`].
pub fn interfaces() -> Vec<Ipv4Addr> {
    choose(if_addrs::get_if_addrs().unwrap_or_default().into_iter().map(|i| i.ip()))
}

fn choose(addresses: impl Iterator<Item = IpAddr>) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = addresses
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out.truncate(limits::DISCOVERY_INTERFACES_MAX);
    out
}

/// A UDP socket on `local` whose multicast goes out of that address's interface.
fn socket(local: Ipv4Addr) -> std::io::Result<UdpSocket> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_multicast_if_v4(&local)?;
    s.set_multicast_ttl_v4(1)?;
    s.set_nonblocking(true)?;
    s.bind(&SocketAddr::from((local, 0)).into())?;
    UdpSocket::from_std(s.into())
}

/// A new message id: a version 4 UUID as `urn:uuid:…`.
fn message_id() -> String {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).expect("the OS random source");
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    let h: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!("urn:uuid:{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// Probes the device at `ip` alone (a Probe sent to its port 3702, again after
/// [`REPEAT_AFTER_MS`]: UDP may lose one) and waits at most `wait` for its answer: what it
/// says of itself, or none.
pub async fn probe_at(ip: Ipv4Addr, wait: Duration) -> Option<Found> {
    let id = message_id();
    let probe = probe_message(&id);
    let s = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).await.ok()?;
    let to = SocketAddr::from((ip, 3702));
    let deadline = Instant::now() + wait;
    let mut repeat_at = Some(Instant::now() + Duration::from_millis(REPEAT_AFTER_MS));
    let _ = s.send_to(probe.as_bytes(), to).await;
    let mut buf = vec![0u8; limits::DISCOVERY_DATAGRAM_MAX_BYTES + 1];
    loop {
        let wake = repeat_at.unwrap_or(deadline).min(deadline);
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {
                if wake >= deadline {
                    return None;
                }
                repeat_at = None;
                let _ = s.send_to(probe.as_bytes(), to).await;
            }
            got = s.recv_from(&mut buf) => {
                // A receive that fails fails again: no answer, rather than a spin to the deadline.
                let Ok((n, from)) = got else { return None };
                if from.ip() != IpAddr::V4(ip) {
                    continue;
                }
                let mut one = Search::default();
                one.take(&id, &buf[..n], from.ip());
                if let Some(f) = one.found.into_iter().next() {
                    return Some(f);
                }
            }
        }
    }
}

/// Probes from every interface and gathers the answers for [`limits::DISCOVERY_WAIT_MS`].
pub async fn search() -> Search {
    let id = message_id();
    let probe = probe_message(&id);
    let mut search = Search { interfaces: interfaces(), ..Search::default() };
    let sockets: Vec<UdpSocket> = search
        .interfaces
        .iter()
        .filter_map(|&ip| socket(ip).inspect_err(|e| tracing::debug!(%ip, error = %e, "no discovery from here")).ok())
        .collect();
    if sockets.is_empty() {
        return search;
    }
    let deadline = Instant::now() + Duration::from_millis(limits::DISCOVERY_WAIT_MS);
    let repeat_at = Instant::now() + Duration::from_millis(REPEAT_AFTER_MS);
    for s in &sockets {
        let _ = s.send_to(probe.as_bytes(), GROUP).await;
    }
    let mut repeated = false;
    let mut buf = vec![0u8; limits::DISCOVERY_DATAGRAM_MAX_BYTES + 1];
    loop {
        let wake = if repeated { deadline } else { repeat_at };
        // Which socket has a datagram; it is read below into the one buffer.
        let readable = futures::future::select_all(sockets.iter().map(|s| Box::pin(s.readable())));
        let ready = tokio::select! {
            _ = tokio::time::sleep_until(wake) => None,
            (_, i, _) = readable => Some(i),
        };
        let Some(i) = ready else {
            if repeated {
                break;
            }
            repeated = true;
            for s in &sockets {
                let _ = s.send_to(probe.as_bytes(), GROUP).await;
            }
            continue;
        };
        let Ok((n, from)) = sockets[i].try_recv_from(&mut buf) else { continue };
        search.take(&id, &buf[..n], from.ip());
    }
    search
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ProbeMatches as cameras send it: other prefixes, a device service at another
    /// address too, a scope with an encoded name.
    fn answer(relates_to: &str, endpoint: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
            <SOAP-ENV:Envelope xmlns:SOAP-ENV="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing"
              xmlns:wsdd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:tdn="http://www.onvif.org/ver10/network/wsdl" xmlns:tds="http://www.onvif.org/ver10/device/wsdl">
            <SOAP-ENV:Header><wsa:RelatesTo>{relates_to}</wsa:RelatesTo></SOAP-ENV:Header>
            <SOAP-ENV:Body><wsdd:ProbeMatches><wsdd:ProbeMatch>
              <wsa:EndpointReference><wsa:Address>{endpoint}</wsa:Address></wsa:EndpointReference>
              <wsdd:Types>tdn:NetworkVideoTransmitter tds:Device</wsdd:Types>
              <wsdd:Scopes>onvif://www.onvif.org/type/video_encoder onvif://www.onvif.org/name/Front%20Door onvif://www.onvif.org/hardware/DS-2CD2143</wsdd:Scopes>
              <wsdd:XAddrs>http://169.254.3.4/onvif/device_service http://192.168.1.64:8000/onvif/device_service</wsdd:XAddrs>
              <wsdd:MetadataVersion>1</wsdd:MetadataVersion>
            </wsdd:ProbeMatch></wsdd:ProbeMatches></SOAP-ENV:Body></SOAP-ENV:Envelope>"#
        )
    }

    #[test]
    fn a_probe_match_names_the_camera_at_the_address_it_answered_from() {
        let from: IpAddr = "192.168.1.64".parse().unwrap();
        let m = parse_matches(answer("urn:uuid:1", "urn:uuid:cam").as_bytes()).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].types[0], "{http://www.onvif.org/ver10/network/wsdl}NetworkVideoTransmitter");
        let f = found(&m[0], from).unwrap();
        assert_eq!(f.device_url, "http://192.168.1.64:8000/onvif/device_service");
        assert_eq!((f.name.as_deref(), f.hardware.as_deref()), (Some("Front Door"), Some("DS-2CD2143")));
        // From elsewhere: the first service, taken at that address.
        let f = found(&m[0], "10.0.0.7".parse().unwrap()).unwrap();
        assert_eq!(f.device_url, "http://10.0.0.7/onvif/device_service");
        // Not a video transmitter: left out.
        let printer =
            answer("urn:uuid:1", "urn:uuid:p").replace("tdn:NetworkVideoTransmitter tds:Device", "tds:Device");
        assert_eq!(found(&parse_matches(printer.as_bytes()).unwrap()[0], from), None);
        // User information in an address (the fuzzer's find) is dropped.
        let odd = answer("urn:uuid:1", "urn:uuid:cam").replace("http://169.254.3.4/", "http:0.2.7@8000/");
        let f = found(&parse_matches(odd.as_bytes()).unwrap()[0], "10.0.0.7".parse().unwrap()).unwrap();
        assert_eq!(f.device_url, "http://10.0.0.7/onvif/device_service");
        assert!(probe_message("urn:uuid:1").contains("<a:MessageID>urn:uuid:1</a:MessageID>"));
    }

    #[test]
    fn a_search_keeps_each_device_once_up_to_its_ceilings() {
        let mut s = Search::default();
        let from: IpAddr = "192.168.1.64".parse().unwrap();
        // Twice (the probe is sent twice), and once for another probe: one device.
        s.take("urn:uuid:1", answer("urn:uuid:1", "urn:uuid:cam").as_bytes(), from);
        s.take("urn:uuid:1", answer("urn:uuid:1", "urn:uuid:cam").as_bytes(), from);
        s.take("urn:uuid:1", answer("urn:uuid:2", "urn:uuid:other").as_bytes(), from);
        assert_eq!(s.found.len(), 1);
        for i in 0..limits::DISCOVERY_DEVICES_MAX + 3 {
            s.take("urn:uuid:1", answer("urn:uuid:1", &format!("urn:uuid:{i}")).as_bytes(), from);
        }
        assert_eq!((s.found.len(), s.left_out), (limits::DISCOVERY_DEVICES_MAX, 4));
        s.take("urn:uuid:1", b"<not xml", from);
        let long = answer("urn:uuid:1", "urn:uuid:long")
            .replace("<wsdd:MetadataVersion>", &" ".repeat(limits::DISCOVERY_DATAGRAM_MAX_BYTES));
        s.take("urn:uuid:1", long.as_bytes(), from);
        let at_most =
            format!("{:<width$}", answer("urn:uuid:1", "urn:uuid:fits"), width = limits::DISCOVERY_DATAGRAM_MAX_BYTES);
        assert_eq!(at_most.len(), limits::DISCOVERY_DATAGRAM_MAX_BYTES);
        assert!(!parse_matches(at_most.as_bytes()).unwrap().is_empty());
        assert_eq!(s.unreadable, 2);
    }

    #[test]
    fn interfaces_are_ipv4_and_bounded() {
        let many = (1..=20u8)
            .map(|i| IpAddr::from([10, 0, 0, i]))
            .chain(["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]);
        let chosen = choose(many);
        assert_eq!(chosen.len(), limits::DISCOVERY_INTERFACES_MAX);
        assert!(chosen.iter().all(|a| !a.is_loopback()));
    }
}
