//! The writer threads: a small fixed pool that records every stream, instead of a thread
//! per stream.
//!
//! Each recorded stream is a job in one shared line. A writer takes the job at the front,
//! gives it one turn (what its queue held when the turn began, no more) and puts it at the
//! back; a job is in one writer's hands at a time, so a stream's frames stay in order. A
//! writer that finds a whole round of jobs with nothing to do sleeps (or until a job is
//! added or the pool stops): the first to sleep keeps the watch and wakes after
//! [`limits::RECORDER_POLL_INTERVAL_MS`] for the next round; the others are its backups
//! and wake after [`limits::RECORDER_BACKUP_POLL_INTERVAL_MS`]. One writer takes the rounds
//! while the streams are few, rather than every writer waking every poll: a thread's wake
//! costs more CPU than the round it takes. A round that finds work keeps its writer turning.
//!
//! The bound on waiting for another stream: a slow write (a stalled disk, a catalog commit)
//! holds only the writer doing it, and the others go on taking turns; a stream waits at most
//! for one turn of each job ahead of it while a writer is free, and while the watch is in a
//! slow write, for a backup's wake. Should every writer stall,
//! the streams' queues fill and drop until their next keyframe, as a slow disk always made
//! them: ingest never waits. A job that panics ends alone, logged; its writer goes on.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::error;

use crate::limits;

/// What one turn of a job did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It took messages: give it another turn soon.
    Worked,
    /// Nothing was waiting.
    Idle,
    /// Its queue closed and its files are closed: it leaves the pool.
    Ended,
}

/// Work the writers take turns at: one recorded stream.
pub trait Work: Send + 'static {
    fn turn(&mut self) -> Turn;
}

/// Writer threads for a board of `ram_class_bytes`.
pub fn count_for(ram_class_bytes: u64) -> usize {
    let by_ram = (limits::RECORD_WRITERS_PER_GIB as u64 * ram_class_bytes) >> 30;
    (by_ram as usize).clamp(2, limits::RECORD_WRITERS_MAX)
}

/// Set when a job has left the pool; waited on to stop a camera.
#[derive(Default)]
pub struct Done {
    ended: Mutex<bool>,
    changed: Condvar,
}

impl Done {
    fn set(&self) {
        *self.ended.lock().expect("done lock") = true;
        self.changed.notify_all();
    }

    /// Waits until the job has ended or `deadline` passes; returns whether it ended.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let mut ended = self.ended.lock().expect("done lock");
        while !*ended {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            ended = self.changed.wait_timeout(ended, left).expect("done lock").0;
        }
        true
    }
}

struct Job {
    work: Box<dyn Work>,
    done: Arc<Done>,
}

#[derive(Default)]
struct Line {
    waiting: VecDeque<Job>,
    /// Jobs in a writer's hands now.
    in_hand: usize,
    stopping: bool,
    /// A writer is asleep keeping the watch (waking after the poll interval).
    watched: bool,
}

struct Shared {
    line: Mutex<Line>,
    changed: Condvar,
    /// The watch's sleep.
    poll: Duration,
    /// The backups' sleep.
    backup_poll: Duration,
}

/// The pool of writer threads.
pub struct Writers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Writers {
    /// Starts `count` writers, each with a stack of [`limits::THREAD_STACK_BYTES`].
    pub fn start(count: usize) -> Writers {
        Writers::with_poll(
            count,
            Duration::from_millis(limits::RECORDER_POLL_INTERVAL_MS),
            Duration::from_millis(limits::RECORDER_BACKUP_POLL_INTERVAL_MS),
        )
    }

    fn with_poll(count: usize, poll: Duration, backup_poll: Duration) -> Writers {
        let shared = Arc::new(Shared { line: Mutex::default(), changed: Condvar::new(), poll, backup_poll });
        let threads = (0..count)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("kp-writer-{i}"))
                    .stack_size(limits::THREAD_STACK_BYTES)
                    .spawn(move || write(&shared))
                    .expect("spawning a writer thread")
            })
            .collect();
        Writers { shared, threads }
    }

    /// Writer threads running.
    pub fn count(&self) -> usize {
        self.threads.len()
    }

    /// Adds a job at the back of the line; the returned [`Done`] is set when it ends.
    pub fn add(&self, work: Box<dyn Work>) -> Arc<Done> {
        let done = Arc::new(Done::default());
        self.shared.line.lock().expect("line lock").waiting.push_back(Job { work, done: done.clone() });
        self.shared.changed.notify_one();
        done
    }

    /// Stops the writers once every job has ended; waits for them until `deadline` and
    /// returns whether they all stopped (a writer stuck in a write is left behind).
    pub fn stop(self, deadline: Instant) -> bool {
        self.shared.line.lock().expect("line lock").stopping = true;
        self.shared.changed.notify_all();
        let mut all = true;
        for t in self.threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                all = false;
            }
        }
        all
    }
}

/// One writer's loop.
fn write(shared: &Shared) {
    // Turns in a row that found nothing to do: past the line's length, a whole round did.
    let mut idle_turns = 0usize;
    loop {
        let mut job = {
            let mut line = shared.line.lock().expect("line lock");
            loop {
                if idle_turns <= line.waiting.len()
                    && let Some(job) = line.waiting.pop_front()
                {
                    line.in_hand += 1;
                    break job;
                }
                if line.stopping && line.waiting.is_empty() && line.in_hand == 0 {
                    return;
                }
                idle_turns = 0;
                if line.watched {
                    line = shared.changed.wait_timeout(line, shared.backup_poll).expect("line lock").0;
                } else {
                    line.watched = true;
                    line = shared.changed.wait_timeout(line, shared.poll).expect("line lock").0;
                    line.watched = false;
                }
            }
        };
        let turn = catch_unwind(AssertUnwindSafe(|| job.work.turn())).unwrap_or_else(|_| {
            error!("a recorded stream's writer job panicked; that stream stops recording");
            Turn::Ended
        });
        match turn {
            Turn::Worked => idle_turns = 0,
            Turn::Idle => idle_turns += 1,
            Turn::Ended => job.done.set(),
        }
        let mut line = shared.line.lock().expect("line lock");
        line.in_hand -= 1;
        if turn != Turn::Ended {
            line.waiting.push_back(job);
        } else if line.stopping {
            shared.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A job that does `turns` turns of work, then ends; it may be made to block in a turn.
    struct Fake {
        turns_left: u64,
        done_turns: Arc<AtomicU64>,
        block: Option<Arc<AtomicBool>>,
        panic_at: Option<u64>,
    }

    impl Work for Fake {
        fn turn(&mut self) -> Turn {
            if let Some(block) = &self.block {
                while block.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            if self.panic_at == Some(self.turns_left) {
                panic!("a bug in one stream");
            }
            if self.turns_left == 0 {
                return Turn::Ended;
            }
            self.turns_left -= 1;
            self.done_turns.fetch_add(1, Ordering::Relaxed);
            Turn::Worked
        }
    }

    fn fake(turns: u64) -> (Box<Fake>, Arc<AtomicU64>) {
        let done_turns = Arc::new(AtomicU64::new(0));
        (Box::new(Fake { turns_left: turns, done_turns: done_turns.clone(), block: None, panic_at: None }), done_turns)
    }

    /// A one-turn job that blocks in its turn until the returned flag is cleared.
    fn stuck() -> (Box<Fake>, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(true));
        let (mut slow, _) = fake(1);
        slow.block = Some(flag.clone());
        (slow, flag)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn the_pool_is_sized_for_the_board() {
        assert_eq!(count_for(512 << 20), 2);
        assert_eq!(count_for(1 << 30), 2);
        assert_eq!(count_for(3 << 29), 3);
        assert_eq!(count_for(2 << 30), limits::RECORD_WRITERS_MAX);
        assert_eq!(count_for(64 << 30), limits::RECORD_WRITERS_MAX);
    }

    #[test]
    fn many_streams_are_written_by_a_few_threads_and_each_ends() {
        let writers = Writers::with_poll(2, Duration::from_millis(5), Duration::from_millis(20));
        let jobs: Vec<_> = (0..64)
            .map(|i| {
                let (work, turns) = fake(i % 7 + 1);
                (writers.add(work), turns, i % 7 + 1)
            })
            .collect();
        assert_eq!(writers.count(), 2);
        for (done, turns, want) in &jobs {
            assert!(done.wait_until(soon()));
            assert_eq!(turns.load(Ordering::Relaxed), *want);
        }
        assert!(writers.stop(soon()));
    }

    #[test]
    fn a_stream_stuck_in_a_write_holds_one_writer_while_the_others_record_on() {
        let writers = Writers::with_poll(2, Duration::from_millis(5), Duration::from_millis(20));
        let (slow, stuck) = stuck();
        let slow_done = writers.add(slow);
        let (work, turns) = fake(1000);
        let done = writers.add(work);
        assert!(done.wait_until(soon()), "the other stream was written through while one write hung");
        assert_eq!(turns.load(Ordering::Relaxed), 1000);
        assert!(!slow_done.wait_until(Instant::now()), "the stuck one is still in its write");
        stuck.store(false, Ordering::Relaxed);
        assert!(slow_done.wait_until(soon()));
        assert!(writers.stop(soon()));
    }

    /// A stream with nothing to write, counting the turns it is given, until it is told to end.
    struct Quiet(Arc<AtomicU64>, Arc<AtomicBool>);

    impl Work for Quiet {
        fn turn(&mut self) -> Turn {
            if self.1.load(Ordering::Relaxed) {
                return Turn::Ended;
            }
            self.0.fetch_add(1, Ordering::Relaxed);
            Turn::Idle
        }
    }

    #[test]
    fn a_quiet_stream_is_looked_at_by_the_watch_not_by_every_writer() {
        let (poll, backup_poll) = (Duration::from_millis(10), Duration::from_millis(250));
        let writers = Writers::with_poll(3, poll, backup_poll);
        let (turns, end) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let done = writers.add(Box::new(Quiet(turns.clone(), end.clone())));
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let (n, rounds) = (turns.load(Ordering::Relaxed), start.elapsed().as_millis() as u64 / 10);
        // A writer that wakes gives the one job at most two turns before it sleeps again. The
        // watch wakes once a poll, the two backups at most three times each in the time:
        // every writer waking every poll would give about three times the watch's turns.
        assert!(n > 0, "the stream was looked at");
        assert!(n <= 2 * (rounds + 1) + 2 * 2 * 3, "{n} turns in {rounds} polls");
        end.store(true, Ordering::Relaxed);
        assert!(done.wait_until(soon()));
        assert!(writers.stop(soon()));
    }

    #[test]
    fn a_job_that_panics_ends_alone() {
        let writers = Writers::with_poll(2, Duration::from_millis(5), Duration::from_millis(20));
        let (mut bad, _) = fake(5);
        bad.panic_at = Some(3);
        let bad_done = writers.add(bad);
        let (good, turns) = fake(50);
        let good_done = writers.add(good);
        assert!(bad_done.wait_until(soon()));
        assert!(good_done.wait_until(soon()));
        assert_eq!(turns.load(Ordering::Relaxed), 50);
        assert!(writers.stop(soon()));
    }

    #[test]
    fn stopping_waits_for_jobs_to_end_and_gives_up_on_a_stuck_writer_at_the_deadline() {
        let writers = Writers::with_poll(2, Duration::from_millis(5), Duration::from_millis(20));
        let (slow, stuck) = stuck();
        let _done = writers.add(slow);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!writers.stop(Instant::now() + Duration::from_millis(100)), "one writer is stuck");
        stuck.store(false, Ordering::Relaxed);
    }
}
