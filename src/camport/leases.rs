//! The camera port's leases: who has which address of the pool, and what the server answers
//! each message (RFC 2131 4.3). Pure: time comes in, decisions go out; the server loop sends
//! the answers and keeps the table in the catalog.
//!
//! A client keeps its binding after its lease ends or it releases it, so it gets the same
//! address back (after a restart of the camera or of the box); an address is given to
//! another client only when none was ever leased is left, the longest-expired first. At most
//! [`limits::CAMPORT_LEASES_MAX`] bindings, [`limits::CAMPORT_OFFERS_PENDING_MAX`] offers
//! waiting for their REQUEST at once, and an address a client declined (someone else has it)
//! is not offered for [`limits::CAMPORT_DECLINED_HOLD_MS`].
//!
//! Times are the wall clock's (a lease outlives a restart of the box), which may step: NTP
//! setting a board without an RTC from 1970, or a person. A step moves every end with it
//! ([`Table::follow_clock`]), so it neither ends every lease at once nor makes them last for
//! years; leases read back from an earlier run hold at most one lease time from now.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use smoltcp::wire::DhcpMessageType;

use super::dhcp::{Answer, ClientId, Message};
use crate::limits;

/// One client's binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The client id's bytes ([`ClientId`]).
    pub client: Vec<u8>,
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    /// Until when it holds the address (UTC µs): an offer's hold, or the lease's end.
    pub until_us: i64,
    /// Acknowledged (else only offered).
    pub bound: bool,
    #[serde(default)]
    pub hostname: Option<String>,
}

/// What the server does with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Answer with this (after an ARP probe of an offered address).
    Answer(Answer),
    /// Say nothing, and why (for the log and the counters).
    Silent(&'static str),
}

/// Counters, for the UI and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub offers: u64,
    pub acks: u64,
    pub naks: u64,
    pub declines: u64,
    pub releases: u64,
    /// DISCOVERs that found no address: the pool (or the table) is full.
    pub exhausted: u64,
    /// DISCOVERs passed over because [`limits::CAMPORT_OFFERS_PENDING_MAX`] offers wait.
    pub offers_full: u64,
}

/// The pool and its bindings.
#[derive(Debug, Clone)]
pub struct Table {
    pub server: Ipv4Addr,
    /// The pool, first and last address, inclusive.
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
    pub lease_s: u32,
    leases: Vec<Lease>,
    declined: Vec<(Ipv4Addr, i64)>,
    pub counts: Counts,
    /// The wall clock less the monotonic one (µs) on whose timeline the ends are written.
    pub offset_us: i64,
}

impl Table {
    /// A table of `leases` (from the catalog) at `wall_us` and `mono_us`. A lease of an
    /// earlier run holds at most `lease_s` from now: a clock that was wrong then, or is now,
    /// would otherwise keep its address from others for as long as the clocks differ.
    pub fn new(
        server: Ipv4Addr,
        (first, last): (Ipv4Addr, Ipv4Addr),
        lease_s: u32,
        leases: Vec<Lease>,
        wall_us: i64,
        mono_us: i64,
    ) -> Table {
        let mut leases = leases;
        leases.truncate(limits::CAMPORT_LEASES_MAX);
        let most = wall_us.saturating_add(i64::from(lease_s) * 1_000_000);
        for l in &mut leases {
            l.until_us = l.until_us.min(most);
        }
        Table {
            server,
            first,
            last,
            lease_s,
            leases,
            declined: Vec::new(),
            counts: Counts::default(),
            offset_us: wall_us.saturating_sub(mono_us),
        }
    }

    /// Follows a step of the wall clock of at least [`limits::CLOCK_STEP_MAX_US`] against the
    /// monotonic one: every end moves with it. Whether they moved (to be written again).
    pub fn follow_clock(&mut self, wall_us: i64, mono_us: i64) -> bool {
        let by = wall_us.saturating_sub(mono_us).saturating_sub(self.offset_us);
        if by.saturating_abs() < limits::CLOCK_STEP_MAX_US {
            return false;
        }
        self.offset_us = self.offset_us.saturating_add(by);
        for l in &mut self.leases {
            l.until_us = l.until_us.saturating_add(by);
        }
        for (_, until) in &mut self.declined {
            *until = until.saturating_add(by);
        }
        true
    }

    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    fn in_pool(&self, ip: Ipv4Addr) -> bool {
        (u32::from(self.first)..=u32::from(self.last)).contains(&u32::from(ip)) && ip != self.server
    }

    fn of(&self, client: &ClientId) -> Option<usize> {
        self.leases.iter().position(|l| l.client[..] == client.0[..])
    }

    /// Whether `ip` may go to `client` at `now_us`: in the pool, nobody else's while their
    /// lease or offer lasts, and not declined lately.
    fn free_for(&self, ip: Ipv4Addr, client: &ClientId, now_us: i64) -> bool {
        self.in_pool(ip)
            && !self.declined.iter().any(|(d, until)| *d == ip && *until > now_us)
            && !self.leases.iter().any(|l| l.ip == ip && l.client[..] != client.0[..] && l.until_us > now_us)
    }

    /// The address for `m`'s client: its own, the one it asks for, one never leased, or the
    /// longest-expired other's.
    fn choose(&self, m: &Message, now_us: i64) -> Option<Ipv4Addr> {
        if let Some(i) = self.of(&m.client)
            && self.free_for(self.leases[i].ip, &m.client, now_us)
        {
            return Some(self.leases[i].ip);
        }
        if let Some(ip) = m.requested.filter(|ip| self.free_for(*ip, &m.client, now_us))
            && !self.leases.iter().any(|l| l.ip == ip && l.client[..] != m.client.0[..])
        {
            return Some(ip);
        }
        let (a, b) = (u32::from(self.first), u32::from(self.last));
        // Bounded by the pool's size (the config keeps it within CAMPORT_POOL_MAX).
        let never = (a..=b)
            .map(Ipv4Addr::from)
            .find(|ip| self.free_for(*ip, &m.client, now_us) && !self.leases.iter().any(|l| l.ip == *ip));
        never.or_else(|| {
            self.leases
                .iter()
                .filter(|l| l.until_us <= now_us && self.free_for(l.ip, &m.client, now_us))
                .min_by_key(|l| l.until_us)
                .map(|l| l.ip)
        })
    }

    fn answer(&self, m: &Message, kind: DhcpMessageType, yiaddr: Ipv4Addr) -> Answer {
        let lease_s = matches!(kind, DhcpMessageType::Offer | DhcpMessageType::Ack)
            .then_some(self.lease_s)
            .filter(|_| yiaddr != Ipv4Addr::UNSPECIFIED);
        Answer {
            kind,
            xid: m.xid,
            mac: m.mac,
            client: (m.client != ClientId::of_mac(m.mac)).then(|| m.client.clone()),
            ciaddr: m.ciaddr,
            yiaddr,
            broadcast: m.broadcast,
            lease_s,
        }
    }

    fn nak(&mut self, m: &Message) -> Decision {
        self.counts.naks += 1;
        Decision::Answer(self.answer(m, DhcpMessageType::Nak, Ipv4Addr::UNSPECIFIED))
    }

    /// Notes `ip` for `m`'s client until `until_us`, replacing its binding; false when the
    /// table is full of bindings that still hold.
    fn hold(&mut self, m: &Message, ip: Ipv4Addr, until_us: i64, bound: bool, now_us: i64) -> bool {
        let lease = Lease {
            client: m.client.0.to_vec(),
            mac: m.mac,
            ip,
            until_us,
            bound,
            hostname: m.hostname.as_ref().map(|h| h.to_string()),
        };
        // Another client's expired binding of this address goes: the address is this one's.
        self.leases.retain(|l| l.ip != ip || l.client[..] == m.client.0[..]);
        if let Some(i) = self.of(&m.client) {
            self.leases[i] = lease;
            return true;
        }
        if self.leases.len() >= limits::CAMPORT_LEASES_MAX {
            let Some(oldest) =
                self.leases.iter().enumerate().filter(|(_, l)| l.until_us <= now_us).min_by_key(|(_, l)| l.until_us)
            else {
                return false;
            };
            self.leases.swap_remove(oldest.0);
        }
        self.leases.push(lease);
        true
    }

    /// Offers waiting for their REQUEST.
    pub fn pending_offers(&self, now_us: i64) -> usize {
        self.leases.iter().filter(|l| !l.bound && l.until_us > now_us).count()
    }

    /// What to do with `m` at `now_us`. Changes the table; the caller keeps it when a binding
    /// changed ([`Decision`] of an ACK, a DECLINE, a RELEASE).
    pub fn decide(&mut self, m: &Message, now_us: i64) -> Decision {
        let lease_us = i64::from(self.lease_s) * 1_000_000;
        match m.kind {
            DhcpMessageType::Discover => {
                let own = self.of(&m.client).is_some_and(|i| !self.leases[i].bound && self.leases[i].until_us > now_us);
                if !own && self.pending_offers(now_us) >= limits::CAMPORT_OFFERS_PENDING_MAX {
                    self.counts.offers_full += 1;
                    return Decision::Silent("too many offers waiting");
                }
                let Some(ip) = self.choose(m, now_us) else {
                    self.counts.exhausted += 1;
                    return Decision::Silent("the pool is exhausted");
                };
                // An offer holds its address a while; a bound client keeps its lease's end.
                let hold_until = now_us + limits::CAMPORT_OFFER_HOLD_MS as i64 * 1000;
                let bound =
                    self.of(&m.client).is_some_and(|i| self.leases[i].bound && self.leases[i].until_us > now_us);
                if !bound && !self.hold(m, ip, hold_until, false, now_us) {
                    self.counts.exhausted += 1;
                    return Decision::Silent("the lease table is full");
                }
                self.counts.offers += 1;
                Decision::Answer(self.answer(m, DhcpMessageType::Offer, ip))
            }
            DhcpMessageType::Request => {
                let mine = self.of(&m.client).map(|i| self.leases[i].clone());
                let asked = match (m.server_id, m.requested) {
                    // SELECTING: it took another server's offer.
                    (Some(s), _) if s != self.server => {
                        if let Some(i) = self.of(&m.client).filter(|i| !self.leases[*i].bound) {
                            self.leases[i].until_us = now_us;
                        }
                        return Decision::Silent("the client took another server's offer");
                    }
                    (Some(_), Some(ip)) => ip,
                    (Some(_), None) => return self.nak(m),
                    // INIT-REBOOT: a client that remembers an address.
                    (None, Some(ip)) => {
                        if !self.in_pool(ip) {
                            return self.nak(m);
                        }
                        if mine.is_none() {
                            return Decision::Silent("no record of the client");
                        }
                        ip
                    }
                    // RENEWING or REBINDING.
                    (None, None) if m.ciaddr != Ipv4Addr::UNSPECIFIED => {
                        if mine.is_none() {
                            return Decision::Silent("no record of the client");
                        }
                        m.ciaddr
                    }
                    (None, None) => return Decision::Silent("a request that names no address"),
                };
                let ok = mine.as_ref().is_some_and(|l| l.ip == asked) && self.free_for(asked, &m.client, now_us);
                if !ok {
                    return self.nak(m);
                }
                if !self.hold(m, asked, now_us + lease_us, true, now_us) {
                    return self.nak(m);
                }
                self.counts.acks += 1;
                Decision::Answer(self.answer(m, DhcpMessageType::Ack, asked))
            }
            DhcpMessageType::Decline => {
                if m.server_id != Some(self.server) {
                    return Decision::Silent("a decline for another server");
                }
                let Some(ip) = m.requested else { return Decision::Silent("a decline that names no address") };
                // Only the address given to the client: a decline of any other would let one
                // client hold the whole pool back.
                if self.of(&m.client).is_none_or(|i| self.leases[i].ip != ip) {
                    return Decision::Silent("a decline of an address not given to the client");
                }
                self.declined.retain(|(_, until)| *until > now_us);
                if self.declined.len() < limits::CAMPORT_LEASES_MAX {
                    self.declined.push((ip, now_us + limits::CAMPORT_DECLINED_HOLD_MS as i64 * 1000));
                }
                self.leases.retain(|l| !(l.ip == ip && l.client[..] == m.client.0[..]));
                self.counts.declines += 1;
                Decision::Silent("declined: another host has the address")
            }
            DhcpMessageType::Release => {
                if let Some(i) = self.of(&m.client).filter(|i| self.leases[*i].ip == m.ciaddr) {
                    // Kept, ended: the same address comes back to it next time.
                    self.leases[i].until_us = now_us;
                    self.counts.releases += 1;
                }
                Decision::Silent("released")
            }
            DhcpMessageType::Inform => {
                self.counts.acks += 1;
                Decision::Answer(self.answer(m, DhcpMessageType::Ack, Ipv4Addr::UNSPECIFIED))
            }
            _ => Decision::Silent("not a client's message"),
        }
    }

    /// An ARP probe found `ip` in use before it was offered: it is held back as if declined.
    pub fn conflict(&mut self, ip: Ipv4Addr, now_us: i64) {
        self.declined.retain(|(_, until)| *until > now_us);
        if self.declined.len() < limits::CAMPORT_LEASES_MAX {
            self.declined.push((ip, now_us + limits::CAMPORT_DECLINED_HOLD_MS as i64 * 1000));
        }
        self.leases.retain(|l| l.ip != ip || l.bound);
    }
}

/// Packets a client (by MAC for DHCP, by address for SNTP) may send each second: past it,
/// its packets are dropped and counted, and the others are served.
#[derive(Debug)]
pub struct Rate<K = [u8; 6]> {
    /// Client → (second, packets in it).
    clients: std::collections::HashMap<K, (i64, u32)>,
    per_s: u32,
    pub dropped: u64,
}

impl Default for Rate {
    /// DHCP's: [`limits::CAMPORT_CLIENT_PACKETS_PER_S`] by MAC.
    fn default() -> Rate {
        Rate::new(limits::CAMPORT_CLIENT_PACKETS_PER_S)
    }
}

impl<K: std::hash::Hash + Eq + Copy> Rate<K> {
    /// `per_s` packets a second for each client.
    pub fn new(per_s: u32) -> Rate<K> {
        Rate { clients: std::collections::HashMap::new(), per_s, dropped: 0 }
    }

    /// Whether a packet from `mac` at `now_us` is taken.
    pub fn take(&mut self, mac: K, now_us: i64) -> bool {
        let second = now_us.div_euclid(1_000_000);
        if self.clients.len() >= limits::CAMPORT_RATE_CLIENTS_MAX && !self.clients.contains_key(&mac) {
            // Forget the clients not heard from this second.
            self.clients.retain(|_, (s, _)| *s == second);
            if self.clients.len() >= limits::CAMPORT_RATE_CLIENTS_MAX {
                self.dropped += 1;
                return false;
            }
        }
        let e = self.clients.entry(mac).or_insert((second, 0));
        if e.0 != second {
            *e = (second, 0);
        }
        e.1 += 1;
        let ok = e.1 <= self.per_s;
        if !ok {
            self.dropped += 1;
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::camport::dhcp::{ClientId, Message};

    const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
    const LEASE_S: u32 = 3600;
    const S: i64 = 1_000_000;

    fn table(first: u8, last: u8) -> Table {
        Table::new(SERVER, (Ipv4Addr::new(10, 9, 0, first), Ipv4Addr::new(10, 9, 0, last)), LEASE_S, Vec::new(), 0, 0)
    }

    fn mac(n: u32) -> [u8; 6] {
        let b = n.to_be_bytes();
        [2, 0, b[0], b[1], b[2], b[3]]
    }

    fn msg(kind: DhcpMessageType, n: u32) -> Message {
        Message {
            kind,
            xid: n,
            mac: mac(n),
            client: ClientId::of_mac(mac(n)),
            ciaddr: Ipv4Addr::UNSPECIFIED,
            requested: None,
            server_id: None,
            broadcast: false,
            hostname: None,
        }
    }

    fn given(d: Decision) -> Option<(DhcpMessageType, Ipv4Addr)> {
        match d {
            Decision::Answer(a) => Some((a.kind, a.yiaddr)),
            Decision::Silent(_) => None,
        }
    }

    /// DISCOVER, then REQUEST of what was offered: the address bound.
    fn lease(t: &mut Table, n: u32, now: i64) -> Option<Ipv4Addr> {
        let (_, ip) = given(t.decide(&msg(DhcpMessageType::Discover, n), now))?;
        let req = Message { requested: Some(ip), server_id: Some(SERVER), ..msg(DhcpMessageType::Request, n) };
        let (kind, acked) = given(t.decide(&req, now))?;
        assert_eq!((kind, acked), (DhcpMessageType::Ack, ip));
        Some(ip)
    }

    #[test]
    fn a_client_is_offered_bound_renewed_released_and_gets_the_same_address_back() {
        let mut t = table(10, 50);
        let ip = lease(&mut t, 1, 0).unwrap();
        assert_eq!(ip, Ipv4Addr::new(10, 9, 0, 10));
        assert!(t.leases()[0].bound && t.leases()[0].until_us == i64::from(LEASE_S) * S);
        // Renewing at half the lease: from its address, no server id.
        let renew = Message { ciaddr: ip, ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&renew, 1800 * S)), Some((DhcpMessageType::Ack, ip)));
        assert_eq!(t.leases()[0].until_us, (1800 + i64::from(LEASE_S)) * S);
        // Released, then back (a restart of the camera): the same address.
        t.decide(&Message { ciaddr: ip, ..msg(DhcpMessageType::Release, 1) }, 1900 * S);
        assert_eq!(t.counts.releases, 1);
        lease(&mut t, 2, 1900 * S).unwrap();
        assert_eq!(lease(&mut t, 1, 2000 * S), Some(ip), "its address was kept for it");
        // A client that remembers its address asks for it (INIT-REBOOT): the box restarted
        // with its table kept.
        let kept = Table::new(SERVER, (t.first, t.last), LEASE_S, t.leases().to_vec(), 2100 * S, 2100 * S);
        let mut t = kept;
        let reboot = Message { requested: Some(ip), ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&reboot, 2100 * S)), Some((DhcpMessageType::Ack, ip)));
        // …one it does not have, or of another network: NAK; one the box has no record of:
        // silence.
        let wrong = Message { requested: Some(Ipv4Addr::new(10, 9, 0, 11)), ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&wrong, 2100 * S)), Some((DhcpMessageType::Nak, Ipv4Addr::UNSPECIFIED)));
        let elsewhere = Message { requested: Some(Ipv4Addr::new(192, 168, 1, 5)), ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&elsewhere, 2100 * S)).map(|g| g.0), Some(DhcpMessageType::Nak));
        let stranger = Message { requested: Some(Ipv4Addr::new(10, 9, 0, 30)), ..msg(DhcpMessageType::Request, 99) };
        assert_eq!(t.decide(&stranger, 2100 * S), Decision::Silent("no record of the client"));
        // INFORM: an ACK with no address.
        let inform = Message { ciaddr: Ipv4Addr::new(10, 9, 0, 40), ..msg(DhcpMessageType::Inform, 7) };
        assert_eq!(given(t.decide(&inform, 2100 * S)), Some((DhcpMessageType::Ack, Ipv4Addr::UNSPECIFIED)));
    }

    #[test]
    fn sixty_four_clients_get_distinct_addresses_and_a_ninth_in_a_pool_of_eight_gets_none() {
        let mut t = table(10, 200);
        let ips: std::collections::BTreeSet<_> = (0..64).map(|n| lease(&mut t, n, n as i64 * 1000).unwrap()).collect();
        assert_eq!(ips.len(), 64);
        let mut t = table(10, 17);
        for n in 0..8 {
            lease(&mut t, n, 0).unwrap();
        }
        assert_eq!(t.decide(&msg(DhcpMessageType::Discover, 8), 0), Decision::Silent("the pool is exhausted"));
        assert_eq!(t.counts.exhausted, 1);
        // Once a lease has ended and its client is gone, its address goes to the newcomer.
        let later = (i64::from(LEASE_S) + 1) * S;
        assert!(lease(&mut t, 8, later).is_some());
    }

    #[test]
    fn a_pool_as_large_as_the_table_fills_it_and_then_says_so() {
        let n = limits::CAMPORT_LEASES_MAX as u32;
        let first = Ipv4Addr::new(10, 9, 1, 0);
        let last = Ipv4Addr::from(u32::from(first) + n - 1);
        let mut t = Table::new(SERVER, (first, last), LEASE_S, Vec::new(), 0, 0);
        for c in 0..n {
            lease(&mut t, c, 0).unwrap();
        }
        assert_eq!(t.leases().len(), limits::CAMPORT_LEASES_MAX);
        assert_eq!(t.decide(&msg(DhcpMessageType::Discover, n), 0), Decision::Silent("the pool is exhausted"));
        // A table read back is cut at its ceiling.
        let mut more = t.leases().to_vec();
        more.push(Lease { client: vec![1], ..more[0].clone() });
        assert_eq!(Table::new(SERVER, (first, last), LEASE_S, more, 0, 0).leases().len(), limits::CAMPORT_LEASES_MAX);
    }

    #[test]
    fn offers_waiting_stop_at_their_ceiling_and_lapse_after_their_hold() {
        let mut t = table(10, 250);
        let max = limits::CAMPORT_OFFERS_PENDING_MAX as u32;
        for n in 0..max {
            assert!(given(t.decide(&msg(DhcpMessageType::Discover, n), 0)).is_some());
        }
        assert_eq!(t.pending_offers(0), limits::CAMPORT_OFFERS_PENDING_MAX);
        assert_eq!(t.decide(&msg(DhcpMessageType::Discover, max), 0), Decision::Silent("too many offers waiting"));
        // A client already offered is offered again (its DISCOVER repeated).
        assert!(given(t.decide(&msg(DhcpMessageType::Discover, 0), 0)).is_some());
        let hold = limits::CAMPORT_OFFER_HOLD_MS as i64 * 1000;
        assert_eq!(t.pending_offers(hold), 0);
        assert!(given(t.decide(&msg(DhcpMessageType::Discover, max), hold)).is_some());
        assert_eq!(t.counts.offers_full, 1);
    }

    #[test]
    fn a_declined_or_probed_address_is_held_back_and_another_server_s_choice_frees_the_offer() {
        let mut t = table(10, 20);
        let (_, ip) = given(t.decide(&msg(DhcpMessageType::Discover, 1), 0)).unwrap();
        let decline = Message { requested: Some(ip), server_id: Some(SERVER), ..msg(DhcpMessageType::Decline, 1) };
        t.decide(&decline, 0);
        assert_eq!(t.counts.declines, 1);
        let (_, next) = given(t.decide(&msg(DhcpMessageType::Discover, 1), 0)).unwrap();
        assert_ne!(next, ip, "the declined address is not offered again");
        let hold = limits::CAMPORT_DECLINED_HOLD_MS as i64 * 1000;
        t.conflict(next, 0);
        let (_, third) = given(t.decide(&msg(DhcpMessageType::Discover, 1), 0)).unwrap();
        assert!(third != ip && third != next, "an address an ARP probe found taken neither");
        // Until the hold ends.
        assert_eq!(given(t.decide(&msg(DhcpMessageType::Discover, 2), hold)).unwrap().1, ip);
        // The client took another server's offer: this one's lapses at once.
        let other = Message {
            requested: Some(third),
            server_id: Some(Ipv4Addr::new(10, 9, 0, 254)),
            ..msg(DhcpMessageType::Request, 1)
        };
        assert_eq!(t.decide(&other, 1), Decision::Silent("the client took another server's offer"));
        assert_eq!(t.pending_offers(1), 1, "only client 2's offer waits");
    }

    #[test]
    fn a_decline_of_an_address_not_given_to_the_client_holds_nothing_back() {
        let mut t = table(10, 11);
        let ip = lease(&mut t, 1, 0).unwrap();
        for target in [ip, Ipv4Addr::new(10, 9, 0, 11)] {
            let decline =
                Message { requested: Some(target), server_id: Some(SERVER), ..msg(DhcpMessageType::Decline, 99) };
            assert_eq!(t.decide(&decline, 0), Decision::Silent("a decline of an address not given to the client"));
        }
        assert_eq!(t.counts.declines, 0);
        assert_eq!(lease(&mut t, 2, 0), Some(Ipv4Addr::new(10, 9, 0, 11)), "the rest of the pool is still given");
        let renew = Message { ciaddr: ip, ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&renew, S)), Some((DhcpMessageType::Ack, ip)), "and the first keeps its own");
    }

    /// NTP sets a board without an RTC from 1970 to today, then a person sets it back: the
    /// leases' and holds' ends move with each step, and leases read back from an earlier run
    /// hold at most a lease from now.
    #[test]
    fn a_clock_step_moves_every_end_and_leases_read_back_hold_at_most_a_lease() {
        let years = 56 * 365 * 86_400 * S;
        let mut t = table(10, 11);
        let ip = lease(&mut t, 1, 10 * S).unwrap();
        let offered = given(t.decide(&msg(DhcpMessageType::Discover, 2), 10 * S)).unwrap().1;
        let decline = Message { requested: Some(offered), server_id: Some(SERVER), ..msg(DhcpMessageType::Decline, 2) };
        t.decide(&decline, 10 * S);
        // A drift under CLOCK_STEP_MAX_US moves nothing.
        assert!(!t.follow_clock(20 * S + limits::CLOCK_STEP_MAX_US - 1, 20 * S));
        // The step: the monotonic clock at 20 s, the wall clock 56 years on.
        let (mono, wall) = (20 * S, years + 20 * S);
        assert!(t.follow_clock(wall, mono));
        assert!(!t.follow_clock(wall + S, mono + S), "followed once");
        assert_eq!(t.leases()[0].until_us, years + (10 + i64::from(LEASE_S)) * S);
        // The lease and the declined address still hold: a newcomer gets neither.
        assert_eq!(t.decide(&msg(DhcpMessageType::Discover, 3), wall), Decision::Silent("the pool is exhausted"));
        let renew = Message { ciaddr: ip, ..msg(DhcpMessageType::Request, 1) };
        assert_eq!(given(t.decide(&renew, wall)), Some((DhcpMessageType::Ack, ip)));
        // Set back: the ends follow, no lease lasts 56 years.
        assert!(t.follow_clock(mono + 30 * S, mono + 30 * S));
        assert_eq!(t.leases()[0].until_us, (20 + i64::from(LEASE_S)) * S);
        // Read back by a box whose clock is 56 years behind the one that wrote them: they
        // hold a lease from now, not until then.
        let written: Vec<Lease> = t.leases().iter().map(|l| Lease { until_us: years, ..l.clone() }).collect();
        let read = Table::new(SERVER, (t.first, t.last), LEASE_S, written, 5 * S, 5 * S);
        assert!(read.leases().iter().all(|l| l.until_us == (5 + i64::from(LEASE_S)) * S));
    }

    #[test]
    fn a_flooding_client_is_cut_at_its_rate_and_the_others_are_served() {
        let mut r = Rate::default();
        let per_s = limits::CAMPORT_CLIENT_PACKETS_PER_S;
        let taken = (0..per_s * 3).filter(|_| r.take(mac(1), 5 * S)).count();
        assert_eq!(taken, per_s as usize);
        assert_eq!(r.dropped, u64::from(per_s) * 2);
        assert!(r.take(mac(2), 5 * S), "another client is served");
        assert!(r.take(mac(1), 6 * S), "and the flooder again the next second");
        // Past CAMPORT_RATE_CLIENTS_MAX clients in one second (the flooder and these),
        // newcomers wait for the next.
        for n in 3..limits::CAMPORT_RATE_CLIENTS_MAX as u32 + 2 {
            assert!(r.take(mac(n), 6 * S));
        }
        assert!(!r.take(mac(5000), 6 * S));
        assert!(r.take(mac(5000), 7 * S));
    }
}
