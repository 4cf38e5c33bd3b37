//! The base layer every room builds on, and which imports none of them: files made durable
//! and disk space ([`fs`]), the key every room names a stream by ([`stream`]), and the byte
//! pools shared buffers take their memory from ([`pool`]).

pub mod fs;
pub mod pool;
pub mod stream;
#[cfg(test)]
pub mod testing;

pub use pool::{BytePool, Charge};
pub use stream::{StreamKey, StreamKind};
