//! The request body handed to the HTTP client in slices, with a flag raised when the last
//! slice is taken: what tells a request that never went whole ("unavailable": the message may
//! go elsewhere) from one that did ("uncertain": SES may have it). Slices, not one buffer, so
//! that the HTTP client takes the last bytes only once the earlier ones have been written
//! (its write buffer is far smaller than a large message). The slices share the serialized
//! body's one buffer: nothing is copied.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use aws_sdk_sesv2::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_sesv2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sesv2::error::BoxError;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The size of one slice.
const SLICE: usize = 64 * 1024;

/// Swaps a request's body for a [`Tracked`] one just before it is sent (after signing).
#[derive(Debug, Clone, Default)]
pub struct Track {
    sent: Arc<AtomicBool>,
}

impl Track {
    /// Whether the whole body was handed to the HTTP client.
    pub fn body_sent(&self) -> bool {
        self.sent.load(Ordering::SeqCst)
    }
}

impl Intercept for Track {
    fn name(&self) -> &'static str {
        "mailsluice.track_body"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = context.request_mut().body_mut();
        // The serialized body is one buffer: read out as it is (its only frame), not copied.
        let mut serialized = std::mem::replace(body, SdkBody::taken());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let bytes = match Pin::new(&mut serialized).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
            Poll::Ready(None) => Bytes::new(),
            _ => return Err("the request body is a stream".into()),
        };
        drop(serialized);
        *body = SdkBody::from_body_1_x(Tracked {
            bytes,
            at: 0,
            sent: self.sent.clone(),
        });
        Ok(())
    }
}

struct Tracked {
    bytes: Bytes,
    at: usize,
    sent: Arc<AtomicBool>,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let end = (this.at + SLICE).min(this.bytes.len());
        if end == this.bytes.len() {
            this.sent.store(true, Ordering::SeqCst);
        }
        if this.at == end {
            return Poll::Ready(None);
        }
        let slice = this.bytes.slice(this.at..end);
        this.at = end;
        Poll::Ready(Some(Ok(Frame::data(slice))))
    }

    fn is_end_stream(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.bytes.len() - self.at) as u64)
    }
}
