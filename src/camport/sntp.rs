//! SNTP on the camera port (RFC 4330): cameras without the internet ask the box the time, so
//! their clocks (and the timestamps they put on their streams, which feed the clock model)
//! stay right. A client's request is read and checked; the answer carries the box's clock,
//! with the client's transmit time echoed so it can measure the round trip.
//!
//! While the box's own clock is not yet sane (no RTC, no NTP yet: before the build date), it
//! answers "not synchronized" (leap indicator 3, stratum 16), which clients ignore, rather
//! than hand cameras a wrong time.

use crate::limits;

/// Seconds from 1900 (NTP's era 0) to 1970.
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;
/// The stratum the box gives when its clock is sane: a local clock, a few hops from a
/// reference, so a camera with a better server keeps that one.
const STRATUM: u8 = 8;
const MODE_CLIENT: u8 = 3;
const MODE_SERVER: u8 = 4;
/// An NTP header: what a request must have.
pub const HEADER_BYTES: usize = 48;

/// Why a datagram is not a request this server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SntpError {
    #[error("{0} bytes: an NTP request has {HEADER_BYTES} to {max}", max = limits::CAMPORT_SNTP_MESSAGE_MAX_BYTES)]
    Length(usize),
    #[error("mode {0}: only a client's (3) is answered")]
    Mode(u8),
    #[error("version {0}: versions 1 to 4 are answered")]
    Version(u8),
}

/// A client's request, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub version: u8,
    /// The client's transmit time (NTP format), echoed as the answer's originate time.
    pub transmit: u64,
}

/// Reads a client's request (a header, perhaps with extension fields or a MAC after it).
pub fn parse(buf: &[u8]) -> Result<Request, SntpError> {
    if !(HEADER_BYTES..=limits::CAMPORT_SNTP_MESSAGE_MAX_BYTES).contains(&buf.len()) {
        return Err(SntpError::Length(buf.len()));
    }
    let (version, mode) = ((buf[0] >> 3) & 7, buf[0] & 7);
    if mode != MODE_CLIENT {
        return Err(SntpError::Mode(mode));
    }
    if !(1..=4).contains(&version) {
        return Err(SntpError::Version(version));
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&buf[40..48]);
    Ok(Request { version, transmit: u64::from_be_bytes(t) })
}

/// `unix_us` (UTC µs) as an NTP timestamp: seconds since 1900 and a 32-bit fraction. Times
/// before 1970 are not the box's: they come out as 1970.
pub fn ntp_time(unix_us: i64) -> u64 {
    let us = u64::try_from(unix_us).unwrap_or(0);
    let (s, frac_us) = (us / 1_000_000 + NTP_UNIX_OFFSET_S, us % 1_000_000);
    // Era 0 ends in 2036: the seconds wrap there, as RFC 4330 says clients expect.
    ((s & 0xFFFF_FFFF) << 32) | ((frac_us << 32) / 1_000_000)
}

/// The answer to `r`, received at `received_us` and sent at `sent_us` (UTC µs), from a box
/// whose clock is `synced` (sane) or not.
pub fn answer(r: &Request, received_us: i64, sent_us: i64, synced: bool) -> [u8; HEADER_BYTES] {
    let mut out = [0u8; HEADER_BYTES];
    let leap = if synced { 0 } else { 3 };
    out[0] = (leap << 6) | (r.version << 3) | MODE_SERVER;
    out[1] = if synced { STRATUM } else { 16 };
    // Poll: the client's interval, 2^6 s as a hint; precision: 2^-20 s (about 1 µs).
    out[2] = 6;
    out[3] = (-20i8) as u8;
    // Root delay 0; root dispersion: 10 ms (16.16 fixed point).
    out[8..12].copy_from_slice(&(((10u32) << 16) / 1000).to_be_bytes());
    out[12..16].copy_from_slice(b"LOCL");
    out[16..24].copy_from_slice(&ntp_time(received_us).to_be_bytes());
    out[24..32].copy_from_slice(&r.transmit.to_be_bytes());
    out[32..40].copy_from_slice(&ntp_time(received_us).to_be_bytes());
    out[40..48].copy_from_slice(&ntp_time(sent_us).to_be_bytes());
    out
}

/// The fuzz target's harness (`fuzz/fuzz_targets/camport_sntp.rs`): any datagram is read or
/// refused, never a panic; an answer to a request read echoes its time and says mode 4.
pub fn fuzz(data: &[u8]) {
    if let Ok(r) = parse(data) {
        let a = answer(&r, 1_796_464_800_000_000, 1_796_464_800_000_100, true);
        assert_eq!(a[0] & 7, MODE_SERVER);
        assert_eq!(u64::from_be_bytes(a[24..32].try_into().expect("8 bytes")), r.transmit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: u8, mode: u8, transmit: u64) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES];
        b[0] = (version << 3) | mode;
        b[40..48].copy_from_slice(&transmit.to_be_bytes());
        b
    }

    #[test]
    fn a_request_is_answered_with_the_boxs_time_and_its_own_time_echoed() {
        let r = parse(&request(4, MODE_CLIENT, 0x1234_5678_9abc_def0)).unwrap();
        // 2026-12-06T00:00:00.5Z
        let at = 1_796_515_200_500_000;
        let a = answer(&r, at, at + 200, true);
        assert_eq!((a[0] >> 6, (a[0] >> 3) & 7, a[0] & 7, a[1]), (0, 4, MODE_SERVER, STRATUM));
        assert_eq!(u64::from_be_bytes(a[24..32].try_into().unwrap()), 0x1234_5678_9abc_def0);
        let t = u64::from_be_bytes(a[32..40].try_into().unwrap());
        assert_eq!(t >> 32, 1_796_515_200 + NTP_UNIX_OFFSET_S);
        assert_eq!(t & 0xFFFF_FFFF, 1 << 31, "half a second");
        assert!(u64::from_be_bytes(a[40..48].try_into().unwrap()) > t, "sent after it was received");
        // Unsynchronized: clients are told to pass over it.
        let a = answer(&r, at, at, false);
        assert_eq!((a[0] >> 6, a[1]), (3, 16));
    }

    #[test]
    fn what_is_not_a_clients_request_is_refused() {
        assert_eq!(parse(&request(4, 4, 1)), Err(SntpError::Mode(4)));
        assert_eq!(parse(&request(0, MODE_CLIENT, 1)), Err(SntpError::Version(0)));
        assert_eq!(parse(&request(4, MODE_CLIENT, 1)[..47]), Err(SntpError::Length(47)));
        let long = vec![0x23u8; limits::CAMPORT_SNTP_MESSAGE_MAX_BYTES + 1];
        assert!(matches!(parse(&long), Err(SntpError::Length(_))));
        let mut with_mac = request(3, MODE_CLIENT, 9);
        with_mac.resize(limits::CAMPORT_SNTP_MESSAGE_MAX_BYTES, 0);
        assert_eq!(parse(&with_mac).map(|r| r.version), Ok(3), "extension fields or a MAC after the header");
    }

    #[test]
    fn the_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("camport_sntp", fuzz);
        assert!(n >= 1, "{n} inputs in the corpus");
    }
}
