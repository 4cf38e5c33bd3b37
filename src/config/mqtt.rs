//! `[mqtt]`: the broker the box publishes to.

use serde::Deserialize;

use super::Invalid;
use crate::limits;

/// The broker (`[mqtt]`), changed live.
#[derive(Clone, PartialEq, Eq)]
pub struct MqttConfig {
    /// A host name or address.
    pub host: String,
    /// 1883, or 8883 with TLS, unless given.
    pub port: u16,
    pub tls: bool,
    /// The broker's CA (PEM), when it is not one of the public roots.
    pub ca_pem: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// The box's topics are under it (`keeppeek` unless given).
    pub prefix: String,
    /// Home Assistant's discovery prefix (`homeassistant` unless given).
    pub discovery_prefix: String,
    /// The client id the box connects with (`keeppeek-<host name>` unless given).
    pub client_id: String,
}

impl std::fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "set"))
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMqtt {
    host: String,
    port: Option<u16>,
    #[serde(default)]
    tls: bool,
    ca_pem: Option<String>,
    username: Option<String>,
    password: Option<String>,
    prefix: Option<String>,
    discovery_prefix: Option<String>,
    client_id: Option<String>,
}

/// A topic prefix: 1 to [`limits::MQTT_PREFIX_MAX_BYTES`] bytes of letters, digits, `-`,
/// `_` and `/` between levels (no wildcards, no empty level).
fn prefix_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= limits::MQTT_PREFIX_MAX_BYTES
        && p.split('/').all(|level| {
            !level.is_empty() && level.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl RawMqtt {
    pub fn validate(self) -> Result<MqttConfig, Invalid> {
        let at = |key: &str| format!("mqtt.{key}");
        let host = self.host.trim().to_string();
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && (host.parse::<std::net::IpAddr>().is_ok() || url::Host::parse(&host).is_ok());
        if !host_ok {
            return Err((at("host"), "a host name or address".into()));
        }
        let small = |key: &str, v: &Option<String>| match v {
            Some(v) if v.len() > limits::MQTT_FIELD_MAX_BYTES => {
                Err((at(key), format!("at most {} bytes (MQTT_FIELD_MAX_BYTES)", limits::MQTT_FIELD_MAX_BYTES)))
            }
            _ => Ok(()),
        };
        small("username", &self.username)?;
        small("password", &self.password)?;
        small("client_id", &self.client_id)?;
        if self.password.is_some() && self.username.is_none() {
            return Err((at("password"), "a password goes with a user name".into()));
        }
        if let Some(ca) = &self.ca_pem {
            if ca.len() > limits::TLS_UPLOAD_MAX_BYTES {
                return Err((at("ca_pem"), format!("at most {} KiB", limits::TLS_UPLOAD_MAX_BYTES >> 10)));
            }
            if !self.tls {
                return Err((at("ca_pem"), "a CA is for a broker over TLS (tls = true)".into()));
            }
            crate::oidc::fetch::trust(Some(ca)).map_err(|e| (at("ca_pem"), e))?;
        }
        let prefix = self.prefix.unwrap_or_else(|| "keeppeek".into());
        if !prefix_ok(&prefix) {
            return Err((at("prefix"), "letters, digits, '-' and '_', levels joined by '/'".into()));
        }
        let discovery_prefix = self.discovery_prefix.unwrap_or_else(|| "homeassistant".into());
        if !prefix_ok(&discovery_prefix) {
            return Err((at("discovery_prefix"), "letters, digits, '-' and '_', levels joined by '/'".into()));
        }
        let client_id = match self.client_id.filter(|c| !c.trim().is_empty()) {
            Some(c) => c,
            None => {
                let name = crate::tls::host_name();
                format!("keeppeek-{name}").chars().take(limits::MQTT_FIELD_MAX_BYTES).collect()
            }
        };
        Ok(MqttConfig {
            host,
            port: self.port.unwrap_or(if self.tls { 8883 } else { 1883 }),
            tls: self.tls,
            ca_pem: self.ca_pem.filter(|c| !c.trim().is_empty()),
            username: self.username.filter(|u| !u.is_empty()),
            password: self.password.filter(|p| !p.is_empty()),
            prefix,
            discovery_prefix,
            client_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(extra: &str) -> Result<MqttConfig, Invalid> {
        let r: RawMqtt = toml::from_str(&format!("host = \"broker.lan\"\n{extra}")).unwrap();
        r.validate()
    }

    #[test]
    fn defaults_and_refusals_name_their_field() {
        let c = raw("").unwrap();
        assert_eq!(
            (c.port, c.tls, c.prefix.as_str(), c.discovery_prefix.as_str()),
            (1883, false, "keeppeek", "homeassistant")
        );
        assert!(c.client_id.starts_with("keeppeek-"));
        assert_eq!(raw("tls = true").unwrap().port, 8883);
        assert_eq!(raw("prefix = \"home/nvr\"").unwrap().prefix, "home/nvr");
        for (extra, field) in [
            ("prefix = \"a/+/b\"", "mqtt.prefix"),
            ("prefix = \"a//b\"", "mqtt.prefix"),
            ("discovery_prefix = \"#\"", "mqtt.discovery_prefix"),
            ("password = \"p\"", "mqtt.password"),
            ("ca_pem = \"junk\"", "mqtt.ca_pem"),
        ] {
            assert_eq!(raw(extra).unwrap_err().0, field, "{extra}");
        }
        let long = format!("username = \"{}\"", "u".repeat(limits::MQTT_FIELD_MAX_BYTES + 1));
        assert_eq!(raw(&long).unwrap_err().0, "mqtt.username");
        let bad: RawMqtt = toml::from_str("host = \"a b\"").unwrap();
        assert_eq!(bad.validate().unwrap_err().0, "mqtt.host");
    }
}
