//! Fraud detection with a keyed process function, after Flink's classic walkthrough: an
//! account is flagged when a transaction under 1.00 (a thief checking that a stolen card
//! works) is followed by one over 500.00 within a minute.
//!
//! Per account, the function keeps one piece of state: the last small transaction and
//! until when a large one after it is suspicious. An event-time timer at that deadline
//! clears it, so an account that goes quiet holds nothing (its key is forgotten), and any
//! other transaction in between clears it too.
//!
//! The transactions are generated: ten per second of event time over a thousand regular
//! accounts, with a planted fraud (small, then large 30 s later) and a near miss (small,
//! then large 80 s later) every 200 s. The program prints each alert (from the shard that
//! owns the account, so alerts of different accounts may print out of time order) and
//! finishes once the input is done.
//!
//! ```sh
//! cargo run --release --example fraud_detection
//! ```

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use sluice_engine::dataflow::{
    Data, Event, Generator, KeyedProcessFunction, KeyedState, Pipeline, PipelineConfig, ProcessContext, Timer,
    ValueState, WatermarkStrategy, checkpoint::StateError,
};
use sluice_io::EventTime;

/// Under 1.00, in cents.
const SMALL_CENTS: u64 = 100;
/// Over 500.00, in cents.
const LARGE_CENTS: u64 = 50_000;
/// How long after a small transaction a large one is suspicious.
const WINDOW_MS: i64 = 60_000;

const TRANSACTIONS: u64 = 20_000;
/// One transaction every 100 ms of event time.
const STEP_MS: i64 = 100;
/// Transactions per block of generated traffic; each block plants one fraud and one near miss.
const BLOCK: u64 = 2_000;

#[derive(Debug, Clone, Copy)]
struct Transaction {
    account: u32,
    cents: u64,
    time: EventTime,
}

/// Transactions cross a `key_by`: an unaligned checkpoint may store them in flight.
impl Data for Transaction {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.account, self.cents, self.time).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (account, cents, time) = Data::decode(input)?;
        Ok(Transaction { account, cents, time })
    }
}

#[derive(Debug)]
struct Alert {
    account: u32,
    small_cents: u64,
    large_cents: u64,
}

/// An account's state: set by a small transaction, cleared by the next transaction or the
/// timer at its deadline.
#[derive(Debug, Default)]
struct Account {
    /// The small transaction's amount and the deadline for a large one.
    small: ValueState<(u64, EventTime)>,
}

/// How an account is stored in a checkpoint: its one state field.
impl Data for Account {
    fn encode(&self, out: &mut Vec<u8>) {
        self.small.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Account { small: ValueState::decode(input)? })
    }
}

/// Lets the operator forget an account whose flag is cleared.
impl KeyedState for Account {
    fn is_empty(&self) -> bool {
        self.small.is_empty()
    }
}

struct FraudDetector;

impl KeyedProcessFunction<u32, Transaction> for FraudDetector {
    type State = Account;
    type Out = Alert;

    fn process_element(
        &mut self,
        account: &u32,
        tx: Event<Transaction>,
        state: &mut Account,
        ctx: &mut ProcessContext<'_, u32, Alert>,
    ) {
        if let Some((small_cents, until)) = state.small.take() {
            // Whatever follows a small transaction ends its watch (as in Flink's example).
            ctx.delete_event_time_timer(until);
            // The deadline is checked here too, not left to the timer alone: records of one
            // batch are processed before the watermark after them fires any timer.
            if tx.value.cents > LARGE_CENTS && tx.time <= until {
                ctx.emit(Alert { account: *account, small_cents, large_cents: tx.value.cents });
            }
        }
        if tx.value.cents < SMALL_CENTS {
            let until = EventTime::from_millis(tx.time.millis() + WINDOW_MS);
            state.small.set((tx.value.cents, until));
            ctx.register_event_time_timer(until);
        }
    }

    fn on_timer(&mut self, _: &u32, _: Timer, state: &mut Account, _: &mut ProcessContext<'_, u32, Alert>) {
        state.small.clear();
    }
}

/// splitmix64: a stateless hash, so transaction `i` is the same on whichever shard makes it.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Transaction `i`: regular purchases of 1.00-300.00 on accounts 0-999; in each block, a
/// fraud on account 1000+ (small at 0 s, large at 30 s) and a near miss on 2000+ (small at
/// 60 s, large at 140 s).
fn transaction(i: u64) -> Transaction {
    let time = EventTime::from_millis(i as i64 * STEP_MS);
    let block = (i / BLOCK) as u32;
    let r = mix(i);
    let (account, cents) = match i % BLOCK {
        0 => (1000 + block, 1 + r % 99),
        300 => (1000 + block, 50_001 + r % 100_000),
        600 => (2000 + block, 1 + r % 99),
        1400 => (2000 + block, 50_001 + r % 100_000),
        _ => ((r % 1000) as u32, 100 + (r >> 32) % 29_901),
    };
    Transaction { account, cents, time }
}

fn dollars(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let alerts = Arc::new(AtomicU64::new(0));
    let counted = alerts.clone();
    Pipeline::new(PipelineConfig::with_shards(2)).run(move |scope| {
        let counted = counted.clone();
        scope
            .source(
                Generator::new(scope.shard(), scope.shards(), TRANSACTIONS, transaction),
                WatermarkStrategy::monotonous(|tx: &Transaction| tx.time),
            )
            .key_by(|tx| tx.account)
            .process(FraudDetector)
            .for_each(move |alert| {
                counted.fetch_add(1, Ordering::Relaxed);
                let a = alert.value;
                println!(
                    "ALERT at {:>6.1}s: account {} spent {} then {}",
                    alert.time.millis() as f64 / 1000.0,
                    a.account,
                    dollars(a.small_cents),
                    dollars(a.large_cents),
                );
            });
    })?;
    println!(
        "{TRANSACTIONS} transactions, {} alerts ({} frauds planted)",
        alerts.load(Ordering::Relaxed),
        TRANSACTIONS.div_ceil(BLOCK)
    );
    Ok(())
}
