//! Compressing bodies in the content codings espalier sends: whole (a static file's variant,
//! once per worker thread) or as a stream (an app's answer, chunk by chunk, with memory
//! bounded per connection).
//!
//! The crates: `flate2` on its `zlib-rs` backend for gzip (a Rust port of zlib-ng, about
//! twice miniz_oxide's speed at the same output, and no C to build), `brotli` (Dropbox's
//! pure-Rust port of Google's encoder, byte-identical output), and `zstd` (bindings to the
//! reference C library — there is no Rust encoder of its speed). Levels: a static variant is
//! made once and served many times, so it is compressed hard (gzip 9, brotli 9, zstd 15); a
//! stream is compressed while the client waits, so lightly (gzip 5, brotli 4, zstd 3), with
//! windows of 256 KiB (brotli, zstd) so a connection holds about 1 MiB at most.
//!
//! Owns: [`Coding`], [`whole`] and [`Stream`]. Must not touch: which coding a request gets
//! or any I/O (callers hand bytes in and take bytes out).

use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// A content coding espalier can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Coding {
    Zstd,
    Brotli,
    Gzip,
}

impl Coding {
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// Its name in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The suffix of a precompressed file beside the original (`app.js.br`).
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Zstd => ".zst",
            Coding::Brotli => ".br",
            Coding::Gzip => ".gz",
        }
    }

    /// From a config's name (`"br"` and `"brotli"` both).
    pub fn from_name(name: &str) -> Option<Coding> {
        match name {
            "zstd" => Some(Coding::Zstd),
            "br" | "brotli" => Some(Coding::Brotli),
            "gzip" => Some(Coding::Gzip),
            _ => None,
        }
    }

    /// Its slot in per-coding arrays (the order of [`Coding::ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The window of a streaming brotli or zstd encoder: 2^18 = 256 KiB.
const STREAM_WINDOW_LOG: u32 = 18;

/// `data` compressed in `coding`, hard (see the module's levels).
pub fn whole(coding: Coding, data: &[u8]) -> io::Result<Vec<u8>> {
    match coding {
        Coding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 3 + 64),
                flate2::Compression::new(9),
            );
            e.write_all(data)?;
            e.finish()
        }
        Coding::Brotli => {
            let mut out = Vec::with_capacity(data.len() / 3 + 64);
            {
                let mut w = brotli::CompressorWriter::new(&mut out, 16 << 10, 9, 22);
                w.write_all(data)?;
            }
            Ok(out)
        }
        Coding::Zstd => zstd::bulk::compress(data, 15),
    }
}

/// A body being compressed as it streams: bytes in with [`Stream::push`], out with
/// [`Stream::take`] after each push (flushed, so a client sees what the app has sent), the
/// end with [`Stream::finish`].
pub struct Stream {
    encoder: Encoder,
    _live: Live,
}

thread_local! {
    /// The streams alive on this thread (each holds its encoder's window and tables).
    static LIVE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many [`Stream`]s are alive on this thread: what a caller bounding their memory reads.
pub fn live_streams() -> usize {
    LIVE.with(std::cell::Cell::get)
}

/// One stream counted in [`LIVE`] while it lives.
struct Live;

impl Live {
    fn new() -> Live {
        LIVE.with(|n| n.set(n.get() + 1));
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Stream {
    pub fn new(coding: Coding) -> io::Result<Stream> {
        let encoder = match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(5),
            )),
            Coding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                16 << 10,
                4,
                STREAM_WINDOW_LOG,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3)?;
                e.window_log(STREAM_WINDOW_LOG)?;
                Encoder::Zstd(e)
            }
        };
        Ok(Stream {
            encoder,
            _live: Live::new(),
        })
    }

    /// Compresses `data` and flushes, so that all of it can be decoded from what
    /// [`Self::take`] gives.
    pub fn push(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.encoder {
            Encoder::Gzip(e) => {
                e.write_all(data)?;
                e.flush()
            }
            Encoder::Brotli(e) => {
                e.write_all(data)?;
                e.flush()
            }
            Encoder::Zstd(e) => {
                e.write_all(data)?;
                e.flush()
            }
        }
    }

    /// The compressed bytes made so far and not taken yet.
    pub fn take(&mut self) -> Vec<u8> {
        let out = match &mut self.encoder {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Brotli(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        };
        std::mem::take(out)
    }

    /// Ends the stream: the last bytes (trailer, checksum).
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self.encoder {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Brotli(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => {
                out = zstd::stream::decode_all(data).unwrap();
            }
        }
        out
    }

    #[test]
    fn whole_and_streamed_bodies_decode_to_what_went_in() {
        let text: Vec<u8> = (0..20_000)
            .flat_map(|i| format!("line {i} of a page\n").into_bytes())
            .collect();
        for c in Coding::ALL {
            let packed = whole(c, &text).unwrap();
            assert!(packed.len() < text.len() / 4, "{c:?} compresses");
            assert_eq!(decode(c, &packed), text, "{c:?} whole");
            let mut s = Stream::new(c).unwrap();
            let mut streamed = Vec::new();
            for piece in text.chunks(7_000) {
                s.push(piece).unwrap();
                let out = s.take();
                assert!(!out.is_empty(), "{c:?}: each push is flushed out");
                streamed.extend_from_slice(&out);
            }
            streamed.extend_from_slice(&s.finish().unwrap());
            assert_eq!(decode(c, &streamed), text, "{c:?} streamed");
        }
    }
}
