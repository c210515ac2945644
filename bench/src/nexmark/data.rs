//! Checkpoint encodings ([`Data`]) of the Nexmark types that queries keep as state.
//!
//! A field that is a `&'static str` (a city, a state, a channel, a url) is encoded as its
//! text and read back as the generator's own copy of that text: a value the generator never
//! makes is reported as damaged state, not invented.

use sluice_engine::dataflow::{
    Data,
    checkpoint::{StateError, take},
};

use super::{generator::interned, model::Bid};

/// Appends `s` as a length and its bytes (the encoding of a `String`).
pub(crate) fn encode_str(s: &str, out: &mut Vec<u8>) {
    (s.len() as u64).encode(out);
    out.extend_from_slice(s.as_bytes());
}

/// Reads a string written by [`encode_str`] and returns the generator's copy of it.
pub(crate) fn decode_static(input: &mut &[u8], what: &str) -> Result<&'static str, StateError> {
    let len = usize::try_from(u64::decode(input)?).map_err(|_| StateError(format!("a {what} too long")))?;
    let bytes = take(input, len, what)?;
    let text = std::str::from_utf8(bytes).map_err(|e| StateError(format!("a {what} that is not UTF-8: {e}")))?;
    interned(text).ok_or_else(|| StateError(format!("{text:?} is no {what} the Nexmark generator makes")))
}

impl Data for Bid {
    fn encode(&self, out: &mut Vec<u8>) {
        self.auction.encode(out);
        self.bidder.encode(out);
        self.price.encode(out);
        encode_str(self.channel, out);
        encode_str(self.url, out);
        self.date_time.encode(out);
        self.extra.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Bid {
            auction: u64::decode(input)?,
            bidder: u64::decode(input)?,
            price: u64::decode(input)?,
            channel: decode_static(input, "channel")?,
            url: decode_static(input, "url")?,
            date_time: i64::decode(input)?,
            extra: String::decode(input)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexmark::{NexmarkConfig, NexmarkGenerator};

    #[test]
    fn bids_read_back_equal_and_unknown_channels_are_refused() {
        let generator = NexmarkGenerator::new(NexmarkConfig::default()).expect("valid config");
        for n in 4..200 {
            let Some(bid) = generator.event(n).into_bid() else { continue };
            let mut bytes = Vec::new();
            bid.encode(&mut bytes);
            let mut input = &bytes[..];
            assert_eq!(Bid::decode(&mut input).expect("decodes"), bid);
            assert!(input.is_empty());
        }
        let mut bytes = Vec::new();
        encode_str("no such channel", &mut bytes);
        assert!(decode_static(&mut &bytes[..], "channel").is_err());
        assert!(decode_static(&mut &bytes[..3], "channel").is_err());
    }
}
