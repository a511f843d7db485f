//! What both roles share about the control stream: a tokio channel as a gRPC message
//! stream, the token check, the address form and the error chain of the transport.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc::UnboundedReceiver;

/// The largest control message either side accepts (a Deploy of a large plan).
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// Messages queued by one side, as the stream tonic sends (both the worker's request
/// stream and the coordinator's response stream).
pub(crate) struct Messages<T>(pub(crate) UnboundedReceiver<T>);

impl<T> tonic::codegen::tokio_stream::Stream for Messages<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a guessed
/// token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, y) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ y;
    }
    diff == 0
}

/// A transport error with its causes, which carry the useful part ("connection refused").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s = format!("{s}: {c}");
        source = c.source();
    }
    s
}
