//! Moving a batch's records into one vector per destination, for `key_by`'s exchange.
//!
//! The exchange's loop used to branch on whether each record stays on this shard. Keys
//! hash to shards at random, so at two shards that branch is mispredicted for about half
//! the records, which cost more than the rest of the routing (measured: see tuning.md).
//! Here the destinations are computed first (user code, which may panic, runs only there),
//! then the records move without a data-dependent branch: at two destinations every record
//! is written to the next free slot of both vectors and only its destination's length
//! advances; at more, each goes through its destination's `push`.
//!
//! This is the only `unsafe` of the engine (the crate denies it elsewhere); the tests below
//! check order, counts and drops, with and without spare capacity.

#![allow(unsafe_code)]

/// Moves every record of `batch`, in order, to the end of `outs[dest[i]]`, leaving `batch`
/// empty (its allocation kept). Records keep their relative order within each destination.
///
/// # Panics
///
/// If `dest` and `batch` differ in length, or a destination is not an index of `outs`.
pub(crate) fn scatter<T>(batch: &mut Vec<T>, dest: &[u16], outs: &mut [Vec<T>]) {
    assert_eq!(dest.len(), batch.len(), "one destination per record");
    let last = dest.iter().copied().max().map_or(0, usize::from);
    assert!(batch.is_empty() || last < outs.len(), "destination {last} of {} vectors", outs.len());
    if let [a, b] = outs {
        two_way(batch, dest, a, b);
    } else {
        for (record, &to) in batch.drain(..).zip(dest) {
            outs[usize::from(to)].push(record);
        }
    }
}

/// [`scatter`] to two vectors: a record goes to `b` when its destination is not zero.
fn two_way<T>(batch: &mut Vec<T>, dest: &[u16], a: &mut Vec<T>, b: &mut Vec<T>) {
    let n = batch.len();
    debug_assert_eq!(dest.len(), n);
    a.reserve(n);
    b.reserve(n);
    let (start_a, start_b) = (a.len(), b.len());
    let src = batch.as_ptr();
    // SAFETY: `reserve(n)` left room for `n` more records in each vector, so these
    // pointers and the `n` slots after them are within their allocations.
    let (to_a, to_b) = unsafe { (a.as_mut_ptr().add(start_a), b.as_mut_ptr().add(start_b)) };
    // From here `batch` owns none of its records: each is moved out, bit for bit, once.
    // Its length goes to zero first, so a panic below (there is none: no user code runs
    // here) could only leak records, never drop one twice.
    // SAFETY: zero is always a valid length; the records stay readable through `src`.
    unsafe { batch.set_len(0) };
    let (mut na, mut nb) = (0usize, 0usize);
    for (i, &to) in dest.iter().enumerate() {
        // SAFETY: `i < n`, so `src.add(i)` is an initialized record of `batch`, read
        // only here. `na + nb == i < n`, so both destination slots are within the room
        // reserved above, and they do not overlap `batch`'s buffer (distinct
        // allocations). The record is copied into both; only the one whose length
        // advances holds it. The other copy lies past its vector's length, where the
        // next record overwrites it (or it stays as spare capacity, never read as a
        // `T` nor dropped), so each record is owned exactly once.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(i), to_a.add(na), 1);
            std::ptr::copy_nonoverlapping(src.add(i), to_b.add(nb), 1);
        }
        let goes_b = usize::from(to != 0);
        na += 1 - goes_b;
        nb += goes_b;
    }
    // SAFETY: the first `na` (`nb`) slots after the old lengths hold the records moved
    // there, initialized above, within the reserved capacity.
    unsafe {
        a.set_len(start_a + na);
        b.set_len(start_b + nb);
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, rc::Rc};

    use super::scatter;

    /// A record that counts its drops.
    #[derive(Debug)]
    struct Counted(u32, Rc<Cell<u32>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.set(self.1.get() + 1);
        }
    }

    fn destinations(n: u32, outs: u16, seed: u64) -> Vec<u16> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % u64::from(outs)) as u16
            })
            .collect()
    }

    fn check(outs_n: u16, n: u32, prefilled: u32, seed: u64) {
        let drops = Rc::new(Cell::new(0));
        let dest = destinations(n, outs_n, seed);
        let mut batch: Vec<Counted> = (0..n).map(|i| Counted(i, drops.clone())).collect();
        let mut outs: Vec<Vec<Counted>> = (0..outs_n)
            .map(|o| (0..prefilled).map(|i| Counted(1_000_000 + u32::from(o) * 1000 + i, drops.clone())).collect())
            .collect();
        scatter(&mut batch, &dest, &mut outs);
        assert!(batch.is_empty());
        assert_eq!(drops.get(), 0, "nothing dropped while moving");
        for (o, out) in outs.iter().enumerate() {
            let expected: Vec<u32> = (0..prefilled)
                .map(|i| 1_000_000 + o as u32 * 1000 + i)
                .chain((0..n).filter(|&i| usize::from(dest[i as usize]) == o))
                .collect();
            let got: Vec<u32> = out.iter().map(|c| c.0).collect();
            assert_eq!(got, expected, "destination {o} of {outs_n}, seed {seed}");
        }
        let held: usize = outs.iter().map(Vec::len).sum();
        assert_eq!(held, (n + prefilled * u32::from(outs_n)) as usize);
        drop(outs);
        drop(batch);
        assert_eq!(drops.get(), n + prefilled * u32::from(outs_n), "every record dropped exactly once");
    }

    #[test]
    fn records_reach_their_destination_in_order_and_are_dropped_once() {
        for outs in [1, 2, 3, 4] {
            for (n, prefilled) in [(0, 0), (1, 0), (7, 3), (1024, 0), (1000, 24)] {
                for seed in [1, 2, 0x9e37_79b9] {
                    check(outs, n, prefilled, seed);
                }
            }
        }
    }

    #[test]
    fn all_to_one_side_at_two_destinations() {
        for to in [0u16, 1] {
            let mut batch: Vec<String> = (0..100).map(|i| i.to_string()).collect();
            let mut outs = vec![Vec::with_capacity(1), Vec::new()];
            scatter(&mut batch, &[to; 100], &mut outs);
            let expected: Vec<String> = (0..100).map(|i| i.to_string()).collect();
            assert_eq!(outs[usize::from(to)], expected);
            assert!(outs[usize::from(1 - to)].is_empty());
        }
    }

    #[test]
    #[should_panic(expected = "destination 2 of 2 vectors")]
    fn a_destination_out_of_range_is_refused_before_anything_moves() {
        let mut batch = vec![1u8, 2];
        scatter(&mut batch, &[0, 2], &mut [Vec::new(), Vec::new()]);
    }
}
