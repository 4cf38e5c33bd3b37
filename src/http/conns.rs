//! The connection table: the [`limits::HTTP_CONNECTIONS_MAX`] slots, what each connection is
//! doing, and which one gives its slot up when a new client comes and every slot is taken.
//!
//! A client that opens connections and never finishes a request (slow heads, slow bodies,
//! `Expect: 100-continue` with no body, nothing at all) must not keep everyone else out until
//! its read deadlines run out. So a full table does not refuse the newcomer while some
//! connection is waiting for a client: the one that goes is the oldest that has never been
//! answered, else the oldest one. A connection is waiting for its client while it waits for
//! a head, or for a small body (read before a handler slot is taken), or in the line for a
//! slot. One whose handler runs, or whose reply is being written (an export download), is
//! never taken, so the newcomer is refused with `503` only when every slot is working.
//!
//! [`Conn`] is also what the socket guard ([`super::guard`]) and the request handler share,
//! so that the guard knows whether a write is a response (the next request gets a fresh
//! clock) or an interim `100 Continue` (the request's clock runs on), whether a `408` is its
//! to write or the handler's, and when a body read after a wait in the line gets a fresh
//! clock.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::limits;

/// One connection's state, shared by its socket guard, its request handler and the table.
#[derive(Debug)]
pub struct Conn {
    opened: Instant,
    /// A handler is working on a request (from its head until its reply is made).
    in_handler: AtomicBool,
    /// Requests whose reply has not been handed whole to hyper (or dropped) yet.
    replies_open: AtomicUsize,
    /// A reply was handed whole to hyper, which may still hold its end in its write buffer:
    /// set until the socket's next completed flush.
    flushing: AtomicBool,
    /// [`OPEN`], [`WORKING`] or [`TAKEN`].
    state: AtomicU8,
    /// The request's body is read from now: the guard restarts the read clock.
    fresh_clock: AtomicBool,
    /// At least one reply was made on this connection.
    answered: AtomicBool,
    evict: Notify,
}

/// No request of the connection holds a handler slot: the table may take it.
const OPEN: u8 = 0;
/// A request holds a handler slot (or hashes a password): the table does not take it.
const WORKING: u8 = 1;
/// The table took the connection for a newcomer: it ends, and admits nothing more.
const TAKEN: u8 = 2;

impl Conn {
    pub fn new() -> Conn {
        Conn {
            opened: Instant::now(),
            in_handler: false.into(),
            replies_open: 0.into(),
            flushing: false.into(),
            state: OPEN.into(),
            fresh_clock: false.into(),
            answered: false.into(),
            evict: Notify::new(),
        }
    }

    /// True while a handler works on a request: a write then is an interim response.
    pub fn in_handler(&self) -> bool {
        self.in_handler.load(Ordering::Acquire)
    }

    /// True when no reply is open or still leaving: nothing but the guard can write on the
    /// connection now.
    pub fn quiet(&self) -> bool {
        self.replies_open.load(Ordering::Acquire) == 0 && !self.flushing.load(Ordering::Acquire)
    }

    /// The socket completed a flush: whatever hyper had buffered has been written.
    pub fn flushed(&self) {
        self.flushing.store(false, Ordering::Release);
    }

    /// A request's head was parsed and goes to its handler; the returned mark is kept by its
    /// reply until the reply is written whole.
    pub fn request_started(self: &Arc<Self>) -> ReplyMark {
        self.replies_open.fetch_add(1, Ordering::AcqRel);
        self.in_handler.store(true, Ordering::Release);
        ReplyMark(self.clone())
    }

    /// The handler made its reply.
    pub fn handler_done(&self) {
        // A taken connection stays taken.
        let _ = self.state.compare_exchange(WORKING, OPEN, Ordering::AcqRel, Ordering::Acquire);
        self.answered.store(true, Ordering::Release);
        self.in_handler.store(false, Ordering::Release);
    }

    /// The request takes a handler slot, so the connection is not taken from now on; false
    /// when the table took it first (the request is then refused, and the connection ends).
    #[must_use]
    pub fn set_admitted(&self) -> bool {
        self.state.compare_exchange(OPEN, WORKING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The handler reads the request's body from now (after its wait in the line): the read
    /// clock starts again, so a wait for a handler is not counted against the client.
    pub fn body_read_from_now(&self) {
        self.fresh_clock.store(true, Ordering::Release);
    }

    /// True once after [`Conn::body_read_from_now`].
    pub fn take_fresh_clock(&self) -> bool {
        self.fresh_clock.swap(false, Ordering::AcqRel)
    }

    /// Resolves when the table takes this connection's slot for a newcomer.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

/// Held by a reply's body: the reply is open until it is dropped.
#[derive(Debug)]
pub struct ReplyMark(Arc<Conn>);

impl Drop for ReplyMark {
    fn drop(&mut self) {
        // Leaving, until the socket's next flush: never quiet in between.
        self.0.flushing.store(true, Ordering::Release);
        self.0.replies_open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The slots.
pub struct Table {
    slots: Mutex<Vec<Option<Arc<Conn>>>>,
    freed: Notify,
}

/// A connection's place in the table, given back when dropped.
pub struct Slot {
    table: Arc<Table>,
    index: usize,
    pub conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.slots.lock().expect("lock")[self.index] = None;
        self.table.freed.notify_waiters();
    }
}

/// What [`Table::admit`] did.
pub enum Admission {
    Slot(Slot),
    /// Every slot is working: refuse.
    Full,
}

impl Table {
    pub fn new() -> Arc<Table> {
        Self::with_capacity(limits::HTTP_CONNECTIONS_MAX)
    }

    fn with_capacity(n: usize) -> Arc<Table> {
        Arc::new(Table { slots: Mutex::new(vec![None; n]), freed: Notify::new() })
    }

    fn take_free(self: &Arc<Self>) -> Option<Slot> {
        let mut slots = self.slots.lock().expect("lock");
        let index = slots.iter().position(Option::is_none)?;
        let conn = Arc::new(Conn::new());
        slots[index] = Some(conn.clone());
        Some(Slot { table: self.clone(), index, conn })
    }

    /// The connection that gives its slot up, marked taken: one waiting for its client
    /// (never one in a handler slot or writing a reply); the oldest never answered, else the
    /// oldest.
    fn victim(&self) -> Option<Arc<Conn>> {
        let slots = self.slots.lock().expect("lock");
        // A candidate admitted meanwhile is WORKING when its mark fails, so the next pass
        // skips it: at most one pass per slot.
        loop {
            let candidate = slots
                .iter()
                .flatten()
                .filter(|c| c.state.load(Ordering::Acquire) == OPEN && (c.in_handler() || c.quiet()))
                .min_by_key(|c| (c.answered.load(Ordering::Acquire), c.opened))?;
            if candidate.state.compare_exchange(OPEN, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Some(candidate.clone());
            }
        }
    }

    /// A slot for a new connection: a free one, or one another connection gives up (it is
    /// told to end and its slot awaited for at most [`limits::HTTP_EVICT_WAIT_MS`]). The bool
    /// says whether a connection was taken.
    pub async fn admit(self: &Arc<Self>) -> (Admission, bool) {
        if let Some(s) = self.take_free() {
            return (Admission::Slot(s), false);
        }
        let Some(victim) = self.victim() else { return (Admission::Full, false) };
        victim.evict.notify_one();
        drop(victim);
        let wait = std::time::Duration::from_millis(limits::HTTP_EVICT_WAIT_MS);
        let deadline = Instant::now() + wait;
        loop {
            let freed = self.freed.notified();
            if let Some(s) = self.take_free() {
                return (Admission::Slot(s), true);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return (self.take_free().map_or(Admission::Full, Admission::Slot), true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(a: (Admission, bool)) -> Slot {
        match a.0 {
            Admission::Slot(s) => s,
            Admission::Full => panic!("a slot"),
        }
    }

    #[tokio::test]
    async fn a_full_table_takes_the_oldest_unanswered_slot_and_never_one_in_a_handler() {
        let table = Table::with_capacity(3);
        let mut held: Vec<Slot> = Vec::new();
        for _ in 0..3 {
            held.push(slot(table.admit().await));
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // The oldest was answered; the second never was; the third is in a handler.
        held[0].conn.handler_done();
        assert!(held[2].conn.set_admitted());
        let second = held[1].conn.clone();
        let told = tokio::spawn(async move { second.evicted().await });
        let ending = held.remove(1);
        let newcomer = tokio::spawn({
            let table = table.clone();
            async move { table.admit().await }
        });
        told.await.unwrap();
        drop(ending);
        let (a, took) = newcomer.await.unwrap();
        assert!(took && matches!(a, Admission::Slot(_)));
        drop(a);
        // Everyone in a handler: refused.
        assert!(held[0].conn.set_admitted());
        let third = slot(table.admit().await);
        assert!(third.conn.set_admitted());
        assert!(matches!(table.admit().await, (Admission::Full, false)));
        third.conn.handler_done();
        // A told connection that does not end in time: the newcomer is refused.
        let (a, took) = table.admit().await;
        assert!(took && matches!(a, Admission::Full), "the slot was not given back");
    }

    #[tokio::test]
    async fn a_connection_writing_a_reply_is_never_taken_but_one_reading_a_body_is() {
        let table = Table::with_capacity(3);
        let (a, b) = (slot(table.admit().await), slot(table.admit().await));
        assert!(b.conn.set_admitted());
        // `a` answered and is still writing its reply (an export download).
        let reply = a.conn.request_started();
        a.conn.handler_done();
        assert!(table.victim().is_none());
        // Its body was handed whole to hyper, whose buffer still holds its end.
        drop(reply);
        assert!(!a.conn.quiet() && table.victim().is_none(), "still leaving");
        a.conn.flushed();
        assert!(a.conn.quiet());
        let c = slot(table.admit().await);
        // `c` reads a small body before it has a handler: it may go, and before `a`, which
        // was answered.
        let _reading = c.conn.request_started();
        let taken = table.victim().expect("one waiting for its client");
        assert!(Arc::ptr_eq(&taken, &c.conn));
        // Taken first: its request is not admitted.
        assert!(!c.conn.set_admitted());
        assert!(table.victim().is_some_and(|v| Arc::ptr_eq(&v, &a.conn)), "idle now");
        assert!(!a.conn.set_admitted() && table.victim().is_none(), "each is taken once");
    }

    /// The table's task and the connections' tasks race for each connection: every one is
    /// either taken or admitted, never both.
    #[test]
    fn taking_and_admitting_never_both_win() {
        let table = Table::with_capacity(64);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        rt.block_on(async {
            for _ in 0..50 {
                let slots: Vec<Slot> =
                    futures::future::join_all((0..64).map(|_| table.admit())).await.into_iter().map(slot).collect();
                let admitting = tokio::spawn({
                    let conns: Vec<Arc<Conn>> = slots.iter().map(|s| s.conn.clone()).collect();
                    async move { conns.iter().map(|c| c.set_admitted()).collect::<Vec<bool>>() }
                });
                let mut taken = Vec::new();
                while let Some(v) = table.victim() {
                    taken.push(v);
                }
                let admitted = admitting.await.unwrap();
                for (s, admitted) in slots.iter().zip(admitted) {
                    let was_taken = taken.iter().any(|t| Arc::ptr_eq(t, &s.conn));
                    assert!(was_taken != admitted, "taken {was_taken}, admitted {admitted}");
                }
            }
        });
    }
}
