//! A deadline on writing answers: a client that sends requests but does
//! not read the answers (a pipelined flood whose answers are never read,
//! a reader that stopped) stops the server's writes once the socket's
//! buffers are full, and hyper would wait for room forever, holding the
//! connection. Wrapped in [`WriteDeadline`], a socket whose writes make
//! no progress for `--write-timeout` fails them (`TimedOut`), and hyper
//! closes the connection (rule "A default server serves everyone":
//! answers that are not read time out).
//!
//! Only a stall counts: the clock starts when a write finds no room, and
//! any progress stops it, so a slow reader that keeps reading is never cut
//! off, however long its answer takes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A socket whose writes fail after `stall` without progress.
#[derive(Debug)]
pub(crate) struct WriteDeadline<S> {
    inner: S,
    stall: Duration,
    /// Armed while a write waits for room: when it fails.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(inner: S, stall: Duration) -> Self {
        Self {
            inner,
            stall,
            waiting: None,
        }
    }

    /// `polled`, the inner socket's answer to a write or a flush: passed
    /// on, but a stall (`Pending`) arms the deadline, or fails once it has
    /// passed; progress disarms it.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let stall = self.stall;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + stall)));
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read none of its answer for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_finds_no_room_for_the_stall_fails_and_progress_resets_it() {
        // A pipe of 64 bytes whose far end reads nothing until told.
        let (near, mut far) = tokio::io::duplex(64);
        let mut socket = WriteDeadline::new(near, Duration::from_secs(10));
        socket.write_all(&[1; 64]).await.unwrap();
        // Full: a write now waits, and after 9 s of nothing read it still
        // waits; reading lets it go on.
        let mut writing = Box::pin(async move {
            let result = socket.write_all(&[2; 64]).await;
            (socket, result)
        });
        tokio::select! {
            _ = &mut writing => panic!("wrote into a full pipe"),
            () = tokio::time::sleep(Duration::from_secs(9)) => {}
        }
        let mut drained = [0; 64];
        tokio::io::AsyncReadExt::read_exact(&mut far, &mut drained)
            .await
            .unwrap();
        let (mut socket, wrote) = writing.await;
        wrote.unwrap();
        // Full again, and nothing read for 10 s: timed out.
        let failed = socket.write_all(&[3; 1]).await.unwrap_err();
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
    }
}
