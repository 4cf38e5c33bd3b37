//! A counting allocator for the benchmarks that measure memory: the heap's live bytes and
//! their peak, beside the system allocator. A benchmark installs it with
//! `#[global_allocator] static GLOBAL: heap::Counting = heap::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

pub struct Counting;

/// Bytes allocated less bytes freed.
pub static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
/// The most [`LIVE_BYTES`] reached since it was last set.
pub static PEAK_BYTES: AtomicI64 = AtomicI64::new(0);

fn grew(by: i64) {
    let now = LIVE_BYTES.fetch_add(by, Ordering::Relaxed) + by;
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
