//! The local phase's table of partials per key ([`Partials`]), for
//! [`Combiner`](super::combine): the one hash-map operation the local phase does per
//! record (find the key's partial, or make it, and fold the record in) in fewer
//! instructions than `hashbrown`'s probe, which on the main job was most of the local
//! phase's work (measured in tuning.md, "Scaling with the cores", session 25).
//!
//! Linear probing in a power-of-two array of `Option<(K, V)>`, at most three quarters
//! full: on the main job (10 000 keys, 16 384 slots of 24 bytes) that ran 5-6% faster than
//! at most half full, whose table is twice the size for a few fewer probes. A hash's home
//! slot is the top bits of its product with the golden ratio (Fibonacci hashing: see
//! [`Partials::home`]). Entries leave only all at once ([`Partials::drain_into`]), so there
//! are no tombstones, and they leave in the order of the hash's low bits, the order of
//! their buckets in the global phase's `FxHashMap`, which then fills its table front to
//! back instead of at random.

use std::hash::{BuildHasher, Hash};

use rustc_hash::FxBuildHasher;

/// A map from keys to partials.
pub(super) struct Partials<K, V> {
    slots: Vec<Option<(K, V)>>,
    len: usize,
    /// 64 minus log2 of the slot count: a hash's home slot is `(hash * golden) >> shift`.
    shift: u32,
    /// [`Partials::drain_into`]'s room, kept with its capacity: the (bucket, slot) pairs
    /// of the entries leaving, and [`radix_sort`]'s.
    leaving: Vec<(usize, usize)>,
    spare: Vec<(usize, usize)>,
    counts: Vec<usize>,
}

impl<K: Hash + Eq, V> Default for Partials<K, V> {
    fn default() -> Self {
        // Never without slots, so that a probe need not check.
        let slots = std::iter::repeat_with(|| None).take(MIN_SLOTS).collect();
        Partials {
            slots,
            len: 0,
            shift: 64 - MIN_SLOTS.trailing_zeros(),
            leaving: Vec::new(),
            spare: Vec::new(),
            counts: Vec::new(),
        }
    }
}

/// The slots of a new table (a power of two).
const MIN_SLOTS: usize = 16;

impl<K: Hash + Eq, V> Partials<K, V> {
    /// The hash [`Partials::upsert`] takes for `key` (the engine's key hash, as
    /// `FxHashMap`'s).
    #[inline]
    pub(super) fn hash(key: &K) -> u64 {
        FxBuildHasher.hash_one(key)
    }

    /// How many keys it holds.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// A hash's home slot: the top bits of its product with the golden ratio (Fibonacci
    /// hashing). They depend on every bit of the hash, so keys whose Fx hashes differ in
    /// a few bits only still spread. Consecutive integer keys, which the Fx hash's low bits
    /// lay out perfectly for one shard (every key in its home slot) but unevenly for every
    /// other one (what a shard of two sees), probe alike both ways here (tuning.md,
    /// "Scaling with the cores", session 26).
    #[inline]
    fn home(&self, hash: u64) -> usize {
        (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// Folds into `key`'s partial with `update`, after creating it with `create` if the
    /// key is new. `hash` must be [`Partials::hash`] of `key`.
    #[inline]
    pub(super) fn upsert(&mut self, hash: u64, key: K, create: impl FnOnce() -> V, update: impl FnOnce(&mut V)) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            match &mut self.slots[i] {
                Some((k, v)) if *k == key => return update(v),
                Some(_) => i = (i + 1) & mask,
                None => break,
            }
        }
        // A new key: the table grows first if it would be over three quarters full.
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
            i = self.vacant(hash);
        }
        let (_, v) = self.slots[i].insert((key, create()));
        self.len += 1;
        update(v);
    }

    /// The first empty slot from `hash`'s home on (there always is one).
    fn vacant(&self, hash: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        while self.slots[i].is_some() {
            i = (i + 1) & mask;
        }
        i
    }

    /// Doubles the slots, moving every entry to its new place.
    fn grow(&mut self) {
        let slots = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, std::iter::repeat_with(|| None).take(slots).collect());
        self.shift = 64 - slots.trailing_zeros();
        for (key, value) in old.into_iter().flatten() {
            let i = self.vacant(Self::hash(&key));
            self.slots[i] = Some((key, value));
        }
    }

    /// Hands every entry to `each` in the order of their hashes' low bits (as many as the
    /// table has slots), and leaves the table empty, keeping its slots for the next keys.
    ///
    /// That order is the order of their buckets in an `FxHashMap` (`hashbrown` takes a
    /// hash's low bits), the global phase's table: at two shards q5 ran at 0.56 of linear
    /// scaling when the partials went on in slot order, each insert there a cache miss
    /// in a table of many auctions, and at 0.82-0.84 in this order (tuning.md). The order
    /// is made by a radix sort of (bucket, slot) pairs, not by sorting the entries: the
    /// comparison sort was 5% of the main job's time at one shard.
    pub(super) fn drain_into(&mut self, mut each: impl FnMut(K, V)) {
        if self.len == 0 {
            return;
        }
        self.len = 0;
        let low = self.slots.len() as u64 - 1;
        let leaving = &mut self.leaving;
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some((key, _)) = slot {
                leaving.push(((Self::hash(key) & low) as usize, i));
            }
        }
        radix_sort(leaving, &mut self.spare, &mut self.counts, self.slots.len().trailing_zeros());
        for (_, i) in leaving.drain(..) {
            if let Some((key, value)) = self.slots[i].take() {
                each(key, value);
            }
        }
    }
}

/// The most bits [`radix_sort`] sorts by in one pass (2048 counters).
const RADIX_BITS: u32 = 11;

/// Sorts `pairs` by their first halves, which are below `2^bits`: a least significant digit
/// radix sort, in as few passes of at most [`RADIX_BITS`] as cover `bits`, through `spare`
/// and with `counts` (both kept by the caller with their capacity).
fn radix_sort(pairs: &mut Vec<(usize, usize)>, spare: &mut Vec<(usize, usize)>, counts: &mut Vec<usize>, bits: u32) {
    let passes = bits.div_ceil(RADIX_BITS).max(1);
    let digit = bits.div_ceil(passes);
    let mask = (1usize << digit) - 1;
    for pass in 0..passes {
        let shift = pass * digit;
        // `counts[d + 1]` counts digit `d`, then becomes where digit `d + 1` starts; placing
        // a pair moves its digit's start on.
        counts.clear();
        counts.resize(mask + 2, 0);
        for &(bucket, _) in pairs.iter() {
            counts[((bucket >> shift) & mask) + 1] += 1;
        }
        for d in 1..counts.len() {
            counts[d] += counts[d - 1];
        }
        spare.clear();
        spare.resize(pairs.len(), (0, 0));
        for &pair in pairs.iter() {
            let start = &mut counts[(pair.0 >> shift) & mask];
            spare[*start] = pair;
            *start += 1;
        }
        std::mem::swap(pairs, spare);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn add(table: &mut Partials<u64, u64>, key: u64, by: u64) {
        let hash = Partials::<u64, u64>::hash(&key);
        table.upsert(hash, key, || 0, |v| *v += by);
    }

    #[test]
    fn counts_like_a_hash_map_through_growth_and_drains() {
        let mut table = Partials::default();
        let mut expected = HashMap::new();
        // Keys that share their low bits (multiples of 1024 and of 2^40) and dense ones.
        for round in 0..3u64 {
            for i in 0..50_000u64 {
                let key = match i % 3 {
                    0 => (i % 700) * 1024,
                    1 => (i % 500) << 40,
                    _ => i % 3001 + round,
                };
                add(&mut table, key, i);
                *expected.entry(key).or_insert(0) += i;
            }
            assert_eq!(table.len(), expected.len());
            let mut got = HashMap::new();
            table.drain_into(|k, v| assert!(got.insert(k, v).is_none(), "key {k} twice"));
            assert_eq!(got, std::mem::take(&mut expected));
            assert_eq!(table.len(), 0);
            table.drain_into(|k, _| panic!("{k} left after a drain"));
        }
    }

    #[test]
    fn keeps_its_slots_across_a_drain_and_never_fills_up() {
        let mut table = Partials::default();
        for key in 0..10_000u64 {
            add(&mut table, key, 1);
        }
        let slots = table.slots.len();
        assert!(table.len() * 4 <= slots * 3, "{} keys in {slots} slots", table.len());
        table.drain_into(|_, v| assert_eq!(v, 1));
        for key in 0..10_000u64 {
            add(&mut table, key + 7, 2);
        }
        assert_eq!(table.slots.len(), slots);
    }

    #[test]
    fn drains_in_the_order_of_the_hashes_low_bits() {
        // 5000 keys take 8192 slots (13 bits: two radix passes), 50 000 take 131 072 (17:
        // two), 500 000 take 2^20 (20: two), 2000 take 4096 (12: two) and 10 take 16 (one).
        for keys in [10u64, 2000, 5000, 50_000, 500_000] {
            let mut table = Partials::default();
            for key in 0..keys {
                add(&mut table, key * 2, 1);
            }
            let low = table.slots.len() as u64 - 1;
            let mut buckets = Vec::new();
            table.drain_into(|k, _| buckets.push(Partials::<u64, u64>::hash(&k) & low));
            assert_eq!(buckets.len() as u64, keys);
            assert!(buckets.is_sorted(), "{keys} keys: not in the order of the low bits");
        }
    }

    #[test]
    fn the_radix_sort_sorts_by_the_first_half_and_keeps_each_pair() {
        let (mut spare, mut counts) = (Vec::new(), Vec::new());
        for bits in [0, 1, 7, 11, 12, 23, 33] {
            let mut pairs: Vec<(usize, usize)> =
                (0..3000usize).map(|i| ((i.wrapping_mul(0x9e37_79b9) >> 3) & ((1 << bits) - 1), i)).collect();
            let mut expected = pairs.clone();
            expected.sort_unstable();
            radix_sort(&mut pairs, &mut spare, &mut counts, bits);
            assert!(pairs.iter().map(|p| p.0).is_sorted(), "{bits} bits");
            // Stable: equal buckets keep their slot order, so the whole pair is sorted.
            assert_eq!(pairs, expected, "{bits} bits");
        }
    }

    #[test]
    fn keys_that_own_memory() {
        let mut table: Partials<String, Vec<u32>> = Partials::default();
        for i in 0..1000u32 {
            let key = format!("key-{}", i % 37);
            let hash = Partials::<String, Vec<u32>>::hash(&key);
            table.upsert(hash, key, Vec::new, |v| v.push(i));
        }
        let mut total = 0;
        table.drain_into(|k, v| {
            let n: u32 = k.trim_start_matches("key-").parse().unwrap();
            assert!(v.iter().all(|i| i % 37 == n));
            total += v.len();
        });
        assert_eq!(total, 1000);
    }
}
