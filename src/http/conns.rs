//! The connection table: the [`limits::HTTP_CONNECTIONS_MAX`] slots, what each connection is
//! doing, and which one gives its slot up when a new client comes and every slot is taken.
//!
//! A client that opens connections and never finishes a request (slow heads, slow bodies,
//! `Expect: 100-continue` with no body, nothing at all) must not keep everyone else out until
//! its read deadlines run out. So a full table does not refuse the newcomer while some
//! connection is waiting for a client: the one that goes is the oldest that has never been
//! answered, else the oldest one. A connection is waiting for its client while it waits for
//! a head, or for a small body (read before a handler slot is taken), or in the line for a
//! slot, or while the client has taken nothing of its reply for
//! [`limits::HTTP_EVICT_WRITE_STALLED_MS`]. One whose handler runs, or whose reply moves (an
//! export download, up to its last byte leaving hyper's write buffer), is never taken, so the
//! newcomer is refused with `503` only when every slot is working.
//!
//! The table and the connections' own tasks run side by side, so what a connection does is
//! one atomic word (its state and a count of its changes): the table takes a connection only
//! in the very state it judged, a request is admitted only on a connection not taken, and
//! whichever comes first wins; a request whose connection was taken first is refused.
//!
//! [`Conn`] is also what the socket guard ([`super::guard`]) and the request handler share,
//! so that the guard knows whether a write is a response (the next request gets a fresh
//! clock) or an interim `100 Continue` (the request's clock runs on), whether a `408` is its
//! to write or the handler's, and when a body read after a wait in the line gets a fresh
//! clock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// What the connection does ([`OPEN`], [`WORKING`], [`WRITING`] or [`TAKEN`]) in the low
    /// byte, and above it a count of its changes, so that the table takes a connection only
    /// in the very state it judged.
    state: AtomicU64,
    /// Since when (ms after `opened`, plus one; 0: not now) a reply's write has waited for
    /// the client to take bytes.
    stalled_since_ms: AtomicU64,
    /// The request's body is read from now: the guard restarts the read clock.
    fresh_clock: AtomicBool,
    /// At least one reply was made on this connection.
    answered: AtomicBool,
    evict: Notify,
}

/// Waiting for its client: for a head, a small body, or a handler slot. The table may take it.
const OPEN: u8 = 0;
/// A request holds a handler slot (or hashes a password): the table does not take it.
const WORKING: u8 = 1;
/// A reply is leaving, until its last byte has left hyper's write buffer: the table takes it
/// only when the client has taken nothing of it for [`limits::HTTP_EVICT_WRITE_STALLED_MS`].
const WRITING: u8 = 2;
/// The table took the connection for a newcomer: it ends, and admits nothing more.
const TAKEN: u8 = 3;

fn kind(word: u64) -> u8 {
    (word & 0xff) as u8
}

impl Conn {
    pub fn new() -> Conn {
        Conn {
            opened: Instant::now(),
            in_handler: false.into(),
            replies_open: 0.into(),
            state: u64::from(OPEN).into(),
            stalled_since_ms: 0.into(),
            fresh_clock: false.into(),
            answered: false.into(),
            evict: Notify::new(),
        }
    }

    /// Moves to `to` from any state `from` allows; the state it found when it does not.
    fn change(&self, from: impl Fn(u8) -> bool, to: u8) -> Result<(), u8> {
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if !from(kind(word)) {
                return Err(kind(word));
            }
            let next = ((word >> 8).wrapping_add(1) << 8) | u64::from(to);
            match self.state.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => word = now,
            }
        }
    }

    /// True while a handler works on a request: a write then is an interim response.
    pub fn in_handler(&self) -> bool {
        self.in_handler.load(Ordering::Acquire)
    }

    /// True when no reply is open or still leaving: nothing but the guard can write on the
    /// connection now.
    pub fn quiet(&self) -> bool {
        self.replies_open.load(Ordering::Acquire) == 0 && kind(self.state.load(Ordering::Acquire)) == OPEN
    }

    fn now_ms(&self) -> u64 {
        Instant::now().duration_since(self.opened).as_millis() as u64 + 1
    }

    /// A reply's write waits for the client to take bytes.
    pub fn write_stalled(&self) {
        let _ = self.stalled_since_ms.compare_exchange(0, self.now_ms(), Ordering::AcqRel, Ordering::Acquire);
    }

    /// The client took bytes of a reply.
    pub fn write_progressed(&self) {
        self.stalled_since_ms.store(0, Ordering::Release);
    }

    /// How long a reply's write has waited for the client, in ms.
    fn stalled_ms(&self) -> u64 {
        match self.stalled_since_ms.load(Ordering::Acquire) {
            0 => 0,
            since => self.now_ms().saturating_sub(since),
        }
    }

    /// The socket completed a flush: whatever hyper had buffered has been written, and once
    /// every reply was handed over whole, the connection waits for its client again.
    pub fn flushed(&self) {
        self.write_progressed();
        if self.replies_open.load(Ordering::Acquire) == 0 {
            let _ = self.change(|k| k == WRITING, OPEN);
        }
    }

    /// A request's head was parsed and goes to its handler; the returned mark is kept by its
    /// reply until the reply is written whole.
    pub fn request_started(self: &Arc<Self>) -> ReplyMark {
        self.replies_open.fetch_add(1, Ordering::AcqRel);
        self.in_handler.store(true, Ordering::Release);
        ReplyMark(self.clone())
    }

    /// The handler made its reply: it is leaving from now.
    pub fn handler_done(&self) {
        self.answered.store(true, Ordering::Release);
        self.in_handler.store(false, Ordering::Release);
        // A taken connection stays taken.
        let _ = self.change(|k| k == OPEN || k == WORKING, WRITING);
    }

    /// The request takes a handler slot, so the connection is not taken from now on; false
    /// when the table took it first (the request is then refused, and the connection ends).
    #[must_use]
    pub fn set_admitted(&self) -> bool {
        // WRITING: the previous reply's end may still be leaving.
        self.change(|k| k == OPEN || k == WRITING, WORKING).is_ok()
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

    /// The connection that gives its slot up, marked taken: one waiting for its client, or
    /// one whose reply the client has taken nothing of for
    /// [`limits::HTTP_EVICT_WRITE_STALLED_MS`] (never one in a handler slot, nor a reply
    /// that moves); the oldest never answered, else the oldest.
    fn victim(&self) -> Option<Arc<Conn>> {
        let slots = self.slots.lock().expect("lock");
        // A candidate that changed meanwhile fails its mark and is judged again in its new
        // state: a pass per change, and each change is a connection's step forward.
        loop {
            let (candidate, word) = slots
                .iter()
                .flatten()
                .filter_map(|c| {
                    let word = c.state.load(Ordering::Acquire);
                    let stalled = || c.stalled_ms() >= limits::HTTP_EVICT_WRITE_STALLED_MS;
                    let takeable = kind(word) == OPEN || (kind(word) == WRITING && stalled());
                    takeable.then_some((c, word))
                })
                .min_by_key(|(c, _)| (c.answered.load(Ordering::Acquire), c.opened))?;
            let taken = ((word >> 8).wrapping_add(1) << 8) | u64::from(TAKEN);
            if candidate.state.compare_exchange(word, taken, Ordering::AcqRel, Ordering::Acquire).is_ok() {
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
        held[0].conn.flushed();
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
        third.conn.flushed();
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

    /// A reply the client takes nothing of is waiting for its client: past the stall it may
    /// go, and a byte taken makes it a moving reply again.
    #[tokio::test(start_paused = true)]
    async fn a_reply_the_client_stopped_taking_may_go_after_the_stall() {
        let table = Table::with_capacity(1);
        let a = slot(table.admit().await);
        let reply = a.conn.request_started();
        a.conn.handler_done();
        a.conn.write_stalled();
        let stall = std::time::Duration::from_millis(limits::HTTP_EVICT_WRITE_STALLED_MS);
        tokio::time::sleep(stall - std::time::Duration::from_millis(10)).await;
        assert!(table.victim().is_none(), "not yet");
        a.conn.write_progressed();
        tokio::time::sleep(stall).await;
        assert!(table.victim().is_none(), "it moved");
        a.conn.write_stalled();
        tokio::time::sleep(stall).await;
        assert!(table.victim().is_some_and(|v| Arc::ptr_eq(&v, &a.conn)));
        drop(reply);
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
