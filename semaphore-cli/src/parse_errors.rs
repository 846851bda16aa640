//! JSON bodies for the answers hyper writes itself.
//!
//! A request that hyper cannot parse (a path over 64 KiB: 414; headers over
//! its buffer: 431; a garbled request line: 400) is answered by hyper
//! before any route runs, with an empty body, and the connection is
//! closed. Every error this service gives is the seed's JSON body, so this
//! wrapper of the connection's socket completes those answers: a response
//! head with a 4xx or 5xx status and `content-length: 0` gets a JSON body
//! naming the status. The routes never send such a head (each of their
//! errors has a body), so nothing else is touched.
//!
//! Responses pass through untouched otherwise, byte for byte; the wrapper
//! does not do vectored writes, so hyper hands it each head in one buffer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A socket whose bodiless error answers get the JSON body.
#[derive(Debug)]
pub(crate) struct JsonErrors<S> {
    inner: S,
    /// Bytes still to write of a completed answer.
    pending: Vec<u8>,
    written: usize,
}

impl<S> JsonErrors<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The completed answer, if `head` is a bodiless error head.
fn complete(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    if code < 400 || !text.ends_with("\r\n\r\n") {
        return None;
    }
    let reason = rest[3..].split("\r\n").next().unwrap_or("").trim();
    let lower = text.to_ascii_lowercase();
    let at = lower.find("\r\ncontent-length: 0\r\n")?;
    let body = serde_json::json!({
        "error": if reason.is_empty() { format!("HTTP {code}") } else { reason.to_ascii_lowercase() },
        "code": "bad_request",
        "retryable": false,
    })
    .to_string();
    let mut out = String::with_capacity(text.len() + body.len() + 48);
    out.push_str(&text[..at]);
    out.push_str(&format!(
        "\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    ));
    out.push_str(&text[at + "\r\ncontent-length: 0\r\n".len()..]);
    out.push_str(&body);
    Some(out.into_bytes())
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        if let Some(answer) = complete(buf) {
            self.pending = answer;
            // The whole head is taken; what is left is written by the next
            // call or by flush.
            let _ = self.drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::complete;

    #[test]
    fn a_bodiless_error_head_gets_a_json_body() {
        let head = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(complete(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "uri too long");
    }

    #[test]
    fn other_writes_pass_untouched() {
        for bytes in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 409 Conflict\r\ncontent-length: 40\r\n\r\n",
            b"{\"error\":\"no resource available\"}",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n", // not a whole head
        ] {
            assert!(
                complete(bytes).is_none(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
