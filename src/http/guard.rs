//! The socket under every HTTP connection, with the timeouts hyper does not enforce itself.
//!
//! - Read: a request (head and body) must arrive within [`limits::HTTP_READ_TIMEOUT_MS`] of
//!   the server starting to read it, plus a second for every
//!   [`limits::HTTP_READ_MIN_RATE_BYTES_PER_S`] bytes read (the deadline is never more than
//!   the timeout ahead). The clock starts when reading starts after the last response (or at
//!   connect), so a slow-loris client that trickles bytes is cut off, and so is an idle
//!   keep-alive connection holding a slot, while a large upload over a slow link that keeps
//!   the minimum rate is read whole. The clock survives every write made while the request
//!   is still in its handler (hyper's `100 Continue`): only a reply ends it. A body that
//!   waited for a handler slot gets a fresh clock when its handler starts reading it
//!   ([`Conn::body_read_from_now`]): the wait was the server's, not the client's.
//! - One writer: on expiry, when no reply is open ([`Conn::quiet`]: the server was reading a
//!   head), the guard writes a `408` straight to the socket and the connection ends; when a
//!   handler is reading the body, the read fails with [`io::ErrorKind::TimedOut`] and the
//!   handler answers the `408` itself ([`super::api::read_body`]), so a client never gets two
//!   answers to one request.
//! - Write: a response write that makes no progress for [`limits::HTTP_WRITE_TIMEOUT_MS`]
//!   ends the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::HttpStats;
use super::conns::Conn;
use crate::limits;

/// The 408 sent to a client whose request did not arrive in time.
const REQUEST_TIMEOUT_RESPONSE: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

pub struct Guarded<S = TcpStream> {
    stream: S,
    read_deadline: Option<Pin<Box<Sleep>>>,
    write_stall: Option<Pin<Box<Sleep>>>,
    stats: Arc<HttpStats>,
    conn: Arc<Conn>,
}

impl<S> Guarded<S> {
    pub fn new(stream: S, stats: Arc<HttpStats>, conn: Arc<Conn>) -> Self {
        Guarded { stream, read_deadline: None, write_stall: None, stats, conn }
    }
}

fn sleep_ms(ms: u64) -> Pin<Box<Sleep>> {
    Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.conn.take_fresh_clock() {
            me.read_deadline = None;
        }
        let deadline = me.read_deadline.get_or_insert_with(|| sleep_ms(limits::HTTP_READ_TIMEOUT_MS));
        let before = buf.filled().len();
        match Pin::new(&mut me.stream).poll_read(cx, buf) {
            Poll::Ready(r) => {
                let read = buf.filled().len() - before;
                if read > 0 {
                    let now = tokio::time::Instant::now();
                    let later = extended(deadline.deadline(), now, read);
                    deadline.as_mut().reset(later);
                }
                Poll::Ready(r)
            }
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    me.stats.request_timeouts.fetch_add(1, Ordering::Relaxed);
                    if me.conn.quiet() {
                        // Best effort, once: the client may not be reading either.
                        let _ = Pin::new(&mut me.stream).poll_write(cx, REQUEST_TIMEOUT_RESPONSE);
                    }
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request not received in time")))
                }
            },
        }
    }
}

/// The read deadline after `read` more bytes arrived at `now`: later by the time those bytes
/// take at the minimum rate, but never more than the read timeout ahead of `now`.
fn extended(deadline: tokio::time::Instant, now: tokio::time::Instant, read: usize) -> tokio::time::Instant {
    let earned = Duration::from_micros(read as u64 * 1_000_000 / limits::HTTP_READ_MIN_RATE_BYTES_PER_S);
    (deadline + earned).min(now + Duration::from_millis(limits::HTTP_READ_TIMEOUT_MS))
}

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// A write that makes no progress for [`limits::HTTP_WRITE_TIMEOUT_MS`] fails.
    fn guard_write(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        // A reply is going out: the request is over and the next one gets a fresh clock. A
        // write while the handler still works is interim (`100 Continue`): the clock runs on.
        if !self.conn.in_handler() {
            self.read_deadline = None;
        }
        match write(Pin::new(&mut self.stream), cx) {
            Poll::Ready(r) => {
                self.write_stall = None;
                self.conn.write_progressed();
                Poll::Ready(r)
            }
            Poll::Pending => {
                self.conn.write_stalled();
                let stall = self.write_stall.get_or_insert_with(|| sleep_ms(limits::HTTP_WRITE_TIMEOUT_MS));
                match stall.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => {
                        self.stats.write_timeouts.fetch_add(1, Ordering::Relaxed);
                        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "response not taken in time")))
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().guard_write(cx, |s, cx| s.poll_write(cx, data))
    }

    /// Vectored, so hyper hands a response's head and body chunks to the socket as they are
    /// instead of copying them into one buffer first.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().guard_write(cx, |s, cx| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    /// hyper flushes the socket only once its own write buffer is empty, so a completed
    /// flush means every reply handed to it has been written ([`Conn::flushed`]).
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.stream).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            me.conn.flushed();
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn bytes_read_at_the_minimum_rate_move_the_deadline_by_their_time_up_to_the_timeout() {
        let now = Instant::now();
        let timeout = Duration::from_millis(limits::HTTP_READ_TIMEOUT_MS);
        let start = now + timeout;
        // A second's worth of bytes at the minimum rate earns a second.
        let rate = limits::HTTP_READ_MIN_RATE_BYTES_PER_S as usize;
        assert_eq!(extended(start - Duration::from_secs(5), now, rate), start - Duration::from_secs(4));
        // Never further than the timeout ahead: a burst does not bank time for a stall.
        assert_eq!(extended(start, now, rate), start);
        assert_eq!(extended(start - Duration::from_millis(1), now, 100 * rate), start);
        // A trickle earns next to nothing: one byte is 61 µs.
        assert_eq!(extended(now, now, 1), now + Duration::from_micros(61));
    }
}
