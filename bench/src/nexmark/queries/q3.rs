//! q3, local item suggestion: who sells in category 10 in Oregon, Idaho or California, an
//! incremental join of people and auctions keyed by the seller ([`LocalItemSuggestion`]).

use sluice_engine::dataflow::{
    Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, ValueState, checkpoint::StateError,
};

use crate::nexmark::{
    data::{decode_static, encode_str},
    model::Event,
};

/// q3's result: a seller from Oregon, Idaho or California and an auction of theirs in
/// category 10.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q3Row {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: &'static str,
    /// The seller's state.
    pub state: &'static str,
    /// The auction's id.
    pub auction: u64,
}

/// q3's join input, keyed by the person's id.
#[derive(Debug, Clone)]
pub enum Q3Input {
    /// A person from one of the three states.
    Seller {
        /// Id.
        id: u64,
        /// Name.
        name: String,
        /// City.
        city: &'static str,
        /// State.
        state: &'static str,
    },
    /// An auction in category 10.
    Auction {
        /// Id.
        id: u64,
        /// The seller's id.
        seller: u64,
    },
}

/// Crosses q3's `key_by`, so an unaligned checkpoint can store it in flight.
impl Data for Q3Input {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Q3Input::Seller { id, name, city, state } => {
                out.push(0);
                id.encode(out);
                name.encode(out);
                encode_str(city, out);
                encode_str(state, out);
            }
            Q3Input::Auction { id, seller } => {
                out.push(1);
                (*id, *seller).encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Q3Input::Seller {
                id: u64::decode(input)?,
                name: String::decode(input)?,
                city: decode_static(input, "city")?,
                state: decode_static(input, "state")?,
            }),
            1 => {
                let (id, seller) = Data::decode(input)?;
                Ok(Q3Input::Auction { id, seller })
            }
            tag => Err(StateError(format!("{tag} is not a q3 input"))),
        }
    }
}

/// The seller part of a q3 result: q3's state per seller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seller {
    name: String,
    city: &'static str,
    state: &'static str,
}

impl Data for Seller {
    fn encode(&self, out: &mut Vec<u8>) {
        self.name.encode(out);
        encode_str(self.city, out);
        encode_str(self.state, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Seller {
            name: String::decode(input)?,
            city: decode_static(input, "city")?,
            state: decode_static(input, "state")?,
        })
    }
}

/// q3's incremental join: a seller, once seen, is kept; an auction whose seller has not
/// been seen waits for them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalItemSuggestion;

impl KeyedProcessFunction<u64, Q3Input> for LocalItemSuggestion {
    type State = (ValueState<Seller>, ListState<u64>);
    type Out = Q3Row;

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q3Input>,
        (seller, waiting): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q3Row>,
    ) {
        match event.value {
            Q3Input::Seller { name, city, state, .. } => {
                for auction in waiting.take() {
                    ctx.emit(Q3Row { name: name.clone(), city, state, auction });
                }
                seller.set(Seller { name, city, state });
            }
            Q3Input::Auction { id, .. } => match seller.get() {
                Some(s) => ctx.emit(Q3Row { name: s.name.clone(), city: s.city, state: s.state, auction: id }),
                None => waiting.add(id),
            },
        }
    }
}

/// q3, local item suggestion: who sells in category 10 in Oregon, Idaho or California.
///
/// ```sql
/// SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P on A.seller = P.id
/// WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
/// ```
pub fn query(events: Stream<Event>) -> Stream<Q3Row> {
    events
        .flat_map(|e| match e {
            Event::Person(p) if matches!(p.state, "OR" | "ID" | "CA") => {
                Some(Q3Input::Seller { id: p.id, name: p.name, city: p.city, state: p.state })
            }
            Event::Auction(a) if a.category == 10 => Some(Q3Input::Auction { id: a.id, seller: a.seller }),
            _ => None,
        })
        .key_by(|input| match input {
            Q3Input::Seller { id, .. } => *id,
            Q3Input::Auction { seller, .. } => *seller,
        })
        .process(LocalItemSuggestion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexmark::generator::interned;

    #[test]
    fn join_inputs_round_trip_as_checkpoint_data() {
        let city = interned("Portland").expect("a generator city");
        let state = interned("OR").expect("a generator state");
        let q3 = [Q3Input::Seller { id: 7, name: "Ann".into(), city, state }, Q3Input::Auction { id: 9, seller: 7 }];
        let mut out = Vec::new();
        q3.iter().for_each(|i| i.encode(&mut out));
        let mut input = out.as_slice();
        for want in &q3 {
            let got = Q3Input::decode(&mut input).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        assert!(input.is_empty());
        assert!(Q3Input::decode(&mut [9u8].as_slice()).is_err());
    }
}
