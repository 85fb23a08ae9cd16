//! The request body: the message's base64 spliced into the JSON the SDK serialized around a
//! placeholder ([`Splice`], before signing), so the message is in the request once, not also
//! in the SDK's input; then handed to the HTTP client in slices ([`Track`]), with a flag
//! raised when the last slice is taken: what tells a request that never went whole ("unavailable": the message may
//! go elsewhere) from one that did ("uncertain": SES may have it). Slices, not one buffer, so
//! that the HTTP client takes the last bytes only once the earlier ones have been written
//! (its write buffer is far smaller than a large message). The slices share the serialized
//! body's one buffer: nothing is copied.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use aws_sdk_sesv2::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_sesv2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sesv2::error::BoxError;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The size of one slice.
const SLICE: usize = 64 * 1024;

/// What the SDK is given as the message's bytes: 9 bytes, whose base64 (letters only, never
/// escaped in JSON) is found in the serialized request and replaced by the message's.
pub const PLACEHOLDER: &[u8] = b"mslplaceh";
/// The JSON of [`PLACEHOLDER`] as the data of the raw message.
const PLACEHOLDER_FIELD: &[u8] = b"\"Data\":\"bXNscGxhY2Vo\"";
/// Where the value starts in it.
const VALUE_AT: usize = b"\"Data\":\"".len();

/// Puts the message's base64 (a [`Raw`](super::raw::Raw)'s data, with room before and after
/// it) in place of the placeholder's, before the request is signed: the JSON before the data
/// is written into the room before it, the JSON after it appended, and the buffer becomes the
/// body as it is.
#[derive(Debug)]
pub struct Splice {
    data: Mutex<Option<Vec<u8>>>,
    front: usize,
}

impl Splice {
    /// `data` holds the base64 from `front` on.
    pub fn new(data: Vec<u8>, front: usize) -> Splice {
        Splice {
            data: Mutex::new(Some(data)),
            front,
        }
    }
}

impl Intercept for Splice {
    fn name(&self) -> &'static str {
        "mailsluice.splice_body"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let json = request
            .body()
            .bytes()
            .ok_or("the request body is a stream")?;
        let at = memchr::memmem::find(json, PLACEHOLDER_FIELD).ok_or("no placeholder")?;
        let (before, after) = (
            &json[..at + VALUE_AT],
            &json[at + PLACEHOLDER_FIELD.len() - 1..],
        );
        let mut data = (self.data.lock().unwrap_or_else(|e| e.into_inner()).take())
            .ok_or("the request was sent twice")?;
        let start = match self.front.checked_sub(before.len()) {
            Some(start) => start,
            None => return Err("the JSON before the data is larger than its room".into()),
        };
        data[start..self.front].copy_from_slice(before);
        data.extend_from_slice(after);
        let body = Bytes::from(data).slice(start..);
        request
            .headers_mut()
            .insert("content-length", body.len().to_string());
        *request.body_mut() = SdkBody::from(body);
        Ok(())
    }
}

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
