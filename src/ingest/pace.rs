//! The ingest thread: every camera session runs on a runtime of its own, which reads the
//! cameras in ticks while no one watches them live.
//!
//! A thread's wake costs more CPU than reading one frame: a camera sends a frame every
//! 33 ms, and waking for each (as every session's socket tells the runtime it has data)
//! was most of what a recorded stream cost. While nothing needs frames the moment they come,
//! the thread, before it parks, sleeps until the next tick of [`limits::INGEST_READ_TICK_MS`]
//! (ticks shared by every session, so one wake serves them all); what the cameras sent
//! meanwhile waits in the kernel's socket buffers, and is read at once. A live viewer,
//! or a session over UDP (whose datagrams would overflow a socket buffer no one reads),
//! holds the pacing off ([`Pace::hold`]): then the thread wakes as packets come, as before.
//!
//! What a tick costs: a frame may be read up to one tick after it came, so its receipt
//! time (which anchors a recording's wall-clock time, slewed after) can be one tick late,
//! and the recorder sees frames in bursts. Timers on this runtime (a session's timeouts
//! and watchdog, seconds long) may fire up to one tick late. The web face and live view
//! run on the daemon's own runtime and are never paced.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::limits;

/// When the ingest thread may sleep before parking, and what holds it awake.
pub struct Pace {
    tick: Duration,
    /// Ticks are counted from here, so every session's wake falls on the same instants.
    epoch: Instant,
    /// Live viewers and UDP sessions that need packets read as they come.
    holds: AtomicUsize,
    /// Times the thread slept to a tick.
    naps: AtomicU64,
}

/// Keeps the ingest thread reading as packets come until dropped.
pub struct Hold(Arc<Pace>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pace {
    pub fn new(tick: Duration) -> Arc<Pace> {
        Arc::new(Pace { tick, epoch: Instant::now(), holds: AtomicUsize::new(0), naps: AtomicU64::new(0) })
    }

    /// Holds the pacing off while the returned guard lives.
    pub fn hold(self: &Arc<Pace>) -> Hold {
        self.holds.fetch_add(1, Ordering::Relaxed);
        Hold(self.clone())
    }

    /// Whether something holds the pacing off now.
    pub fn held(&self) -> bool {
        self.holds.load(Ordering::Relaxed) > 0
    }

    pub fn naps(&self) -> u64 {
        self.naps.load(Ordering::Relaxed)
    }

    /// The runtime is about to park (it has nothing to run): unless held, sleep until the
    /// next tick first.
    fn before_park(&self) {
        if self.tick.is_zero() || self.held() {
            return;
        }
        let tick_ns = self.tick.as_nanos();
        let now = Instant::now();
        let ticks = now.duration_since(self.epoch).as_nanos() / tick_ns + 1;
        let next = self.epoch + Duration::from_nanos(u64::try_from(ticks * tick_ns).unwrap_or(u64::MAX));
        self.naps.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(next.saturating_duration_since(now));
    }
}

/// The thread that runs every camera session, paced by a [`Pace`]. Dropping it stops the
/// thread; tasks still on it are dropped with the runtime.
pub struct IngestThread {
    handle: tokio::runtime::Handle,
    pace: Arc<Pace>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IngestThread {
    /// Starts the thread (its stack [`limits::INGEST_THREAD_STACK_BYTES`], and a blocking
    /// pool, for name lookups and file sources, of [`limits::INGEST_BLOCKING_THREADS_MAX`]).
    pub fn start(tick: Duration) -> std::io::Result<IngestThread> {
        let pace = Pace::new(tick);
        let parked = pace.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(move || parked.before_park())
            .max_blocking_threads(limits::INGEST_BLOCKING_THREADS_MAX)
            .thread_stack_size(limits::BLOCKING_THREAD_STACK_BYTES)
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kp-ingest".into())
            .stack_size(limits::INGEST_THREAD_STACK_BYTES)
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
                rt.shutdown_timeout(Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS));
            })?;
        Ok(IngestThread { handle, pace, stop: Some(stop), thread: Some(thread) })
    }

    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    pub fn pace(&self) -> &Arc<Pace> {
        &self.pace
    }
}

impl Drop for IngestThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    /// Wakes of a task reading a socket that gets a few bytes every 5 ms for `run`.
    fn reads_on(thread: &IngestThread, run: Duration, hold: bool) -> usize {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reads = Arc::new(Mutex::new(0usize));
        let counted = reads.clone();
        let pace = thread.pace().clone();
        let reader = thread.spawn(async move {
            let _hold = hold.then(|| pace.hold());
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut buf = [0u8; 4096];
            while s.read(&mut buf).await.unwrap() > 0 {
                *counted.lock().unwrap() += 1;
            }
        });
        let (mut peer, _) = listener.accept().unwrap();
        let start = Instant::now();
        while start.elapsed() < run {
            std::io::Write::write_all(&mut peer, b"frame").unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(peer);
        futures::executor::block_on(reader).unwrap();
        *reads.lock().unwrap()
    }

    #[test]
    fn unwatched_the_thread_reads_once_a_tick_and_held_as_packets_come() {
        let thread = IngestThread::start(Duration::from_millis(limits::INGEST_READ_TICK_MS)).unwrap();
        let run = Duration::from_millis(limits::INGEST_READ_TICK_MS * 8);
        let paced = reads_on(&thread, run, false);
        // One read a tick, give or take the ends, though 5 ms packets came 200 times.
        assert!((4..=11).contains(&paced), "{paced} reads in 8 ticks");
        assert!(thread.pace().naps() >= 6);
        let held = reads_on(&thread, run, true);
        assert!(held > 100, "held: {held} reads of about 400 packets");
        assert!(!thread.pace().held(), "the hold ended with its session");
    }

    #[test]
    fn the_ingest_blocking_pool_stops_at_its_ceiling() {
        let thread = IngestThread::start(Duration::from_millis(limits::INGEST_READ_TICK_MS)).unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (running2, most2) = (running.clone(), most.clone());
        let all = thread.spawn(async move {
            let tasks: Vec<_> = (0..limits::INGEST_BLOCKING_THREADS_MAX * 3)
                .map(|_| {
                    let (running, most) = (running2.clone(), most2.clone());
                    tokio::task::spawn_blocking(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        futures::executor::block_on(all).unwrap();
        assert_eq!(most.load(Ordering::SeqCst), limits::INGEST_BLOCKING_THREADS_MAX, "reached, not passed");
    }
}
