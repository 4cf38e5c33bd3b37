//! Single sign-on with OpenID Connect: the authorization code flow with PKCE, `state` and
//! `nonce`, for the providers the config names (`[oidc.<id>]`).
//!
//! - A sign-in starts at the box ([`Oidc::start`]): a pending login is kept under a random
//!   `state` with its nonce, its PKCE verifier and a random binding the browser gets as a
//!   cookie; the browser goes to the provider. At most [`limits::OIDC_LOGINS_PENDING_MAX`]
//!   wait, each at most [`limits::OIDC_LOGIN_PENDING_S`].
//! - It finishes when the provider sends the browser back ([`Oidc::finish`]): the `state` is
//!   taken (once: a replay finds nothing), the binding must be this browser's, the code is
//!   exchanged at the token endpoint with the verifier and the client's secret, and the id
//!   token verified ([`token::verify`]). Its subject, with the provider's issuer, is who
//!   signed in; the role claim's values make an admin or a viewer, or refuse.
//! - Each provider's discovery document and keys are fetched when first needed and kept for
//!   [`limits::OIDC_DOCUMENT_TTL_S`]; a token naming a key not held fetches the keys again at
//!   most once per [`limits::OIDC_JWKS_REFETCH_MIN_INTERVAL_MS`]. What is held is keyed by the
//!   provider's issuer, client and CA, so a changed provider is a new entry beside the old:
//!   at most [`limits::OIDC_PROVIDER_CACHES_MAX`], the least recently used going first.
//! - A provider down, slow or wrong refuses the sign-in with what failed; nothing else waits
//!   on it, and sessions already open go on.

pub mod fetch;
pub mod token;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::auth::Role;
use crate::config::OidcProvider;
use crate::limits;
use fetch::{Ask, FetchError};
use token::{Discovery, Keys, TokenError};

/// Why a sign-in with a provider failed; each names what to look at.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OidcError {
    #[error("no sign-in provider is called \"{0}\"")]
    UnknownProvider(String),
    #[error("{provider}: its {what} at {url}: {error}")]
    Fetch { provider: String, what: &'static str, url: String, error: FetchError },
    #[error("{provider}: {error}")]
    Token { provider: String, error: TokenError },
    #[error("{provider} refused the sign-in: {reason}")]
    ProviderSaid { provider: String, reason: String },
    #[error("this sign-in was used already or has expired: start it again")]
    UnknownState,
    #[error("this sign-in was started in another browser: start it again here")]
    OtherBrowser,
    #[error(
        "{provider}: {who} has no role on this box (its {claim} claim holds none of the values the box's settings name)"
    )]
    NoRole { provider: String, who: String, claim: String },
    #[error("{0} sign-ins are talking to providers at once, the most: try again shortly")]
    Busy(usize),
    #[error("{provider}: the sign-in took over {ms} ms at the box")]
    TooSlow { provider: String, ms: u64 },
    #[error("{provider}: {reason}")]
    Config { provider: String, reason: String },
}

/// What the box holds for one provider (keyed by issuer, client and CA).
struct Held {
    key: [u8; 32],
    tls: Arc<rustls::ClientConfig>,
    discovery: Mutex<Option<(Arc<Discovery>, Instant)>>,
    keys: Mutex<Option<(Arc<Keys>, Instant)>>,
    last_refetch: Mutex<Option<Instant>>,
    used: Mutex<Instant>,
    kept: fetch::Kept,
}

/// A sign-in sent to its provider.
struct Pending {
    provider: String,
    held_key: [u8; 32],
    nonce: String,
    verifier: String,
    binding: [u8; 32],
    redirect_uri: String,
    started: Instant,
}

/// A finished sign-in.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub provider: String,
    /// `sso:<provider>:<subject>`, as sessions and principals name the person.
    pub name: String,
    pub display: String,
    pub role: Role,
    pub id_token: String,
}

/// The providers and what is held for them.
pub struct Oidc {
    providers: RwLock<Vec<Arc<OidcProvider>>>,
    held: Mutex<Vec<Arc<Held>>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Sign-ins talking to a provider now (starting or finishing).
    talking: tokio::sync::Semaphore,
}

fn random_b64(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// True when a sign-in started at `started` has waited [`limits::OIDC_LOGIN_PENDING_S`] by `now`.
fn expired(started: Instant, now: Instant) -> bool {
    now.saturating_duration_since(started) >= Duration::from_secs(limits::OIDC_LOGIN_PENDING_S)
}

fn held_key(p: &OidcProvider) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [p.issuer.as_str(), p.client_id.as_str(), p.ca_pem.as_deref().unwrap_or("")] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

impl Oidc {
    pub fn new(providers: &[OidcProvider]) -> Oidc {
        let oidc = Oidc {
            providers: RwLock::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            pending: Mutex::new(HashMap::new()),
            talking: tokio::sync::Semaphore::new(limits::OIDC_SIGN_INS_TALKING_MAX),
        };
        oidc.set_providers(providers);
        oidc
    }

    /// The providers from now on (a config change): sign-ins started with a provider that
    /// changed or went are refused when they come back.
    pub fn set_providers(&self, providers: &[OidcProvider]) {
        *self.providers.write().expect("lock") = providers.iter().cloned().map(Arc::new).collect();
    }

    /// The providers people may choose: (id, name).
    pub fn list(&self) -> Vec<(String, String)> {
        self.providers.read().expect("lock").iter().map(|p| (p.id.clone(), p.name.clone())).collect()
    }

    fn provider(&self, id: &str) -> Result<Arc<OidcProvider>, OidcError> {
        self.providers
            .read()
            .expect("lock")
            .iter()
            .find(|p| p.id == id)
            .cloned()
            .ok_or_else(|| OidcError::UnknownProvider(id.chars().take(40).collect()))
    }

    /// What is held for `p`, made when new; the least recently used goes past the ceiling.
    fn held(&self, p: &OidcProvider) -> Result<Arc<Held>, OidcError> {
        let key = held_key(p);
        let mut held = self.held.lock().expect("lock");
        if let Some(h) = held.iter().find(|h| h.key == key) {
            *h.used.lock().expect("lock") = Instant::now();
            return Ok(h.clone());
        }
        let tls = fetch::trust(p.ca_pem.as_deref())
            .map_err(|reason| OidcError::Config { provider: p.name.clone(), reason })?;
        if held.len() >= limits::OIDC_PROVIDER_CACHES_MAX
            && let Some(i) = (0..held.len()).min_by_key(|&i| *held[i].used.lock().expect("lock"))
        {
            held.remove(i);
        }
        let h = Arc::new(Held {
            key,
            tls,
            discovery: Mutex::new(None),
            keys: Mutex::new(None),
            last_refetch: Mutex::new(None),
            used: Mutex::new(Instant::now()),
            kept: fetch::Kept::default(),
        });
        held.push(h.clone());
        Ok(h)
    }

    /// Entries held now (for tests and `/metrics`).
    pub fn held_count(&self) -> usize {
        self.held.lock().expect("lock").len()
    }

    async fn discovery(&self, p: &OidcProvider, h: &Held) -> Result<Arc<Discovery>, OidcError> {
        let ttl = Duration::from_secs(limits::OIDC_DOCUMENT_TTL_S);
        if let Some((d, at)) = h.discovery.lock().expect("lock").as_ref()
            && at.elapsed() < ttl
        {
            return Ok(d.clone());
        }
        let url = format!("{}/.well-known/openid-configuration", p.issuer.trim_end_matches('/'));
        let fail =
            |error| OidcError::Fetch { provider: p.name.clone(), what: "discovery document", url: url.clone(), error };
        let parsed = url::Url::parse(&url).map_err(|e| fail(FetchError::Unreachable(e.to_string())))?;
        let bytes =
            fetch::fetch(&h.tls, &h.kept, &parsed, Ask::Get, limits::OIDC_DOCUMENT_MAX_BYTES).await.map_err(fail)?;
        let d = Arc::new(
            Discovery::parse(&bytes, &p.issuer)
                .map_err(|error| OidcError::Token { provider: p.name.clone(), error })?,
        );
        *h.discovery.lock().expect("lock") = Some((d.clone(), Instant::now()));
        Ok(d)
    }

    async fn keys(&self, p: &OidcProvider, h: &Held, d: &Discovery, again: bool) -> Result<Arc<Keys>, OidcError> {
        let ttl = Duration::from_secs(limits::OIDC_DOCUMENT_TTL_S);
        if !again
            && let Some((k, at)) = h.keys.lock().expect("lock").as_ref()
            && at.elapsed() < ttl
        {
            return Ok(k.clone());
        }
        let url = d.jwks_uri.clone();
        let fail = |error| OidcError::Fetch { provider: p.name.clone(), what: "key set", url: url.to_string(), error };
        let bytes =
            fetch::fetch(&h.tls, &h.kept, &url, Ask::Get, limits::OIDC_DOCUMENT_MAX_BYTES).await.map_err(fail)?;
        let k = Arc::new(Keys::parse(&bytes).map_err(|error| OidcError::Token { provider: p.name.clone(), error })?);
        *h.keys.lock().expect("lock") = Some((k.clone(), Instant::now()));
        Ok(k)
    }

    /// Starts a sign-in with provider `id`, to come back to `redirect_uri`: the address to
    /// send the browser to, and the binding for its cookie.
    ///
    /// The discovery document held is used while the connection kept to the provider is
    /// open (it answered moments ago and has not gone); otherwise it is fetched again (within
    /// the ceiling on sign-ins talking to providers), so a provider that is down or wrong
    /// refuses here, with what failed, instead of leaving the browser at an address that
    /// does not answer.
    pub async fn start(&self, id: &str, redirect_uri: &str) -> Result<(String, String), OidcError> {
        let Ok(_permit) = self.talking.try_acquire() else {
            return Err(OidcError::Busy(limits::OIDC_SIGN_INS_TALKING_MAX));
        };
        let p = self.provider(id)?;
        let h = self.held(&p)?;
        let there = h.discovery.lock().expect("lock").as_ref().is_some_and(|(d, _)| h.kept.open_to(&d.token_endpoint));
        if !there {
            *h.discovery.lock().expect("lock") = None;
        }
        let d = self.discovery(&p, &h).await?;
        let (state, nonce, verifier, binding) = (random_b64(24), random_b64(24), random_b64(48), random_b64(32));
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let mut url = d.authorization_endpoint.clone();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &p.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", "openid profile email")
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        self.remember(
            state,
            Pending {
                provider: p.id.clone(),
                held_key: h.key,
                nonce,
                verifier,
                binding: Sha256::digest(binding.as_bytes()).into(),
                redirect_uri: redirect_uri.into(),
                started: Instant::now(),
            },
        );
        Ok((url.to_string(), binding))
    }

    /// Keeps a sign-in sent to its provider: the expired ones forgotten, and the oldest when
    /// [`limits::OIDC_LOGINS_PENDING_MAX`] wait.
    fn remember(&self, state: String, login: Pending) {
        let mut pending = self.pending.lock().expect("lock");
        let now = Instant::now();
        pending.retain(|_, v| !expired(v.started, now));
        if pending.len() >= limits::OIDC_LOGINS_PENDING_MAX
            && let Some(oldest) = pending.iter().min_by_key(|(_, v)| v.started).map(|(k, _)| k.clone())
        {
            pending.remove(&oldest);
        }
        pending.insert(state, login);
    }

    /// Sign-ins waiting for their provider now.
    pub fn pending_count(&self) -> usize {
        self.pending.lock().expect("lock").len()
    }

    /// Finishes the sign-in `state` names with its `code`, in the browser holding `binding`,
    /// within [`limits::OIDC_CALLBACK_TIMEOUT_MS`].
    pub async fn finish(&self, state: &str, code: &str, binding: Option<&str>) -> Result<SignedIn, OidcError> {
        let Ok(_permit) = self.talking.try_acquire() else {
            return Err(OidcError::Busy(limits::OIDC_SIGN_INS_TALKING_MAX));
        };
        let pending = self.pending.lock().expect("lock").remove(state).ok_or(OidcError::UnknownState)?;
        if expired(pending.started, Instant::now()) {
            return Err(OidcError::UnknownState);
        }
        let same_browser = binding.is_some_and(|b| crate::auth::same(&Sha256::digest(b.as_bytes()), &pending.binding));
        if !same_browser {
            return Err(OidcError::OtherBrowser);
        }
        let p = self.provider(&pending.provider)?;
        let h = self.held(&p)?;
        if h.key != pending.held_key {
            return Err(OidcError::Config {
                provider: p.name.clone(),
                reason: "its settings changed meanwhile: start again".into(),
            });
        }
        let ms = limits::OIDC_CALLBACK_TIMEOUT_MS;
        match tokio::time::timeout(Duration::from_millis(ms), self.exchange(&p, &h, &pending, code)).await {
            Ok(r) => r,
            Err(_) => Err(OidcError::TooSlow { provider: p.name.clone(), ms }),
        }
    }

    async fn exchange(&self, p: &OidcProvider, h: &Held, pending: &Pending, code: &str) -> Result<SignedIn, OidcError> {
        let d = self.discovery(p, h).await?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &pending.redirect_uri)
            .append_pair("code_verifier", &pending.verifier)
            .append_pair("client_id", &p.client_id)
            .finish();
        // client_secret_basic (RFC 6749 § 2.3.1: each part form-encoded first).
        let basic = p.client_secret.as_ref().map(|secret| {
            let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(&p.client_id), enc(secret));
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
        });
        let ask = Ask::PostForm { form, authorization: basic.as_deref() };
        let answer = fetch::fetch(&h.tls, &h.kept, &d.token_endpoint, ask, limits::OIDC_DOCUMENT_MAX_BYTES)
            .await
            .map_err(|error| OidcError::Fetch {
                provider: p.name.clone(),
                what: "token endpoint",
                url: d.token_endpoint.to_string(),
                error,
            })?;
        let token_error = |error| OidcError::Token { provider: p.name.clone(), error };
        let id_token = token::id_token_of(&answer).map_err(token_error)?;
        let expect = token::Expect {
            issuer: &p.issuer,
            client_id: &p.client_id,
            nonce: &pending.nonce,
            role_claim: &p.role_claim,
        };
        let keys = self.keys(p, h, &d, false).await?;
        let identity = match token::verify(&id_token, &keys, &expect) {
            Err(TokenError::UnknownKey(kid)) => {
                // The provider may have rotated its keys: fetch them again, once in a while.
                let may = {
                    let mut last = h.last_refetch.lock().expect("lock");
                    let gap = Duration::from_millis(limits::OIDC_JWKS_REFETCH_MIN_INTERVAL_MS);
                    let may = last.is_none_or(|at| at.elapsed() >= gap);
                    if may {
                        *last = Some(Instant::now());
                    }
                    may
                };
                if !may {
                    return Err(token_error(TokenError::UnknownKey(kid)));
                }
                let keys = self.keys(p, h, &d, true).await?;
                token::verify(&id_token, &keys, &expect).map_err(token_error)?
            }
            other => other.map_err(token_error)?,
        };
        let has = |values: &[String]| {
            values.iter().any(|v| v == "*") || identity.role_values.iter().any(|r| values.contains(r))
        };
        let role = if !p.admin_values.is_empty() && has(&p.admin_values) {
            Role::Admin
        } else if has(&p.viewer_values) {
            Role::Viewer
        } else {
            return Err(OidcError::NoRole {
                provider: p.name.clone(),
                who: identity.display,
                claim: p.role_claim.clone(),
            });
        };
        Ok(SignedIn {
            provider: p.id.clone(),
            name: format!("sso:{}:{}", p.id, identity.subject.chars().take(128).collect::<String>()),
            display: identity.display,
            role,
            id_token,
        })
    }

    /// The provider's end-session address for a signed-in person, coming back to
    /// `after`, when the provider has one (from its discovery document, as held).
    pub fn end_session_url(&self, provider: &str, id_token: &str, after: &str) -> Option<String> {
        let p = self.provider(provider).ok()?;
        let held = self.held.lock().expect("lock");
        let h = held.iter().find(|h| h.key == held_key(&p))?;
        let d = h.discovery.lock().expect("lock").as_ref()?.0.clone();
        let mut url = d.end_session_endpoint.clone()?;
        url.query_pairs_mut()
            .append_pair("id_token_hint", id_token)
            .append_pair("client_id", &p.client_id)
            .append_pair("post_logout_redirect_uri", after);
        Some(url.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(id: &str, issuer: &str) -> OidcProvider {
        OidcProvider {
            id: id.into(),
            name: id.into(),
            issuer: issuer.into(),
            client_id: "kp".into(),
            client_secret: Some("s".into()),
            role_claim: "groups".into(),
            admin_values: vec!["admins".into()],
            viewer_values: vec!["*".into()],
            ca_pem: None,
        }
    }

    #[test]
    fn held_providers_stay_within_their_ceiling_the_least_used_going() {
        let providers: Vec<_> = (0..limits::OIDC_PROVIDER_CACHES_MAX + 3)
            .map(|i| provider("p", &format!("https://id{i}.example")))
            .collect();
        let oidc = Oidc::new(&providers[..1]);
        for p in &providers {
            oidc.held(p).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(oidc.held_count(), limits::OIDC_PROVIDER_CACHES_MAX);
        // The newest are held; the first ones went.
        let keys: Vec<_> = oidc.held.lock().unwrap().iter().map(|h| h.key).collect();
        assert!(!keys.contains(&held_key(&providers[0])));
        assert!(keys.contains(&held_key(providers.last().unwrap())));
    }

    #[tokio::test]
    async fn sign_ins_talking_to_providers_are_bounded() {
        let oidc = Oidc::new(&[provider("home", "https://id.example")]);
        let held: Vec<_> =
            (0..limits::OIDC_SIGN_INS_TALKING_MAX).map(|_| oidc.talking.try_acquire().unwrap()).collect();
        assert!(matches!(oidc.start("home", "https://nvr/api/oidc/callback").await, Err(OidcError::Busy(8))));
        assert!(matches!(oidc.finish("s", "c", Some("b")).await, Err(OidcError::Busy(8))));
        drop(held);
        assert!(matches!(oidc.finish("s", "c", Some("b")).await, Err(OidcError::UnknownState)));
    }

    #[tokio::test]
    async fn a_state_is_taken_once_and_only_in_its_browser() {
        let oidc = Oidc::new(&[provider("home", "https://id.example")]);
        // A pending login made by hand (no provider to reach).
        let insert = |state: &str, binding: &str| {
            oidc.remember(
                state.into(),
                Pending {
                    provider: "home".into(),
                    held_key: [0; 32],
                    nonce: "n".into(),
                    verifier: "v".into(),
                    binding: Sha256::digest(binding.as_bytes()).into(),
                    redirect_uri: "https://nvr/api/oidc/callback".into(),
                    started: Instant::now(),
                },
            );
            std::thread::sleep(Duration::from_micros(50));
        };
        insert("s1", "b1");
        assert!(matches!(oidc.finish("s1", "code", Some("other")).await, Err(OidcError::OtherBrowser)));
        // Taken by that try: a replay, even in the right browser, finds nothing.
        assert!(matches!(oidc.finish("s1", "code", Some("b1")).await, Err(OidcError::UnknownState)));
        assert!(matches!(oidc.finish("never", "code", Some("b1")).await, Err(OidcError::UnknownState)));
        // A sign-in older than OIDC_LOGIN_PENDING_S is refused, even in its own browser.
        let t = Instant::now();
        assert!(!expired(t, t + Duration::from_secs(limits::OIDC_LOGIN_PENDING_S - 1)));
        assert!(expired(t, t + Duration::from_secs(limits::OIDC_LOGIN_PENDING_S)));
        // The table keeps its ceiling: the oldest goes.
        for i in 0..limits::OIDC_LOGINS_PENDING_MAX + 5 {
            insert(&format!("x{i}"), "b");
        }
        assert_eq!(oidc.pending_count(), limits::OIDC_LOGINS_PENDING_MAX);
        assert!(!oidc.pending.lock().unwrap().contains_key("x0"));
        assert!(oidc.pending.lock().unwrap().contains_key(&format!("x{}", limits::OIDC_LOGINS_PENDING_MAX + 4)));
    }
}
