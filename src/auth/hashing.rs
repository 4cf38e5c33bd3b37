//! Password hashing (argon2id) into memory set aside once.
//!
//! Each hash needs [`HASH_MEMORY_BYTES`] of working memory. Left to the `argon2` crate, every
//! hash allocates it anew on whichever blocking thread runs it; glibc then keeps a malloc
//! arena per thread with those pages, and a burst of logins left the process at 438 MB RSS
//! with the budget saying 38 MiB. Here [`limits::AUTH_HASHES_CONCURRENT_MAX`] buffers are
//! allocated on first use and kept: a hash takes one for its duration (the permit and the
//! buffer are one thing), so the memory hashing holds is exactly what the budget counts.
//!
//! A login for a user that does not exist does the same work as a wrong password for one
//! that does ([`Hasher::spend`]), so the answer's time says nothing about which names exist.

use std::sync::{Arc, Mutex};

use argon2::password_hash::{Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::Semaphore;

use super::AuthError;
use crate::limits;

/// Working memory of one hash with the parameters KeepPeek writes (argon2's defaults:
/// m = 19 MiB, t = 2, p = 1, as OWASP recommends for argon2id).
pub const HASH_MEMORY_BYTES: usize = Params::DEFAULT_M_COST as usize * 1024;

/// Blocks of one buffer.
const BLOCKS: usize = Params::DEFAULT_M_COST as usize;

/// The hashing slots and their memory.
pub struct Hasher {
    permits: Arc<Semaphore>,
    /// Buffers not in use; a slot without one allocates it, once.
    spare: Arc<Mutex<Vec<Box<[Block]>>>>,
    /// Hashes computed since start.
    computed: std::sync::atomic::AtomicU64,
}

/// What to compute: a new hash, a check against a stored one, or the same work for nothing.
enum Job {
    New { salt: [u8; 16] },
    Check { phc: String },
    Spend,
}

impl Hasher {
    pub fn new() -> Hasher {
        Hasher {
            permits: Arc::new(Semaphore::new(limits::AUTH_HASHES_CONCURRENT_MAX)),
            spare: Arc::new(Mutex::new(Vec::with_capacity(limits::AUTH_HASHES_CONCURRENT_MAX))),
            computed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Runs `job` on a blocking thread with a buffer of its own, at most
    /// [`limits::AUTH_HASHES_CONCURRENT_MAX`] at once. The thread holds the slot and the
    /// buffer and gives both back itself, so a caller that goes away (a client that hung up)
    /// cannot let a third hash start while two still run.
    async fn run(&self, password: &str, job: Job) -> Result<Option<String>, AuthError> {
        let permit = self.permits.clone().acquire_owned().await.map_err(|e| AuthError::Hash(e.to_string()))?;
        self.computed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let spare = self.spare.clone();
        let password = password.to_string();
        tokio::task::spawn_blocking(move || {
            let taken = spare.lock().expect("lock").pop();
            let mut blocks = taken.unwrap_or_else(|| vec![Block::default(); BLOCKS].into_boxed_slice());
            let out = compute(&password, &job, &mut blocks);
            spare.lock().expect("lock").push(blocks);
            drop(permit);
            out
        })
        .await
        .map_err(|e| AuthError::Hash(e.to_string()))?
    }

    /// Hashes computed (or under way) since start.
    pub fn computed(&self) -> u64 {
        self.computed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new PHC string for `password`.
    pub async fn hash(&self, password: &str) -> Result<String, AuthError> {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the OS random source");
        self.run(password, Job::New { salt }).await?.ok_or_else(|| AuthError::Hash("no hash".into()))
    }

    /// True when `password` matches the stored PHC string. A stored hash this box cannot
    /// check (another algorithm, more memory than a buffer) never matches.
    pub async fn verify(&self, password: &str, phc: &str) -> bool {
        matches!(self.run(password, Job::Check { phc: phc.to_string() }).await, Ok(Some(_)))
    }

    /// The work of a check, for a user that does not exist.
    pub async fn spend(&self, password: &str) {
        let _ = self.run(password, Job::Spend).await;
    }
}

/// argon2id over `blocks`; for a check, `Some` when it matched.
fn compute(password: &str, job: &Job, blocks: &mut [Block]) -> Result<Option<String>, AuthError> {
    let hash_err = |e: argon2::Error| AuthError::Hash(e.to_string());
    match job {
        Job::New { salt } => {
            let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
            Argon2::default()
                .hash_password_into_with_memory(password.as_bytes(), salt, &mut out, blocks)
                .map_err(hash_err)?;
            let salt = SaltString::encode_b64(salt).map_err(|e| AuthError::Hash(e.to_string()))?;
            let phc = PasswordHash {
                algorithm: argon2::ARGON2ID_IDENT,
                version: Some(Version::V0x13.into()),
                params: (&Params::DEFAULT)
                    .try_into()
                    .map_err(|e: argon2::password_hash::Error| AuthError::Hash(e.to_string()))?,
                salt: Some(salt.as_salt()),
                hash: Some(Output::new(&out).map_err(|e| AuthError::Hash(e.to_string()))?),
            };
            Ok(Some(phc.to_string()))
        }
        // A new hash's work, thrown away.
        Job::Spend => compute(password, &Job::New { salt: [0; 16] }, blocks).map(|_| None),
        Job::Check { phc } => {
            let Ok(stored) = PasswordHash::new(phc) else { return Ok(None) };
            let (Some(expected), Some(salt)) = (stored.hash, stored.salt) else { return Ok(None) };
            if stored.algorithm != argon2::ARGON2ID_IDENT {
                return Ok(None);
            }
            let Ok(params) = Params::try_from(&stored) else { return Ok(None) };
            let Ok(params) = Params::new(params.m_cost(), params.t_cost(), params.p_cost(), Some(expected.len()))
            else {
                return Ok(None);
            };
            if params.block_count() > blocks.len() {
                return Ok(None);
            }
            let version = stored.version.and_then(|v| Version::try_from(v).ok()).unwrap_or_default();
            let mut salt_bytes = [0u8; 64];
            let Ok(salt) = salt.decode_b64(&mut salt_bytes) else { return Ok(None) };
            let mut out = [0u8; 64];
            let out = &mut out[..expected.len()];
            Argon2::new(Algorithm::Argon2id, version, params)
                .hash_password_into_with_memory(password.as_bytes(), salt, out, blocks)
                .map_err(hash_err)?;
            Ok(super::same(out, expected.as_bytes()).then(String::new))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::PasswordHasher;

    #[tokio::test]
    async fn hashes_check_against_themselves_and_argon2s_own_and_nothing_else() {
        let h = Hasher::new();
        let phc = h.hash("correct horse").await.unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(h.verify("correct horse", &phc).await);
        assert!(!h.verify("correct horsf", &phc).await);
        // A hash the crate made itself (as older firmware stored them) checks the same.
        let salt = SaltString::encode_b64(&[7u8; 16]).unwrap();
        let theirs = Argon2::default().hash_password(b"correct horse", &salt).unwrap().to_string();
        assert!(h.verify("correct horse", &theirs).await && !h.verify("wrong", &theirs).await);
        // Strange stored values never match.
        for bad in [
            "",
            "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaA",
            "$argon2id$v=19$m=65536,t=2,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaA",
        ] {
            assert!(!h.verify("correct horse", bad).await, "{bad}");
        }
        h.spend("whatever").await;
        // Every hash used one of the two buffers: no more were made.
        assert!(h.spare.lock().unwrap().len() <= limits::AUTH_HASHES_CONCURRENT_MAX);
    }

    #[tokio::test]
    async fn at_most_two_buffers_exist_however_many_hash_at_once() {
        let h = std::sync::Arc::new(Hasher::new());
        let all: Vec<_> = (0..6)
            .map(|i| {
                let h = h.clone();
                tokio::spawn(async move { h.spend(&format!("pw{i}")).await })
            })
            .collect();
        for t in all {
            t.await.unwrap();
        }
        assert_eq!(h.spare.lock().unwrap().len(), limits::AUTH_HASHES_CONCURRENT_MAX);
    }
}
