//! One connection to the broker: TCP, or TLS with rustls (the process's aws-lc-rs provider,
//! Mozilla's roots and the CA the admin gives), MQTT 3.1.1 packets read and written with
//! rumqttc's codec under [`limits::MQTT_PACKET_MAX_BYTES`] each way.
//!
//! rumqttc's own event loop is not used: its queue of unacknowledged publishes lives in
//! memory and its packet ids are its own, where the box must deliver from a durable outbox
//! in order and know which outbox row each acknowledgement answers; and its TLS feature
//! compiles in a second crypto provider. Its codec (`rumqttc::mqttbytes::v4`, with default
//! features off: no TLS, no sockets) is the part used.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rumqttc::mqttbytes::v4::{ConnAck, Connect, LastWill, Login, Packet};
use rumqttc::mqttbytes::{Error as CodecError, QoS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::limits;

/// Why a connection failed or ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("cannot reach the broker: {0}")]
    Unreachable(String),
    #[error("TLS with the broker failed: {0}")]
    Tls(String),
    #[error("the broker refused the connection: {0}")]
    Refused(String),
    #[error("the broker sent a packet KeepPeek cannot read: {0}")]
    Protocol(String),
    #[error("the broker did not answer within {0} ms")]
    Timeout(u64),
    #[error("the broker closed the connection")]
    Closed,
    #[error("the connection broke: {0}")]
    Io(String),
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Dial {
    pub host: String,
    pub port: u16,
    /// TLS, with whom the box trusts.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub client_id: String,
    pub login: Option<(String, String)>,
    /// The retained "offline" the broker publishes when the box goes without a word.
    pub will_topic: String,
    pub keep_alive_s: u16,
}

/// The byte stream under a connection.
pub trait Wire: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Wire for T {}

/// An open MQTT connection: packets in and out.
pub struct Link {
    wire: Box<dyn Wire>,
    inbound: BytesMut,
    outbound: BytesMut,
}

fn io(e: std::io::Error) -> LinkError {
    LinkError::Io(e.to_string())
}

impl Link {
    /// Connects, sends CONNECT (a clean session, the will) and waits for CONNACK, all within
    /// [`limits::MQTT_CONNECT_TIMEOUT_MS`].
    pub async fn open(dial: &Dial) -> Result<Link, LinkError> {
        let ms = limits::MQTT_CONNECT_TIMEOUT_MS;
        match tokio::time::timeout(Duration::from_millis(ms), Link::open_inner(dial)).await {
            Ok(r) => r,
            Err(_) => Err(LinkError::Timeout(ms)),
        }
    }

    async fn open_inner(dial: &Dial) -> Result<Link, LinkError> {
        let tcp = TcpStream::connect((dial.host.as_str(), dial.port))
            .await
            .map_err(|e| LinkError::Unreachable(format!("{}:{}: {e}", dial.host, dial.port)))?;
        let _ = tcp.set_nodelay(true);
        let wire: Box<dyn Wire> = match &dial.tls {
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(dial.host.clone())
                    .map_err(|e| LinkError::Tls(e.to_string()))?;
                let stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| LinkError::Tls(e.to_string()))?;
                Box::new(stream)
            }
            None => Box::new(tcp),
        };
        let mut link = Link { wire, inbound: BytesMut::with_capacity(4096), outbound: BytesMut::with_capacity(4096) };
        let mut connect = Connect::new(dial.client_id.clone());
        connect.keep_alive = dial.keep_alive_s;
        connect.clean_session = true;
        connect.last_will = Some(LastWill::new(dial.will_topic.clone(), "offline", QoS::AtLeastOnce, true));
        connect.login = dial.login.as_ref().map(|(u, p)| Login::new(u.clone(), p.clone()));
        link.send(&Packet::Connect(connect)).await?;
        match link.next().await? {
            Packet::ConnAck(ConnAck { code: rumqttc::mqttbytes::v4::ConnectReturnCode::Success, .. }) => Ok(link),
            Packet::ConnAck(ConnAck { code, .. }) => Err(LinkError::Refused(refusal(code))),
            other => Err(LinkError::Protocol(format!("{other:?} before CONNACK").chars().take(120).collect())),
        }
    }

    /// A link over `wire`, its CONNECT already answered (the tests' in-memory brokers).
    #[cfg(test)]
    pub(crate) fn over(wire: Box<dyn Wire>) -> Link {
        Link { wire, inbound: BytesMut::new(), outbound: BytesMut::new() }
    }

    /// Queues `packet` to be written (see [`Link::flush`]).
    pub fn queue(&mut self, packet: &Packet) -> Result<(), LinkError> {
        packet
            .write(&mut self.outbound, limits::MQTT_PACKET_MAX_BYTES)
            .map(|_| ())
            .map_err(|e| LinkError::Protocol(e.to_string()))
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.outbound.len()
    }

    /// Writes what is queued, within [`limits::MQTT_WRITE_TIMEOUT_MS`].
    pub async fn flush(&mut self) -> Result<(), LinkError> {
        if self.outbound.is_empty() {
            return Ok(());
        }
        let ms = limits::MQTT_WRITE_TIMEOUT_MS;
        let write = async {
            self.wire.write_all(&self.outbound).await.map_err(io)?;
            self.wire.flush().await.map_err(io)
        };
        match tokio::time::timeout(Duration::from_millis(ms), write).await {
            Ok(r) => r?,
            Err(_) => return Err(LinkError::Timeout(ms)),
        }
        self.outbound.clear();
        if self.outbound.capacity() > 64 << 10 {
            // A large snapshot went: its buffer goes too.
            self.outbound = BytesMut::with_capacity(4096);
        }
        Ok(())
    }

    /// Queues and writes one packet.
    pub async fn send(&mut self, packet: &Packet) -> Result<(), LinkError> {
        self.queue(packet)?;
        self.flush().await
    }

    /// The next packet from the broker. Cancel-safe: bytes read stay in the buffer.
    pub async fn next(&mut self) -> Result<Packet, LinkError> {
        loop {
            if let Some(p) = take_packet(&mut self.inbound)? {
                return Ok(p);
            }
            self.inbound.reserve(4096);
            let n = self.wire.read_buf(&mut self.inbound).await.map_err(io)?;
            if n == 0 {
                return Err(LinkError::Closed);
            }
        }
    }
}

/// One whole packet from the front of `buf`, if it holds one: at most
/// [`limits::MQTT_PACKET_MAX_BYTES`], or the connection is given up.
pub fn take_packet(buf: &mut BytesMut) -> Result<Option<Packet>, LinkError> {
    match Packet::read(buf, limits::MQTT_PACKET_MAX_BYTES) {
        Ok(p) => Ok(Some(p)),
        Err(CodecError::InsufficientBytes(_)) => Ok(None),
        Err(e) => Err(LinkError::Protocol(e.to_string())),
    }
}

fn refusal(code: rumqttc::mqttbytes::v4::ConnectReturnCode) -> String {
    use rumqttc::mqttbytes::v4::ConnectReturnCode as C;
    match code {
        C::RefusedProtocolVersion => "it does not speak MQTT 3.1.1".into(),
        C::BadClientId => "it refused the client id".into(),
        C::ServiceUnavailable => "it is unavailable".into(),
        C::BadUserNamePassword => "wrong user name or password".into(),
        C::NotAuthorized => "not authorized".into(),
        C::Success => "success".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_is_taken_whole_waited_for_in_part_and_refused_past_the_ceiling() {
        let mut whole = BytesMut::new();
        Packet::PingResp.write(&mut whole, 16).unwrap();
        Packet::PubAck(rumqttc::mqttbytes::v4::PubAck::new(7)).write(&mut whole, 16).unwrap();
        assert_eq!(take_packet(&mut whole).unwrap(), Some(Packet::PingResp));
        assert!(matches!(take_packet(&mut whole).unwrap(), Some(Packet::PubAck(a)) if a.pkid == 7));
        assert_eq!(take_packet(&mut whole).unwrap(), None);
        // A PUBLISH whose remaining length says one byte past the ceiling: refused before it
        // is read (four bytes of length, then nothing).
        let len = limits::MQTT_PACKET_MAX_BYTES + 1;
        let mut head = BytesMut::from(&[0x30][..]);
        let mut x = len;
        loop {
            let mut b = (x % 128) as u8;
            x /= 128;
            if x > 0 {
                b |= 0x80;
            }
            head.extend_from_slice(&[b]);
            if x == 0 {
                break;
            }
        }
        assert!(matches!(take_packet(&mut head), Err(LinkError::Protocol(_))));
        // Half a packet waits for the rest.
        let mut half = BytesMut::from(&[0x90, 0x03, 0x00][..]);
        assert_eq!(take_packet(&mut half).unwrap(), None);
    }

    /// A broker that stops reading: a write gives up at its timeout (on tokio's paused
    /// clock).
    #[tokio::test(start_paused = true)]
    async fn a_broker_that_stops_reading_is_given_up_on_at_the_write_timeout() {
        let (ours, _broker) = tokio::io::duplex(1024);
        let mut link = Link::over(Box::new(ours));
        let mut p = rumqttc::mqttbytes::v4::Publish::new("k/events", QoS::AtLeastOnce, vec![7u8; 4096]);
        p.pkid = 1;
        link.queue(&Packet::Publish(p)).unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(link.flush().await, Err(LinkError::Timeout(limits::MQTT_WRITE_TIMEOUT_MS)));
        assert_eq!(started.elapsed(), Duration::from_millis(limits::MQTT_WRITE_TIMEOUT_MS));
    }

    /// A broker that takes the connection and never answers: the connect gives up at its
    /// timeout (on tokio's paused clock).
    #[tokio::test(start_paused = true)]
    async fn a_broker_that_never_acknowledges_the_connect_is_given_up_on() {
        let port = crate::base::testing::silent_peer().await;
        let dial = Dial {
            host: "127.0.0.1".into(),
            port,
            tls: None,
            client_id: "t".into(),
            login: None,
            will_topic: "k/available".into(),
            keep_alive_s: 30,
        };
        let started = tokio::time::Instant::now();
        assert_eq!(Link::open(&dial).await.err(), Some(LinkError::Timeout(limits::MQTT_CONNECT_TIMEOUT_MS)));
        assert!(started.elapsed() >= Duration::from_millis(limits::MQTT_CONNECT_TIMEOUT_MS));
    }
}
