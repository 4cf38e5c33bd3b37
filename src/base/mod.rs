//! The base layer every room builds on, and which imports none of them: files made durable
//! and disk space ([`fs`]).

pub mod fs;
