//! Kafka's murmur2 partitioner, checked against Kafka's own test vectors.

use strom_core::serde::partitioner::{murmur2, partition_for_key};

/// `UtilsTest.testMurmur2` in Apache Kafka's clients module.
const KAFKA_VECTORS: &[(&[u8], i32)] = &[
    (b"21", -973_932_308),
    (b"foobar", -790_332_482),
    (b"a-little-bit-long-string", -985_981_536),
    (b"a-little-bit-longer-string", -1_486_304_829),
    (
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        -58_897_971,
    ),
    (b"abc", 479_470_107),
];

/// Java client outputs for the tail lengths Kafka's table does not cover
/// (0 and 1 trailing bytes past the last 4-byte block).
const EXTRA_VECTORS: &[(&[u8], i32)] = &[(b"", 275_646_681), (b"a", -1_563_381_124)];

#[test]
fn murmur2_matches_kafka_utils_test() {
    for &(input, expected) in KAFKA_VECTORS.iter().chain(EXTRA_VECTORS) {
        assert_eq!(
            murmur2(input),
            expected,
            "murmur2({:?})",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn partition_masks_the_sign_bit_like_to_positive() {
    for &(input, hash) in KAFKA_VECTORS {
        for n in [1u32, 2, 3, 7, 12, 100] {
            let expected = ((hash & 0x7fff_ffff) as u32) % n;
            assert_eq!(partition_for_key(input, n), expected);
        }
    }
    // "foobar" hashes negative: Math.abs would differ from the mask.
    assert_eq!(partition_for_key(b"foobar", 3), 1_357_151_166 % 3);
    assert_eq!(partition_for_key(b"21", 1), 0);
}

#[test]
fn partitions_are_in_range_and_spread() {
    let mut counts = [0u32; 6];
    for i in 0..6000 {
        let p = partition_for_key(format!("key-{i}").as_bytes(), 6);
        counts[p as usize] += 1;
    }
    assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
}
