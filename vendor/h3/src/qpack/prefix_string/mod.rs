mod bitwin;
mod decode;
mod encode;
mod recent;

use std::convert::TryInto;
use std::fmt;
use std::num::TryFromIntError;

use bytes::{Buf, BufMut};

pub use self::bitwin::BitWindow;

pub use self::{
    decode::{Error as HuffmanDecodingError, HpackStringDecode},
    encode::Error as HuffmanEncodingError,
};

use crate::qpack::prefix_int::{self, Error as IntegerError};

#[derive(Debug, PartialEq)]
pub enum Error {
    UnexpectedEnd,
    Integer(IntegerError),
    HuffmanDecoding(HuffmanDecodingError),
    HuffmanEncoding(HuffmanEncodingError),
    BufSize(TryFromIntError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnexpectedEnd => write!(f, "unexpected end"),
            Error::Integer(e) => write!(f, "could not parse integer: {}", e),
            Error::HuffmanDecoding(e) => write!(f, "Huffman decode failed: {:?}", e),
            Error::HuffmanEncoding(e) => write!(f, "Huffman encode failed: {:?}", e),
            Error::BufSize(_) => write!(f, "number in buffer wrong size"),
        }
    }
}

pub fn decode<B: Buf>(size: u8, buf: &mut B) -> Result<Vec<u8>, Error> {
    let (flags, len) = prefix_int::decode(size - 1, buf)?;
    let len: usize = len.try_into()?;
    if buf.remaining() < len {
        return Err(Error::UnexpectedEnd);
    }

    let payload = buf.copy_to_bytes(len);
    let value = if flags & 1 == 0 {
        payload.to_vec()
    } else {
        // espalier's patch: decoded straight from the payload, not through a copy and a
        // byte-at-a-time iterator (a Huffman string is at most 8/5 as long decoded)
        let mut decoded = Vec::with_capacity(len + len / 2 + 1);
        decode::decode_huffman(&payload, &mut decoded)?;
        decoded
    };
    Ok(value)
}

/// espalier's patch: Huffman only where it is shorter (RFC 9204 §4.1.2 lets an encoder choose;
/// a value of digits or a base64 token is often longer encoded), written straight into `buf`;
/// a value of middling length coded once per thread while it repeats (see [`recent`]).
pub fn encode<B: BufMut>(size: u8, flags: u8, value: &[u8], buf: &mut B) -> Result<(), Error> {
    if (recent::SHORTEST..=recent::LONGEST).contains(&value.len()) {
        let written = recent::with_code(value, |huffman| put(size, flags, value, huffman, buf));
        if let Some(written) = written {
            return written;
        }
    }
    let huffman = encode::huffman_len(value);
    if huffman < value.len() {
        prefix_int::encode(size - 1, flags << 1 | 1, huffman.try_into()?, buf);
        encode::put_huffman(value, buf);
    } else {
        prefix_int::encode(size - 1, flags << 1, value.len().try_into()?, buf);
        buf.put_slice(value);
    }
    Ok(())
}

/// espalier's patch: `value` written with its Huffman code, or as it is where that is `None`.
fn put<B: BufMut>(
    size: u8,
    flags: u8,
    value: &[u8],
    huffman: Option<&[u8]>,
    buf: &mut B,
) -> Result<(), Error> {
    match huffman {
        Some(code) => {
            prefix_int::encode(size - 1, flags << 1 | 1, code.len().try_into()?, buf);
            buf.put_slice(code);
        }
        None => {
            prefix_int::encode(size - 1, flags << 1, value.len().try_into()?, buf);
            buf.put_slice(value);
        }
    }
    Ok(())
}

impl From<HuffmanEncodingError> for Error {
    fn from(error: HuffmanEncodingError) -> Self {
        Error::HuffmanEncoding(error)
    }
}

impl From<IntegerError> for Error {
    fn from(error: IntegerError) -> Self {
        match error {
            IntegerError::UnexpectedEnd => Error::UnexpectedEnd,
            e => Error::Integer(e),
        }
    }
}

impl From<HuffmanDecodingError> for Error {
    fn from(error: HuffmanDecodingError) -> Self {
        Error::HuffmanDecoding(error)
    }
}

impl From<TryFromIntError> for Error {
    fn from(error: TryFromIntError) -> Self {
        Error::BufSize(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use assert_matches::assert_matches;
    use std::io::Cursor;

    #[test]
    fn codec_6() {
        let mut buf = Vec::new();
        encode(6, 0b01, b"name without ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(
            &buf,
            &[
                0b0110_1100,
                168,
                116,
                149,
                79,
                6,
                76,
                231,
                181,
                42,
                88,
                89,
                127
            ]
        );
        assert_eq!(decode(6, &mut read).unwrap(), b"name without ref");
    }

    #[test]
    fn codec_8() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"name with ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(
            &buf,
            &[0b1000_1010, 168, 116, 149, 79, 6, 76, 234, 88, 89, 127]
        );
        assert_eq!(decode(8, &mut read).unwrap(), b"name with ref");
    }

    #[test]
    fn codec_8_empty() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        // espalier's patch: an empty value is sent as it is (H bit clear), Huffman being no
        // shorter (h3 0.0.8 sent [0b1000_0000], a Huffman string of length 0).
        assert_eq!(&buf, &[0b0000_0000]);
        assert_eq!(decode(8, &mut read).unwrap(), b"");
    }

    #[test]
    fn codec_8_not_shorter_huffman_is_sent_as_it_is() {
        // espalier's patch: '~' and '{' take 13 and 15 bits; Huffman would be longer
        let mut buf = Vec::new();
        encode(8, 0, b"~{~{", &mut buf).unwrap();
        assert_eq!(&buf, &[4, b'~', b'{', b'~', b'{']);
        assert_eq!(decode(8, &mut Cursor::new(&buf)).unwrap(), b"~{~{");
        // …and a Huffman-shorter one still goes Huffman, round trip exact
        let value: Vec<u8> = (0u8..=255)
            .chain(b"text/html; charset=utf-8".iter().copied())
            .collect();
        for sample in [&b"text/html; charset=utf-8"[..], &value[..]] {
            let mut buf = Vec::new();
            encode(8, 0, sample, &mut buf).unwrap();
            assert_eq!(decode(8, &mut Cursor::new(&buf)).unwrap(), sample);
        }
    }

    #[test]
    fn decode_non_huffman() {
        let buf = vec![0b0100_0011, b'b', b'a', b'r'];
        let mut read = Cursor::new(&buf);
        assert_eq!(decode(6, &mut read).unwrap(), b"bar");
    }

    #[test]
    fn decode_too_short() {
        let buf = vec![0b0100_0011, b'b', b'a'];
        let mut read = Cursor::new(&buf);
        assert_matches!(decode(6, &mut read), Err(Error::UnexpectedEnd));
    }
}
