//! Login limits: failed logins counted per window, pure (the caller passes the time).
//!
//! A try counts as failed from the moment it starts ([`Limiter::attempt`]), and a success
//! takes its count back ([`Limiter::succeeded`]): tries that run side by side (the hash takes
//! a while) are all counted before any of them ends, so a burst of them gets no more than
//! the limits allow one after another. At most
//! [`limits::AUTH_LOGINS_IN_FLIGHT_PER_ADDRESS_MAX`] tries from one address run at once.
//!
//! Three counts, each over [`limits::AUTH_LOGIN_WINDOW_S`]:
//! - per client address *and* user name: past [`limits::AUTH_LOGIN_FAILURES_MAX`] that
//!   address may not try that user again until the window ends (`429`);
//! - per client address, whatever the user: past [`limits::AUTH_LOGIN_ADDRESS_FAILURES_MAX`]
//!   the address is refused (one address guessing many users);
//! - per user, from every address: past [`limits::AUTH_LOGIN_USER_FAILURES_SLOW`] every try
//!   at that user waits [`limits::AUTH_LOGIN_SLOW_DELAY_MS`] first, right password or wrong.
//!   Never a refusal: others' failures must not lock a user out (a web page a LAN user opens
//!   can post logins too), but a guesser with many addresses is slowed.
//!
//! And after each wrong password, the address that sent it waits
//! [`limits::AUTH_LOGIN_FAILURE_PAUSE_MS`] before its next try is looked at (`429`): a
//! person retyping never notices, a script gets one guess a second and each guess refused
//! in the pause costs no hash.
//!
//! An IPv6 client counts by its /64, which one host can fill with addresses.
//!
//! The table holds at most [`limits::AUTH_LOGIN_TRACKED_MAX`] entries of a fixed size (a user
//! name is at most [`limits::AUTH_NAME_MAX_BYTES`]; a longer one cannot exist and is counted
//! by address alone), reserved at start: its bytes are bounded, whatever names arrive. When
//! it is full of live entries, a failure that finds no room counts in one shared window
//! instead, and once that is past [`limits::AUTH_LOGIN_FAILURES_MAX`] every untracked try is
//! refused: a full table limits more, never less.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::limits;

/// A user name as the table keeps it.
pub type Name = heapless::String<{ limits::AUTH_NAME_MAX_BYTES }>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Address(IpAddr),
    AddressUser(IpAddr, Name),
    User(Name),
}

#[derive(Clone, Copy, Debug)]
struct Window {
    failures: u32,
    since_us: i64,
    /// An address's tries are refused until then ([`Limiter::wrong`]).
    paused_until_us: i64,
}

impl Window {
    fn live(&self, now_us: i64) -> bool {
        now_us - self.since_us < window_us()
    }
}

fn window_us() -> i64 {
    limits::AUTH_LOGIN_WINDOW_S as i64 * 1_000_000
}

/// A try under way, from [`Limiter::attempt`]: give it back with [`Limiter::ended`], and
/// with [`Limiter::succeeded`] when the password was right.
#[derive(Debug)]
pub struct Try {
    address: IpAddr,
    at_us: i64,
    /// Its failure found no room in a full table and counts in the shared window.
    overflowed: bool,
    /// Wait [`limits::AUTH_LOGIN_SLOW_DELAY_MS`] before checking the password.
    pub slow: bool,
}

/// Why a try may not start.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Too many failures in the window.
    Limited { retry_after_s: u64 },
    /// A wrong password from this address a moment ago ([`Limiter::wrong`]).
    Paused { retry_after_s: u64 },
    /// [`limits::AUTH_LOGINS_IN_FLIGHT_PER_ADDRESS_MAX`] tries from this address run now.
    InFlight,
}

/// What a login may do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Go,
    /// Wait [`limits::AUTH_LOGIN_SLOW_DELAY_MS`], then go.
    Slow,
    Refuse {
        retry_after_s: u64,
    },
    /// In the pause after a wrong password from this address.
    Paused {
        retry_after_s: u64,
    },
}

/// The counts.
pub struct Limiter {
    entries: HashMap<Key, Window>,
    /// Failures that found no room in a full table.
    overflow: Window,
    /// Tries under way by counted address; never more than the logins in flight.
    in_flight: heapless::Vec<(IpAddr, u32), { limits::AUTH_LOGINS_IN_FLIGHT_MAX }>,
}

/// The address a client counts as: itself, or its /64.
fn counted(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)),
        v4 => v4,
    }
}

/// The keys of a try: the address, and with a name that can exist, the pair and the user.
fn keys(peer: IpAddr, user: Option<&Name>) -> [Option<Key>; 3] {
    let a = counted(peer);
    [Some(Key::Address(a)), user.map(|u| Key::AddressUser(a, u.clone())), user.map(|u| Key::User(u.clone()))]
}

impl Limiter {
    pub fn new() -> Limiter {
        Limiter {
            entries: HashMap::with_capacity(limits::AUTH_LOGIN_TRACKED_MAX),
            overflow: Window { failures: 0, since_us: i64::MIN / 2, paused_until_us: i64::MIN },
            in_flight: heapless::Vec::new(),
        }
    }

    /// Starts a try of `peer` at `user`: refused, or counted as failed until it succeeds.
    pub fn attempt(&mut self, peer: IpAddr, user: Option<&Name>, now_us: i64) -> Result<Try, Refusal> {
        let address = counted(peer);
        let slow = match self.check(peer, user, now_us) {
            Verdict::Refuse { retry_after_s } => return Err(Refusal::Limited { retry_after_s }),
            Verdict::Paused { retry_after_s } => return Err(Refusal::Paused { retry_after_s }),
            Verdict::Slow => true,
            Verdict::Go => false,
        };
        match self.in_flight.iter_mut().find(|(a, _)| *a == address) {
            Some((_, n)) if *n >= limits::AUTH_LOGINS_IN_FLIGHT_PER_ADDRESS_MAX => return Err(Refusal::InFlight),
            Some((_, n)) => *n += 1,
            // Full only past the logins in flight, which the caller bounds first.
            None => self.in_flight.push((address, 1)).map_err(|_| Refusal::InFlight)?,
        }
        let overflowed = self.failed(peer, user, now_us);
        Ok(Try { address, at_us: now_us, overflowed, slow })
    }

    /// The try is over, whatever its result.
    pub fn ended(&mut self, t: &Try) {
        if let Some(i) = self.in_flight.iter().position(|(a, _)| *a == t.address) {
            self.in_flight[i].1 -= 1;
            if self.in_flight[i].1 == 0 {
                self.in_flight.swap_remove(i);
            }
        }
    }

    /// Tries under way from `peer`'s address.
    pub fn in_flight(&self, peer: IpAddr) -> u32 {
        let address = counted(peer);
        self.in_flight.iter().find(|(a, _)| *a == address).map_or(0, |(_, n)| *n)
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// May `peer` try to log in as `user` now?
    pub fn check(&self, peer: IpAddr, user: Option<&Name>, now_us: i64) -> Verdict {
        let refuse = |w: &Window| Verdict::Refuse {
            retry_after_s: ((w.since_us + window_us() - now_us) / 1_000_000).max(1) as u64,
        };
        let [address, pair, by_user] = keys(peer, user);
        if let Some(w) = address.as_ref().and_then(|k| self.entries.get(k)).filter(|w| w.paused_until_us > now_us) {
            let left_us = w.paused_until_us - now_us;
            return Verdict::Paused { retry_after_s: (left_us as u64).div_ceil(1_000_000) };
        }
        let live = |k: &Option<Key>| k.as_ref().and_then(|k| self.entries.get(k)).filter(|w| w.live(now_us));
        if let Some(w) = live(&address).filter(|w| w.failures >= limits::AUTH_LOGIN_ADDRESS_FAILURES_MAX) {
            return refuse(w);
        }
        if let Some(w) = live(&pair).filter(|w| w.failures >= limits::AUTH_LOGIN_FAILURES_MAX) {
            return refuse(w);
        }
        let untracked = [&address, &pair].iter().any(|k| k.as_ref().is_some_and(|k| !self.entries.contains_key(k)));
        if untracked
            && self.entries.len() >= limits::AUTH_LOGIN_TRACKED_MAX
            && self.overflow.live(now_us)
            && self.overflow.failures >= limits::AUTH_LOGIN_FAILURES_MAX
        {
            return refuse(&self.overflow);
        }
        if live(&by_user).is_some_and(|w| w.failures >= limits::AUTH_LOGIN_USER_FAILURES_SLOW) {
            return Verdict::Slow;
        }
        Verdict::Go
    }

    /// A failure (every try is one until it succeeds); true when it found no room in a full
    /// table and counts in the shared window.
    pub fn failed(&mut self, peer: IpAddr, user: Option<&Name>, now_us: i64) -> bool {
        let mut overflowed = false;
        for key in keys(peer, user).into_iter().flatten() {
            if !self.entries.contains_key(&key) && self.entries.len() >= limits::AUTH_LOGIN_TRACKED_MAX {
                self.entries.retain(|_, w| w.live(now_us));
            }
            if !self.entries.contains_key(&key) && self.entries.len() >= limits::AUTH_LOGIN_TRACKED_MAX {
                overflowed = true;
                continue;
            }
            bump(
                self.entries.entry(key).or_insert(Window { failures: 0, since_us: now_us, paused_until_us: i64::MIN }),
                now_us,
            );
        }
        if overflowed {
            bump(&mut self.overflow, now_us);
        }
        overflowed
    }

    /// A try ended with a wrong password (or a user that does not exist): its address may not
    /// try again for [`limits::AUTH_LOGIN_FAILURE_PAUSE_MS`]. Tries already under way go on.
    pub fn wrong(&mut self, t: &Try, now_us: i64) {
        if let Some(w) = self.entries.get_mut(&Key::Address(t.address)) {
            w.paused_until_us = now_us + limits::AUTH_LOGIN_FAILURE_PAUSE_MS as i64 * 1_000;
        }
    }

    /// A try succeeded: its own failure is taken back from the address's and the user's
    /// counts (when their window is still the one it was counted in), and the pair's count
    /// starts again. Others' failures stay, so a success does not wash out a guesser's.
    pub fn succeeded(&mut self, user: &Name, t: &Try) {
        self.entries.remove(&Key::AddressUser(t.address, user.clone()));
        let counted_in = |w: &Window| w.since_us <= t.at_us;
        for key in [Key::Address(t.address), Key::User(user.clone())] {
            if let Some(w) = self.entries.get_mut(&key).filter(|w| counted_in(w)) {
                w.failures = w.failures.saturating_sub(1);
            }
        }
        if t.overflowed && counted_in(&self.overflow) {
            self.overflow.failures = self.overflow.failures.saturating_sub(1);
        }
    }
}

fn bump(w: &mut Window, now_us: i64) {
    if !w.live(now_us) {
        *w = Window { failures: 0, since_us: now_us, paused_until_us: w.paused_until_us };
    }
    w.failures += 1;
}

/// The bytes the table may hold: its entries (reserved at start) with the map's own control
/// bytes. For the memory budget.
pub fn table_bytes() -> usize {
    limits::AUTH_LOGIN_TRACKED_MAX * (std::mem::size_of::<(Key, Window)>() + 1) * 8 / 7
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::try_from(s).unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    const S: i64 = 1_000_000;

    #[test]
    fn others_failures_slow_a_user_down_but_never_lock_it_out() {
        let mut l = Limiter::new();
        let root = name("root");
        for _ in 0..limits::AUTH_LOGIN_FAILURES_MAX {
            assert_eq!(l.check(ip("192.0.2.1"), Some(&root), 0), Verdict::Go);
            l.failed(ip("192.0.2.1"), Some(&root), 0);
        }
        assert!(matches!(l.check(ip("192.0.2.1"), Some(&root), S), Verdict::Refuse { retry_after_s: 59 }));
        assert_eq!(l.check(ip("192.0.2.2"), Some(&root), S), Verdict::Go, "another address is not refused");
        for i in 0..limits::AUTH_LOGIN_USER_FAILURES_SLOW {
            l.failed(ip(&format!("198.51.100.{i}")), Some(&root), S);
        }
        assert_eq!(l.check(ip("192.0.2.2"), Some(&root), S), Verdict::Slow, "slowed, not refused");
        assert_eq!(l.check(ip("192.0.2.2"), Some(&root), 62 * S), Verdict::Go, "the window ended");
        assert_eq!(l.check(ip("192.0.2.1"), Some(&root), 62 * S), Verdict::Go);
    }

    #[test]
    fn one_address_guessing_many_users_is_refused() {
        let mut l = Limiter::new();
        for i in 0..limits::AUTH_LOGIN_ADDRESS_FAILURES_MAX {
            l.failed(ip("192.0.2.1"), Some(&name(&format!("u{i}"))), 0);
        }
        assert!(matches!(l.check(ip("192.0.2.1"), Some(&name("other")), 0), Verdict::Refuse { .. }));
        assert!(matches!(l.check(ip("192.0.2.1"), None, 0), Verdict::Refuse { .. }), "names that cannot exist too");
        // An IPv6 host counts by its /64.
        for i in 0..limits::AUTH_LOGIN_ADDRESS_FAILURES_MAX {
            l.failed(ip(&format!("2001:db8::{i:x}")), None, 0);
        }
        assert!(matches!(l.check(ip("2001:db8::ffff:1"), None, 0), Verdict::Refuse { .. }));
        assert_eq!(l.check(ip("2001:db8:0:1::1"), None, 0), Verdict::Go);
    }

    #[test]
    fn a_full_table_limits_more_never_less() {
        let mut l = Limiter::new();
        // Distinct addresses and names, each failing once, fill the table.
        let mut i = 0u32;
        while l.len() < limits::AUTH_LOGIN_TRACKED_MAX {
            let a = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            l.failed(a, None, 0);
            i += 1;
        }
        assert_eq!(l.len(), limits::AUTH_LOGIN_TRACKED_MAX);
        // A new address keeps failing: it is not tracked, but the shared window refuses it.
        let newcomer = ip("203.0.113.9");
        let mut refused_after = None;
        for n in 0..20 {
            if let Verdict::Refuse { .. } = l.check(newcomer, Some(&name("root")), S) {
                refused_after = Some(n);
                break;
            }
            l.failed(newcomer, Some(&name("root")), S);
        }
        assert_eq!(refused_after, Some(limits::AUTH_LOGIN_FAILURES_MAX), "limited as soon as tracked ones");
        assert_eq!(l.len(), limits::AUTH_LOGIN_TRACKED_MAX, "the table did not grow");
        // Once the entries' window ends they make room again.
        l.failed(newcomer, Some(&name("root")), 61 * S);
        assert!(l.len() < 10, "expired entries went: {}", l.len());
    }

    #[test]
    fn tries_side_by_side_count_before_any_ends_and_a_success_takes_its_own_back() {
        let mut l = Limiter::new();
        let (peer, root) = (ip("192.0.2.1"), name("root"));
        // Four at once from one address, the most: the fifth waits for one to end.
        let tries: Vec<Try> = (0..4).map(|_| l.attempt(peer, Some(&root), 0).unwrap()).collect();
        assert_eq!(l.attempt(peer, Some(&root), 0).unwrap_err(), Refusal::InFlight);
        assert_eq!(l.in_flight(peer), 4);
        let elsewhere = l.attempt(ip("192.0.2.2"), Some(&root), 0).unwrap();
        assert!(!elsewhere.slow, "another address goes");
        l.ended(&elsewhere);
        // They count before they end: one more try, then the pair is refused.
        for t in &tries {
            l.ended(t);
        }
        assert_eq!(l.in_flight(peer), 0);
        let fifth = l.attempt(peer, Some(&root), S).unwrap();
        l.ended(&fifth);
        assert!(matches!(l.attempt(peer, Some(&root), S), Err(Refusal::Limited { .. })));
        // A success counts while it runs and gives its count back when it ends.
        let other = ip("198.51.100.1");
        for i in 0..limits::AUTH_LOGIN_ADDRESS_FAILURES_MAX - 1 {
            l.failed(other, Some(&name(&format!("u{i}"))), S);
        }
        let right = l.attempt(other, Some(&root), S).unwrap();
        assert!(matches!(l.attempt(other, Some(&name("v")), S), Err(Refusal::Limited { .. })), "30 counted");
        l.succeeded(&root, &right);
        l.ended(&right);
        assert!(l.attempt(other, Some(&name("v")), S).is_ok(), "29 again");
        // Taken back only from the window it was counted in.
        let late = l.attempt(ip("203.0.113.1"), Some(&name("w")), 2 * S).unwrap();
        l.failed(ip("203.0.113.1"), Some(&name("x")), 70 * S);
        l.succeeded(&name("w"), &late);
        let address = l.entries.get(&Key::Address(ip("203.0.113.1"))).unwrap();
        assert_eq!((address.failures, address.since_us), (1, 70 * S), "the new window's failure stays");
    }

    #[test]
    fn the_tables_bytes_are_fixed_whatever_the_names() {
        // 16 KiB names are not names: they count by address alone and add nothing.
        assert!(std::mem::size_of::<(Key, Window)>() <= 96);
        assert!(table_bytes() < 512 << 10, "{}", table_bytes());
    }
}
