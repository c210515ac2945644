//! [`Data`]: how checkpointed state (keys, accumulators, process-function state) is
//! encoded, and the per-key-group entry lists snapshots are made of.
//!
//! `Data` is implemented for the integers, `bool`, floats, `char`, `String`, `Vec`,
//! `Option`, `Box`, tuples of up to six, maps and sets, [`Event`], timestamps and the
//! process-function state types, each as a plain little-endian encoding. For your own
//! types, derive rkyv's `Archive`, `Serialize` and `Deserialize` and name the type in
//! [`rkyv_data!`](crate::rkyv_data): it is then stored as its rkyv archive. A snapshot
//! itself (the part a shard writes) is an rkyv archive holding these encodings.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    hash::{BuildHasher, Hash},
};

use sluice_io::Timestamp;

use crate::dataflow::{Event, Firing, Window, WindowResult, topic::TopicRecord};
use crate::record::OwnedHeader;

pub use crate::error::StateError;

fn short(what: &str) -> StateError {
    StateError(format!("truncated while reading {what}"))
}

/// A value that can be part of a checkpoint.
pub trait Data: Sized + 'static {
    /// Appends this value's encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads a value from the front of `input`, advancing it past the value.
    ///
    /// # Errors
    ///
    /// Input that is truncated or does not encode a value of this type.
    fn decode(input: &mut &[u8]) -> Result<Self, StateError>;
}

/// Takes `n` bytes from the front of `input`.
pub fn take<'a>(input: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], StateError> {
    if input.len() < n {
        return Err(short(what));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

macro_rules! int_data {
    ($($t:ty),*) => {$(
        impl Data for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
                let bytes = take(input, std::mem::size_of::<$t>(), stringify!($t))?;
                Ok(<$t>::from_le_bytes(bytes.try_into().expect("sized above")))
            }
        }
    )*};
}

int_data!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

impl Data for usize {
    fn encode(&self, out: &mut Vec<u8>) {
        (*self as u64).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        usize::try_from(u64::decode(input)?).map_err(|_| StateError("a usize out of range".into()))
    }
}

impl Data for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(StateError(format!("{b} is not a bool"))),
        }
    }
}

impl Data for char {
    fn encode(&self, out: &mut Vec<u8>) {
        u32::from(*self).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let c = u32::decode(input)?;
        char::from_u32(c).ok_or_else(|| StateError(format!("{c:#x} is not a char")))
    }
}

impl Data for () {
    fn encode(&self, _: &mut Vec<u8>) {}
    fn decode(_: &mut &[u8]) -> Result<Self, StateError> {
        Ok(())
    }
}

/// A length, as a u64.
fn encode_len(len: usize, out: &mut Vec<u8>) {
    (len as u64).encode(out);
}

/// A length, bounded by what is left to read (every element takes at least a byte, or
/// the caller checks), so a damaged length cannot ask for a huge allocation.
fn decode_len(input: &mut &[u8], what: &str) -> Result<usize, StateError> {
    let len = u64::decode(input)?;
    usize::try_from(len)
        .ok()
        .filter(|&n| n <= input.len().max(1) * 8 + 1024)
        .ok_or_else(|| StateError(format!("a {what} length of {len} is damaged")))
}

impl Data for String {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_len(self.len(), out);
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let len = decode_len(input, "string")?;
        let bytes = take(input, len, "a string")?;
        String::from_utf8(bytes.to_vec()).map_err(|e| StateError(format!("a string that is not UTF-8: {e}")))
    }
}

impl<T: Data> Data for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_len(self.len(), out);
        for v in self {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let len = decode_len(input, "list")?;
        let mut v = Vec::with_capacity(len.min(1 << 16));
        for _ in 0..len {
            v.push(T::decode(input)?);
        }
        Ok(v)
    }
}

impl<T: Data> Data for std::collections::VecDeque<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_len(self.len(), out);
        for v in self {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Vec::<T>::decode(input)?.into())
    }
}

impl<T: Data, const N: usize> Data for [T; N] {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let mut v = Vec::with_capacity(N);
        for _ in 0..N {
            v.push(T::decode(input)?);
        }
        v.try_into().map_err(|_| StateError("an array of the wrong length".into()))
    }
}

impl<T: Data> Data for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(input)?)),
            b => Err(StateError(format!("{b} is not an option tag"))),
        }
    }
}

impl<T: Data> Data for Box<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        T::decode(input).map(Box::new)
    }
}

macro_rules! tuple_data {
    ($($name:ident : $index:tt),+) => {
        impl<$($name: Data),+> Data for ($($name,)+) {
            fn encode(&self, out: &mut Vec<u8>) {
                $(self.$index.encode(out);)+
            }
            fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
                Ok(($($name::decode(input)?,)+))
            }
        }
    };
}

tuple_data!(A: 0);
tuple_data!(A: 0, B: 1);
tuple_data!(A: 0, B: 1, C: 2);
tuple_data!(A: 0, B: 1, C: 2, D: 3);
tuple_data!(A: 0, B: 1, C: 2, D: 3, E: 4);
tuple_data!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);

/// Maps and sets: their length, then each entry (key and value) in iteration order.
macro_rules! map_data {
    ($t:ident < $($p:ident),+ >, [$($bound:tt)*], $new:expr, |$m:ident, $input:ident| $insert:expr, |$self_:ident, $out:ident| $each:expr) => {
        impl<$($bound)*> Data for $t<$($p),+> {
            fn encode(&$self_, $out: &mut Vec<u8>) {
                encode_len($self_.len(), $out);
                $each;
            }
            fn decode($input: &mut &[u8]) -> Result<Self, StateError> {
                let len = decode_len($input, stringify!($t))?;
                let mut $m = $new(len.min(1 << 16));
                for _ in 0..len {
                    $insert;
                }
                Ok($m)
            }
        }
    };
}

map_data!(HashMap<K, V, S>, [K: Data + Hash + Eq, V: Data, S: BuildHasher + Default + 'static],
    |n| HashMap::with_capacity_and_hasher(n, S::default()),
    |m, input| { let k = K::decode(input)?; m.insert(k, V::decode(input)?) },
    |self, out| for (k, v) in self { k.encode(out); v.encode(out); });
map_data!(HashSet<K, S>, [K: Data + Hash + Eq, S: BuildHasher + Default + 'static],
    |n| HashSet::with_capacity_and_hasher(n, S::default()),
    |m, input| m.insert(K::decode(input)?),
    |self, out| for k in self { k.encode(out); });
map_data!(BTreeMap<K, V>, [K: Data + Ord, V: Data],
    |_| BTreeMap::new(),
    |m, input| { let k = K::decode(input)?; m.insert(k, V::decode(input)?) },
    |self, out| for (k, v) in self { k.encode(out); v.encode(out); });
map_data!(BTreeSet<K>, [K: Data + Ord],
    |_| BTreeSet::new(),
    |m, input| m.insert(K::decode(input)?),
    |self, out| for k in self { k.encode(out); });

impl Data for Timestamp {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        i64::decode(input).map(Timestamp)
    }
}

impl<T: Data> Data for Event<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.time.encode(out);
        self.value.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Event { time: Timestamp::decode(input)?, value: T::decode(input)? })
    }
}

// The engine's own record types, so that streams of them can cross a `key_by` (whose
// in-flight records an unaligned checkpoint stores).

impl Data for Window {
    fn encode(&self, out: &mut Vec<u8>) {
        self.start.encode(out);
        self.end.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Window { start: Timestamp::decode(input)?, end: Timestamp::decode(input)? })
    }
}

impl Data for Firing {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(match self {
            Firing::OnTime => 0,
            Firing::Early => 1,
            Firing::Update => 2,
        });
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Firing::OnTime),
            1 => Ok(Firing::Early),
            2 => Ok(Firing::Update),
            b => Err(StateError(format!("{b} is not a window firing"))),
        }
    }
}

impl<K: Data, R: Data> Data for WindowResult<K, R> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.window.encode(out);
        self.value.encode(out);
        self.firing.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(WindowResult {
            key: K::decode(input)?,
            window: Window::decode(input)?,
            value: R::decode(input)?,
            firing: Firing::decode(input)?,
        })
    }
}

impl Data for OwnedHeader {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.value.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(OwnedHeader { key: String::decode(input)?, value: Option::decode(input)? })
    }
}

impl Data for TopicRecord {
    fn encode(&self, out: &mut Vec<u8>) {
        self.partition.0.encode(out);
        self.offset.0.encode(out);
        self.key.encode(out);
        self.value.encode(out);
        self.time.encode(out);
        self.headers.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(TopicRecord {
            partition: sluice_io::PartitionId(u32::decode(input)?),
            offset: sluice_io::Offset(u64::decode(input)?),
            key: Option::decode(input)?,
            value: Option::decode(input)?,
            time: Timestamp::decode(input)?,
            headers: Vec::decode(input)?,
        })
    }
}

/// Implements [`Data`] for types that derive rkyv's `Archive`, `Serialize` and
/// `Deserialize`: each value is stored as its rkyv archive (checked when read back).
///
/// ```
/// #[derive(Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
/// struct Account {
///     balance: i64,
///     flagged: bool,
/// }
/// sluice_engine::rkyv_data!(Account);
/// ```
#[macro_export]
macro_rules! rkyv_data {
    ($($t:ty),+ $(,)?) => {$(
        impl $crate::dataflow::Data for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                let bytes = ::rkyv::to_bytes::<::rkyv::rancor::Error>(self)
                    .expect("rkyv serializes an in-memory value into a growable buffer");
                $crate::dataflow::Data::encode(&(bytes.len() as u64), out);
                out.extend_from_slice(&bytes);
            }
            fn decode(input: &mut &[u8]) -> Result<Self, $crate::dataflow::checkpoint::StateError> {
                let len = <u64 as $crate::dataflow::Data>::decode(input)?;
                let len = usize::try_from(len)
                    .map_err(|_| $crate::dataflow::checkpoint::StateError(format!("an archive of {len} bytes")))?;
                let bytes = $crate::dataflow::checkpoint::take(input, len, stringify!($t))?;
                let mut aligned = ::rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
                aligned.extend_from_slice(bytes);
                ::rkyv::from_bytes::<$t, ::rkyv::rancor::Error>(&aligned)
                    .map_err(|e| $crate::dataflow::checkpoint::StateError(format!("{}: {e}", stringify!($t))))
            }
        }
    )+};
}

/// Writes one key group's entries: a count, then each key and value.
#[derive(Debug)]
pub struct EntryWriter {
    buf: Vec<u8>,
    count: u64,
}

impl Default for EntryWriter {
    fn default() -> Self {
        EntryWriter::new()
    }
}

impl EntryWriter {
    /// A writer with no entries.
    #[must_use]
    pub fn new() -> EntryWriter {
        EntryWriter { buf: vec![0; 8], count: 0 }
    }

    /// Adds one `(key, value)` entry.
    pub fn push<K: Data, V: Data>(&mut self, key: &K, value: &V) {
        key.encode(&mut self.buf);
        value.encode(&mut self.buf);
        self.count += 1;
    }

    /// Adds one entry that `write` encodes field by field (the encoding of a tuple is its
    /// fields' encodings in order, so an entry read back as `((A, B, K), V)` may be written
    /// as `a`, `b`, `k`, `v` without building the tuple).
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.buf);
        self.count += 1;
    }

    /// Entries added so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The encoded list.
    #[must_use]
    pub fn finish(mut self) -> Vec<u8> {
        self.buf[..8].copy_from_slice(&self.count.to_le_bytes());
        self.buf
    }
}

/// Reads an entry list, handing `each` the input positioned at each entry in turn (it
/// must read exactly one entry).
///
/// # Errors
///
/// A truncated or damaged list, or an error of `each`.
pub fn read_entries_raw(
    mut bytes: &[u8],
    mut each: impl FnMut(&mut &[u8]) -> Result<(), StateError>,
) -> Result<(), StateError> {
    let count = u64::decode(&mut bytes)?;
    for _ in 0..count {
        each(&mut bytes)?;
    }
    if !bytes.is_empty() {
        return Err(StateError(format!("{} bytes left after the last entry", bytes.len())));
    }
    Ok(())
}

/// Reads an entry list written by [`EntryWriter`], calling `each` per entry.
///
/// # Errors
///
/// A truncated or damaged list.
pub fn read_entries<K: Data, V: Data>(bytes: &[u8], mut each: impl FnMut(K, V)) -> Result<(), StateError> {
    read_entries_raw(bytes, |input| {
        let key = K::decode(input)?;
        each(key, V::decode(input)?);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_mixed_types() {
        let mut w = EntryWriter::new();
        type Entry = ((i64, bool, String), Vec<Option<u64>>);
        let entries: Vec<Entry> =
            (0..50).map(|i| ((i - 25, i % 3 == 0, "k".repeat(i as usize % 7)), vec![Some(i as u64), None])).collect();
        for (k, v) in &entries {
            w.push(k, v);
        }
        assert_eq!(w.count(), 50);
        let bytes = w.finish();
        let mut back = Vec::new();
        read_entries::<(i64, bool, String), Vec<Option<u64>>>(&bytes, |k, v| back.push((k, v))).unwrap();
        assert_eq!(back, entries);
    }

    #[test]
    fn maps_and_sets_round_trip() {
        let hm: HashMap<String, Vec<u8>> = (0..20).map(|i| (format!("k{i}"), vec![i as u8; i])).collect();
        let hs: HashSet<i64> = (-5..5).collect();
        let bm: BTreeMap<u32, Option<bool>> = (0..7).map(|i| (i, (i % 2 == 0).then_some(i % 3 == 0))).collect();
        let bs: BTreeSet<char> = "sluice".chars().collect();
        let mut out = Vec::new();
        (hm.clone(), hs.clone(), bm.clone(), bs.clone()).encode(&mut out);
        let mut input = &out[..];
        let back =
            <(HashMap<String, Vec<u8>>, HashSet<i64>, BTreeMap<u32, Option<bool>>, BTreeSet<char>)>::decode(&mut input)
                .unwrap();
        assert_eq!(back, (hm, hs, bm, bs));
        assert!(input.is_empty());
    }

    #[test]
    fn truncated_or_damaged_entry_lists_are_errors() {
        let mut w = EntryWriter::new();
        w.push(&1u64, &"value".to_string());
        let bytes = w.finish();
        for cut in [0, 4, 8, 12, 16, bytes.len() - 1] {
            assert!(read_entries::<u64, String>(&bytes[..cut], |_, _| {}).is_err(), "cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(read_entries::<u64, String>(&long, |_, _| {}).is_err(), "trailing bytes");
        let mut huge = bytes.clone();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_entries::<u64, String>(&huge, |_, _| {}).is_err(), "a damaged length");
        let mut bad_bool = EntryWriter::new();
        bad_bool.push(&1u8, &2u8);
        assert!(read_entries::<u8, bool>(&bad_bool.finish(), |_, _| {}).is_err());
    }

    #[derive(Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    struct Account {
        balance: i64,
        names: Vec<String>,
    }
    crate::rkyv_data!(Account);

    #[test]
    fn engine_record_types_round_trip() {
        let result = WindowResult {
            key: "k".to_string(),
            window: Window { start: Timestamp(10), end: Timestamp(20) },
            value: 3u64,
            firing: Firing::Update,
        };
        let record = TopicRecord {
            partition: sluice_io::PartitionId(2),
            offset: sluice_io::Offset(7),
            key: Some(b"key".to_vec()),
            value: None,
            time: Timestamp(-5),
            headers: vec![OwnedHeader::new("trace", "abc"), OwnedHeader { key: "n".into(), value: None }],
        };
        let mut out = Vec::new();
        result.encode(&mut out);
        record.encode(&mut out);
        let mut input = out.as_slice();
        assert_eq!(WindowResult::<String, u64>::decode(&mut input).unwrap(), result);
        assert_eq!(TopicRecord::decode(&mut input).unwrap(), record);
        assert!(input.is_empty());
        assert!(Firing::decode(&mut [7u8].as_slice()).is_err());
    }

    #[test]
    fn rkyv_types_round_trip_through_the_macro() {
        let a = Account { balance: -5, names: vec!["x".into(), "yz".into()] };
        let mut out = vec![1u8]; // misaligned on purpose
        a.encode(&mut out);
        let mut input = &out[1..];
        assert_eq!(Account::decode(&mut input).unwrap(), a);
        assert!(input.is_empty());
        let mut cut = &out[1..out.len() - 3];
        assert!(Account::decode(&mut cut).is_err());
    }
}
