//! The network as init leaves it for keeppeek: no forwarding between interfaces (the camera
//! port's cameras never reach the LAN or the internet through the box), and the camera
//! port, when the config names one, up with the box's address there before keeppeek starts
//! (keeppeek follows later changes of it itself).

use std::path::Path;

use tracing::{error, info};

/// Turns IPv4 forwarding off and brings the camera port of the config at `config` up.
pub(super) fn prepare(config: &Path) {
    if let Err(e) = std::fs::write("/proc/sys/net/ipv4/ip_forward", "0") {
        error!(error = %e, "IPv4 forwarding could not be turned off");
    }
    // A config that does not read is the supervisor's to report; the port waits for it.
    let Ok(c) = crate::config::Config::load(config) else { return };
    let Some(port) = c.camera_port else { return };
    match crate::camport::port::address_on(&port.interface, port.address, port.prefix, None) {
        Ok(()) => info!(interface = port.interface, address = %port.address, "camera port up"),
        Err(why) => error!(interface = port.interface, problem = why, "camera port not up: keeppeek tries again"),
    }
}
