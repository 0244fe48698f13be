//! CRC-32C (Castagnoli) of frames, the same values as the `crc32c` crate's.
//!
//! Frames are short (a hundred bytes is typical), where the crate's routine
//! spends much of its time aligning: up to seven bytes one at a time before
//! its 8-byte words and up to seven after, each a dependent 3-cycle
//! instruction, and as many again for a frame's 8-byte offset when it is
//! not aligned. Here SSE 4.2's instruction takes unaligned 8-byte words,
//! then one 4-byte, 2-byte and 1-byte step at most. A CRC's steps depend on
//! each other (latency 3, one per cycle issued), so [`append3`] runs three
//! buffers' CRCs interleaved: a batch's frames are checked three at a time.
//! Long buffers go to the crate, whose interleaved form suits them.

/// From this length on, the crate's three-way interleaved routine is faster.
const LONG: usize = 512;

/// `crc` extended over `data` (`crc32c::crc32c_append`).
#[inline]
pub(crate) fn append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < LONG && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked above).
        return unsafe { hw::append(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// Three independent CRCs, `crcs[i]` extended over `data[i]`.
#[inline]
pub(crate) fn append3(crcs: [u32; 3], data: [&[u8]; 3]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked above).
        return unsafe { hw::append3(crcs, data) };
    }
    [0, 1, 2].map(|i| crc32c::crc32c_append(crcs[i], data[i]))
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64};

    #[inline]
    fn word(w: &[u8]) -> u64 {
        u64::from_le_bytes(w.try_into().expect("8 bytes"))
    }

    /// The register's state after the bytes that are no whole 8-byte word.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn tail(mut c: u32, mut rest: &[u8]) -> u32 {
        if rest.len() >= 4 {
            c = _mm_crc32_u32(
                c,
                u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")),
            );
            rest = &rest[4..];
        }
        if rest.len() >= 2 {
            c = _mm_crc32_u16(
                c,
                u16::from_le_bytes(rest[..2].try_into().expect("2 bytes")),
            );
            rest = &rest[2..];
        }
        if let Some(&b) = rest.first() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }

    #[target_feature(enable = "sse4.2")]
    pub(super) fn append(crc: u32, data: &[u8]) -> u32 {
        let mut c = u64::from(!crc);
        let words = data.chunks_exact(8);
        let rest = words.remainder();
        for w in words {
            c = _mm_crc32_u64(c, word(w));
        }
        !tail(c as u32, rest)
    }

    #[target_feature(enable = "sse4.2")]
    pub(super) fn append3(crcs: [u32; 3], data: [&[u8]; 3]) -> [u32; 3] {
        let n = data[0].len().min(data[1].len()).min(data[2].len()) / 8 * 8;
        let (mut a, mut b, mut c) = (
            u64::from(!crcs[0]),
            u64::from(!crcs[1]),
            u64::from(!crcs[2]),
        );
        let lanes = data[0][..n]
            .chunks_exact(8)
            .zip(data[1][..n].chunks_exact(8))
            .zip(data[2][..n].chunks_exact(8));
        for ((x, y), z) in lanes {
            a = _mm_crc32_u64(a, word(x));
            b = _mm_crc32_u64(b, word(y));
            c = _mm_crc32_u64(c, word(z));
        }
        [
            append(!(a as u32), &data[0][n..]),
            append(!(b as u32), &data[1][n..]),
            append(!(c as u32), &data[2][n..]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that are not a pattern a wrong word order would still match.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn equals_the_crate_at_every_length_and_alignment() {
        let bytes = noise(2 * LONG + 64, 7);
        for start in 0..9 {
            for len in (0..160).chain([LONG - 1, LONG, LONG + 9, 2 * LONG]) {
                let data = &bytes[start..start + len];
                for seed in [0, 0xdead_beef] {
                    let expected = crc32c::crc32c_append(seed, data);
                    assert_eq!(append(seed, data), expected, "start {start} len {len}");
                }
            }
        }
        // The check value of the CRC-32C catalogue entry.
        assert_eq!(append(0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn three_lanes_equal_three_single_crcs() {
        let bytes = noise(3000, 11);
        let lengths = [
            (0, 0, 0),
            (8, 8, 8),
            (100, 97, 113),
            (1, 250, 64),
            (700, 9, 1500),
        ];
        for (i, &(x, y, z)) in lengths.iter().enumerate() {
            let data = [
                &bytes[1..=x],
                &bytes[5..5 + y],
                &bytes[1000 + i..1000 + i + z],
            ];
            let seeds = [3, 0, u32::MAX];
            let expected = [0, 1, 2].map(|j| crc32c::crc32c_append(seeds[j], data[j]));
            assert_eq!(append3(seeds, data), expected, "lengths {x} {y} {z}");
        }
    }
}
