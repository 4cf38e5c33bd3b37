//! How every room names a camera's stream: a [`StreamKey`], the camera's name and which of
//! its streams. The catalog, the recorder, live view, events and the routes all key by it;
//! its one spelling as text (`camera/kind`, [`StreamKey::name`]) is what the catalog stores,
//! what URLs carry and what the logs print.

use std::fmt;
use std::sync::Arc;

/// Which of a camera's streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKind {
    Main,
    Sub,
}

impl StreamKind {
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Main => "main",
            StreamKind::Sub => "sub",
        }
    }

    /// The kind a path or a catalog name spells, if any.
    pub fn parse(name: &str) -> Option<StreamKind> {
        match name {
            "main" => Some(StreamKind::Main),
            "sub" => Some(StreamKind::Sub),
            _ => None,
        }
    }
}

/// One stream of one camera. Cloning it is a reference count: live view carries it with
/// every frame it taps.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    pub camera: Arc<str>,
    pub kind: StreamKind,
}

impl StreamKey {
    pub fn new(camera: &str, kind: StreamKind) -> StreamKey {
        StreamKey { camera: camera.into(), kind }
    }

    /// `camera/kind`: the catalog's name of the stream and its path in URLs.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The key a `camera/kind` name spells (a camera's name is not empty and has no `/`).
    pub fn parse(name: &str) -> Option<StreamKey> {
        let (camera, kind) = name.rsplit_once('/')?;
        if camera.is_empty() {
            return None;
        }
        Some(StreamKey::new(camera, StreamKind::parse(kind)?))
    }

    /// Whether this is one of `camera`'s streams.
    pub fn of(&self, camera: &str) -> bool {
        &*self.camera == camera
    }
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.camera, self.kind.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_from_its_name() {
        let key = StreamKey::new("front-door", StreamKind::Sub);
        assert_eq!(key.name(), "front-door/sub");
        assert_eq!(StreamKey::parse(&key.name()), Some(key));
        assert_eq!(StreamKey::parse("front/main"), Some(StreamKey::new("front", StreamKind::Main)));
        for bad in ["front", "front/third", "/main", ""] {
            assert_eq!(StreamKey::parse(bad), None, "{bad}");
        }
    }
}
