//! The one lookup of per-window state that tumbling/sliding windows and window joins
//! share: buckets kept sorted by window, and the index of the last one used, so that
//! in-order input finds its window without a search.

use super::Window;

/// A bucket of per-window state.
pub(crate) trait Bucketed {
    /// The window the bucket holds.
    fn window(&self) -> Window;
}

/// The index of `window`'s bucket in `buckets` (sorted by window), made with `make` and
/// inserted in order if there is none yet, and whether it was made now. `hint` is the
/// bucket looked at first, and is left at the one returned.
#[inline(always)]
pub(crate) fn find_or_insert<B: Bucketed>(
    buckets: &mut Vec<B>,
    hint: &mut usize,
    window: Window,
    make: impl FnOnce() -> B,
) -> (usize, bool) {
    if let Some(b) = buckets.get(*hint)
        && b.window() == window
    {
        return (*hint, false);
    }
    let (i, made) = match buckets.binary_search_by(|b| b.window().cmp(&window)) {
        Ok(i) => (i, false),
        Err(i) => {
            buckets.insert(i, make());
            (i, true)
        }
    };
    *hint = i;
    (i, made)
}

#[cfg(test)]
mod tests {
    use sluice_io::EventTime;

    use super::*;

    struct B(Window);

    impl Bucketed for B {
        fn window(&self) -> Window {
            self.0
        }
    }

    fn w(start: i64) -> Window {
        Window { start: EventTime::from_millis(start), end: EventTime::from_millis(start + 10) }
    }

    #[test]
    fn buckets_stay_sorted_and_the_hint_follows_the_last_lookup() {
        let (mut buckets, mut hint) = (Vec::new(), 0);
        let mut made_now = Vec::new();
        for start in [20, 0, 10, 20, 0] {
            let (i, made) = find_or_insert(&mut buckets, &mut hint, w(start), || B(w(start)));
            assert_eq!(buckets[i].0, w(start));
            assert_eq!(hint, i);
            made_now.push(made);
        }
        assert_eq!(made_now, [true, true, true, false, false]);
        let starts: Vec<i64> = buckets.iter().map(|b| b.0.start.millis()).collect();
        assert_eq!(starts, [0, 10, 20]);
    }
}
