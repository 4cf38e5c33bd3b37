//! Certificates as the box sees them, without a clock or a disk: the box's own certificate
//! made for its names, what a certificate says (names, dates, fingerprints), when the box's
//! own must be made again, and the checks an uploaded certificate and key pass.
//!
//! The box's own certificate is self-signed (a LAN box has no name a public authority could
//! vouch for): ECDSA P-256, `serverAuth`, not a CA, its subject alternative names the box's
//! host name, that name under `.local`, `localhost` and every address the box has, valid from
//! a day back (a board whose clock is a little late still accepts it) for
//! [`limits::TLS_CERT_VALIDITY_DAYS`]. Its key is kept when the certificate is made again, so
//! a client that pins the key (`curl --pinnedpubkey`) keeps working across address changes.

use std::fmt::Write as _;
use std::net::IpAddr;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::limits;

/// A name a certificate is for: a host name (perhaps a wildcard) or an address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Dns(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Dns(d) => f.write_str(d),
            Name::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Name {
    /// The name a client reached the box as: an address when it parses as one (brackets of
    /// an IPv6 literal removed), a lower-case host name otherwise.
    pub fn reached_as(host: &str) -> Name {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Name::Ip(ip),
            Err(_) => Name::Dns(bare.trim_end_matches('.').to_ascii_lowercase()),
        }
    }

    /// True when a certificate naming `self` is valid for a client asking for `asked`: the
    /// same address, the same host name (case aside), or a wildcard `*.b.c` for `a.b.c`.
    pub fn covers(&self, asked: &Name) -> bool {
        match (self, asked) {
            (Name::Ip(a), Name::Ip(b)) => a == b,
            (Name::Dns(pattern), Name::Dns(host)) => {
                let pattern = pattern.to_ascii_lowercase();
                match pattern.strip_prefix("*.") {
                    Some(parent) => host
                        .split_once('.')
                        .is_some_and(|(label, rest)| !label.is_empty() && rest == parent && rest.contains('.')),
                    None => pattern == *host,
                }
            }
            _ => false,
        }
    }
}

/// What a certificate says, as the UI shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// SHA-256 of the certificate (what a browser's certificate viewer shows).
    pub sha256: [u8; 32],
    /// SHA-256 of its public key (what `curl --pinnedpubkey` and Chromium's SPKI lists take).
    pub spki_sha256: [u8; 32],
    pub subject: String,
    pub issuer: String,
    pub names: Vec<Name>,
    pub not_before_s: i64,
    pub not_after_s: i64,
}

impl CertInfo {
    /// The certificate's fingerprint as browsers show it: `AB:CD:…`.
    pub fn fingerprint(&self) -> String {
        colon_hex(&self.sha256)
    }

    /// The public key's pin as curl takes it: `sha256//` and the base64 of the SHA-256.
    pub fn pin(&self) -> String {
        use base64::Engine;
        format!("sha256//{}", base64::engine::general_purpose::STANDARD.encode(self.spki_sha256))
    }

    /// True when one of the certificate's names is valid for `asked`.
    pub fn covers(&self, asked: &Name) -> bool {
        self.names.iter().any(|n| n.covers(asked))
    }
}

fn colon_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02X}");
    }
    s
}

/// Why a certificate, a key or an upload is refused. Each message names what to fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("the certificate file holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")")]
    NoCertificate,
    #[error("the certificate file is not PEM: {0}")]
    Pem(String),
    #[error("the certificate file holds more than {0} certificates")]
    TooManyCertificates(usize),
    #[error("certificate {index} of the chain does not parse: {reason}")]
    Unparsable { index: usize, reason: String },
    #[error(
        "certificate {index} of the chain was not issued by certificate {next} (\"{issuer}\" is not \"{subject}\"): put the server's certificate first, then each issuer in order"
    )]
    ChainOrder { index: usize, next: usize, issuer: String, subject: String },
    #[error("the key file holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey,
    #[error("the key is not one this box can sign with: {0}")]
    UnsupportedKey(String),
    #[error("the key does not belong to the certificate (their public keys differ)")]
    KeyMismatch,
    #[error(
        "the certificate is a certificate authority's, not a server's (Firefox refuses it: make it with basicConstraints CA:FALSE)"
    )]
    NotAServer,
    #[error("the certificate expired at {0} (UTC)")]
    Expired(String),
    #[error("the certificate is not valid before {0} (UTC)")]
    NotYetValid(String),
    #[error(
        "the certificate names {names}, but this page was reached as {asked}: a browser would refuse it (open the box by one of its names, then upload it again)"
    )]
    NamesDoNotFit { names: String, asked: String },
    #[error("the certificate could not be made: {0}")]
    Make(String),
}

/// Reads one DER certificate: its names, dates and fingerprints. Bytes after it, an
/// unparsable extension or a second subject-alternative-name extension refuse it.
pub fn inspect(der: &[u8], index: usize) -> Result<CertInfo, CertError> {
    let bad = |reason: String| CertError::Unparsable { index, reason };
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| bad(e.to_string()))?;
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes follow it", rest.len())));
    }
    let mut names = Vec::new();
    if let Some(san) = cert.subject_alternative_name().map_err(|e| bad(e.to_string()))? {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(Name::Dns(d.to_ascii_lowercase())),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).map(IpAddr::from).ok(),
                        16 => <[u8; 16]>::try_from(*b).map(IpAddr::from).ok(),
                        _ => None,
                    };
                    names.push(Name::Ip(ip.ok_or_else(|| bad("an IP address name is neither 4 nor 16 bytes".into()))?));
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        sha256: Sha256::digest(der).into(),
        spki_sha256: Sha256::digest(cert.public_key().raw).into(),
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        names,
        not_before_s: cert.validity().not_before.timestamp(),
        not_after_s: cert.validity().not_after.timestamp(),
    })
}

/// `s` seconds after the epoch as `2026-12-05 01:02:03`.
pub fn utc(s: i64) -> String {
    let (y, m, d) = crate::clock::civil_from_days(s.div_euclid(86_400));
    let t = s.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}

/// The names the box's own certificate is for: its host name, that name under `.local`,
/// `localhost`, and every address given (IPv6 link-local ones aside: a URL cannot name them
/// portably), sorted and without repeats.
pub fn own_names(host_name: &str, addresses: &[IpAddr]) -> Vec<Name> {
    let mut names = vec![Name::Dns("localhost".into())];
    let host = host_name.trim_end_matches('.').to_ascii_lowercase();
    if !host.is_empty() && host != "localhost" {
        names.push(Name::Dns(format!("{host}.local")));
        names.push(Name::Dns(host));
    }
    for ip in addresses {
        let link_local_v6 = matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
        if !link_local_v6 {
            names.push(Name::Ip(*ip));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// A new ECDSA P-256 key for the box's own certificate, as PKCS#8 PEM.
pub fn new_key_pem() -> Result<String, CertError> {
    let key =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| CertError::Make(e.to_string()))?;
    Ok(key.serialize_pem())
}

/// The box's own certificate for `names`, signed by the key `key_pem`, valid from a day
/// before `now_s` for [`limits::TLS_CERT_VALIDITY_DAYS`]; PEM.
pub fn make_own(key_pem: &str, host_name: &str, names: &[Name], now_s: i64) -> Result<String, CertError> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose, SanType,
        SerialNumber,
    };
    let make = |e: rcgen::Error| CertError::Make(e.to_string());
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(make)?;
    let mut params = CertificateParams::default();
    params.subject_alt_names = names
        .iter()
        .map(|n| match n {
            Name::Dns(d) => d.clone().try_into().map(SanType::DnsName),
            Name::Ip(ip) => Ok(SanType::IpAddress(*ip)),
        })
        .collect::<Result<_, _>>()
        .map_err(make)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, if host_name.is_empty() { "keeppeek" } else { host_name });
    dn.push(DnType::OrganizationName, "KeepPeek NVR (made by the box itself)");
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let not_before_s = now_s - limits::TLS_CERT_BACKDATE_S as i64;
    let not_after_s = not_before_s + limits::TLS_CERT_VALIDITY_DAYS as i64 * 86_400;
    let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).map_err(|e| CertError::Make(e.to_string()));
    params.not_before = at(not_before_s)?;
    params.not_after = at(not_after_s)?;
    let mut serial = [0u8; 16];
    getrandom::fill(&mut serial).map_err(|e| CertError::Make(e.to_string()))?;
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    Ok(params.self_signed(&key).map_err(make)?.pem())
}

/// Why the box's own certificate must be made again, if it must: a name it lacks, or its
/// dates (only judged on a sane clock: a board whose clock has not been set yet keeps the
/// certificate it has).
pub fn remake_reason(info: &CertInfo, wanted: &[Name], now_s: i64, clock_sane: bool) -> Option<String> {
    if let Some(missing) = wanted.iter().find(|w| !info.names.contains(w)) {
        return Some(format!("the box is now also {missing}"));
    }
    if clock_sane && info.not_before_s > now_s {
        return Some(format!("it is not valid before {} and the clock says {}", utc(info.not_before_s), utc(now_s)));
    }
    if clock_sane && info.not_after_s - limits::TLS_CERT_RENEW_BEFORE_S as i64 <= now_s {
        return Some(format!("it expires at {}", utc(info.not_after_s)));
    }
    None
}

/// A certificate chain and its key, checked: what serves HTTPS.
#[derive(Debug)]
pub struct Checked {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub info: CertInfo,
    pub signing: std::sync::Arc<rustls::sign::CertifiedKey>,
}

/// Reads a PEM chain (the server's certificate first) and a PEM key and checks them: each
/// certificate parses, at most [`limits::TLS_CHAIN_CERTS_MAX`], each issued by the next, the
/// key is one the box signs with and belongs to the first certificate, which is a server's.
pub fn check_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<Checked, CertError> {
    let mut chain = Vec::new();
    for c in CertificateDer::pem_slice_iter(cert_pem) {
        let c = c.map_err(|e| CertError::Pem(e.to_string()))?;
        if chain.len() == limits::TLS_CHAIN_CERTS_MAX {
            return Err(CertError::TooManyCertificates(limits::TLS_CHAIN_CERTS_MAX));
        }
        chain.push(c);
    }
    if chain.is_empty() {
        return Err(CertError::NoCertificate);
    }
    let infos = chain.iter().enumerate().map(|(i, c)| inspect(c, i + 1)).collect::<Result<Vec<_>, _>>()?;
    for (i, pair) in infos.windows(2).enumerate() {
        if pair[0].issuer != pair[1].subject {
            return Err(CertError::ChainOrder {
                index: i + 1,
                next: i + 2,
                issuer: pair[0].issuer.clone(),
                subject: pair[1].subject.clone(),
            });
        }
    }
    let leaf_is_ca = x509_parser::parse_x509_certificate(&chain[0]).map(|(_, c)| c.is_ca()).unwrap_or(false);
    if leaf_is_ca {
        return Err(CertError::NotAServer);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CertError::NoKey,
        e => CertError::Pem(e.to_string()),
    })?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| CertError::UnsupportedKey(e.to_string()))?;
    let signing = rustls::sign::CertifiedKey::new(chain.clone(), signer);
    // An unknown answer (a key type that cannot tell its public key) is a refusal too.
    signing.keys_match().map_err(|_| CertError::KeyMismatch)?;
    let info = infos.into_iter().next().expect("a chain of at least one");
    Ok(Checked { chain, key, info, signing: std::sync::Arc::new(signing) })
}

/// [`check_pair`] for an admin's upload, and the certificate fits: valid now (on a sane
/// clock) and naming `asked`, the name the admin's browser reached the box as.
pub fn check_upload(
    cert_pem: &[u8],
    key_pem: &[u8],
    asked: &Name,
    now_s: i64,
    clock_sane: bool,
) -> Result<Checked, CertError> {
    let checked = check_pair(cert_pem, key_pem)?;
    let info = &checked.info;
    if clock_sane && info.not_after_s <= now_s {
        return Err(CertError::Expired(utc(info.not_after_s)));
    }
    if clock_sane && info.not_before_s > now_s {
        return Err(CertError::NotYetValid(utc(info.not_before_s)));
    }
    if !info.covers(asked) {
        let names = if info.names.is_empty() {
            "no name (no subject alternative names)".to_string()
        } else {
            info.names.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        };
        return Err(CertError::NamesDoNotFit { names, asked: asked.to_string() });
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_S: i64 = 1_796_428_800; // 2026-12-04

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn own() -> (String, String, Vec<Name>) {
        let names = own_names("keeppeek", &[addr("192.168.1.20"), addr("fe80::1"), addr("fd00::20")]);
        let key = new_key_pem().unwrap();
        let cert = make_own(&key, "keeppeek", &names, NOW_S).unwrap();
        (key, cert, names)
    }

    #[test]
    fn the_box_makes_a_server_certificate_for_its_names_and_addresses() {
        let (key, cert, names) = own();
        assert_eq!(
            names.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["keeppeek", "keeppeek.local", "localhost", "192.168.1.20", "fd00::20"]
        );
        let checked = check_pair(cert.as_bytes(), key.as_bytes()).unwrap();
        let info = &checked.info;
        assert_eq!(info.names, names);
        assert_eq!(info.not_before_s, NOW_S - 86_400);
        assert_eq!(info.not_after_s - info.not_before_s, limits::TLS_CERT_VALIDITY_DAYS as i64 * 86_400);
        assert!(info.subject.contains("CN=keeppeek"));
        assert_eq!(info.fingerprint().len(), 32 * 3 - 1);
        assert!(info.pin().starts_with("sha256//") && info.pin().len() == 8 + 44);
        let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(!parsed.is_ca());
        let eku = parsed.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth);
        // Made again with the same key: the certificate differs, the pin does not.
        let again = make_own(&key, "keeppeek", &names, NOW_S + 10).unwrap();
        let info2 = check_pair(again.as_bytes(), key.as_bytes()).unwrap().info;
        assert_ne!(info2.sha256, info.sha256);
        assert_eq!(info2.pin(), info.pin());
    }

    #[test]
    fn the_own_certificate_is_made_again_for_a_new_address_or_near_its_end_on_a_sane_clock() {
        let (key, cert, names) = own();
        let info = check_pair(cert.as_bytes(), key.as_bytes()).unwrap().info;
        assert_eq!(remake_reason(&info, &names, NOW_S, true), None);
        // An address gone is no reason; a new one is.
        assert_eq!(remake_reason(&info, &names[..2], NOW_S, true), None);
        let mut more = names.clone();
        more.push(Name::Ip(addr("10.0.0.7")));
        assert_eq!(remake_reason(&info, &more, NOW_S, true).unwrap(), "the box is now also 10.0.0.7");
        let renew_at = info.not_after_s - limits::TLS_CERT_RENEW_BEFORE_S as i64;
        assert_eq!(remake_reason(&info, &names, renew_at - 1, true), None);
        assert!(remake_reason(&info, &names, renew_at, true).unwrap().starts_with("it expires at"));
        assert!(remake_reason(&info, &names, NOW_S - 2 * 86_400, true).unwrap().contains("not valid before"));
        // A clock not set yet (1970) judges no dates.
        assert_eq!(remake_reason(&info, &names, 0, false), None);
    }

    #[test]
    fn names_cover_what_a_client_asks_for() {
        let wild = Name::Dns("*.home.example".into());
        assert!(wild.covers(&Name::reached_as("NVR.home.example")));
        assert!(!wild.covers(&Name::reached_as("home.example")));
        assert!(!wild.covers(&Name::reached_as("a.b.home.example")));
        assert!(!Name::Dns("*.example".into()).covers(&Name::reached_as("a.example")));
        assert!(Name::Ip(addr("::1")).covers(&Name::reached_as("[::1]")));
        assert!(Name::Dns("keeppeek.local".into()).covers(&Name::reached_as("keeppeek.local.")));
        assert!(!Name::Dns("192.168.1.2".into()).covers(&Name::reached_as("192.168.1.2")));
    }

    /// A certificate authority named `ca_name` and a server certificate it signs, as an admin
    /// would bring: (leaf, CA, leaf key, CA key), PEM.
    fn issued(names: &[&str], not_before_s: i64, days: i64, ca_name: &str) -> (String, String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, ca_name);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let ca_key_pem = ca_key.serialize_pem();
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, names[0]);
        p.not_before = time::OffsetDateTime::from_unix_timestamp(not_before_s).unwrap();
        p.not_after = time::OffsetDateTime::from_unix_timestamp(not_before_s + days * 86_400).unwrap();
        let leaf = p.signed_by(&key, &Issuer::new(ca, ca_key)).unwrap();
        (leaf.pem(), ca_cert.pem(), key.serialize_pem(), ca_key_pem)
    }

    #[test]
    fn an_upload_is_checked_for_its_key_chain_dates_and_names() {
        let (leaf, ca, key, ca_key) = issued(&["nvr.home.example", "192.168.1.20"], NOW_S - 86_400, 90, "Home CA");
        let asked = Name::reached_as("nvr.home.example");
        let chain = format!("{leaf}{ca}");
        let ok = check_upload(chain.as_bytes(), key.as_bytes(), &asked, NOW_S, true).unwrap();
        assert_eq!(ok.chain.len(), 2);
        assert!(check_upload(chain.as_bytes(), key.as_bytes(), &Name::reached_as("192.168.1.20"), NOW_S, true).is_ok());
        // The leaf alone serves too (the browser may know the issuer already).
        assert!(check_upload(leaf.as_bytes(), key.as_bytes(), &asked, NOW_S, true).is_ok());

        let wrong_order = format!("{ca}{leaf}");
        assert!(matches!(
            check_upload(wrong_order.as_bytes(), key.as_bytes(), &asked, NOW_S, true),
            Err(CertError::ChainOrder { index: 1, next: 2, .. })
        ));
        assert_eq!(check_pair(ca.as_bytes(), ca_key.as_bytes()).unwrap_err(), CertError::NotAServer);
        let (_, other_ca, other_key, _) = issued(&["nvr.home.example"], NOW_S, 90, "Office CA");
        assert_eq!(
            check_upload(chain.as_bytes(), other_key.as_bytes(), &asked, NOW_S, true).unwrap_err(),
            CertError::KeyMismatch
        );
        let foreign = format!("{leaf}{other_ca}");
        let err = check_upload(foreign.as_bytes(), key.as_bytes(), &asked, NOW_S, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "certificate 1 of the chain was not issued by certificate 2 (\"CN=Home CA\" is not \"CN=Office CA\"): put the server's certificate first, then each issuer in order"
        );
        let err =
            check_upload(chain.as_bytes(), key.as_bytes(), &Name::reached_as("10.0.0.9"), NOW_S, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the certificate names nvr.home.example, 192.168.1.20, but this page was reached as 10.0.0.9: a browser would refuse it (open the box by one of its names, then upload it again)"
        );
        assert!(matches!(
            check_upload(chain.as_bytes(), key.as_bytes(), &asked, NOW_S + 91 * 86_400, true),
            Err(CertError::Expired(_))
        ));
        assert!(matches!(
            check_upload(chain.as_bytes(), key.as_bytes(), &asked, NOW_S - 2 * 86_400, true),
            Err(CertError::NotYetValid(_))
        ));
        // On a clock not set yet the dates are not judged.
        assert!(check_upload(chain.as_bytes(), key.as_bytes(), &asked, 0, false).is_ok());
        assert_eq!(check_pair(b"", key.as_bytes()).unwrap_err(), CertError::NoCertificate);
        assert_eq!(check_pair(key.as_bytes(), key.as_bytes()).unwrap_err(), CertError::NoCertificate);
        assert_eq!(check_pair(leaf.as_bytes(), leaf.as_bytes()).unwrap_err(), CertError::NoKey);
        let broken = leaf.replace("MII", "MIJ");
        assert!(matches!(check_pair(broken.as_bytes(), key.as_bytes()), Err(CertError::Unparsable { index: 1, .. })));
        let many = leaf.repeat(limits::TLS_CHAIN_CERTS_MAX + 1);
        assert_eq!(
            check_pair(many.as_bytes(), key.as_bytes()).unwrap_err(),
            CertError::TooManyCertificates(limits::TLS_CHAIN_CERTS_MAX)
        );
    }
}
