//! A byte pool: one global ceiling that many holders share, as the budget counts it.
//!
//! Each shared buffer of the firmware (ingest queues, live GOPs, event uploads, live frames
//! waiting to be sent) takes its bytes from a pool sized in `src/limits.rs` instead of holding
//! a worst case per stream: the pool's ceiling is the most that buffer can hold across the
//! box, whatever the number of streams. A holder reserves before it keeps bytes and gives
//! them back when it lets them go; a reservation past the ceiling is refused, never waited
//! for, and the holder does what its room says (drop to the next keyframe, let a GOP go,
//! answer 503).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A pool's ceiling on a board of `ram_class_bytes`: `per_gib` for each GiB, in proportion,
/// and never below `floor_bytes` (the largest single thing it must be able to hold).
pub fn ceiling_for(per_gib: usize, ram_class_bytes: u64, floor_bytes: usize) -> usize {
    let scaled = (per_gib as u128 * u128::from(ram_class_bytes)) >> 30;
    usize::try_from(scaled).unwrap_or(usize::MAX).max(floor_bytes)
}

/// Bytes held against one ceiling.
#[derive(Debug)]
pub struct BytePool {
    /// The ceiling: set at the start, and again when the plan changes (a camera added or
    /// removed while the box runs).
    max_bytes: AtomicUsize,
    held_bytes: AtomicUsize,
    /// The most ever held at once.
    peak_bytes: AtomicUsize,
    /// Reservations refused at the ceiling.
    refusals: AtomicU64,
}

impl BytePool {
    pub fn new(max_bytes: usize) -> BytePool {
        BytePool {
            max_bytes: AtomicUsize::new(max_bytes),
            held_bytes: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// A pool of `max_bytes` (a config's figure) to share between holders.
    pub fn shared(max_bytes: u64) -> Arc<BytePool> {
        Arc::new(BytePool::new(usize::try_from(max_bytes).unwrap_or(usize::MAX)))
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes.load(Ordering::Relaxed)
    }

    /// A new ceiling. Lowered below what is held, it refuses until enough is given back;
    /// nothing held is taken away.
    pub fn set_max_bytes(&self, max_bytes: usize) {
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
    }

    pub fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Relaxed)
    }

    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Takes `len` bytes if they fit under the ceiling; counts a refusal when they do not.
    pub fn reserve(&self, len: usize) -> bool {
        let max_bytes = self.max_bytes();
        let taken = self.held_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            held.checked_add(len).filter(|&after| after <= max_bytes)
        });
        match taken {
            Ok(before) => {
                self.peak_bytes.fetch_max(before + len, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Gives back `len` bytes reserved before.
    pub fn release(&self, len: usize) {
        let before = self.held_bytes.fetch_sub(len, Ordering::Relaxed);
        debug_assert!(before >= len, "released {len} of {before} held");
    }

    /// Reserves `len` bytes as a [`Charge`] that gives them back when dropped.
    pub fn charge(self: &Arc<Self>, len: usize) -> Option<Charge> {
        self.reserve(len).then(|| Charge { pool: Some(self.clone()), bytes: len })
    }
}

/// Bytes reserved from a pool, given back when the charge is dropped. Charges of one pool
/// can be merged, so a holder keeps one for everything it holds.
#[derive(Debug, Default)]
pub struct Charge {
    pool: Option<Arc<BytePool>>,
    bytes: usize,
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds `other` (of the same pool) to this charge.
    pub fn merge(&mut self, mut other: Charge) {
        if other.bytes == 0 {
            return;
        }
        match &self.pool {
            None => *self = std::mem::take(&mut other),
            Some(pool) => {
                debug_assert!(other.pool.as_ref().is_some_and(|p| Arc::ptr_eq(p, pool)), "one pool");
                self.bytes += std::mem::take(&mut other.bytes);
            }
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_refuses_what_would_pass_it_and_keeps_the_peak() {
        let pool = Arc::new(BytePool::new(100));
        let a = pool.charge(60).unwrap();
        assert!(pool.charge(41).is_none(), "past the ceiling");
        assert_eq!(pool.refusals(), 1);
        let mut b = pool.charge(40).unwrap();
        assert_eq!(pool.held_bytes(), 100, "the ceiling is reached exactly");
        drop(a);
        b.merge(pool.charge(30).unwrap());
        assert_eq!((b.bytes(), pool.held_bytes(), pool.peak_bytes()), (70, 70, 100));
        drop(b);
        assert_eq!(pool.held_bytes(), 0);
        assert!(!pool.reserve(usize::MAX), "no overflow");
    }

    #[test]
    fn a_new_ceiling_takes_nothing_back_and_refuses_until_there_is_room() {
        let pool = Arc::new(BytePool::new(100));
        let a = pool.charge(80).unwrap();
        pool.set_max_bytes(50);
        assert_eq!(pool.held_bytes(), 80, "what is held stays held");
        assert!(pool.charge(1).is_none());
        drop(a);
        assert!(pool.charge(50).is_some());
        pool.set_max_bytes(200);
        assert!(pool.charge(200).is_some());
    }

    #[test]
    fn ceilings_follow_the_ram_class_above_their_floor() {
        assert_eq!(ceiling_for(32 << 20, 1 << 30, 4 << 20), 32 << 20);
        assert_eq!(ceiling_for(32 << 20, 3 << 29, 4 << 20), 48 << 20);
        assert_eq!(ceiling_for(32 << 20, 64 << 20, 4 << 20), 4 << 20);
    }

    #[test]
    fn an_empty_charge_takes_the_pool_of_what_it_merges() {
        let pool = Arc::new(BytePool::new(10));
        let mut c = Charge::default();
        c.merge(pool.charge(4).unwrap());
        c.merge(Charge::default());
        assert_eq!(c.bytes(), 4);
        drop(c);
        assert_eq!(pool.held_bytes(), 0);
    }
}
