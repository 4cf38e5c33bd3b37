//! The camera port: a network of the box's own for cameras plugged into it (a second NIC, or
//! a PoE switch behind one). Cameras get their address from the box (DHCPv4, bound to that
//! interface only), their time from it (SNTP), and are found by it when they take a lease.
//!
//! Built in steps. Here so far:
//! - `dhcp`: the wire, with `smoltcp::wire`: a client's message read and checked, answers
//!   written, and the Ethernet frame that carries one to a client without an address yet;
//! - `leases`: the pool and its bindings, and what the server answers each message, with
//!   the rate each client may send at;
//! - `sntp`: the time, read and answered (RFC 4330);
//! - `serve`: the DHCP and SNTP servers on the interface (UDP sockets bound to the device, a
//!   packet socket for frames, ARP probes), the leases kept in the catalog
//!   (`catalog::camport`);
//! - `found`: a new lease is a new camera, asked over ONVIF and RTSP, shown as plugged in;
//! - `port`: the room, started from `[camera_port]` and again when it changes.

pub mod dhcp;
pub mod found;
pub mod leases;
pub mod port;
pub mod serve;
pub mod sntp;
