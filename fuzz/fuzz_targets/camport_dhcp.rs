//! Any datagram on the camera port's DHCP server port reaches `camport::dhcp::parse`: read
//! and checked or refused, never a panic; a message read is answered, and the answer and its
//! frame read back (`keeppeek::camport::dhcp::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keeppeek::camport::dhcp::fuzz(data));
