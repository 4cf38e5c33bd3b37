//! Accounts and credentials: users with argon2id password hashes, browser sessions with a
//! CSRF token each, bearer tokens with scopes for services, login rate limits, and the
//! one-time setup of the first admin.
//!
//! - There is no default password. Until an admin exists, setup is open to clients on this
//!   machine, or anywhere with the setup token printed in the log at start.
//! - Session cookies and token secrets are random 256-bit values; only their SHA-256 is kept
//!   (sessions in memory, tokens in the catalog), and they are compared in constant time.
//! - Setup makes the first admin once: the setup token works for one setup, and the last admin
//!   can be neither deleted nor made a viewer, so setup never opens again.
//! - Sessions live in a fixed-size table ([`limits::AUTH_SESSIONS_MAX`]), at most
//!   [`limits::AUTH_SESSIONS_PER_USER_MAX`] per user (a new one ends that user's oldest). A
//!   full table ends the oldest viewer's session (the oldest of all when every one is an
//!   admin's), so it never refuses a login. Logout, a password change and deleting the user
//!   end sessions at once; the caller is told which, to close what they opened. A restart
//!   logs everyone out; tokens survive it.
//! - Failed logins are limited per address and user, per address, and (as a delay) per user
//!   ([`limiter`]). An unknown user costs the same hash as a wrong password.
//! - Hashing is bounded to [`limits::AUTH_HASHES_CONCURRENT_MAX`] at once, into memory set
//!   aside once ([`hashing`]), off the async runtime. Logins wait for it (and for a slowed
//!   turn) in their own line of [`limits::AUTH_LOGINS_IN_FLIGHT_MAX`], not in the HTTP
//!   handler slots: a login flood cannot keep other requests out.

pub mod hashing;
pub mod limiter;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::catalog::{Catalog, CatalogError};
use crate::clock::SharedClocks;
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
    /// A field of the request (named as the API names it) is not acceptable.
    #[error("{reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("wrong user name or password")]
    BadCredentials,
    #[error("too many failed logins; retry in {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    #[error("a wrong password came from here a moment ago; retry in {retry_after_s} s")]
    Paused { retry_after_s: u64 },
    #[error("{0} is full (the maximum is {1})")]
    Full(&'static str, usize),
    #[error("this is the last admin: make another admin first")]
    LastAdmin,
    #[error("{0} logins are in progress, the most at once: try again shortly")]
    Busy(usize),
    #[error("{0} logins from this address are in progress, the most at once: wait for them")]
    AddressBusy(u32),
    #[error("password hashing failed: {0}")]
    Hash(String),
}

struct Session {
    name: String,
    role: Role,
    /// How the person signed in with a provider (none: a local account).
    sso: Option<Arc<SsoLogin>>,
    csrf: String,
    /// Order of opening (the oldest has the smallest).
    serial: u64,
    expires_us: i64,
}

/// A session opened by single sign-on: the provider, the name people see, and the id token
/// (the provider's logout takes it as a hint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoLogin {
    pub provider: String,
    pub display: String,
    pub id_token: String,
}

/// A session's key: the SHA-256 of its cookie.
pub type SessionKey = [u8; 32];

/// Accounts, sessions, tokens and login limits.
pub struct Auth {
    catalog: Arc<Catalog>,
    sessions: Mutex<HashMap<SessionKey, Session>>,
    limiter: Mutex<limiter::Limiter>,
    hasher: hashing::Hasher,
    /// Until the first setup succeeds.
    setup_token: Mutex<Option<String>>,
    /// Held while the first admin is created, so two setups cannot both succeed.
    pub setup_lock: tokio::sync::Mutex<()>,
    /// Held across the last-admin check and the write that follows it.
    admins: Mutex<()>,
    /// The next session's [`Session::serial`].
    serial: std::sync::atomic::AtomicU64,
    /// Tokens checked since start: id → (secret's SHA-256, scopes), at most the token table's
    /// [`limits::AUTH_TOKENS_MAX`]; a revocation goes through [`Auth::delete_token`], which
    /// forgets it here first.
    tokens: std::sync::RwLock<HashMap<u64, ([u8; 32], u8)>>,
    /// Logins in progress ([`limits::AUTH_LOGINS_IN_FLIGHT_MAX`]): they wait for a hash or a
    /// slowed turn here, never in the handler slots other requests need.
    logins: tokio::sync::Semaphore,
    /// Session lifetimes (wall time) and login windows (monotonic time).
    clocks: SharedClocks,
}

/// A successful login: the cookie, its CSRF token and role, and the sessions it ended.
#[derive(Debug)]
pub struct Login {
    pub cookie: String,
    pub csrf: String,
    pub role: Role,
    /// Sessions that went to make room for this one.
    pub ended: Vec<SessionKey>,
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
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
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
        Err(AuthError::Invalid {
            field: "username",
            reason: format!(
                "a user name is 1 to {} characters of a-z, 0-9, '-', '_' and '.'",
                limits::AUTH_NAME_MAX_BYTES
            ),
        })
    }
}

/// Checks a new password's length.
pub fn check_password(pw: &str) -> Result<(), AuthError> {
    if (limits::AUTH_PASSWORD_MIN_BYTES..=limits::AUTH_PASSWORD_MAX_BYTES).contains(&pw.len()) {
        Ok(())
    } else {
        Err(AuthError::Invalid {
            field: "password",
            reason: format!(
                "a password is {} to {} bytes long",
                limits::AUTH_PASSWORD_MIN_BYTES,
                limits::AUTH_PASSWORD_MAX_BYTES
            ),
        })
    }
}

impl Auth {
    pub fn new(catalog: Arc<Catalog>, clocks: SharedClocks) -> Auth {
        Auth {
            catalog,
            sessions: Mutex::new(HashMap::with_capacity(limits::AUTH_SESSIONS_MAX)),
            limiter: Mutex::new(limiter::Limiter::new()),
            hasher: hashing::Hasher::new(),
            setup_token: Mutex::new(Some(random_hex()[..24].to_string())),
            setup_lock: tokio::sync::Mutex::new(()),
            admins: Mutex::new(()),
            serial: 0.into(),
            tokens: Default::default(),
            logins: tokio::sync::Semaphore::new(limits::AUTH_LOGINS_IN_FLIGHT_MAX),
            clocks,
        }
    }

    /// The token that allows setup from another machine, until the first setup; the daemon
    /// logs it at start (the support bundle leaves it out).
    pub fn setup_token(&self) -> Option<String> {
        self.setup_token.lock().expect("lock").clone()
    }

    /// True until an admin exists.
    pub fn setup_needed(&self) -> Result<bool, AuthError> {
        Ok(!self.catalog.users()?.iter().any(|(_, r)| *r == Role::Admin.code()))
    }

    /// May this client run setup now?
    pub fn setup_allowed(&self, peer: IpAddr, token: Option<&str>) -> bool {
        let ours = self.setup_token.lock().expect("lock");
        peer.is_loopback() || ours.as_deref().zip(token).is_some_and(|(o, t)| same(t.as_bytes(), o.as_bytes()))
    }

    /// The first admin was made: the setup token is spent.
    pub fn setup_done(&self) {
        self.setup_token.lock().expect("lock").take();
    }

    /// Creates or replaces a user. Replacing ends the user's sessions (returned, so their
    /// live views can be closed too); the last admin cannot be made a viewer.
    pub async fn put_user(&self, name: &str, password: &str, role: Role) -> Result<Vec<SessionKey>, AuthError> {
        check_name(name)?;
        check_password(password)?;
        let users = self.catalog.users()?;
        if users.len() >= limits::AUTH_USERS_MAX && !users.iter().any(|(n, _)| n == name) {
            return Err(AuthError::Full("the user table", limits::AUTH_USERS_MAX));
        }
        let phc = self.hasher.hash(password).await?;
        {
            let _admins = self.admins.lock().expect("lock");
            if role != Role::Admin {
                self.refuse_last_admin(name)?;
            }
            self.catalog.put_user(name, role.code(), &phc)?;
        }
        Ok(self.end_sessions_of(name))
    }

    /// Deletes a user and ends their sessions (returned); the last admin stays.
    pub fn delete_user(&self, name: &str) -> Result<Option<Vec<SessionKey>>, AuthError> {
        {
            let _admins = self.admins.lock().expect("lock");
            self.refuse_last_admin(name)?;
            if !self.catalog.delete_user(name)? {
                return Ok(None);
            }
        }
        Ok(Some(self.end_sessions_of(name)))
    }

    /// Err when `name` is the only admin.
    fn refuse_last_admin(&self, name: &str) -> Result<(), AuthError> {
        let users = self.catalog.users()?;
        let admin = Role::Admin.code();
        let is_admin = users.iter().any(|(n, r)| n == name && *r == admin);
        if is_admin && users.iter().filter(|(_, r)| *r == admin).count() == 1 {
            return Err(AuthError::LastAdmin);
        }
        Ok(())
    }

    /// Checks a login against the limits and the stored hash; on success opens a session.
    pub async fn login(&self, peer: IpAddr, name: &str, password: &str) -> Result<Login, AuthError> {
        let _turn = self.logins.try_acquire().map_err(|_| AuthError::Busy(limits::AUTH_LOGINS_IN_FLIGHT_MAX))?;
        // A name that cannot exist is counted by address alone.
        let key = check_name(name).ok().and_then(|()| limiter::Name::try_from(name).ok());
        // Monotonic time: a step of the wall clock neither lengthens nor ends a window. The
        // try counts as failed from now until it succeeds.
        let now_us = self.clocks.mono_us();
        let attempt = self.limiter.lock().expect("lock").attempt(peer, key.as_ref(), now_us);
        let attempt = attempt.map_err(|r| match r {
            limiter::Refusal::Limited { retry_after_s } => AuthError::RateLimited { retry_after_s },
            limiter::Refusal::Paused { retry_after_s } => AuthError::Paused { retry_after_s },
            limiter::Refusal::InFlight => AuthError::AddressBusy(limits::AUTH_LOGINS_IN_FLIGHT_PER_ADDRESS_MAX),
        })?;
        /// Ends the try however the login ends (its client may leave mid-hash).
        struct Trying<'a>(&'a Mutex<limiter::Limiter>, limiter::Try);
        impl Drop for Trying<'_> {
            fn drop(&mut self) {
                self.0.lock().expect("lock").ended(&self.1);
            }
        }
        let trying = Trying(&self.limiter, attempt);
        if trying.1.slow {
            tokio::time::sleep(std::time::Duration::from_millis(limits::AUTH_LOGIN_SLOW_DELAY_MS)).await
        }
        let fits = password.len() <= limits::AUTH_PASSWORD_MAX_BYTES;
        let user = match (&key, fits) {
            (Some(_), true) => self.catalog.user(name)?,
            _ => None,
        };
        // The same work whether the user exists or not.
        let ok = match &user {
            Some((_, phc)) => self.hasher.verify(password, phc).await,
            None => {
                // argon2's time does not depend on the password's length.
                self.hasher.spend(if fits { password } else { "" }).await;
                false
            }
        };
        let role = user.and_then(|(r, _)| Role::from_code(r));
        match (ok, role, &key) {
            (true, Some(role), Some(key)) => {
                self.limiter.lock().expect("lock").succeeded(key, &trying.1);
                let (cookie, csrf, ended) = self.open_session(name, role, None);
                Ok(Login { cookie, csrf, role, ended })
            }
            // Counted when it started; the address pauses.
            _ => {
                self.limiter.lock().expect("lock").wrong(&trying.1, self.clocks.mono_us());
                Err(AuthError::BadCredentials)
            }
        }
    }

    /// Opens a session; returns its cookie, its CSRF token and the sessions that went to make
    /// room: this user's oldest past [`limits::AUTH_SESSIONS_PER_USER_MAX`], and in a full
    /// table the oldest viewer's (the oldest of all when every one is an admin's).
    pub(crate) fn open_session(
        &self,
        name: &str,
        role: Role,
        sso: Option<SsoLogin>,
    ) -> (String, String, Vec<SessionKey>) {
        let now = self.clocks.wall_us();
        let mut s = self.sessions.lock().expect("lock");
        let mut ended = Vec::new();
        s.retain(|_, v| v.expires_us > now);
        let oldest = |s: &HashMap<SessionKey, Session>, pick: &dyn Fn(&Session) -> bool| {
            s.iter().filter(|(_, v)| pick(v)).min_by_key(|(_, v)| v.serial).map(|(k, _)| *k)
        };
        if s.values().filter(|v| v.name == name).count() >= limits::AUTH_SESSIONS_PER_USER_MAX
            && let Some(k) = oldest(&s, &|v| v.name == name)
        {
            s.remove(&k);
            ended.push(k);
        }
        if s.len() >= limits::AUTH_SESSIONS_MAX
            && let Some(k) = oldest(&s, &|v| v.role != Role::Admin).or_else(|| oldest(&s, &|_| true))
        {
            s.remove(&k);
            ended.push(k);
        }
        let cookie = random_hex();
        let csrf = random_hex();
        let expires_us = now + limits::AUTH_SESSION_LIFETIME_S as i64 * 1_000_000;
        let serial = self.serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session =
            Session { name: name.to_string(), role, sso: sso.map(Arc::new), csrf: csrf.clone(), serial, expires_us };
        s.insert(sha256(&cookie), session);
        (cookie, csrf, ended)
    }

    /// The principal of a session cookie, if it is open. A user deleted since login has no
    /// session.
    pub fn session(&self, cookie: &str) -> Option<Principal> {
        let key = sha256(cookie);
        let mut s = self.sessions.lock().expect("lock");
        let v = s.get(&key)?;
        if v.expires_us <= self.clocks.wall_us() {
            s.remove(&key);
            return None;
        }
        Some(Principal::User { name: v.name.clone(), role: v.role, session: key, csrf: v.csrf.clone() })
    }

    /// Sessions held now, open or expired and not yet swept.
    pub fn sessions_held(&self) -> usize {
        self.sessions.lock().expect("lock").len()
    }

    /// Ends a session at once; how it signed in, when by a provider.
    pub fn end_session(&self, session: &[u8; 32]) -> Option<Arc<SsoLogin>> {
        self.sessions.lock().expect("lock").remove(session).and_then(|s| s.sso)
    }

    /// How an open session signed in, when by a provider.
    pub fn sso_of(&self, session: &[u8; 32]) -> Option<Arc<SsoLogin>> {
        self.sessions.lock().expect("lock").get(session).and_then(|s| s.sso.clone())
    }

    /// Opens a session for someone a provider signed in (no password: the provider checked
    /// them), as [`Auth::login`] does for a local account.
    pub fn open_sso_session(&self, name: &str, role: Role, sso: SsoLogin) -> Login {
        let (cookie, csrf, ended) = self.open_session(name, role, Some(sso));
        Login { cookie, csrf, role, ended }
    }

    /// Ends every session of a user (deleted, or password changed); returns them.
    fn end_sessions_of(&self, name: &str) -> Vec<SessionKey> {
        let mut s = self.sessions.lock().expect("lock");
        let ended: Vec<SessionKey> = s.iter().filter(|(_, v)| v.name == name).map(|(k, _)| *k).collect();
        for k in &ended {
            s.remove(k);
        }
        ended
    }

    /// The principal of a bearer token `kp_<id>_<secret>`.
    pub fn bearer(&self, token: &str) -> Option<Principal> {
        let rest = token.strip_prefix("kp_")?;
        let (id, secret) = rest.split_once('_')?;
        let id: u64 = id.parse().ok()?;
        let known = self.tokens.read().expect("lock").get(&id).copied();
        let (hash, scopes) = match known {
            Some(k) => k,
            None => {
                // Read once from the catalog, then kept: a service's every request is checked.
                // Under the write lock, so a revocation cannot fall between the read and the
                // keeping.
                let mut known = self.tokens.write().expect("lock");
                let (_, hash, scopes) = self.catalog.token(id).ok()??;
                let hash: [u8; 32] = hash.try_into().ok()?;
                known.insert(id, (hash, scopes));
                (hash, scopes)
            }
        };
        same(&hash, &sha256(secret)).then_some(Principal::Token { id, scopes })
    }

    /// Revokes token `id` at once; false when there was none.
    pub fn delete_token(&self, id: u64) -> Result<bool, AuthError> {
        let mut known = self.tokens.write().expect("lock");
        known.remove(&id);
        Ok(self.catalog.delete_token(id)?)
    }

    /// Creates a token; returns its id and the token string (shown once).
    pub fn create_token(&self, name: &str, scopes: u8) -> Result<(u64, String), AuthError> {
        check_name(name)?;
        if self.catalog.tokens()?.len() >= limits::AUTH_TOKENS_MAX {
            return Err(AuthError::Full("the token table", limits::AUTH_TOKENS_MAX));
        }
        let secret = random_hex();
        let id = self.catalog.add_token(name, &sha256(&secret), scopes, self.clocks.wall_us())?;
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
        (dir, Auth::new(cat, crate::clock::RealClocks::shared()))
    }

    #[tokio::test]
    async fn setup_login_logout_and_tokens() {
        let (_d, a, clocks) = auth_simulated();
        assert!(a.setup_needed().unwrap());
        assert!(a.setup_allowed("127.0.0.1".parse().unwrap(), None));
        assert!(!a.setup_allowed("192.0.2.7".parse().unwrap(), Some("wrong")));
        let token = a.setup_token().unwrap();
        assert!(a.setup_allowed("192.0.2.7".parse().unwrap(), Some(&token)));
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        a.setup_done();
        assert!(!a.setup_allowed("192.0.2.7".parse().unwrap(), Some(&token)), "the token is spent");
        assert!(!a.setup_needed().unwrap());
        let peer = "192.0.2.1".parse().unwrap();
        assert!(matches!(a.login(peer, "root", "wrong one").await, Err(AuthError::BadCredentials)));
        clocks.advance(pause());
        let Login { cookie, csrf, role, .. } = a.login(peer, "root", "correct horse").await.unwrap();
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
        assert!(a.delete_token(id).unwrap());
        assert!(a.bearer(&token).is_none(), "revoked");
        assert!(!a.delete_token(id).unwrap());
    }

    /// An `Auth` on simulated clocks, and its clocks.
    fn auth_simulated() -> (tempfile::TempDir, Auth, crate::clock::SimulatedClocks) {
        let dir = tempfile::tempdir().unwrap();
        let cat = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let clocks = crate::clock::SimulatedClocks::new(1_800_000_000_000_000);
        (dir, Auth::new(cat, clocks.shared()), clocks)
    }

    fn pause() -> std::time::Duration {
        std::time::Duration::from_millis(limits::AUTH_LOGIN_FAILURE_PAUSE_MS)
    }

    #[tokio::test]
    async fn a_wrong_password_pauses_its_address_and_no_hash_is_spent_in_the_pause() {
        let (_d, a, clocks) = auth_simulated();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let (peer, other): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        assert!(matches!(a.login(peer, "root", "nope nope").await, Err(AuthError::BadCredentials)));
        // Even the right password waits out the pause; it costs no hash.
        let hashes = a.hasher.computed();
        let refused = a.login(peer, "root", "correct horse").await;
        assert!(matches!(refused, Err(AuthError::Paused { retry_after_s: 1 })), "{refused:?}");
        assert_eq!(a.hasher.computed(), hashes, "refused before hashing");
        assert!(a.login(other, "root", "correct horse").await.is_ok(), "another address is not paused");
        clocks.advance(pause() - std::time::Duration::from_micros(1));
        assert!(matches!(a.login(peer, "root", "correct horse").await, Err(AuthError::Paused { .. })));
        clocks.advance(std::time::Duration::from_micros(1));
        assert!(a.login(peer, "root", "correct horse").await.is_ok(), "the pause is over");
    }

    #[tokio::test]
    async fn failed_logins_are_limited_per_user_and_per_address() {
        let (_d, a, clocks) = auth_simulated();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let peer = "192.0.2.1".parse().unwrap();
        for _ in 0..limits::AUTH_LOGIN_FAILURES_MAX {
            assert!(matches!(a.login(peer, "root", "nope nope").await, Err(AuthError::BadCredentials)));
            clocks.advance(pause());
        }
        assert!(matches!(a.login(peer, "root", "correct horse").await, Err(AuthError::RateLimited { .. })));
        // Another address is not: others' failures never lock a user out.
        assert!(a.login("192.0.2.2".parse().unwrap(), "root", "correct horse").await.is_ok());
    }

    /// Ten wrong passwords sent at once from one address: four run (the rest are refused at
    /// once), each counted when it starts, so the address gets one try more and no burst
    /// gets past the limit.
    #[tokio::test]
    async fn logins_at_once_from_one_address_are_counted_before_any_ends() {
        let (_d, a, clocks) = auth_simulated();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let burst = futures::future::join_all((0..10).map(|_| a.login(peer, "root", "nope nope"))).await;
        let wrong = burst.iter().filter(|r| matches!(r, Err(AuthError::BadCredentials))).count();
        let waiting = burst.iter().filter(|r| matches!(r, Err(AuthError::AddressBusy(4)))).count();
        assert_eq!((wrong, waiting), (4, 6), "{burst:?}");
        clocks.advance(pause());
        assert!(matches!(a.login(peer, "root", "nope nope").await, Err(AuthError::BadCredentials)));
        clocks.advance(pause());
        assert!(matches!(a.login(peer, "root", "correct horse").await, Err(AuthError::RateLimited { .. })));
        assert_eq!(a.limiter.lock().unwrap().in_flight(peer), 0, "every try ended");
    }

    #[tokio::test]
    async fn one_user_holds_at_most_its_share_of_sessions_and_a_full_table_still_admits_an_admin() {
        let (_d, a) = auth();
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let viewers = limits::AUTH_SESSIONS_MAX / limits::AUTH_SESSIONS_PER_USER_MAX;
        for v in 0..viewers {
            a.put_user(&format!("v{v}"), "viewer password", Role::Viewer).await.unwrap();
        }
        // One viewer: its 17th session ends its first.
        let mut first = Vec::new();
        for i in 0..=limits::AUTH_SESSIONS_PER_USER_MAX {
            let (cookie, _, ended) = a.open_session("v0", Role::Viewer, None);
            first.push(cookie);
            assert_eq!(ended.len(), usize::from(i == limits::AUTH_SESSIONS_PER_USER_MAX));
        }
        assert!(a.session(&first[0]).is_none() && a.session(&first[1]).is_some());
        // Every viewer at its share: the table is full, and an admin still logs in.
        for v in 1..viewers {
            for _ in 0..limits::AUTH_SESSIONS_PER_USER_MAX {
                a.open_session(&format!("v{v}"), Role::Viewer, None);
            }
        }
        assert_eq!(a.sessions.lock().unwrap().len(), limits::AUTH_SESSIONS_MAX);
        let login = a.login(peer, "root", "correct horse").await.unwrap();
        assert_eq!(login.ended.len(), 1, "the oldest viewer session went");
        assert!(a.session(&first[1]).is_none(), "it was v0's oldest left");
        assert_eq!(a.sessions.lock().unwrap().len(), limits::AUTH_SESSIONS_MAX);
    }

    #[tokio::test]
    async fn past_the_logins_in_flight_a_login_is_refused_at_once() {
        let (_d, a) = auth();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let held = a.logins.try_acquire_many(limits::AUTH_LOGINS_IN_FLIGHT_MAX as u32).unwrap();
        assert!(matches!(a.login(peer, "root", "correct horse").await, Err(AuthError::Busy(32))));
        drop(held);
        assert!(a.login(peer, "root", "correct horse").await.is_ok());
    }

    #[tokio::test]
    async fn the_last_admin_can_be_neither_deleted_nor_demoted() {
        let (_d, a) = auth();
        a.put_user("root", "correct horse", Role::Admin).await.unwrap();
        assert!(matches!(a.delete_user("root"), Err(AuthError::LastAdmin)));
        assert!(matches!(a.put_user("root", "correct horse", Role::Viewer).await, Err(AuthError::LastAdmin)));
        a.put_user("second", "correct horse", Role::Admin).await.unwrap();
        assert!(a.put_user("root", "correct horse", Role::Viewer).await.is_ok());
        assert!(matches!(a.delete_user("second"), Err(AuthError::LastAdmin)));
        assert!(a.delete_user("root").unwrap().is_some());
        assert!(!a.setup_needed().unwrap());
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
