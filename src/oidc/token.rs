//! What an OpenID provider sends, read without a network: its discovery document, its keys
//! (JWKS), its token endpoint's answer and the id token, each bounded and checked, each
//! refusal saying what was wrong.
//!
//! The id token is checked here, not by a library's defaults: its header first (no `alg:
//! none`, no shared-secret algorithm, the key's own algorithm), its signature by the
//! provider's key for its `kid` (jsonwebtoken on aws-lc-rs), then issuer, audience (and
//! `azp` when there are several), expiry and not-before within
//! [`limits::OIDC_CLOCK_SKEW_S`], and the login's nonce.

use std::collections::HashSet;

use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::limits;

/// Why a provider's document or token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the provider's {what} is not the JSON expected: {reason}")]
    BadDocument { what: &'static str, reason: String },
    #[error("the provider says its issuer is {said}, not {configured} as configured")]
    IssuerMismatch { said: String, configured: String },
    #[error("the provider's {what} ({url}) is not an https address")]
    NotHttps { what: &'static str, url: String },
    #[error("the provider lists more than {0} keys")]
    TooManyKeys(usize),
    #[error("the id token is over {0} bytes")]
    TooLong(usize),
    #[error("the id token is not a signed JWT: {0}")]
    Malformed(String),
    #[error("the id token is unsigned (alg \"none\")")]
    Unsigned,
    #[error("the id token is signed with a shared secret ({0}), which this box does not take")]
    SharedSecret(String),
    #[error("the id token's algorithm {0} is not one this box takes")]
    UnsupportedAlgorithm(String),
    #[error("the id token names a key the provider does not list ({0})")]
    UnknownKey(String),
    #[error("the id token's signature does not verify")]
    BadSignature,
    #[error("the id token was issued by {0}, not this provider")]
    WrongIssuer(String),
    #[error("the id token is for another client (its audience is not this box's client id)")]
    WrongAudience,
    #[error("the id token has expired")]
    Expired,
    #[error("the id token is not valid yet (is the box's clock right?)")]
    NotYetValid,
    #[error("the id token lacks its {0} claim")]
    MissingClaim(String),
    #[error("the id token's nonce is not this login's (a replayed or foreign token)")]
    WrongNonce,
}

fn bad(what: &'static str) -> impl Fn(String) -> TokenError {
    move |reason| TokenError::BadDocument { what, reason }
}

/// An address a provider gives: https, or http when the issuer itself is an http address on
/// this machine's loopback (a development provider).
fn endpoint(what: &'static str, url: &str, loopback_http: bool) -> Result<url::Url, TokenError> {
    let parsed = url::Url::parse(url).map_err(|e| bad("discovery document")(format!("{what}: {e}")))?;
    let ok = parsed.scheme() == "https" || (loopback_http && parsed.scheme() == "http");
    if !ok || parsed.host_str().is_none() {
        return Err(TokenError::NotHttps { what, url: url.into() });
    }
    Ok(parsed)
}

/// True when `url` is http on a loopback address (127.0.0.0/8, ::1 or `localhost`).
pub fn is_loopback_http(url: &url::Url) -> bool {
    url.scheme() == "http"
        && match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        }
}

/// The parts of a provider's discovery document the box uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: url::Url,
    pub token_endpoint: url::Url,
    pub jwks_uri: url::Url,
    pub end_session_endpoint: Option<url::Url>,
}

#[derive(Deserialize)]
struct RawDiscovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    end_session_endpoint: Option<String>,
}

impl Discovery {
    /// Reads `/.well-known/openid-configuration` of the provider configured as `issuer`.
    pub fn parse(bytes: &[u8], issuer: &str) -> Result<Discovery, TokenError> {
        let raw: RawDiscovery = serde_json::from_slice(bytes).map_err(|e| bad("discovery document")(e.to_string()))?;
        if raw.issuer != issuer {
            return Err(TokenError::IssuerMismatch { said: raw.issuer, configured: issuer.into() });
        }
        let loopback = url::Url::parse(issuer).is_ok_and(|u| is_loopback_http(&u));
        Ok(Discovery {
            authorization_endpoint: endpoint("authorization endpoint", &raw.authorization_endpoint, loopback)?,
            token_endpoint: endpoint("token endpoint", &raw.token_endpoint, loopback)?,
            jwks_uri: endpoint("key set address", &raw.jwks_uri, loopback)?,
            end_session_endpoint: raw
                .end_session_endpoint
                .map(|e| endpoint("end-session endpoint", &e, loopback))
                .transpose()?,
            issuer: raw.issuer,
        })
    }
}

/// One signing key of the provider.
struct Key {
    kid: Option<String>,
    /// The algorithms it signs with: its own `alg`, or its type's.
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// The provider's signing keys (encryption keys and shared secrets left out).
pub struct Keys(Vec<Key>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|k| &k.kid)).finish()
    }
}

/// The asymmetric algorithms the box takes, by key type.
const RSA: [Algorithm; 6] =
    [Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512];

impl Keys {
    /// Reads a JWKS: at most [`limits::OIDC_JWKS_KEYS_MAX`] keys; a key this box cannot use
    /// (another type, for encryption, broken) is left out rather than failing the set.
    pub fn parse(bytes: &[u8]) -> Result<Keys, TokenError> {
        #[derive(Deserialize)]
        struct Count {
            keys: Vec<serde::de::IgnoredAny>,
        }
        let count: Count = serde_json::from_slice(bytes).map_err(|e| bad("key set")(e.to_string()))?;
        if count.keys.len() > limits::OIDC_JWKS_KEYS_MAX {
            return Err(TokenError::TooManyKeys(limits::OIDC_JWKS_KEYS_MAX));
        }
        let set: JwkSet = serde_json::from_slice(bytes).map_err(|e| bad("key set")(e.to_string()))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            let by_type: Vec<Algorithm> = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => RSA.to_vec(),
                AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                    jsonwebtoken::jwk::EllipticCurve::P256 => vec![Algorithm::ES256],
                    jsonwebtoken::jwk::EllipticCurve::P384 => vec![Algorithm::ES384],
                    _ => continue,
                },
                AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
                AlgorithmParameters::OctetKey(_) => continue,
            };
            let algorithms = match jwk.common.key_algorithm.and_then(|a| a.to_string().parse::<Algorithm>().ok()) {
                Some(a) if by_type.contains(&a) => vec![a],
                Some(_) => continue,
                None => by_type,
            };
            let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
            keys.push(Key { kid: jwk.common.key_id.clone(), algorithms, key });
        }
        Ok(Keys(keys))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key for a token's `kid` and algorithm; without a `kid`, the one key that signs
    /// with that algorithm.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<&Key> {
        let mut fits = self.0.iter().filter(|k| k.algorithms.contains(&alg));
        match kid {
            Some(kid) => fits.find(|k| k.kid.as_deref() == Some(kid)),
            None => {
                let first = fits.next()?;
                fits.next().is_none().then_some(first)
            }
        }
    }
}

/// What a login expects of its id token.
pub struct Expect<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub nonce: &'a str,
    /// The claim whose values give the role (`groups`, `roles`, …).
    pub role_claim: &'a str,
}

/// An id token's claims, verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    /// A name for people: `preferred_username`, `email` or `name`, else the subject.
    pub display: String,
    /// The role claim's values (a string is one value), at most
    /// [`limits::OIDC_CLAIM_VALUES_MAX`].
    pub role_values: Vec<String>,
    pub expires_s: i64,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    nonce: Option<String>,
    azp: Option<String>,
    aud: Audience,
    preferred_username: Option<String>,
    email: Option<String>,
    name: Option<String>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    // Tried in order: a list first (the one value is not read).
    Many(Vec<String>),
    One(serde::de::IgnoredAny),
}

/// The header's `alg` and `kid`, read before anything is trusted.
fn header(token: &str) -> Result<(Algorithm, Option<String>), TokenError> {
    let part = token.split('.').next().unwrap_or("");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| TokenError::Malformed(format!("its header is not base64url: {e}")))?;
    #[derive(Deserialize)]
    struct Head {
        alg: String,
        kid: Option<String>,
    }
    let head: Head = serde_json::from_slice(&json).map_err(|e| TokenError::Malformed(format!("its header: {e}")))?;
    if head.alg.eq_ignore_ascii_case("none") {
        return Err(TokenError::Unsigned);
    }
    if head.alg.starts_with("HS") {
        return Err(TokenError::SharedSecret(head.alg));
    }
    let alg = head.alg.parse::<Algorithm>().map_err(|_| TokenError::UnsupportedAlgorithm(head.alg.clone()))?;
    Ok((alg, head.kid))
}

/// Verifies an id token against the provider's `keys` and what the login `expect`s.
pub fn verify(token: &str, keys: &Keys, expect: &Expect<'_>) -> Result<Identity, TokenError> {
    if token.len() > limits::OIDC_ID_TOKEN_MAX_BYTES {
        return Err(TokenError::TooLong(limits::OIDC_ID_TOKEN_MAX_BYTES));
    }
    if token.split('.').count() != 3 {
        return Err(TokenError::Malformed("it is not three dot-separated parts".into()));
    }
    let (alg, kid) = header(token)?;
    let Some(key) = keys.find(kid.as_deref(), alg) else {
        return Err(TokenError::UnknownKey(kid.unwrap_or_else(|| format!("no kid, {alg:?}"))));
    };
    let mut v = Validation::new(alg);
    v.leeway = limits::OIDC_CLOCK_SKEW_S;
    v.validate_nbf = true;
    v.set_issuer(&[expect.issuer]);
    v.set_audience(&[expect.client_id]);
    v.required_spec_claims = ["exp", "iat", "iss", "aud", "sub"].iter().map(|s| s.to_string()).collect::<HashSet<_>>();
    let data = jsonwebtoken::decode::<Claims>(token, &key.key, &v).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind as K;
        match e.kind() {
            K::InvalidSignature | K::InvalidEcdsaKey | K::InvalidEddsaKey | K::InvalidRsaKey(_) => {
                TokenError::BadSignature
            }
            K::ExpiredSignature => TokenError::Expired,
            K::ImmatureSignature => TokenError::NotYetValid,
            K::InvalidIssuer => TokenError::WrongIssuer(issuer_of(token)),
            K::InvalidAudience => TokenError::WrongAudience,
            K::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
            K::InvalidAlgorithm => TokenError::UnsupportedAlgorithm(format!("{alg:?} for this key")),
            other => TokenError::Malformed(format!("{other:?}")),
        }
    })?;
    let c = data.claims;
    if let Audience::Many(list) = &c.aud
        && list.len() > 1
        && c.azp.as_deref() != Some(expect.client_id)
    {
        return Err(TokenError::WrongAudience);
    }
    let nonce_ok = c.nonce.as_deref().is_some_and(|n| crate::auth::same(n.as_bytes(), expect.nonce.as_bytes()));
    if !nonce_ok {
        return Err(TokenError::WrongNonce);
    }
    let role_values = match c.other.get(expect.role_claim) {
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => {
            a.iter().filter_map(|v| v.as_str().map(str::to_string)).take(limits::OIDC_CLAIM_VALUES_MAX).collect()
        }
        _ => Vec::new(),
    };
    let display = [c.preferred_username, c.email, c.name]
        .into_iter()
        .flatten()
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| c.sub.clone());
    Ok(Identity { subject: c.sub, display: display.chars().take(64).collect(), role_values, expires_s: c.exp })
}

/// The `iss` a token claims (for the refusal's message), unverified.
fn issuer_of(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or("");
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok())
        .and_then(|v| v.get("iss").and_then(|i| i.as_str()).map(|s| s.chars().take(200).collect()))
        .unwrap_or_else(|| "another issuer".into())
}

/// The id token in a token endpoint's answer.
pub fn id_token_of(bytes: &[u8]) -> Result<String, TokenError> {
    #[derive(Deserialize)]
    struct Answer {
        id_token: Option<String>,
        error: Option<String>,
        error_description: Option<String>,
    }
    let a: Answer = serde_json::from_slice(bytes).map_err(|e| bad("token answer")(e.to_string()))?;
    match (a.id_token, a.error) {
        (Some(t), _) => Ok(t),
        (None, Some(e)) => Err(bad("token answer")(format!(
            "{e}{}",
            a.error_description.map(|d| format!(": {d}")).unwrap_or_default()
        ))),
        (None, None) => Err(bad("token answer")("it holds no id_token".into())),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode, jwk::Jwk};
    use serde_json::json;

    pub const ISSUER: &str = "https://id.home.example";
    pub const CLIENT: &str = "keeppeek";

    /// A provider's key: its signer, and its public JWK with `kid`.
    pub struct Signer {
        pub key: EncodingKey,
        pub jwk: Jwk,
    }

    pub fn signer(kid: &str) -> Signer {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let key = EncodingKey::from_ec_der(&pair.serialize_der());
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.into());
        Signer { key, jwk }
    }

    pub fn jwks(signers: &[&Signer]) -> Vec<u8> {
        serde_json::to_vec(&json!({ "keys": signers.iter().map(|s| &s.jwk).collect::<Vec<_>>() })).unwrap()
    }

    fn now() -> i64 {
        crate::clock::Clocks::wall_us(&crate::clock::RealClocks) / 1_000_000
    }

    pub fn claims(nonce: &str) -> serde_json::Value {
        json!({
            "iss": ISSUER, "aud": CLIENT, "sub": "u-123", "iat": now(), "exp": now() + 300,
            "nonce": nonce, "preferred_username": "ann", "groups": ["nvr-admins", "family"],
        })
    }

    pub fn sign(s: &Signer, claims: &serde_json::Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = s.jwk.common.key_id.clone();
        encode(&h, claims, &s.key).unwrap()
    }

    fn expect(nonce: &str) -> Expect<'_> {
        Expect { issuer: ISSUER, client_id: CLIENT, nonce, role_claim: "groups" }
    }

    fn b64(v: &serde_json::Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn a_good_token_gives_its_subject_name_and_role_values() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let id = verify(&sign(&s, &claims("n1")), &keys, &expect("n1")).unwrap();
        assert_eq!((id.subject.as_str(), id.display.as_str()), ("u-123", "ann"));
        assert_eq!(id.role_values, ["nvr-admins", "family"]);
    }

    #[test]
    fn the_role_claims_values_are_read_up_to_their_ceiling() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let mut c = claims("n");
        c["groups"] = json!((0..limits::OIDC_CLAIM_VALUES_MAX + 10).map(|i| format!("g{i}")).collect::<Vec<_>>());
        let id = verify(&sign(&s, &c), &keys, &expect("n")).unwrap();
        assert_eq!(id.role_values.len(), limits::OIDC_CLAIM_VALUES_MAX);
        c["groups"] = json!("nvr-viewers");
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")).unwrap().role_values, ["nvr-viewers"]);
    }

    #[test]
    fn a_token_signed_by_another_key_is_refused() {
        let (s, rogue) = (signer("k1"), signer("k1"));
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        assert_eq!(verify(&sign(&rogue, &claims("n")), &keys, &expect("n")), Err(TokenError::BadSignature));
        // A claim changed after signing.
        let token = sign(&s, &claims("n"));
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let mut c = claims("n");
        c["groups"] = json!(["nvr-admins", "root"]);
        parts[1] = b64(&c);
        assert_eq!(verify(&parts.join("."), &keys, &expect("n")), Err(TokenError::BadSignature));
    }

    #[test]
    fn an_unsigned_token_is_refused() {
        let keys = Keys::parse(&jwks(&[&signer("k1")])).unwrap();
        let token = format!("{}.{}.", b64(&json!({"alg": "none", "kid": "k1"})), b64(&claims("n")));
        assert_eq!(verify(&token, &keys, &expect("n")), Err(TokenError::Unsigned));
        let token = format!("{}.{}.", b64(&json!({"alg": "None"})), b64(&claims("n")));
        assert_eq!(verify(&token, &keys, &expect("n")), Err(TokenError::Unsigned));
    }

    #[test]
    fn a_token_signed_with_a_shared_secret_is_refused() {
        // The classic confusion: HS256 "signed" with the provider's public key as the secret.
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("k1".into());
        let token = encode(&h, &claims("n"), &EncodingKey::from_secret(&jwks(&[&s]))).unwrap();
        assert_eq!(verify(&token, &keys, &expect("n")), Err(TokenError::SharedSecret("HS256".into())));
    }

    #[test]
    fn a_token_from_another_issuer_is_refused() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let mut c = claims("n");
        c["iss"] = json!("https://evil.example");
        assert_eq!(
            verify(&sign(&s, &c), &keys, &expect("n")),
            Err(TokenError::WrongIssuer("https://evil.example".into()))
        );
    }

    #[test]
    fn a_token_for_another_client_is_refused() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let mut c = claims("n");
        c["aud"] = json!("another-app");
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")), Err(TokenError::WrongAudience));
        // Several audiences with this box among them, but authorized for another party.
        c["aud"] = json!([CLIENT, "another-app"]);
        c["azp"] = json!("another-app");
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")), Err(TokenError::WrongAudience));
        c["azp"] = json!(CLIENT);
        assert!(verify(&sign(&s, &c), &keys, &expect("n")).is_ok());
    }

    #[test]
    fn an_expired_token_is_refused_past_the_clock_skew() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        let mut c = claims("n");
        c["exp"] = json!(now() - limits::OIDC_CLOCK_SKEW_S as i64 - 5);
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")), Err(TokenError::Expired));
        // Within the skew it passes (a provider's clock a little ahead of the box's).
        c["exp"] = json!(now() - 5);
        assert!(verify(&sign(&s, &c), &keys, &expect("n")).is_ok());
        c["exp"] = json!(now() + 300);
        c["nbf"] = json!(now() + limits::OIDC_CLOCK_SKEW_S as i64 + 30);
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")), Err(TokenError::NotYetValid));
    }

    #[test]
    fn a_token_with_another_logins_nonce_is_refused() {
        let s = signer("k1");
        let keys = Keys::parse(&jwks(&[&s])).unwrap();
        assert_eq!(verify(&sign(&s, &claims("old")), &keys, &expect("new")), Err(TokenError::WrongNonce));
        let mut c = claims("n");
        c.as_object_mut().unwrap().remove("nonce");
        assert_eq!(verify(&sign(&s, &c), &keys, &expect("n")), Err(TokenError::WrongNonce));
    }

    #[test]
    fn an_unknown_key_id_asks_for_the_keys_again() {
        let (old, new) = (signer("k1"), signer("k2"));
        let keys = Keys::parse(&jwks(&[&old])).unwrap();
        assert_eq!(verify(&sign(&new, &claims("n")), &keys, &expect("n")), Err(TokenError::UnknownKey("k2".into())));
        let rotated = Keys::parse(&jwks(&[&old, &new])).unwrap();
        assert!(verify(&sign(&new, &claims("n")), &rotated, &expect("n")).is_ok());
    }

    #[test]
    fn key_sets_and_discovery_documents_are_bounded_and_checked() {
        let s = signer("k1");
        let many: Vec<&Signer> = std::iter::repeat_n(&s, limits::OIDC_JWKS_KEYS_MAX + 1).collect();
        assert_eq!(Keys::parse(&jwks(&many)).unwrap_err(), TokenError::TooManyKeys(limits::OIDC_JWKS_KEYS_MAX));
        assert_eq!(Keys::parse(&jwks(&many[1..])).unwrap().len(), limits::OIDC_JWKS_KEYS_MAX);
        // A shared-secret key and an encryption key are left out.
        let mut enc = s.jwk.clone();
        enc.common.public_key_use = Some(PublicKeyUse::Encryption);
        let oct = json!({"kty": "oct", "k": "c2VjcmV0", "kid": "h"});
        let set = json!({"keys": [oct, enc]});
        assert!(Keys::parse(&serde_json::to_vec(&set).unwrap()).unwrap().is_empty());
        assert!(Keys::parse(b"{\"keys\": 3}").is_err());

        let doc = |issuer: &str, token: &str| {
            serde_json::to_vec(&json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/auth"),
                "token_endpoint": token, "jwks_uri": format!("{issuer}/jwks"), "end_session_endpoint": format!("{issuer}/logout")}))
            .unwrap()
        };
        let d = Discovery::parse(&doc(ISSUER, "https://id.home.example/token"), ISSUER).unwrap();
        assert_eq!(d.end_session_endpoint.unwrap().as_str(), "https://id.home.example/logout");
        assert!(matches!(
            Discovery::parse(&doc("https://evil.example", "https://evil.example/token"), ISSUER),
            Err(TokenError::IssuerMismatch { .. })
        ));
        assert!(matches!(
            Discovery::parse(&doc(ISSUER, "http://id.home.example/token"), ISSUER),
            Err(TokenError::NotHttps { what: "token endpoint", .. })
        ));
        // A development provider on this machine's loopback may answer plain http.
        let local = "http://127.0.0.1:3000";
        assert!(Discovery::parse(&doc(local, "http://127.0.0.1:3000/token"), local).is_ok());
        assert!(Discovery::parse(b"<html>", ISSUER).is_err());
    }

    #[test]
    fn token_answers_give_their_id_token_or_the_providers_error() {
        assert_eq!(id_token_of(br#"{"id_token":"a.b.c","access_token":"x"}"#).unwrap(), "a.b.c");
        let e = id_token_of(br#"{"error":"invalid_grant","error_description":"code expired"}"#).unwrap_err();
        assert_eq!(e.to_string(), "the provider's token answer is not the JSON expected: invalid_grant: code expired");
        let long = "a".repeat(limits::OIDC_ID_TOKEN_MAX_BYTES + 1);
        let keys = Keys::parse(&jwks(&[&signer("k")])).unwrap();
        assert_eq!(verify(&long, &keys, &expect("n")), Err(TokenError::TooLong(limits::OIDC_ID_TOKEN_MAX_BYTES)));
        assert!(matches!(verify("a.b", &keys, &expect("n")), Err(TokenError::Malformed(_))));
    }
}
