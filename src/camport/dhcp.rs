//! DHCPv4 on the camera port's wire (RFC 2131, options of RFC 2132): a client's message read
//! into a [`Message`], checked and bounded, and the server's answers written, with
//! `smoltcp::wire`. smoltcp reads the fixed fields and the common options; what it leaves
//! out (a client id that is not a MAC, the host name) and what a server must check itself
//! (the options' framing, the opcode, relays) is done here.

use std::net::Ipv4Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    DHCP_CLIENT_PORT, DHCP_SERVER_PORT, DhcpMessageType, DhcpOption, DhcpPacket, DhcpRepr, EthernetAddress,
    EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

use crate::limits;

/// The magic cookie's end: where options start.
const OPTIONS_AT: usize = 240;
/// BOOTP's smallest message: some clients refuse shorter answers.
const REPLY_MIN_BYTES: usize = 300;
const END: u8 = 255;
const PAD: u8 = 0;
const OPT_HOSTNAME: u8 = 12;
const OPT_MESSAGE_TYPE: u8 = 53;
const OPT_OVERLOAD: u8 = 52;
const OPT_CLIENT_ID: u8 = 61;
const OPT_NTP: u8 = 42;
const OPT_RENEW: u8 = 58;
const OPT_REBIND: u8 = 59;

/// Why a packet is not a message this server reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} bytes: over the {max} a message may have", max = limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES)]
    TooLong(usize),
    #[error("not a DHCP request: {0}")]
    NotDhcp(&'static str),
    #[error("its options do not add up: {0}")]
    Options(&'static str),
}

/// Who a client is: its option 61 when it sends one (a DUID, a MAC, a name), else its MAC.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub heapless::Vec<u8, { limits::CAMPORT_CLIENT_ID_MAX_BYTES + 1 }>);

impl ClientId {
    /// The id of a client known by its MAC alone (as option 61 of type 1 would say).
    pub fn of_mac(mac: [u8; 6]) -> ClientId {
        let mut v = heapless::Vec::new();
        let _ = v.push(1);
        let _ = v.extend_from_slice(&mac);
        ClientId(v)
    }

    /// As shown: its bytes in hex, `:` between.
    pub fn shown(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
    }
}

/// A client's message, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: DhcpMessageType,
    pub xid: u32,
    pub mac: [u8; 6],
    pub client: ClientId,
    /// `ciaddr`: the address it has, when renewing or rebinding (else unspecified).
    pub ciaddr: Ipv4Addr,
    /// Option 50.
    pub requested: Option<Ipv4Addr>,
    /// Option 54: the server it answers (a REQUEST after offers, a DECLINE).
    pub server_id: Option<Ipv4Addr>,
    /// It cannot take a unicast before it has an address.
    pub broadcast: bool,
    /// Option 12, printable ASCII only (else left out).
    pub hostname: Option<heapless::String<{ limits::CAMPORT_HOSTNAME_MAX_BYTES }>>,
}

/// Reads a client's message from a UDP payload sent to port 67.
pub fn parse(payload: &[u8]) -> Result<Message, WireError> {
    if payload.len() > limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES {
        return Err(WireError::TooLong(payload.len()));
    }
    let packet = DhcpPacket::new_checked(payload).map_err(|_| WireError::NotDhcp("shorter than its fixed fields"))?;
    if packet.opcode() != smoltcp::wire::DhcpOpCode::Request {
        return Err(WireError::NotDhcp("not a request (op 1)"));
    }
    if packet.relay_agent_ip() != Ipv4Addr::UNSPECIFIED {
        // A relay means another segment: the camera port serves its own wire only.
        return Err(WireError::NotDhcp("relayed"));
    }
    check_options(payload)?;
    let repr = DhcpRepr::parse(&packet).map_err(|_| WireError::NotDhcp("its fields or message type"))?;
    if matches!(repr.message_type, DhcpMessageType::Unknown(_)) {
        return Err(WireError::NotDhcp("an unknown message type"));
    }
    let mac = repr.client_hardware_address.0;
    let mut client = None;
    let mut hostname = None;
    for o in packet.options() {
        match o.kind {
            OPT_CLIENT_ID => {
                // RFC 2132: a type and at least one byte.
                if o.data.len() < 2 || o.data.len() > limits::CAMPORT_CLIENT_ID_MAX_BYTES {
                    return Err(WireError::Options("a client id shorter than 2 bytes or over its ceiling"));
                }
                let mut v = heapless::Vec::new();
                let _ = v.extend_from_slice(o.data);
                client = Some(ClientId(v));
            }
            OPT_HOSTNAME => {
                let text =
                    std::str::from_utf8(o.data).ok().filter(|t| t.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
                hostname = text.and_then(|t| heapless::String::try_from(t).ok());
            }
            _ => {}
        }
    }
    Ok(Message {
        kind: repr.message_type,
        xid: repr.transaction_id,
        mac,
        client: client.unwrap_or_else(|| ClientId::of_mac(mac)),
        ciaddr: repr.client_ip,
        requested: repr.requested_ip,
        server_id: repr.server_identifier,
        broadcast: repr.broadcast,
        hostname,
    })
}

/// The options' framing, which smoltcp passes over in silence: each option whole within the
/// message, an end, one message type, no overload (options in `sname` and `file`, which this
/// server does not read), and an option given twice only with the same bytes.
fn check_options(payload: &[u8]) -> Result<(), WireError> {
    let mut at = OPTIONS_AT;
    let mut seen: [Option<(usize, usize)>; 256] = [None; 256];
    loop {
        let Some(&kind) = payload.get(at) else { return Err(WireError::Options("no end option")) };
        match kind {
            END => return Ok(()),
            PAD => at += 1,
            _ => {
                let len = *payload.get(at + 1).ok_or(WireError::Options("an option cut at its length"))? as usize;
                let (from, to) = (at + 2, at + 2 + len);
                if to > payload.len() {
                    return Err(WireError::Options("an option runs past the message's end"));
                }
                if kind == OPT_OVERLOAD {
                    return Err(WireError::Options("options overloaded into sname or file"));
                }
                if let Some((f, t)) = seen[kind as usize]
                    && payload[f..t] != payload[from..to]
                {
                    return Err(WireError::Options("an option given twice, differently"));
                }
                if kind == OPT_MESSAGE_TYPE && len != 1 {
                    return Err(WireError::Options("a message type that is not one byte"));
                }
                seen[kind as usize] = Some((from, to));
                at = to;
            }
        }
    }
}

/// What the server says, and to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub kind: DhcpMessageType,
    pub xid: u32,
    pub mac: [u8; 6],
    /// The client's option 61, echoed (RFC 6842).
    pub client: Option<ClientId>,
    pub ciaddr: Ipv4Addr,
    /// The address given (unspecified in a NAK or an answer to INFORM).
    pub yiaddr: Ipv4Addr,
    pub broadcast: bool,
    /// The lease's seconds (none in a NAK or an answer to INFORM); renewal at half, rebinding
    /// at seven eighths.
    pub lease_s: Option<u32>,
}

/// The server's side of the wire: its address on the port, the subnet's mask, and whether it
/// says it is the router and DNS (else it leaves them out: cameras have nowhere to go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    pub ip: Ipv4Addr,
    pub mask: Ipv4Addr,
    pub router: bool,
}

impl Server {
    /// Whether `ip` is on the server's subnet.
    pub fn on_subnet(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::from(self.mask);
        u32::from(ip) & mask == u32::from(self.ip) & mask
    }
}

/// The largest answer [`emit`] writes.
pub const ANSWER_MAX_BYTES: usize = 576;

/// Writes `a` from `server` as a UDP payload into `buf`; its length.
pub fn emit(a: &Answer, server: &Server, buf: &mut [u8; ANSWER_MAX_BYTES]) -> usize {
    let lease = a.lease_s.unwrap_or(0);
    let (t1, t2) = ((lease / 2).to_be_bytes(), (lease / 8 * 7).to_be_bytes());
    let ntp = server.ip.octets();
    let client = a.client.as_ref().map(|c| c.0.clone()).unwrap_or_default();
    let nak = a.kind == DhcpMessageType::Nak;
    let mut extra: heapless::Vec<DhcpOption<'_>, 4> = heapless::Vec::new();
    if a.lease_s.is_some() {
        let _ = extra.push(DhcpOption { kind: OPT_RENEW, data: &t1 });
        let _ = extra.push(DhcpOption { kind: OPT_REBIND, data: &t2 });
    }
    if !nak {
        let _ = extra.push(DhcpOption { kind: OPT_NTP, data: &ntp });
    }
    if !client.is_empty() {
        let _ = extra.push(DhcpOption { kind: OPT_CLIENT_ID, data: &client });
    }
    let me = Some(server.ip);
    let mut dns = heapless::Vec::new();
    if server.router && !nak {
        let _ = dns.push(server.ip);
    }
    let repr = DhcpRepr {
        message_type: a.kind,
        transaction_id: a.xid,
        secs: 0,
        client_hardware_address: EthernetAddress(a.mac),
        client_ip: if nak { Ipv4Addr::UNSPECIFIED } else { a.ciaddr },
        your_ip: a.yiaddr,
        server_ip: Ipv4Addr::UNSPECIFIED,
        router: (server.router && !nak).then_some(server.ip),
        subnet_mask: (!nak).then_some(server.mask),
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        broadcast: a.broadcast,
        requested_ip: None,
        client_identifier: None,
        server_identifier: me,
        parameter_request_list: None,
        dns_servers: (!dns.is_empty()).then_some(dns),
        max_size: None,
        lease_duration: a.lease_s,
        renew_duration: None,
        rebind_duration: None,
        additional_options: &extra,
    };
    // Every option above is bounded (a client id of at most its ceiling): the answer fits.
    let len = repr.buffer_len().clamp(REPLY_MIN_BYTES, ANSWER_MAX_BYTES);
    buf.fill(0);
    let mut packet = DhcpPacket::new_unchecked(&mut buf[..len]);
    let _ = repr.emit(&mut packet);
    len
}

/// Where an answer goes (RFC 2131 4.1): a NAK to everyone; to a client with an address, to
/// that address; to one that asked for broadcasts, to everyone; else to its MAC and its new
/// address, in a frame of the server's own (it has no ARP entry yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    Unicast(Ipv4Addr),
    Broadcast,
    Frame { mac: [u8; 6], ip: Ipv4Addr },
}

impl Answer {
    pub fn destination(&self) -> Destination {
        if self.kind == DhcpMessageType::Nak || self.broadcast {
            Destination::Broadcast
        } else if self.ciaddr != Ipv4Addr::UNSPECIFIED {
            Destination::Unicast(self.ciaddr)
        } else if self.yiaddr != Ipv4Addr::UNSPECIFIED {
            Destination::Frame { mac: self.mac, ip: self.yiaddr }
        } else {
            Destination::Broadcast
        }
    }
}

/// The largest frame [`frame`] writes: Ethernet, IPv4 and UDP headers around an answer.
pub const FRAME_MAX_BYTES: usize = 14 + 20 + 8 + ANSWER_MAX_BYTES;

/// An Ethernet frame from `server` (`server_mac`) to `mac` at `ip` carrying `payload` (an
/// answer) from port 67 to 68, into `buf`; its length.
pub fn frame(
    payload: &[u8],
    (server_mac, server_ip): ([u8; 6], Ipv4Addr),
    (mac, ip): ([u8; 6], Ipv4Addr),
    buf: &mut [u8; FRAME_MAX_BYTES],
) -> usize {
    let payload = &payload[..payload.len().min(ANSWER_MAX_BYTES)];
    let udp_len = 8 + payload.len();
    let len = 14 + 20 + udp_len;
    let caps = ChecksumCapabilities::default();
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..len]);
    EthernetRepr {
        src_addr: EthernetAddress(server_mac),
        dst_addr: EthernetAddress(mac),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut eth);
    let ip_repr = Ipv4Repr {
        src_addr: server_ip,
        dst_addr: ip,
        next_header: IpProtocol::Udp,
        payload_len: udp_len,
        hop_limit: 64,
    };
    let mut ip_packet = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip_repr.emit(&mut ip_packet, &caps);
    let mut udp = UdpPacket::new_unchecked(ip_packet.payload_mut());
    UdpRepr { src_port: DHCP_SERVER_PORT, dst_port: DHCP_CLIENT_PORT }.emit(
        &mut udp,
        &server_ip.into(),
        &ip.into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &caps,
    );
    len
}

/// The fuzz target's harness (`fuzz/fuzz_targets/camport_dhcp.rs`): any datagram is read or
/// refused, never a panic; a message read, answered, reads back as the answer said.
pub fn fuzz(data: &[u8]) {
    let Ok(m) = parse(data) else { return };
    let a = Answer {
        kind: DhcpMessageType::Offer,
        xid: m.xid,
        mac: m.mac,
        client: Some(m.client.clone()),
        ciaddr: m.ciaddr,
        yiaddr: Ipv4Addr::new(10, 0, 0, 9),
        broadcast: m.broadcast,
        lease_s: Some(3600),
    };
    let server = Server { ip: Ipv4Addr::new(10, 0, 0, 1), mask: Ipv4Addr::new(255, 255, 255, 0), router: false };
    let mut buf = [0u8; ANSWER_MAX_BYTES];
    let n = emit(&a, &server, &mut buf);
    let packet = DhcpPacket::new_checked(&buf[..n]).expect("an answer's length");
    let back = DhcpRepr::parse(&packet).expect("an answer reads back");
    assert_eq!((back.transaction_id, back.your_ip, back.lease_duration), (m.xid, a.yiaddr, Some(3600)));
    let mut f = [0u8; FRAME_MAX_BYTES];
    let len = frame(&buf[..n], ([2, 0, 0, 0, 0, 1], server.ip), (m.mac, a.yiaddr), &mut f);
    assert!(EthernetFrame::new_checked(&f[..len]).is_ok());
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MAC: [u8; 6] = [0x02, 0xca, 0xfe, 0, 0, 1];

    /// A client's message as a client writes it, with `extra` options.
    pub(crate) fn client_message(kind: DhcpMessageType, mac: [u8; 6], extra: &[DhcpOption<'_>]) -> Vec<u8> {
        let repr = DhcpRepr {
            message_type: kind,
            transaction_id: 0x1234_5678,
            secs: 0,
            client_hardware_address: EthernetAddress(mac),
            client_ip: Ipv4Addr::UNSPECIFIED,
            your_ip: Ipv4Addr::UNSPECIFIED,
            server_ip: Ipv4Addr::UNSPECIFIED,
            router: None,
            subnet_mask: None,
            relay_agent_ip: Ipv4Addr::UNSPECIFIED,
            broadcast: false,
            requested_ip: None,
            client_identifier: None,
            server_identifier: None,
            parameter_request_list: Some(&[1, 3, 6, 42]),
            dns_servers: None,
            max_size: None,
            lease_duration: None,
            renew_duration: None,
            rebind_duration: None,
            additional_options: extra,
        };
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut DhcpPacket::new_unchecked(&mut buf[..])).unwrap();
        buf
    }

    #[test]
    fn the_subnet_is_the_servers_by_its_mask() {
        let server = Server { ip: Ipv4Addr::new(10, 71, 0, 1), mask: Ipv4Addr::new(255, 255, 255, 0), router: false };
        assert!(server.on_subnet(Ipv4Addr::new(10, 71, 0, 200)));
        assert!(!server.on_subnet(Ipv4Addr::new(10, 71, 1, 200)));
        assert!(!server.on_subnet(Ipv4Addr::new(192, 168, 1, 5)));
    }

    #[test]
    fn a_discover_is_read_with_its_client_id_and_host_name() {
        let duid = [255, 0, 0, 0, 1, 0, 4, 0xde, 0xad, 0xbe, 0xef];
        let msg = client_message(
            DhcpMessageType::Discover,
            MAC,
            &[DhcpOption { kind: OPT_CLIENT_ID, data: &duid }, DhcpOption { kind: OPT_HOSTNAME, data: b"porch-cam" }],
        );
        let m = parse(&msg).unwrap();
        assert_eq!((m.kind, m.xid, m.mac), (DhcpMessageType::Discover, 0x1234_5678, MAC));
        assert_eq!(&m.client.0[..], &duid[..], "a DUID smoltcp passes over is the client's id");
        assert_eq!(m.hostname.as_deref(), Some("porch-cam"));
        // A host name past its ceiling, or not printable, is left out.
        let long = [b'a'; limits::CAMPORT_HOSTNAME_MAX_BYTES + 1];
        for name in [&long[..], &long[..limits::CAMPORT_HOSTNAME_MAX_BYTES], b"cam\x00"] {
            let msg = client_message(DhcpMessageType::Discover, MAC, &[DhcpOption { kind: OPT_HOSTNAME, data: name }]);
            let kept = parse(&msg).unwrap().hostname.is_some();
            assert_eq!(kept, name.len() == limits::CAMPORT_HOSTNAME_MAX_BYTES, "{name:?}");
        }
        // Without option 61, the MAC is the id.
        let m = parse(&client_message(DhcpMessageType::Discover, MAC, &[])).unwrap();
        assert_eq!(m.client, ClientId::of_mac(MAC));
        assert_eq!(m.client.shown(), "01:02:ca:fe:00:00:01");
    }

    #[test]
    fn hostile_messages_are_refused_with_what_is_wrong() {
        let good = client_message(DhcpMessageType::Request, MAC, &[]);
        let end = good.iter().rposition(|b| *b == END).unwrap();
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut m = good.clone();
            f(&mut m);
            parse(&m)
        };
        assert_eq!(parse(&good[..200]), Err(WireError::NotDhcp("shorter than its fixed fields")));
        assert_eq!(parse(&vec![0; limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES + 1]), Err(WireError::TooLong(1501)));
        assert_eq!(with(&|m| m[0] = 2), Err(WireError::NotDhcp("not a request (op 1)")));
        assert_eq!(with(&|m| m[24..28].copy_from_slice(&[10, 0, 0, 1])), Err(WireError::NotDhcp("relayed")));
        assert_eq!(with(&|m| m.truncate(end)), Err(WireError::Options("no end option")));
        // An option whose length runs past the end.
        assert_eq!(
            with(&|m| {
                m.truncate(end);
                m.extend_from_slice(&[OPT_HOSTNAME, 40, b'x']);
            }),
            Err(WireError::Options("an option runs past the message's end"))
        );
        assert_eq!(
            with(&|m| {
                m.truncate(end);
                m.extend_from_slice(&[OPT_MESSAGE_TYPE, 1, 1, END]);
            }),
            Err(WireError::Options("an option given twice, differently"))
        );
        assert_eq!(
            with(&|m| {
                m.truncate(end);
                m.extend_from_slice(&[OPT_OVERLOAD, 1, 3, END]);
            }),
            Err(WireError::Options("options overloaded into sname or file"))
        );
        let long_id = [1u8; limits::CAMPORT_CLIENT_ID_MAX_BYTES + 1];
        let m = client_message(DhcpMessageType::Discover, MAC, &[DhcpOption { kind: OPT_CLIENT_ID, data: &long_id }]);
        assert!(matches!(parse(&m), Err(WireError::Options(_))), "a client id past its ceiling");
        let at_ceiling = [1u8; limits::CAMPORT_CLIENT_ID_MAX_BYTES];
        let m =
            client_message(DhcpMessageType::Discover, MAC, &[DhcpOption { kind: OPT_CLIENT_ID, data: &at_ceiling }]);
        assert_eq!(parse(&m).unwrap().client.0.len(), limits::CAMPORT_CLIENT_ID_MAX_BYTES);
        // The same option twice with the same bytes is taken.
        assert!(
            with(&|m| {
                m.truncate(end);
                m.extend_from_slice(&[OPT_MESSAGE_TYPE, 1, 3, END]);
            })
            .is_ok()
        );
    }

    #[test]
    fn an_answer_carries_its_times_the_boxs_time_and_the_clients_id_and_goes_where_the_rfc_says() {
        let server = Server { ip: Ipv4Addr::new(10, 9, 0, 1), mask: Ipv4Addr::new(255, 255, 255, 0), router: false };
        let client = ClientId(heapless::Vec::from_slice(&[255, 1, 2, 3]).unwrap());
        let a = Answer {
            kind: DhcpMessageType::Offer,
            xid: 7,
            mac: MAC,
            client: Some(client.clone()),
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::new(10, 9, 0, 20),
            broadcast: false,
            lease_s: Some(3600),
        };
        let mut buf = [0u8; ANSWER_MAX_BYTES];
        let n = emit(&a, &server, &mut buf);
        assert!(n >= REPLY_MIN_BYTES);
        let packet = DhcpPacket::new_checked(&buf[..n]).unwrap();
        let back = DhcpRepr::parse(&packet).unwrap();
        assert_eq!(
            (back.message_type, back.your_ip, back.lease_duration),
            (DhcpMessageType::Offer, a.yiaddr, Some(3600))
        );
        assert_eq!((back.renew_duration, back.rebind_duration), (Some(1800), Some(3150)));
        assert_eq!(
            (back.server_identifier, back.subnet_mask, back.router, back.dns_servers),
            (Some(server.ip), Some(server.mask), None, None)
        );
        let option = |kind: u8| packet.options().find(|o| o.kind == kind).map(|o| o.data.to_vec());
        assert_eq!(option(OPT_NTP), Some(server.ip.octets().to_vec()), "the box is the cameras' time");
        assert_eq!(option(OPT_CLIENT_ID), Some(client.0.to_vec()));
        assert_eq!(a.destination(), Destination::Frame { mac: MAC, ip: a.yiaddr });
        // With the box as the router, it says so (and is the DNS too).
        let n = emit(&a, &Server { router: true, ..server }, &mut buf);
        let back_router = DhcpRepr::parse(&DhcpPacket::new_checked(&buf[..n]).unwrap()).unwrap().router;
        assert_eq!(back_router, Some(server.ip));
        // Where answers go.
        assert_eq!(Answer { broadcast: true, ..a.clone() }.destination(), Destination::Broadcast);
        assert_eq!(Answer { kind: DhcpMessageType::Nak, ..a.clone() }.destination(), Destination::Broadcast);
        let renewing = Answer { kind: DhcpMessageType::Ack, ciaddr: a.yiaddr, ..a.clone() };
        assert_eq!(renewing.destination(), Destination::Unicast(a.yiaddr));
        // A NAK says nothing of the subnet, and no times.
        let nak = Answer { kind: DhcpMessageType::Nak, yiaddr: Ipv4Addr::UNSPECIFIED, lease_s: None, ..a.clone() };
        let n = emit(&nak, &server, &mut buf);
        let packet = DhcpPacket::new_checked(&buf[..n]).unwrap();
        let back = DhcpRepr::parse(&packet).unwrap();
        assert_eq!((back.subnet_mask, back.lease_duration, back.renew_duration), (None, None, None));
        assert!(packet.options().all(|o| o.kind != OPT_NTP));
    }

    #[test]
    fn a_frame_to_a_client_without_an_address_reads_back_with_good_checksums() {
        let payload = [7u8; 300];
        let mut buf = [0u8; FRAME_MAX_BYTES];
        let server = ([2, 0, 0, 0, 0, 9], Ipv4Addr::new(10, 9, 0, 1));
        let to = (MAC, Ipv4Addr::new(10, 9, 0, 20));
        let len = frame(&payload, server, to, &mut buf);
        let caps = ChecksumCapabilities::default();
        let eth = EthernetFrame::new_checked(&buf[..len]).unwrap();
        assert_eq!((eth.dst_addr().0, eth.src_addr().0, eth.ethertype()), (MAC, server.0, EthernetProtocol::Ipv4));
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let ip_repr = Ipv4Repr::parse(&ip, &caps).unwrap();
        assert_eq!((ip_repr.src_addr, ip_repr.dst_addr), (server.1, to.1));
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        let udp_repr = UdpRepr::parse(&udp, &server.1.into(), &to.1.into(), &caps).unwrap();
        assert_eq!((udp_repr.src_port, udp_repr.dst_port), (67, 68));
        assert_eq!(udp.payload(), &payload[..]);
    }

    #[test]
    fn the_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("camport_dhcp", fuzz);
        assert!(n >= 2, "{n} inputs in the corpus");
    }
}
