//! `[camera_port]`: a network of the box's own for cameras (a second NIC, or a PoE switch
//! behind one), served by the box's DHCP and SNTP servers (`crate::camport`).

use std::net::Ipv4Addr;

use serde::Deserialize;

use super::Invalid;
use crate::limits;

/// The camera port (`[camera_port]`), changed live: its servers start again with the new
/// settings; the leases stay in the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CameraPortConfig {
    /// The interface cameras are plugged into (`eth1`).
    pub interface: String,
    /// The box's address there, and the subnet's prefix length.
    pub address: Ipv4Addr,
    pub prefix: u8,
    /// First and last address given to cameras, inclusive.
    pub pool: (Ipv4Addr, Ipv4Addr),
    pub lease_time_s: u32,
    /// Whether the box tells cameras it is their router and DNS (it forwards nothing: a
    /// camera that insists on a gateway gets one that leads nowhere).
    pub router: bool,
    /// Whether the web face answers on the port too (for a laptop plugged in there).
    pub web: bool,
}

impl CameraPortConfig {
    pub fn mask(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::MAX << (32 - u32::from(self.prefix)))
    }

    /// The server's side of the wire, as `camport::dhcp` writes it.
    pub fn port(&self) -> crate::camport::serve::Port {
        crate::camport::serve::Port {
            interface: self.interface.clone(),
            server: crate::camport::dhcp::Server { ip: self.address, mask: self.mask(), router: self.router },
            pool: self.pool,
            lease_s: self.lease_time_s,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCameraPort {
    interface: String,
    /// `10.71.0.1/24`.
    address: String,
    /// `10.71.0.100-10.71.0.199`; unless given, from `.100` (or the address after the box's)
    /// to as many as [`limits::CAMPORT_LEASES_MAX`] allows within the subnet.
    pool: Option<String>,
    lease_time_s: Option<u32>,
    #[serde(default)]
    router: bool,
    #[serde(default)]
    web: bool,
}

/// The default lease: an hour (a camera renews at half of it).
pub const LEASE_TIME_DEFAULT_S: u32 = 3_600;
/// The shortest and the longest lease allowed.
pub const LEASE_TIME_MIN_S: u32 = 60;
pub const LEASE_TIME_MAX_S: u32 = 7 * 24 * 3_600;

/// A Linux interface name: 1 to 15 bytes of letters, digits, `.`, `-` and `_`.
fn interface_ok(name: &str) -> bool {
    (1..=15).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl RawCameraPort {
    pub fn validate(self) -> Result<CameraPortConfig, Invalid> {
        let at = |key: &str| format!("camera_port.{key}");
        let interface = self.interface.trim().to_string();
        if !interface_ok(&interface) {
            return Err((
                at("interface"),
                "an interface name (eth1): up to 15 letters, digits, '.', '-' or '_'".into(),
            ));
        }
        let (ip, prefix) = self
            .address
            .trim()
            .split_once('/')
            .and_then(|(ip, p)| Some((ip.parse::<Ipv4Addr>().ok()?, p.parse::<u8>().ok()?)))
            .ok_or_else(|| (at("address"), "the box's address and the subnet's size, as 10.71.0.1/24".into()))?;
        if !(16..=29).contains(&prefix) {
            return Err((at("address"), "a subnet of /16 to /29".into()));
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        let (net, bcast) = (u32::from(ip) & mask, u32::from(ip) | !mask);
        if !ip.is_private() {
            return Err((
                at("address"),
                "a private address (10.x, 172.16–31.x or 192.168.x): cameras stay off the internet".into(),
            ));
        }
        if u32::from(ip) == net || u32::from(ip) == bcast {
            return Err((at("address"), "the subnet's own address or its broadcast: take one between".into()));
        }
        let inside = |a: u32| a > net && a < bcast && a != u32::from(ip);
        let max = limits::CAMPORT_LEASES_MAX as u32;
        let pool = match self.pool {
            Some(text) => {
                let (a, b) = text
                    .trim()
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.trim().parse::<Ipv4Addr>().ok()?, b.trim().parse::<Ipv4Addr>().ok()?)))
                    .ok_or_else(|| (at("pool"), "the first and last address, as 10.71.0.100-10.71.0.199".into()))?;
                let (first, last) = (u32::from(a), u32::from(b));
                if first > last || !inside(first) || !inside(last) {
                    return Err((at("pool"), format!("addresses of {}/{prefix}, first to last", Ipv4Addr::from(net))));
                }
                if (first..=last).contains(&u32::from(ip)) {
                    return Err((at("pool"), format!("the box's own {ip} is in it")));
                }
                if last - first + 1 > max {
                    return Err((at("pool"), format!("at most {max} addresses (CAMPORT_LEASES_MAX)")));
                }
                (a, b)
            }
            None => {
                // From .100 when the subnet has room past it, else from the box's next.
                let from = if net + 100 < bcast && u32::from(ip) < net + 100 { net + 100 } else { u32::from(ip) + 1 };
                let to = (bcast - 1).min(from + max - 1);
                if from > to {
                    return Err((at("address"), "no room for cameras after the box's address in this subnet".into()));
                }
                (Ipv4Addr::from(from), Ipv4Addr::from(to))
            }
        };
        let lease_time_s = self.lease_time_s.unwrap_or(LEASE_TIME_DEFAULT_S);
        if !(LEASE_TIME_MIN_S..=LEASE_TIME_MAX_S).contains(&lease_time_s) {
            return Err((at("lease_time_s"), format!("{LEASE_TIME_MIN_S} s to {LEASE_TIME_MAX_S} s (a week)")));
        }
        Ok(CameraPortConfig { interface, address: ip, prefix, pool, lease_time_s, router: self.router, web: self.web })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<CameraPortConfig, Invalid> {
        toml::from_str::<RawCameraPort>(text).unwrap().validate()
    }

    #[test]
    fn a_port_takes_its_defaults_and_a_pool_of_its_own_subnet() {
        let c = read("interface = \"eth1\"\naddress = \"10.71.0.1/24\"").unwrap();
        assert_eq!(c.pool, (Ipv4Addr::new(10, 71, 0, 100), Ipv4Addr::new(10, 71, 0, 254)));
        assert_eq!((c.lease_time_s, c.router, c.web, c.mask()), (3_600, false, false, Ipv4Addr::new(255, 255, 255, 0)));
        // A large subnet: the pool stops at CAMPORT_LEASES_MAX addresses.
        let c = read("interface = \"eth1\"\naddress = \"10.71.0.1/16\"").unwrap();
        assert_eq!(c.pool, (Ipv4Addr::new(10, 71, 0, 100), Ipv4Addr::new(10, 71, 1, 99)));
        // A small one: after the box's address.
        let c = read("interface = \"eth1\"\naddress = \"192.168.9.1/29\"").unwrap();
        assert_eq!(c.pool, (Ipv4Addr::new(192, 168, 9, 2), Ipv4Addr::new(192, 168, 9, 6)));
        let c = read("interface = \"cam0\"\naddress = \"10.9.8.1/24\"\npool = \"10.9.8.10 - 10.9.8.17\"\nlease_time_s = 600\nrouter = true").unwrap();
        assert_eq!(
            (c.pool.0, c.pool.1, c.lease_time_s, c.router),
            (Ipv4Addr::new(10, 9, 8, 10), Ipv4Addr::new(10, 9, 8, 17), 600, true)
        );
    }

    #[test]
    fn a_bad_port_names_its_field() {
        let cases = [
            ("interface = \"\"\naddress = \"10.71.0.1/24\"", "camera_port.interface"),
            ("interface = \"a-name-far-too-long\"\naddress = \"10.71.0.1/24\"", "camera_port.interface"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1\"", "camera_port.address"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1/8\"", "camera_port.address"),
            ("interface = \"eth1\"\naddress = \"8.8.8.1/24\"", "camera_port.address"),
            ("interface = \"eth1\"\naddress = \"10.71.0.0/24\"", "camera_port.address"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1/24\"\npool = \"10.72.0.10-10.72.0.20\"", "camera_port.pool"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1/24\"\npool = \"10.71.0.20-10.71.0.10\"", "camera_port.pool"),
            ("interface = \"eth1\"\naddress = \"10.71.0.50/24\"\npool = \"10.71.0.40-10.71.0.60\"", "camera_port.pool"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1/16\"\npool = \"10.71.0.2-10.71.2.0\"", "camera_port.pool"),
            ("interface = \"eth1\"\naddress = \"10.71.0.1/24\"\nlease_time_s = 10", "camera_port.lease_time_s"),
        ];
        for (text, field) in cases {
            let e = read(text).expect_err(text);
            assert_eq!(e.0, field, "{text}: {e:?}");
        }
    }
}
