//! ONVIF, the part an NVR's setup needs: cameras found on the LAN by WS-Discovery
//! ([`discovery`]), then, with the camera's credentials, its clock, model, media profiles and
//! their RTSP addresses read over SOAP ([`device`]). Hand-written on `roxmltree` and the
//! HTTP client already in the tree: the Rust ONVIF clients bring a second HTTP and TLS stack
//! (reqwest) for five requests, and none bounds what it reads.
//!
//! Every answer is read with a ceiling on its bytes, its XML nodes and its time
//! (`limits::ONVIF_*`, `limits::DISCOVERY_*`), and by namespace, never by prefix.

pub mod device;
pub mod discovery;
pub mod events;
pub mod soap;
pub mod subscribe;
pub mod xml;

/// Why a camera's streams could not be read over ONVIF, in words a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("nothing answers at that address and port: {0}")]
    Unreachable(String),
    #[error("the camera refused the connection: {0}")]
    Refused(String),
    #[error("the camera did not answer {0} in time")]
    Timeout(&'static str),
    #[error("the camera refused the user name and password")]
    Credentials,
    #[error("what answers there does not speak ONVIF: {0}")]
    NotOnvif(String),
    #[error("the camera answered {0} with an error: {1}")]
    Device(&'static str, String),
    #[error("the camera has no H.264 or H.265 stream over ONVIF: {0}")]
    NoStream(String),
}

impl Failure {
    /// A stable code for the UI.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::Unreachable(_) => "unreachable",
            Failure::Refused(_) => "refused",
            Failure::Timeout(_) => "timeout",
            Failure::Credentials => "wrong_credentials",
            Failure::NotOnvif(_) => "not_onvif",
            Failure::Device(..) => "device_fault",
            Failure::NoStream(_) => "no_stream",
        }
    }

    /// The field of the form it is about.
    pub fn field(&self) -> &'static str {
        match self {
            Failure::Credentials => "password",
            _ => "address",
        }
    }
}
