//! The base layer every room builds on, and which imports none of them: files made durable
//! and disk space ([`fs`]), and the key every room names a stream by ([`stream`]).

pub mod fs;
pub mod stream;

pub use stream::{StreamKey, StreamKind};
