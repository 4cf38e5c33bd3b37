//! HTTPS on the LAN: the certificate the web face serves, kept on the data partition, and
//! the bound on TLS handshakes in progress.
//!
//! - The box makes its own certificate ([`cert`]) on first start, and again when it gains an
//!   address or a name, or nears its end; its key is made once and kept (`own.key`, mode
//!   `0600` in a `0700` directory), so a client that pins the key keeps working.
//! - An admin may upload a certificate chain and key of their own (`uploaded.crt`,
//!   `uploaded.key`); they are served instead of the box's own until removed. An upload that
//!   no longer loads at start is left on disk, logged, and the box's own is served.
//! - The certificate served is swapped in place: a handshake takes whichever is current,
//!   connections already open keep theirs, nothing restarts.
//! - Each certificate served is logged with its SHA-256 fingerprint (the console shows the
//!   log), so a user can check the one their browser warns about.
//!
//! Handshakes in progress are bounded by [`Handshakes`]: a client that opens TLS and stops
//! holds a handshake place (never a connection slot) until it is done, its
//! [`limits::TLS_HANDSHAKE_TIMEOUT_MS`] runs out, or a newcomer finds every place taken and
//! it is the oldest.

pub mod cert;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::limits;
pub use cert::{CertError, CertInfo, Name};

/// Where the certificate served comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Made by the box itself.
    Own,
    /// Uploaded by an admin.
    Uploaded,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Own => "own",
            Source::Uploaded => "uploaded",
        }
    }
}

/// The certificate served now.
#[derive(Debug)]
pub struct Serving {
    pub source: Source,
    pub info: CertInfo,
    /// Why the box last made its own certificate (at start: none when it kept the one it had).
    pub made_because: Option<String>,
    signing: Arc<CertifiedKey>,
}

/// Why the certificate store failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("the TLS configuration could not be built: {0}")]
    Config(String),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> TlsError + 'a {
    move |source| TlsError::Io { what, path: path.to_path_buf(), source }
}

/// The box's certificates and the one served now.
#[derive(Debug)]
pub struct Tls {
    dir: PathBuf,
    host_name: String,
    current: RwLock<Arc<Serving>>,
    /// Uploads, removals and remakes one at a time (each writes files, then swaps).
    changing: Mutex<()>,
}

const OWN_KEY: &str = "own.key";
const OWN_CERT: &str = "own.crt";
const UPLOADED_KEY: &str = "uploaded.key";
const UPLOADED_CERT: &str = "uploaded.crt";

/// The addresses the box has now (none when they cannot be read).
pub fn addresses() -> Vec<IpAddr> {
    if_addrs::get_if_addrs().map(|a| a.into_iter().map(|i| i.ip()).collect()).unwrap_or_default()
}

/// The box's host name (the kernel's), or `keeppeek` when it has none.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    if name.is_empty() || name == "(none)" { "keeppeek".into() } else { name.into() }
}

fn read_small(path: &Path) -> Result<Option<Vec<u8>>, TlsError> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("cannot read", path)(e)),
    };
    let mut bytes = Vec::new();
    // A file past the upload ceiling is no certificate or key of ours: read a byte past it and
    // let the check refuse what is there.
    file.take(limits::TLS_UPLOAD_MAX_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(io("cannot read", path))?;
    Ok(Some(bytes))
}

impl Tls {
    /// Opens the store in `dir`: the uploaded certificate when there is one that loads, else
    /// the box's own (its key and certificate made when missing, and the certificate made
    /// again when `addresses` or the dates call for it).
    pub fn open(
        dir: &Path,
        host_name: &str,
        addresses: &[IpAddr],
        now_s: i64,
        clock_sane: bool,
    ) -> Result<Tls, TlsError> {
        crate::base::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io("cannot restrict", dir))?;
        }
        let tls = Tls {
            dir: dir.to_path_buf(),
            host_name: host_name.to_string(),
            current: RwLock::new(Arc::new(Tls::own(dir, host_name, addresses, now_s, clock_sane)?)),
            changing: Mutex::new(()),
        };
        match tls.load_uploaded() {
            Ok(Some(serving)) => *tls.current.write().expect("lock") = Arc::new(serving),
            Ok(None) => {}
            Err(e) => warn!("the uploaded HTTPS certificate does not load, serving the box's own: {e}"),
        }
        tls.announce();
        Ok(tls)
    }

    /// The box's own certificate: loaded, or made (and written) when missing, broken, or
    /// when [`cert::remake_reason`] says so.
    fn own(
        dir: &Path,
        host_name: &str,
        addresses: &[IpAddr],
        now_s: i64,
        clock_sane: bool,
    ) -> Result<Serving, TlsError> {
        let key_path = dir.join(OWN_KEY);
        let key_pem = match read_small(&key_path)?.map(String::from_utf8) {
            Some(Ok(k)) if rcgen::KeyPair::from_pem(&k).is_ok() => k,
            found => {
                if found.is_some() {
                    warn!(path = %key_path.display(), "the box's HTTPS key does not load: making a new one");
                }
                let k = cert::new_key_pem()?;
                crate::base::fs::write_synced_private(&key_path, k.as_bytes())
                    .map_err(io("cannot write", &key_path))?;
                k
            }
        };
        let wanted = cert::own_names(host_name, addresses);
        let cert_path = dir.join(OWN_CERT);
        let kept = match read_small(&cert_path)? {
            Some(pem) => match cert::check_pair(&pem, key_pem.as_bytes()) {
                Ok(c) => match cert::remake_reason(&c.info, &wanted, now_s, clock_sane) {
                    None => {
                        return Ok(Serving {
                            source: Source::Own,
                            info: c.info,
                            made_because: None,
                            signing: c.signing,
                        });
                    }
                    Some(why) => Some((why, c.info.names)),
                },
                Err(e) => Some((format!("the one on disk does not load ({e})"), Vec::new())),
            },
            None => None,
        };
        let (why, mut names) = kept.unwrap_or_else(|| ("the box had none".into(), Vec::new()));
        // Names the box had keep being served until they are past (an address that comes and
        // goes does not cost a new certificate each time), at most TLS_CERT_PAST_NAMES_MAX.
        names.retain(|n| !wanted.contains(n));
        let mut all = wanted;
        all.extend(names.into_iter().take(limits::TLS_CERT_PAST_NAMES_MAX));
        all.sort();
        // A clock not set yet makes dates from the firmware's build instead.
        let base_s = if clock_sane { now_s } else { now_s.max(crate::clock::BUILD_WALL_US / 1_000_000) };
        let pem = cert::make_own(&key_pem, host_name, &all, base_s)?;
        crate::base::fs::write_synced(&cert_path, pem.as_bytes()).map_err(io("cannot write", &cert_path))?;
        let c = cert::check_pair(pem.as_bytes(), key_pem.as_bytes())?;
        Ok(Serving { source: Source::Own, info: c.info, made_because: Some(why), signing: c.signing })
    }

    fn load_uploaded(&self) -> Result<Option<Serving>, TlsError> {
        let (cert_path, key_path) = (self.dir.join(UPLOADED_CERT), self.dir.join(UPLOADED_KEY));
        let (Some(cert_pem), Some(key_pem)) = (read_small(&cert_path)?, read_small(&key_path)?) else {
            return Ok(None);
        };
        let c = cert::check_pair(&cert_pem, &key_pem)?;
        Ok(Some(Serving { source: Source::Uploaded, info: c.info, made_because: None, signing: c.signing }))
    }

    /// Logs the certificate served, fingerprint first (the console shows it).
    fn announce(&self) {
        let s = self.current();
        let names = s.info.names.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        info!(
            fingerprint = %s.info.fingerprint(),
            pin = %s.info.pin(),
            source = s.source.name(),
            valid_until = %cert::utc(s.info.not_after_s),
            names = ?names,
            made_because = ?s.made_because.as_deref().unwrap_or("-"),
            "HTTPS certificate (SHA-256 fingerprint)"
        );
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<Serving> {
        self.current.read().expect("lock").clone()
    }

    /// Serves an admin's certificate chain and key from now on, once checked
    /// ([`cert::check_upload`]) and written.
    pub fn upload(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        asked: &Name,
        now_s: i64,
        clock_sane: bool,
    ) -> Result<Arc<Serving>, TlsError> {
        let _one = self.changing.lock().expect("lock");
        let c = cert::check_upload(cert_pem, key_pem, asked, now_s, clock_sane)?;
        let (cert_path, key_path) = (self.dir.join(UPLOADED_CERT), self.dir.join(UPLOADED_KEY));
        // The key first: a power cut between the two leaves a pair that does not match, which
        // the next start logs and passes over.
        crate::base::fs::write_synced_private(&key_path, key_pem).map_err(io("cannot write", &key_path))?;
        crate::base::fs::write_synced(&cert_path, cert_pem).map_err(io("cannot write", &cert_path))?;
        let serving =
            Arc::new(Serving { source: Source::Uploaded, info: c.info, made_because: None, signing: c.signing });
        *self.current.write().expect("lock") = serving.clone();
        self.announce();
        Ok(serving)
    }

    /// Goes back to the box's own certificate (made again if it must be).
    pub fn remove_upload(&self, addresses: &[IpAddr], now_s: i64, clock_sane: bool) -> Result<Arc<Serving>, TlsError> {
        let _one = self.changing.lock().expect("lock");
        for name in [UPLOADED_CERT, UPLOADED_KEY] {
            let path = self.dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("cannot remove", &path)(e)),
            }
        }
        crate::base::fs::sync_dir(&self.dir).map_err(io("cannot sync", &self.dir))?;
        let serving = Arc::new(Tls::own(&self.dir, &self.host_name, addresses, now_s, clock_sane)?);
        *self.current.write().expect("lock") = serving.clone();
        self.announce();
        Ok(serving)
    }

    /// Makes the box's own certificate again when it is served and `addresses` or the dates
    /// call for it; true when it did.
    pub fn refresh(&self, addresses: &[IpAddr], now_s: i64, clock_sane: bool) -> Result<bool, TlsError> {
        let _one = self.changing.lock().expect("lock");
        let served = self.current();
        if served.source != Source::Own {
            return Ok(false);
        }
        let wanted = cert::own_names(&self.host_name, addresses);
        if cert::remake_reason(&served.info, &wanted, now_s, clock_sane).is_none() {
            return Ok(false);
        }
        *self.current.write().expect("lock") =
            Arc::new(Tls::own(&self.dir, &self.host_name, addresses, now_s, clock_sane)?);
        self.announce();
        Ok(true)
    }

    /// Looks at the box's addresses and clock every [`limits::TLS_ADDRESS_POLL_MS`] and
    /// makes its own certificate again when they call for it, until `shutdown`.
    pub async fn watch(
        self: Arc<Self>,
        clocks: crate::clock::SharedClocks,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(limits::TLS_ADDRESS_POLL_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let wall_us = clocks.wall_us();
            let tls = self.clone();
            let made = tokio::task::spawn_blocking(move || {
                tls.refresh(&addresses(), wall_us / 1_000_000, crate::clock::is_sane(wall_us))
            })
            .await;
            if let Ok(Err(e)) = made {
                warn!("cannot make the HTTPS certificate again: {e}");
            }
        }
    }

    /// The rustls server configuration: this store's current certificate for each handshake,
    /// HTTP/1.1, on the process's crypto provider (aws-lc-rs).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Hands each handshake the certificate served now.
#[derive(Debug)]
struct Resolver(Arc<Tls>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().signing.clone())
    }
}

/// Bounds what a new connection buffers for sending to [`limits::TLS_SEND_BUFFER_MAX_BYTES`]
/// (rustls's own default is 64 KiB): a writer past it waits for the socket.
pub fn bound_buffers(conn: &mut rustls::ServerConnection) {
    conn.set_buffer_limit(Some(limits::TLS_SEND_BUFFER_MAX_BYTES));
}

/// Installs aws-lc-rs as the process's crypto provider (once; later calls change nothing).
pub fn install_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The handshakes in progress, oldest first: at most [`limits::TLS_HANDSHAKES_MAX`].
#[derive(Debug, Default)]
pub struct Handshakes {
    places: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next: AtomicU64,
}

/// A handshake's place, given back when dropped.
#[derive(Debug)]
pub struct Place {
    table: Arc<Handshakes>,
    id: u64,
    dropped: Arc<Notify>,
}

impl Handshakes {
    /// A place for a new handshake; true when the oldest in progress was dropped for it.
    pub fn enter(self: &Arc<Self>) -> (Place, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let dropped = Arc::new(Notify::new());
        let mut places = self.places.lock().expect("lock");
        let mut took = false;
        if places.len() >= limits::TLS_HANDSHAKES_MAX
            && let Some((_, oldest)) = places.pop_front()
        {
            // `notify_one` keeps the word for a handshake not yet waiting on it.
            oldest.notify_one();
            took = true;
        }
        places.push_back((id, dropped.clone()));
        (Place { table: self.clone(), id, dropped }, took)
    }

    /// Handshakes in progress now.
    pub fn in_progress(&self) -> usize {
        self.places.lock().expect("lock").len()
    }
}

impl Place {
    /// Resolves when a newcomer took this place.
    pub async fn dropped(&self) {
        self.dropped.notified().await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut places = self.table.places.lock().expect("lock");
        if let Some(i) = places.iter().position(|(id, _)| *id == self.id) {
            places.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_S: i64 = 1_796_428_800;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_store_makes_its_certificate_once_keeps_its_key_and_remakes_for_a_new_address() {
        let dir = tempfile::tempdir().unwrap();
        let tls_dir = dir.path().join("tls");
        let first = Tls::open(&tls_dir, "nvr", &ips(&["192.168.1.20"]), NOW_S, true).unwrap();
        let made = first.current();
        assert_eq!(made.source, Source::Own);
        assert_eq!(made.made_because.as_deref(), Some("the box had none"));
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&tls_dir), 0o700);
        assert_eq!(mode(&tls_dir.join(OWN_KEY)), 0o600);
        drop(first);
        // The next start keeps it.
        let again = Tls::open(&tls_dir, "nvr", &ips(&["192.168.1.20"]), NOW_S + 60, true).unwrap();
        assert_eq!(again.current().info, made.info);
        assert_eq!(again.current().made_because, None);
        // A new address: a new certificate, the same key; the old address is still named.
        assert!(again.refresh(&ips(&["10.1.2.3"]), NOW_S + 120, true).unwrap());
        let now = again.current();
        assert_ne!(now.info.sha256, made.info.sha256);
        assert_eq!(now.info.pin(), made.info.pin());
        assert!(now.info.covers(&Name::reached_as("10.1.2.3")) && now.info.covers(&Name::reached_as("192.168.1.20")));
        assert_eq!(now.made_because.as_deref(), Some("the box is now also 10.1.2.3"));
        assert!(!again.refresh(&ips(&["10.1.2.3"]), NOW_S + 180, true).unwrap());
        // A broken certificate on disk is made again at start.
        std::fs::write(tls_dir.join(OWN_CERT), b"garbage").unwrap();
        let mended = Tls::open(&tls_dir, "nvr", &ips(&["10.1.2.3"]), NOW_S + 240, true).unwrap();
        assert!(mended.current().made_because.as_deref().unwrap().starts_with("the one on disk does not load"));
        assert_eq!(mended.current().info.pin(), made.info.pin());
    }

    #[test]
    fn names_the_box_no_longer_has_are_kept_up_to_their_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Tls::open(dir.path(), "nvr", &ips(&["10.0.0.1"]), NOW_S, true).unwrap();
        let own = cert::own_names("nvr", &[]).len();
        // Twenty leases, each a new address: the certificate names the new one, and at most
        // TLS_CERT_PAST_NAMES_MAX of those before it.
        for i in 2..22 {
            let now = ips(&[&format!("10.0.0.{i}")]);
            assert!(tls.refresh(&now, NOW_S + i, true).unwrap());
            let names = &tls.current().info.names;
            assert!(names.contains(&Name::Ip(now[0])));
            let past = names.len() - own - 1;
            assert_eq!(past, (i as usize - 1).min(limits::TLS_CERT_PAST_NAMES_MAX), "lease {i}: {names:?}");
        }
    }

    #[test]
    fn a_connection_buffers_at_most_its_ceiling_to_send() {
        use std::io::Write;
        install_provider();
        let dir = tempfile::tempdir().unwrap();
        let tls = Arc::new(Tls::open(dir.path(), "nvr", &ips(&["127.0.0.1"]), NOW_S, false).unwrap());
        let mut server = rustls::ServerConnection::new(tls.server_config().unwrap()).unwrap();
        bound_buffers(&mut server);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(tls.current().signing.cert[0].clone()).unwrap();
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        // The handshake, in memory.
        while client.is_handshaking() || server.is_handshaking() {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            client.process_new_packets().unwrap();
        }
        // A reply far larger than the ceiling: the server takes the ceiling's worth, then
        // nothing until the socket takes some.
        let taken = server.writer().write(&vec![7u8; 256 << 10]).unwrap();
        assert_eq!(taken, limits::TLS_SEND_BUFFER_MAX_BYTES);
        assert_eq!(server.writer().write(&[7u8; 1024]).unwrap(), 0);
        let mut wire = Vec::new();
        server.write_tls(&mut wire).unwrap();
        assert!(wire.len() > taken && wire.len() < taken + 1024, "{} bytes on the wire", wire.len());
        assert!(server.writer().write(&[7u8; 1024]).unwrap() > 0, "room again once sent");
    }

    #[test]
    fn a_full_table_drops_the_oldest_handshake_for_a_newcomer() {
        let table = Arc::new(Handshakes::default());
        let mut places: Vec<Place> = (0..limits::TLS_HANDSHAKES_MAX)
            .map(|_| table.enter())
            .map(|(p, took)| {
                assert!(!took);
                p
            })
            .collect();
        assert_eq!(table.in_progress(), limits::TLS_HANDSHAKES_MAX);
        let (newcomer, took) = table.enter();
        assert!(took);
        assert_eq!(table.in_progress(), limits::TLS_HANDSHAKES_MAX);
        // The oldest was told (the word waits for it), the others were not.
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), places[0].dropped()).await.unwrap();
            assert!(tokio::time::timeout(std::time::Duration::from_millis(20), places[1].dropped()).await.is_err());
        });
        places.clear();
        assert_eq!(table.in_progress(), 1);
        drop(newcomer);
        assert_eq!(table.in_progress(), 0);
    }
}
