//! `[archive.<id>]`: the S3-compatible buckets recordings are archived to.

use serde::Deserialize;

use super::{Invalid, RawBytes};
use crate::archive::s3::Place;
use crate::limits;

/// Which of a camera's streams a target archives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    Main,
    Sub,
    Both,
}

impl Streams {
    pub fn name(self) -> &'static str {
        match self {
            Streams::Main => "main",
            Streams::Sub => "sub",
            Streams::Both => "both",
        }
    }
}

/// An archive target (`[archive.<id>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveTarget {
    /// Its name in the config, the API and the catalog: lower-case letters, digits and `-`.
    pub id: String,
    pub place: Place,
    /// Every key the box writes starts with it: one prefix a box, so many share a bucket (the
    /// box's host name unless given).
    pub prefix: String,
    /// The most the uploads may send, kbit/s; none: as fast as the link goes.
    pub max_kbit_s: Option<u32>,
    /// The cameras archived; none named: all.
    pub cameras: Vec<String>,
    pub streams: Streams,
    /// Only footage an event holds, rather than everything recorded.
    pub events_only: bool,
    /// Archived footage older than this many days is deleted from the bucket; none: kept.
    pub keep_days: Option<u32>,
    /// Local retention waits for footage to be archived before it deletes it…
    pub before_delete: bool,
    /// …until this many bytes wait, when the oldest goes anyway (counted and shown).
    pub backlog_max_bytes: u64,
}

/// The backlog local retention waits for, unless `backlog_max` is given.
pub const BACKLOG_MAX_BYTES_DEFAULT: u64 = 16 << 30;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArchive {
    endpoint: String,
    region: Option<String>,
    bucket: String,
    prefix: Option<String>,
    access_key: String,
    secret_key: String,
    #[serde(default = "yes")]
    path_style: bool,
    ca_pem: Option<String>,
    max_kbit_s: Option<u32>,
    #[serde(default)]
    cameras: Vec<String>,
    streams: Option<String>,
    what: Option<String>,
    keep_days: Option<u32>,
    #[serde(default)]
    before_delete: bool,
    backlog_max: Option<RawBytes>,
}

fn yes() -> bool {
    true
}

/// A key prefix: levels of letters, digits, `-`, `_` and `.` joined by `/`.
pub(crate) fn prefix_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= limits::ARCHIVE_FIELD_MAX_BYTES
        && p.split('/').count() <= limits::ARCHIVE_PREFIX_LEVELS_MAX
        && p.split('/').all(|level| {
            !level.is_empty()
                && level != "."
                && level != ".."
                && level.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        })
}

/// S3's bucket names: 3 to 63 lower-case letters, digits, `-` and `.`.
fn bucket_ok(b: &str) -> bool {
    (3..=63).contains(&b.len())
        && b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && !b.starts_with(['-', '.'])
}

impl RawArchive {
    /// Checks target `id`; `cameras` are the names of the config's cameras.
    pub fn validate(self, id: String, cameras: &[&str]) -> Result<ArchiveTarget, Invalid> {
        let at = |key: &str| format!("archive.{id}.{key}");
        let id_ok = !id.is_empty()
            && id.len() <= 32
            && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !id_ok {
            return Err((
                format!("archive.{id}"),
                "a target's id is 1 to 32 lower-case letters, digits and '-'".into(),
            ));
        }
        for (key, v) in [
            ("endpoint", &self.endpoint),
            ("bucket", &self.bucket),
            ("access_key", &self.access_key),
            ("secret_key", &self.secret_key),
        ]
        .into_iter()
        .chain(self.region.as_ref().map(|r| ("region", r)))
        {
            if v.len() > limits::ARCHIVE_FIELD_MAX_BYTES {
                return Err((
                    at(key),
                    format!("at most {} bytes (ARCHIVE_FIELD_MAX_BYTES)", limits::ARCHIVE_FIELD_MAX_BYTES),
                ));
            }
            if v.trim().is_empty() {
                return Err((at(key), "must not be empty".into()));
            }
        }
        let endpoint =
            url::Url::parse(self.endpoint.trim()).map_err(|e| (at("endpoint"), format!("not an address: {e}")))?;
        let bare = matches!(endpoint.path(), "" | "/")
            && endpoint.query().is_none()
            && endpoint.username().is_empty()
            && endpoint.password().is_none();
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host().is_none() || !bare {
            return Err((at("endpoint"), "an http:// or https:// address of the server, with no path".into()));
        }
        let region_ok = |r: &str| r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if self.region.as_deref().is_some_and(|r| !region_ok(r.trim())) {
            return Err((at("region"), "lower-case letters, digits and '-', such as eu-west-1".into()));
        }
        if !bucket_ok(&self.bucket) {
            return Err((at("bucket"), "3 to 63 lower-case letters, digits, '-' and '.'".into()));
        }
        if let Some(ca) = &self.ca_pem {
            if ca.len() > limits::TLS_UPLOAD_MAX_BYTES {
                return Err((at("ca_pem"), format!("at most {} KiB", limits::TLS_UPLOAD_MAX_BYTES >> 10)));
            }
            if endpoint.scheme() != "https" {
                return Err((at("ca_pem"), "a CA is for a server over https".into()));
            }
            crate::oidc::fetch::trust(Some(ca)).map_err(|e| (at("ca_pem"), e))?;
        }
        let prefix = match self.prefix {
            Some(p) => p.trim_matches('/').to_string(),
            None => crate::tls::host_name(),
        };
        if !prefix_ok(&prefix) {
            return Err((at("prefix"), "letters, digits, '-', '_' and '.', levels joined by '/'".into()));
        }
        for c in &self.cameras {
            if !cameras.contains(&c.as_str()) {
                return Err((at("cameras"), format!("\"{c}\" is not one of the cameras")));
            }
        }
        let streams = match self.streams.as_deref().unwrap_or("main") {
            "main" => Streams::Main,
            "sub" => Streams::Sub,
            "both" => Streams::Both,
            other => return Err((at("streams"), format!("\"{other}\": main, sub or both"))),
        };
        let events_only = match self.what.as_deref().unwrap_or("all") {
            "all" => false,
            "events" => true,
            other => return Err((at("what"), format!("\"{other}\": all or events"))),
        };
        if self.max_kbit_s == Some(0) {
            return Err((at("max_kbit_s"), "leave it out for no cap".into()));
        }
        if self.keep_days == Some(0) {
            return Err((at("keep_days"), "leave it out to keep archived footage".into()));
        }
        let backlog_max_bytes = match &self.backlog_max {
            Some(b) => b.resolve(&at("backlog_max"))?,
            None => BACKLOG_MAX_BYTES_DEFAULT,
        };
        Ok(ArchiveTarget {
            place: Place {
                endpoint,
                region: self.region.map(|r| r.trim().to_string()).unwrap_or_else(|| "us-east-1".into()),
                bucket: self.bucket,
                path_style: self.path_style,
                access_key: self.access_key,
                secret_key: self.secret_key,
                ca_pem: self.ca_pem.filter(|c| !c.trim().is_empty()),
            },
            id,
            prefix,
            max_kbit_s: self.max_kbit_s,
            cameras: self.cameras,
            streams,
            events_only,
            keep_days: self.keep_days,
            before_delete: self.before_delete,
            backlog_max_bytes,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid target named `id`, with the defaults.
    pub(crate) fn target(id: &str) -> ArchiveTarget {
        let r: RawArchive = toml::from_str(BASE).unwrap();
        r.validate(id.into(), &[]).unwrap()
    }

    const BASE: &str =
        "endpoint = \"https://s3.example\"\nbucket = \"nvr\"\naccess_key = \"ak\"\nsecret_key = \"sk\"\n";

    fn raw(extra: &str) -> Result<ArchiveTarget, Invalid> {
        let r: RawArchive = toml::from_str(&format!("{BASE}{extra}")).unwrap();
        r.validate("off".into(), &["porch", "yard"])
    }

    #[test]
    fn defaults_and_refusals_name_their_field() {
        let t = raw("").unwrap();
        assert_eq!((t.place.region.as_str(), t.place.path_style, t.streams), ("us-east-1", true, Streams::Main));
        assert_eq!((t.events_only, t.before_delete, t.backlog_max_bytes), (false, false, BACKLOG_MAX_BYTES_DEFAULT));
        assert!(!t.prefix.is_empty());
        let t = raw("prefix = \"/site/house-1/\"\ncameras = [\"porch\"]\nstreams = \"both\"\nwhat = \"events\"\nbacklog_max = \"2 GiB\"").unwrap();
        assert_eq!(
            (t.prefix.as_str(), t.cameras.as_slice(), t.streams),
            ("site/house-1", &["porch".to_string()][..], Streams::Both)
        );
        assert_eq!((t.events_only, t.backlog_max_bytes), (true, 2 << 30));
        assert!(!format!("{t:?}").contains("sk"), "the secret is not in the debug form");
        for (extra, field) in [
            ("prefix = \"a/../b\"", "archive.off.prefix"),
            ("prefix = \"a/b/c/d/e\"", "archive.off.prefix"),
            ("cameras = [\"gate\"]", "archive.off.cameras"),
            ("streams = \"all\"", "archive.off.streams"),
            ("what = \"some\"", "archive.off.what"),
            ("max_kbit_s = 0", "archive.off.max_kbit_s"),
            ("keep_days = 0", "archive.off.keep_days"),
            ("ca_pem = \"junk\"", "archive.off.ca_pem"),
            ("backlog_max = \"lots\"", "archive.off.backlog_max"),
            ("region = \"eu/west\"", "archive.off.region"),
        ] {
            assert_eq!(raw(extra).unwrap_err().0, field, "{extra}");
        }
        let with = |endpoint: &str, bucket: &str| {
            let r: RawArchive = toml::from_str(&format!(
                "endpoint = \"{endpoint}\"\nbucket = \"{bucket}\"\naccess_key = \"ak\"\nsecret_key = \"sk\"\n"
            ))
            .unwrap();
            r.validate("off".into(), &[]).map_err(|e| e.0)
        };
        assert_eq!(with("ftp://s3.example", "nvr").unwrap_err(), "archive.off.endpoint");
        assert_eq!(with("https://:hunter2@s3.example", "nvr").unwrap_err(), "archive.off.endpoint", "no secret in it");
        assert_eq!(with("https://s3.example/path", "nvr").unwrap_err(), "archive.off.endpoint");
        assert_eq!(with("http://127.0.0.1:9000", "nvr").unwrap().place.endpoint.port(), Some(9000));
        assert_eq!(with("https://s3.example", "NVR").unwrap_err(), "archive.off.bucket");
        assert_eq!(with("https://s3.example", "nv").unwrap_err(), "archive.off.bucket");
        let long = "k".repeat(limits::ARCHIVE_FIELD_MAX_BYTES + 1);
        let r: RawArchive = toml::from_str(&format!(
            "endpoint = \"https://s3.example\"\nbucket = \"nvr\"\naccess_key = \"{long}\"\nsecret_key = \"sk\"\n"
        ))
        .unwrap();
        assert_eq!(r.validate("off".into(), &[]).unwrap_err().0, "archive.off.access_key");
        let r: RawArchive = toml::from_str(BASE).unwrap();
        assert_eq!(r.validate("Off".into(), &[]).unwrap_err().0, "archive.Off");
    }
}
