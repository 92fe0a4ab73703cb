//! The gRPC codec of every generated client and server here (set in
//! `build.rs`): prost's, but a message is decoded from one slice.
//!
//! tonic hands a decoder the message inside its receive buffer (a
//! `BytesMut`, behind a `DecodeBuf` that counts what is left), and
//! `tonic_prost`'s decoder reads it through that: every field advances the
//! buffer's cursor as it goes. The message's bytes are contiguous there, so
//! [`Decoder`] reads them as a plain slice and advances once: the same
//! values, about a quarter less time per message. That is most of what a
//! client does with a run's events — a fork's replayed history arrives as
//! hundreds of them at once.

use std::marker::PhantomData;

use prost::{Message, bytes::Buf};
use tonic::{
    Status,
    codec::{BufferSettings, Codec as TonicCodec, DecodeBuf, Decoder as TonicDecoder},
};
use tonic_prost::ProstEncoder;

/// Encodes `T` as prost does, decodes `U` with [`Decoder`].
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<fn(T) -> U>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> TonicCodec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Decoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        Decoder::default()
    }
}

/// Decodes `U` from a message's bytes, as one slice when they are.
#[derive(Debug, Clone)]
pub struct Decoder<U>(PhantomData<fn() -> U>);

impl<U> Default for Decoder<U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<U: Message + Default> TonicDecoder for Decoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        decode(buf)
            .map(Some)
            // As tonic_prost maps it (gRPC: a message that does not parse
            // is INTERNAL).
            .map_err(|e| Status::internal(e.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Decodes all of `buf` as one `U`: from its first chunk as a slice when
/// that chunk holds it all, through `buf` otherwise. All of `buf` is
/// consumed either way.
pub fn decode<U: Message + Default>(buf: &mut impl Buf) -> Result<U, prost::DecodeError> {
    let len = buf.remaining();
    if buf.chunk().len() >= len {
        let message = U::decode(&buf.chunk()[..len]);
        buf.advance(len);
        message
    } else {
        U::decode(buf)
    }
}

#[cfg(test)]
mod tests {
    use prost::bytes::{Buf as _, Bytes};

    use super::*;
    use crate::v1 as pb;

    fn event() -> pb::RunEvent {
        pb::RunEvent {
            seq: 7,
            run_id: "019a1b2c-3d4e-7f00-8123-456789abcdef".into(),
            context_id: "root.researcher.1".into(),
            depth: 1,
            payload: Some(pb::run_event::Payload::ToolCallCompleted(
                pb::ToolCallCompleted {
                    call_id: "c1".into(),
                    tool: "search".into(),
                    result: "[]".into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_contiguous_message_decodes_as_prost_decodes_it_and_is_consumed() {
        let bytes = event().encode_to_vec();
        // The message, then what follows it in the receive buffer.
        let buffer = [bytes.as_slice(), b"next"].concat();
        let mut message = &buffer[..bytes.len()];
        let decoded: pb::RunEvent = decode(&mut message).expect("decodes");
        assert_eq!(decoded, event());
        assert_eq!(
            decoded,
            pb::RunEvent::decode(bytes.as_slice()).expect("decodes")
        );
        assert!(message.is_empty());
    }

    #[test]
    fn a_message_in_pieces_decodes_the_same() {
        let bytes = Bytes::from(event().encode_to_vec());
        let (a, b) = (bytes.slice(..10), bytes.slice(10..));
        let mut pieces = a.chain(b);
        let decoded: pb::RunEvent = decode(&mut pieces).expect("decodes");
        assert_eq!(decoded, event());
        assert_eq!(pieces.remaining(), 0);
    }

    #[test]
    fn a_message_that_does_not_parse_is_an_error() {
        let mut bytes = event().encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        assert!(decode::<pb::RunEvent>(&mut bytes.as_slice()).is_err());
        // A field of wire type 7 (there is none).
        assert!(decode::<pb::RunEvent>(&mut &[0x0f_u8][..]).is_err());
    }
}
