//! The Protobuf codec of the `caesar.v1` services (issue 19): prost's own,
//! except that a message that cannot be decoded (a string field that is not
//! UTF-8, a truncated field) is the sender's error, INVALID_ARGUMENT, and
//! not INTERNAL, which tonic's codec answers for every decode error.

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with decode errors answered INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct ArgCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ArgCodec<T, U> {
    fn default() -> Self {
        ArgCodec(PhantomData)
    }
}

impl<T, U> Codec for ArgCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ArgDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ArgDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

/// prost's decoder, with its errors made INVALID_ARGUMENT.
#[derive(Debug)]
pub struct ArgDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for ArgDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(src).map_err(|e| {
            Status::invalid_argument(format!(
                "the message is not valid caesar.v1 Protobuf ({}); every string field must be UTF-8",
                e.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
