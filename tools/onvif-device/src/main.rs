//! `onvif-device ADDRESS PORT USER PASSWORD NAME`: serves oxvif's mock ONVIF device on
//! ADDRESS:PORT, WS-Security digests enforced for USER/PASSWORD, answering WS-Discovery
//! probes as a NetworkVideoTransmitter named NAME. Prints `ready URL` once it listens;
//! stops on SIGTERM.

use std::net::Ipv4Addr;

use oxvif::mock::{DeviceState, MockServer};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, port, user, password, name] = args.as_slice() else {
        eprintln!("usage: onvif-device ADDRESS PORT USER PASSWORD NAME");
        std::process::exit(2);
    };
    let address: Ipv4Addr = address.parse().expect("ADDRESS is an IPv4 address");
    let mut state = DeviceState::default();
    state.users.retain(|u| u.level == "Administrator");
    let admin = state.users.first_mut().expect("the mock device has an administrator");
    admin.username = user.clone();
    admin.password = password.clone();
    let scopes = vec![
        "onvif://www.onvif.org/type/video_encoder".to_string(),
        format!("onvif://www.onvif.org/name/{name}"),
        "onvif://www.onvif.org/hardware/MockCam-4K".to_string(),
        "onvif://www.onvif.org/location/country/nowhere".to_string(),
    ];
    let server = MockServer::builder()
        .bind_ip(address)
        .port(port.parse().expect("PORT is a number"))
        .initial_state(state)
        .enforce_auth(true)
        .discoverable(scopes)
        .start()
        .await
        .expect("the mock device starts");
    println!("ready {}", server.device_url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
