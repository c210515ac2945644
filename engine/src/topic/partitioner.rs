//! Where a produced record goes: Kafka's default partitioner, bit for bit.
//!
//! A keyed record goes to `toPositive(murmur2(key)) % partitions`, exactly as Kafka's
//! `BuiltInPartitioner.partitionForKey` (and the older `DefaultPartitioner`) computes it, so
//! a key lands on the same partition number in sluice as in a Kafka topic with the same
//! partition count; data migrated between the two keeps its per-key order. An unkeyed record
//! goes wherever [`UnkeyedSpreader`] says.
//!
//! Everything here is a pure function of its inputs: no clock, no randomness, no I/O. The
//! producer calls it on whichever shard it runs.

use sluice_io::PartitionId;

/// Kafka's murmur2 seed (`Utils.murmur2`: `int seed = 0x9747b28c`).
pub const KAFKA_MURMUR2_SEED: u32 = 0x9747_b28c;

/// Kafka's `org.apache.kafka.common.utils.Utils.murmur2`: 32-bit MurmurHash2 with seed
/// `0x9747b28c`, 4-byte little-endian loads, the tail bytes folded in before one extra
/// multiply, and the final `h ^= h >>> 13; h *= m; h ^= h >>> 15` mix.
///
/// The `murmur2` crate's endian-neutral `murmur2` (Austin Appleby's `MurmurHashNeutral2`) is
/// that same function; the tests check it against Kafka's, librdkafka's and kafka-python's
/// published vectors and against a line-by-line transliteration of the Java code on random
/// inputs of every tail length. The result is Java's signed `int`, as Kafka returns it.
pub fn murmur2(key: &[u8]) -> i32 {
    // The cast reinterprets the bits, as Java's `int` arithmetic does.
    murmur2::murmur2(key, KAFKA_MURMUR2_SEED) as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit. This is not `abs`: `-1` maps to
/// `i32::MAX`, and `i32::MIN` to `0`.
pub fn to_positive(hash: i32) -> u32 {
    (hash & 0x7fff_ffff) as u32
}

/// The partition Kafka's default partitioner picks for a keyed record:
/// `toPositive(murmur2(key)) % partitions` (`BuiltInPartitioner.partitionForKey`).
///
/// # Panics
///
/// If `partitions` is zero: a topic always has at least one partition, so a zero here is a
/// bug in the caller, not bad input.
pub fn partition_for_key(key: &[u8], partitions: u32) -> PartitionId {
    assert!(partitions > 0, "partition_for_key: a topic has at least one partition");
    // The positive hash is below 2^31, so the `u32` remainder equals Java's `int` remainder
    // for every partition count Kafka allows (1..=i32::MAX).
    PartitionId(to_positive(murmur2(key)) % partitions)
}

/// Spreads unkeyed records over a topic's partitions: round robin, one partition per batch.
///
/// The producer asks for a partition when it opens a new batch of unkeyed records and sends
/// every record of that batch there; the next batch goes to the next partition. This is the
/// shape of Kafka's sticky partitioner (KIP-480): sticking to one partition per batch makes
/// fuller batches than changing partition per record, and moving on after each batch spreads
/// the load. Kafka picks the next partition at random (weighted by queue depth since
/// KIP-794); sluice rotates instead, which is deterministic, and even by construction: over
/// any `partitions` consecutive batches each partition receives exactly one.
///
/// One spreader serves one topic on one producer. Start producers at different partitions
/// (for example at their shard number) so that they do not all begin with partition 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnkeyedSpreader {
    next: u32,
}

impl UnkeyedSpreader {
    /// A spreader whose first batch goes to partition `start % partitions`.
    pub fn new(start: u32) -> Self {
        UnkeyedSpreader { next: start }
    }

    /// The partition for the next batch of unkeyed records of a topic with `partitions`
    /// partitions. The count may change between calls (partitions added): the rotation
    /// continues from where it was, modulo the new count.
    ///
    /// # Panics
    ///
    /// If `partitions` is zero, as [`partition_for_key`].
    pub fn next_partition(&mut self, partitions: u32) -> PartitionId {
        assert!(partitions > 0, "UnkeyedSpreader: a topic has at least one partition");
        let partition = self.next % partitions;
        // Storing the successor, not a running counter, keeps the rotation exact forever: a
        // counter would wrap at 2^32, which is not a multiple of most partition counts.
        self.next = (partition + 1) % partitions;
        PartitionId(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line-by-line transliteration of Kafka's `Utils.murmur2` (Java), kept only to check
    /// the crate against on inputs no published vector covers.
    fn java_murmur2(data: &[u8]) -> i32 {
        let length = data.len() as i32;
        let seed = 0x9747_b28c_u32 as i32;
        let m: i32 = 0x5bd1_e995;
        let r = 24;
        let mut h = seed ^ length;
        let length4 = data.len() / 4;
        for i in 0..length4 {
            let i4 = i * 4;
            let mut k = (data[i4] as i32)
                .wrapping_add((data[i4 + 1] as i32) << 8)
                .wrapping_add((data[i4 + 2] as i32) << 16)
                .wrapping_add((data[i4 + 3] as i32) << 24);
            k = k.wrapping_mul(m);
            k ^= ((k as u32) >> r) as i32; // `>>>`: logical shift
            k = k.wrapping_mul(m);
            h = h.wrapping_mul(m);
            h ^= k;
        }
        let tail = data.len() & !3;
        // Java's `switch` falls through from case 3 to case 1.
        let rest = data.len() % 4;
        if rest >= 3 {
            h ^= (data[tail + 2] as i32) << 16;
        }
        if rest >= 2 {
            h ^= (data[tail + 1] as i32) << 8;
        }
        if rest >= 1 {
            h ^= data[tail] as i32;
            h = h.wrapping_mul(m);
        }
        h ^= ((h as u32) >> 13) as i32;
        h = h.wrapping_mul(m);
        h ^= ((h as u32) >> 15) as i32;
        h
    }

    /// Kafka's own vectors: `UtilsTest.testMurmur2` in apache/kafka,
    /// clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java.
    const KAFKA_UTILS_TEST: [(&[u8], i32); 6] = [
        (b"21", -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
        (b"abc", 479_470_107),
    ];

    /// librdkafka's `unittest_murmur2` (confluentinc/librdkafka, src/rdmurmur2.c), whose
    /// expected values are labelled `java_murmur2_results`; the suffixes of "1234" and of the
    /// long string cover every tail length.
    const LIBRDKAFKA: [(&[u8], u32); 11] = [
        (b"kafka", 0xd067_cf64),
        (b"giberish123456789", 0x8f55_2b0c),
        (b"1234", 0x9fc9_7b14),
        (b"234", 0xe7c0_09ca),
        (b"34", 0x8739_30da),
        (b"4", 0x5a4b_5ca1),
        (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x7842_4f1c),
        (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62_b377),
        (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4_e09e),
        (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8_b43f),
        (b"", 0x106e_08d9),
    ];

    /// kafka-python's `test_murmur2_java_compatibility` (dpkp/kafka-python,
    /// test/test_partitioner.py): partitions out of 1000, "compare with output from Kafka's
    /// org.apache.kafka.clients.producer.Partitioner".
    const KAFKA_PYTHON_1000: [(&[u8], u32); 6] =
        [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)];

    #[test]
    fn murmur2_matches_kafka_utils_test() {
        for (key, expected) in KAFKA_UTILS_TEST {
            assert_eq!(murmur2(key), expected, "murmur2({:?})", String::from_utf8_lossy(key));
            assert_eq!(java_murmur2(key), expected, "transliteration on {:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn murmur2_matches_librdkafka() {
        for (key, expected) in LIBRDKAFKA {
            assert_eq!(murmur2(key), expected as i32, "murmur2({:?})", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn partition_for_key_matches_kafka_python() {
        for (key, expected) in KAFKA_PYTHON_1000 {
            assert_eq!(partition_for_key(key, 1000), PartitionId(expected), "key {key:?}");
        }
    }

    #[test]
    fn negative_hashes_clear_the_sign_bit_rather_than_negate() {
        // "21" hashes to -973932308 (UtilsTest). toPositive gives 2^31 - 973932308 =
        // 1173551340, so partition 340 of 1000; `abs` would have given 308.
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
        assert_eq!(partition_for_key(b"21", 1000), PartitionId(340));
        assert_eq!(to_positive(-1), i32::MAX as u32);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(i32::MAX), i32::MAX as u32);
        for (key, hash) in KAFKA_UTILS_TEST.into_iter().filter(|(_, h)| *h < 0) {
            let expected = (hash & 0x7fff_ffff) % 7;
            assert_eq!(partition_for_key(key, 7).get() as i32, expected, "key {key:?}");
        }
    }

    /// A small xorshift generator; the seed is printed and `SEED=` replays a run.
    fn seeded_rng() -> (u64, impl FnMut() -> u64) {
        let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        });
        println!("SEED={seed}");
        let mut state = seed | 1;
        (seed, move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
    }

    #[test]
    fn crate_equals_java_transliteration_on_random_keys() {
        let (seed, mut rng) = seeded_rng();
        for len in 0..=67 {
            for _ in 0..50 {
                let key: Vec<u8> = (0..len).map(|_| rng() as u8).collect();
                assert_eq!(murmur2(&key), java_murmur2(&key), "seed {seed}, key {key:?}");
            }
        }
    }

    #[test]
    fn partition_is_in_range_and_follows_the_hash() {
        let (seed, mut rng) = seeded_rng();
        let mut negatives = 0;
        for _ in 0..20_000 {
            let len = (rng() % 40) as usize;
            let key: Vec<u8> = (0..len).map(|_| rng() as u8).collect();
            let partitions = match rng() % 4 {
                0 => 1,
                1 => (rng() % 16 + 1) as u32,
                2 => (rng() % 100_000 + 1) as u32,
                _ => i32::MAX as u32,
            };
            let hash = murmur2(&key);
            negatives += usize::from(hash < 0);
            let partition = partition_for_key(&key, partitions);
            assert!(partition.get() < partitions, "seed {seed}, key {key:?}: {partition} of {partitions}");
            // Java: Utils.toPositive(hash) % numPartitions, in `int` arithmetic.
            assert_eq!(partition.get() as i32, (hash & 0x7fff_ffff) % partitions as i32, "seed {seed}, key {key:?}");
        }
        assert!(negatives > 5_000, "seed {seed}: about half the hashes are negative, saw {negatives}");
    }

    #[test]
    #[should_panic(expected = "at least one partition")]
    fn zero_partitions_is_a_bug() {
        partition_for_key(b"k", 0);
    }

    #[test]
    fn unkeyed_batches_rotate_evenly() {
        let mut spreader = UnkeyedSpreader::new(0);
        let picks: Vec<u32> = (0..7).map(|_| spreader.next_partition(3).get()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);

        // A start past the count wraps; every window of `partitions` batches covers each
        // partition once.
        let mut spreader = UnkeyedSpreader::new(11);
        let picks: Vec<u32> = (0..40).map(|_| spreader.next_partition(8).get()).collect();
        assert_eq!(picks[0], 3);
        for window in picks.windows(8) {
            let mut seen = window.to_vec();
            seen.sort_unstable();
            assert_eq!(seen, (0..8).collect::<Vec<_>>());
        }

        // Deterministic: the same start gives the same sequence.
        let mut a = UnkeyedSpreader::new(5);
        let mut b = UnkeyedSpreader::new(5);
        for _ in 0..20 {
            assert_eq!(a.next_partition(6), b.next_partition(6));
        }
    }

    #[test]
    fn unkeyed_rotation_survives_added_partitions() {
        let mut spreader = UnkeyedSpreader::new(0);
        assert_eq!([spreader.next_partition(2), spreader.next_partition(2)], [PartitionId(0), PartitionId(1)]);
        // Two partitions become five: the rotation continues and reaches the new ones.
        let picks: Vec<u32> = (0..5).map(|_| spreader.next_partition(5).get()).collect();
        assert_eq!(picks, [0, 1, 2, 3, 4]);
        let mut spreader = UnkeyedSpreader::new(4);
        // Shrinking is not something Kafka allows, but the spreader stays in range anyway.
        assert_eq!(spreader.next_partition(3), PartitionId(1));
    }
}
