//! Accounts and credentials: users with argon2id password hashes, browser sessions with a
//! CSRF token each, bearer tokens with scopes for services, login rate limits, and the
//! one-time setup of the first admin.
//!
//! - There is no default password. Until an admin exists, setup is open to clients on this
//!   machine, or anywhere with the setup token printed in the log at start.
//! - Session cookies and token secrets are random 256-bit values; only their SHA-256 is kept
//!   (sessions in memory, tokens in the catalog), and they are compared in constant time.
//! - Sessions live in a fixed-size table ([`limits::AUTH_SESSIONS_MAX`]); logout removes the
//!   entry at once. A restart logs everyone out; tokens survive it.
//! - Failed logins are counted per client address and per user name in a bounded table; past
//!   [`limits::AUTH_LOGIN_FAILURES_MAX`] in [`limits::AUTH_LOGIN_WINDOW_S`], 429.
//! - Hashing is bounded to [`limits::AUTH_HASHES_CONCURRENT_MAX`] at once (each argon2id
//!   hash holds ~19 MiB) and runs off the async runtime.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::catalog::{Catalog, CatalogError};
use crate::clock::Clocks;
use crate::limits;

/// Scope bits of a bearer token.
pub mod scope {
    pub const VIEW: u8 = 1;
    pub const EVENTS_WRITE: u8 = 2;
    pub const METRICS: u8 = 4;
    pub const ADMIN: u8 = 8;
    /// Names as the API spells them.
    pub const NAMES: [(&str, u8); 4] =
        [("view", VIEW), ("events:write", EVENTS_WRITE), ("metrics", METRICS), ("admin", ADMIN)];
}

/// A user's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Viewer,
}

impl Role {
    pub fn code(self) -> u8 {
        match self {
            Role::Admin => 1,
            Role::Viewer => 2,
        }
    }
    pub fn from_code(c: u8) -> Option<Role> {
        match c {
            1 => Some(Role::Admin),
            2 => Some(Role::Viewer),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }
}

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A browser session.
    User { name: String, role: Role, session: [u8; 32], csrf: String },
    /// A service with a bearer token.
    Token { id: u64, scopes: u8 },
}

impl Principal {
    /// The principal as sessions and events name it: `user:ann`, `token:7`.
    pub fn name(&self) -> String {
        match self {
            Principal::User { name, .. } => format!("user:{name}"),
            Principal::Token { id, .. } => format!("token:{id}"),
        }
    }

    /// True when this principal holds `scope` (an admin holds every scope).
    pub fn can(&self, scope: u8) -> bool {
        match self {
            Principal::User { role: Role::Admin, .. } => true,
            Principal::User { role: Role::Viewer, .. } => scope == scope::VIEW,
            Principal::Token { scopes, .. } => scopes & scope::ADMIN != 0 || scopes & scope == scope,
        }
    }
}

/// Why an account operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{0}")]
    Invalid(String),
    #[error("wrong user name or password")]
    BadCredentials,
    #[error("too many failed logins; retry in {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    #[error("{0} is full (the maximum is {1})")]
    Full(&'static str, usize),
    #[error("password hashing failed: {0}")]
    Hash(String),
}

struct Session {
    name: String,
    role: Role,
    csrf: String,
    expires_us: i64,
}

#[derive(Default)]
struct Failures {
    /// Failed attempts in the current window, by key ("a:<address>" or "u:<name>").
    by_key: HashMap<String, (u32, i64)>,
}

/// Accounts, sessions, tokens and login limits.
pub struct Auth {
    catalog: Arc<Catalog>,
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<Failures>,
    hashing: Semaphore,
    setup_token: String,
    /// Held while the first admin is created, so two setups cannot both succeed.
    pub setup_lock: tokio::sync::Mutex<()>,
}

/// 32 random bytes as lower-case hex.
fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source");
    hex(&b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time equality of two byte strings of the same length.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a user name: short, lower-case ASCII.
pub fn check_name(name: &str) -> Result<(), AuthError> {
    let ok = !name.is_empty()
        && name.len() <= limits::AUTH_NAME_MAX_BYTES
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AuthError::Invalid(format!(
            "a user name is 1 to {} characters of a-z, 0-9, '-', '_' and '.'",
            limits::AUTH_NAME_MAX_BYTES
        )))
    }
}

/// Checks a new password's length.
pub fn check_password(pw: &str) -> Result<(), AuthError> {
    if (limits::AUTH_PASSWORD_MIN_BYTES..=limits::AUTH_PASSWORD_MAX_BYTES).contains(&pw.len()) {
        Ok(())
    } else {
        Err(AuthError::Invalid(format!(
            "a password is {} to {} bytes long",
            limits::AUTH_PASSWORD_MIN_BYTES,
            limits::AUTH_PASSWORD_MAX_BYTES
        )))
    }
}

impl Auth {
    pub fn new(catalog: Arc<Catalog>) -> Auth {
        Auth {
            catalog,
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(Failures::default()),
            hashing: Semaphore::new(limits::AUTH_HASHES_CONCURRENT_MAX),
            setup_token: random_hex()[..24].to_string(),
            setup_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The token that allows setup from another machine; the daemon logs it at start.
    pub fn setup_token(&self) -> &str {
        &self.setup_token
    }

    /// True until an admin exists.
    pub fn setup_needed(&self) -> Result<bool, AuthError> {
        Ok(!self.catalog.users()?.iter().any(|(_, r)| *r == Role::Admin.code()))
    }

    /// May this client run setup now?
    pub fn setup_allowed(&self, peer: IpAddr, token: Option<&str>) -> bool {
        peer.is_loopback() || token.is_some_and(|t| same(t.as_bytes(), self.setup_token.as_bytes()))
    }

    async fn hash(&self, password: String) -> Result<String, AuthError> {
        let _permit = self.hashing.acquire().await.map_err(|e| AuthError::Hash(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let mut salt = [0u8; 16];
            getrandom::fill(&mut salt).expect("the OS random source");
            let salt = SaltString::encode_b64(&salt).map_err(|e| AuthError::Hash(e.to_string()))?;
            Argon2::default()
                .hash_password(password.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| AuthError::Hash(e.to_string()))
        })
        .await
        .map_err(|e| AuthError::Hash(e.to_string()))?
    }

    async fn verify(&self, password: String, phc: String) -> bool {
        let Ok(_permit) = self.hashing.acquire().await else { return false };
        tokio::task::spawn_blocking(move || {
            PasswordHash::new(&phc).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
        })
        .await
        .unwrap_or(false)
    }

    /// Creates or replaces a user.
    pub async fn put_user(&self, name: &str, password: &str, role: Role) -> Result<(), AuthError> {
        check_name(name)?;
        check_password(password)?;
        let users = self.catalog.users()?;
        if users.len() >= limits::AUTH_USERS_MAX && !users.iter().any(|(n, _)| n == name) {
            return Err(AuthError::Full("the user table", limits::AUTH_USERS_MAX));
        }
        let phc = self.hash(password.to_string()).await?;
        self.catalog.put_user(name, role.code(), &phc)?;
        Ok(())
    }

    /// Checks a login against the rate limits and the stored hash; on success opens a
    /// session and returns (cookie value, CSRF token, role).
    pub async fn login(&self, peer: IpAddr, name: &str, password: &str) -> Result<(String, String, Role), AuthError> {
        let keys = [format!("a:{peer}"), format!("u:{name}")];
        self.check_rate(&keys)?;
        let user = if password.len() <= limits::AUTH_PASSWORD_MAX_BYTES { self.catalog.user(name)? } else { None };
        let ok = match &user {
            Some((_, phc)) => self.verify(password.to_string(), phc.clone()).await,
            None => false,
        };
        let role = user.and_then(|(r, _)| Role::from_code(r));
        match (ok, role) {
            (true, Some(role)) => {
                self.failures.lock().expect("lock").by_key.remove(&keys[1]);
                let (cookie, csrf) = self.open_session(name, role)?;
                Ok((cookie, csrf, role))
            }
            _ => {
                self.fail(&keys);
                Err(AuthError::BadCredentials)
            }
        }
    }

    fn check_rate(&self, keys: &[String]) -> Result<(), AuthError> {
        let now = Clocks.wall_us();
        let window_us = limits::AUTH_LOGIN_WINDOW_S as i64 * 1_000_000;
        let f = self.failures.lock().expect("lock");
        for k in keys {
            if let Some(&(count, since)) = f.by_key.get(k)
                && count >= limits::AUTH_LOGIN_FAILURES_MAX
                && now - since < window_us
            {
                return Err(AuthError::RateLimited {
                    retry_after_s: ((since + window_us - now) / 1_000_000).max(1) as u64,
                });
            }
        }
        Ok(())
    }

    fn fail(&self, keys: &[String]) {
        let now = Clocks.wall_us();
        let window_us = limits::AUTH_LOGIN_WINDOW_S as i64 * 1_000_000;
        let mut f = self.failures.lock().expect("lock");
        if f.by_key.len() + keys.len() > limits::AUTH_LOGIN_TRACKED_MAX {
            f.by_key.retain(|_, (_, since)| now - *since < window_us);
        }
        for k in keys {
            if f.by_key.len() >= limits::AUTH_LOGIN_TRACKED_MAX && !f.by_key.contains_key(k) {
                // Under a flood of distinct keys the table stays bounded; the per-user key
                // still limits guessing at any one account.
                continue;
            }
            let e = f.by_key.entry(k.clone()).or_insert((0, now));
            if now - e.1 >= window_us {
                *e = (0, now);
            }
            e.0 += 1;
        }
    }

    fn open_session(&self, name: &str, role: Role) -> Result<(String, String), AuthError> {
        let now = Clocks.wall_us();
        let mut s = self.sessions.lock().expect("lock");
        if s.len() >= limits::AUTH_SESSIONS_MAX {
            s.retain(|_, v| v.expires_us > now);
        }
        if s.len() >= limits::AUTH_SESSIONS_MAX {
            return Err(AuthError::Full("the session table", limits::AUTH_SESSIONS_MAX));
        }
        let cookie = random_hex();
        let csrf = random_hex();
        let expires_us = now + limits::AUTH_SESSION_LIFETIME_S as i64 * 1_000_000;
        s.insert(sha256(&cookie), Session { name: name.to_string(), role, csrf: csrf.clone(), expires_us });
        Ok((cookie, csrf))
    }

    /// The principal of a session cookie, if it is open. A user deleted since login has no
    /// session.
    pub fn session(&self, cookie: &str) -> Option<Principal> {
        let key = sha256(cookie);
        let mut s = self.sessions.lock().expect("lock");
        let v = s.get(&key)?;
        if v.expires_us <= Clocks.wall_us() {
            s.remove(&key);
            return None;
        }
        Some(Principal::User { name: v.name.clone(), role: v.role, session: key, csrf: v.csrf.clone() })
    }

    /// Ends a session at once.
    pub fn end_session(&self, session: &[u8; 32]) {
        self.sessions.lock().expect("lock").remove(session);
    }

    /// Ends every session of a user (deleted, or password changed).
    pub fn end_sessions_of(&self, name: &str) {
        self.sessions.lock().expect("lock").retain(|_, v| v.name != name);
    }

    /// The principal of a bearer token `kp_<id>_<secret>`.
    pub fn bearer(&self, token: &str) -> Option<Principal> {
        let rest = token.strip_prefix("kp_")?;
        let (id, secret) = rest.split_once('_')?;
        let id: u64 = id.parse().ok()?;
        let (_, hash, scopes) = self.catalog.token(id).ok()??;
        same(&hash, &sha256(secret)).then_some(Principal::Token { id, scopes })
    }

    /// Creates a token; returns its id and the token string (shown once).
    pub fn create_token(&self, name: &str, scopes: u8) -> Result<(u64, String), AuthError> {
        check_name(name)?;
        if self.catalog.tokens()?.len() >= limits::AUTH_TOKENS_MAX {
            return Err(AuthError::Full("the token table", limits::AUTH_TOKENS_MAX));
        }
        let secret = random_hex();
        let id = self.catalog.add_token(name, &sha256(&secret), scopes, Clocks.wall_us())?;
        Ok((id, format!("kp_{id}_{secret}")))
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> (tempfile::TempDir, Auth) {
        let dir = tempfile::tempdir().unwrap();
        let cat = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        (dir, Auth::new(cat))
    }

    #[tokio::test]
    async fn setup_login_logout_and_tokens() {
        let (_d, a) = auth();
        assert!(a.setup_needed().unwrap());
        assert!(a.setup_allowed("127.0.0.1".parse().unwrap(), None));
        assert!(!a.setup_allowed("192.0.2.7".parse().unwrap(), Some("wrong")));
        assert!(a.setup_allowed("192.0.2.7".parse().unwrap(), Some(&a.setup_token().to_string())));
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        assert!(!a.setup_needed().unwrap());
        let peer = "192.0.2.1".parse().unwrap();
        assert!(matches!(a.login(peer, "root", "wrong one").await, Err(AuthError::BadCredentials)));
        let (cookie, csrf, role) = a.login(peer, "root", "correct horse").await.unwrap();
        assert_eq!(role, Role::Admin);
        let Some(Principal::User { session, csrf: c, .. }) = a.session(&cookie) else { panic!("a session") };
        assert_eq!(c, csrf);
        a.end_session(&session);
        assert!(a.session(&cookie).is_none(), "logout revokes at once");

        let (id, token) = a.create_token("detector", scope::EVENTS_WRITE).unwrap();
        let p = a.bearer(&token).unwrap();
        assert_eq!(p, Principal::Token { id, scopes: scope::EVENTS_WRITE });
        assert!(p.can(scope::EVENTS_WRITE) && !p.can(scope::METRICS) && !p.can(scope::ADMIN));
        assert!(a.bearer(&token.replace(&token[token.len() - 4..], "0000")).is_none());
        assert!(a.catalog().delete_token(id).unwrap());
        assert!(a.bearer(&token).is_none(), "revoked");
    }

    #[tokio::test]
    async fn failed_logins_are_limited_per_user_and_per_address() {
        let (_d, a) = auth();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let peer = "192.0.2.1".parse().unwrap();
        for _ in 0..limits::AUTH_LOGIN_FAILURES_MAX {
            assert!(matches!(a.login(peer, "root", "nope nope").await, Err(AuthError::BadCredentials)));
        }
        assert!(matches!(a.login(peer, "root", "correct horse").await, Err(AuthError::RateLimited { .. })));
        // Another address is limited too, for this user.
        assert!(matches!(
            a.login("192.0.2.2".parse().unwrap(), "root", "correct horse").await,
            Err(AuthError::RateLimited { .. })
        ));
    }

    #[test]
    fn viewers_only_view_and_admin_tokens_do_everything() {
        let viewer = Principal::User { name: "v".into(), role: Role::Viewer, session: [0; 32], csrf: String::new() };
        assert!(viewer.can(scope::VIEW) && !viewer.can(scope::ADMIN) && !viewer.can(scope::METRICS));
        let admin = Principal::Token { id: 1, scopes: scope::ADMIN };
        assert!(admin.can(scope::METRICS) && admin.can(scope::VIEW));
    }

    #[test]
    fn names_and_passwords_are_checked() {
        assert!(check_name("front-desk_1.a").is_ok());
        assert!(check_name("Root").is_err() && check_name("").is_err() && check_name(&"a".repeat(33)).is_err());
        assert!(check_password("short").is_err());
        assert!(check_password(&"p".repeat(limits::AUTH_PASSWORD_MAX_BYTES + 1)).is_err());
    }
}
