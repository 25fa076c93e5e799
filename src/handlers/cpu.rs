//! The `cpu` handler: CPU-heavy work per request, like the web-gardening seed's audio
//! transcoding service. It synthesizes a block of 16-bit PCM audio (three tones under an
//! envelope, integer arithmetic only so the output is the same on every machine), encodes it
//! with IMA ADPCM (4:1), and answers the sizes and an FNV-1a checksum of the encoded stream.
//!
//! `GET /…?ms=N` transcodes N milliseconds of 44.1 kHz audio (default 100, at most 10 000).
//! Owns: the synthesis and the codec. Must not touch: I/O.

use crate::http::Responder;

pub const SAMPLE_RATE: u32 = 44_100;
pub const DEFAULT_MS: u32 = 100;
pub const MAX_MS: u32 = 10_000;

/// What one transcoding produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transcoded {
    pub samples: u32,
    pub encoded_bytes: u32,
    pub checksum: u64,
}

/// A sine on a 32-bit phase, in -32767..=32767: Bhaskara I's approximation
/// `16x(π−x) / (5π² − 4x(π−x))` on each half-wave, in integers so it is exact everywhere.
fn sine(phase: u32) -> i32 {
    let negative = phase >= 1 << 31;
    // x in 0..2^15 stands for 0..π on this half-wave.
    let x = ((phase & 0x7fff_ffff) >> 16) as i64;
    let half = 1i64 << 15;
    let p = x * (half - x);
    let y = (16 * p * 32767 / (5 * half * half - 4 * p)) as i32;
    if negative {
        -y
    } else {
        y
    }
}

/// Synthesizes `samples` of PCM audio.
pub fn synthesize(samples: u32) -> Vec<i16> {
    let step = |hz: u64| ((hz << 32) / SAMPLE_RATE as u64) as u32;
    let (s1, s2, s3) = (step(440), step(660), step(1320));
    let (mut p1, mut p2, mut p3) = (0u32, 0u32, 0u32);
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..samples {
        // A triangle envelope over each 100 ms.
        let pos = i % 4410;
        let env = if pos < 2205 { pos } else { 4410 - pos } as i32;
        let mix = sine(p1) / 2 + sine(p2) / 3 + sine(p3) / 6;
        out.push((mix * env / 2205).clamp(-32768, 32767) as i16);
        p1 = p1.wrapping_add(s1);
        p2 = p2.wrapping_add(s2);
        p3 = p3.wrapping_add(s3);
    }
    out
}

const STEP_TABLE: [i32; 89] = [
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66,
    73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449,
    494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272,
    2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493,
    10442, 11487, 12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767,
];
const INDEX_TABLE: [i32; 8] = [-1, -1, -1, -1, 2, 4, 6, 8];

/// The IMA ADPCM state carried from sample to sample.
#[derive(Default, Clone, Copy)]
struct AdpcmState {
    predictor: i32,
    index: i32,
}

impl AdpcmState {
    /// Applies a 4-bit code to the state (shared by encoder and decoder).
    fn apply(&mut self, code: u8) -> i16 {
        let step = STEP_TABLE[self.index as usize];
        let mut diff = step >> 3;
        if code & 4 != 0 {
            diff += step;
        }
        if code & 2 != 0 {
            diff += step >> 1;
        }
        if code & 1 != 0 {
            diff += step >> 2;
        }
        self.predictor = if code & 8 != 0 {
            self.predictor - diff
        } else {
            self.predictor + diff
        }
        .clamp(-32768, 32767);
        self.index = (self.index + INDEX_TABLE[(code & 7) as usize]).clamp(0, 88);
        self.predictor as i16
    }
}

/// Encodes PCM as IMA ADPCM, two samples per byte (low nibble first).
pub fn adpcm_encode(pcm: &[i16]) -> Vec<u8> {
    let mut st = AdpcmState::default();
    let mut out = Vec::with_capacity(pcm.len().div_ceil(2));
    let mut pending: Option<u8> = None;
    for &s in pcm {
        let step = STEP_TABLE[st.index as usize];
        let mut diff = s as i32 - st.predictor;
        let mut code = 0u8;
        if diff < 0 {
            code = 8;
            diff = -diff;
        }
        let mut threshold = step;
        for bit in [4u8, 2, 1] {
            if diff >= threshold {
                code |= bit;
                diff -= threshold;
            }
            threshold >>= 1;
        }
        st.apply(code);
        match pending.take() {
            None => pending = Some(code),
            Some(low) => out.push(low | (code << 4)),
        }
    }
    if let Some(low) = pending {
        out.push(low);
    }
    out
}

/// Decodes IMA ADPCM back to PCM (`samples` of them).
pub fn adpcm_decode(data: &[u8], samples: usize) -> Vec<i16> {
    let mut st = AdpcmState::default();
    let mut out = Vec::with_capacity(samples);
    for &byte in data {
        for code in [byte & 0x0f, byte >> 4] {
            if out.len() < samples {
                out.push(st.apply(code));
            }
        }
    }
    out
}

/// FNV-1a, 64-bit.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The whole job for `ms` milliseconds of audio.
pub fn transcode(ms: u32) -> Transcoded {
    let samples = (SAMPLE_RATE as u64 * ms as u64 / 1000) as u32;
    let pcm = synthesize(samples);
    let encoded = adpcm_encode(&pcm);
    Transcoded {
        samples,
        encoded_bytes: encoded.len() as u32,
        checksum: fnv1a(&encoded),
    }
}

/// The `ms` query parameter, or an error text.
pub fn parse_ms(query: &str) -> Result<u32, String> {
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("ms=") {
            return match v.parse::<u32>() {
                Ok(ms) if ms <= MAX_MS => Ok(ms),
                _ => Err(format!("ms must be a whole number from 0 to {MAX_MS}\n")),
            };
        }
    }
    Ok(DEFAULT_MS)
}

/// Answers a request: JSON with the sizes and checksum.
pub fn respond(query: &str, resp: &mut Responder<'_>) {
    match parse_ms(query) {
        Err(text) => resp.simple(400, "text/plain; charset=utf-8", text.as_bytes()),
        Ok(ms) => {
            let t = transcode(ms);
            let body = format!(
                "{{\"ms\":{ms},\"samples\":{},\"encoded_bytes\":{},\"checksum\":\"{:016x}\"}}\n",
                t.samples, t.encoded_bytes, t.checksum
            );
            resp.status(200)
                .header("Content-Type", "application/json")
                .header("Cache-Control", "no-store")
                .body(body.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sine_has_the_right_shape() {
        assert_eq!(sine(0), 0);
        assert!(
            (sine(1 << 30) - 32767).abs() < 50,
            "peak at a quarter turn: {}",
            sine(1 << 30)
        );
        assert!((sine(3 << 30) + 32767).abs() < 50);
        assert!(
            sine(1 << 29) > 22000 && sine(1 << 29) < 24500,
            "sin(π/4) ≈ 0.707: {}",
            sine(1 << 29)
        );
    }

    #[test]
    fn adpcm_round_trip_keeps_the_signal() {
        let pcm = synthesize(4410);
        let enc = adpcm_encode(&pcm);
        assert_eq!(enc.len(), 2205, "4 bits per sample");
        let dec = adpcm_decode(&enc, pcm.len());
        let signal: f64 = pcm.iter().map(|&s| (s as f64).powi(2)).sum();
        let noise: f64 = pcm
            .iter()
            .zip(&dec)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum();
        let snr_db = 10.0 * (signal / noise).log10();
        assert!(
            snr_db > 20.0,
            "ADPCM should keep the tones: SNR {snr_db:.1} dB"
        );
    }

    #[test]
    fn transcode_is_deterministic_and_sized_by_ms() {
        let a = transcode(100);
        assert_eq!(a, transcode(100));
        assert_eq!(a.samples, 4410);
        assert_eq!(a.encoded_bytes, 2205);
        let b = transcode(200);
        assert_eq!(b.samples, 8820);
        assert_ne!(a.checksum, b.checksum);
        assert_eq!(
            transcode(0),
            Transcoded {
                samples: 0,
                encoded_bytes: 0,
                checksum: fnv1a(&[])
            }
        );
    }

    #[test]
    fn ms_parameter() {
        assert_eq!(parse_ms(""), Ok(DEFAULT_MS));
        assert_eq!(parse_ms("x=1&ms=250"), Ok(250));
        assert!(parse_ms("ms=abc").is_err());
        assert!(parse_ms("ms=10001").is_err());
    }
}
