//! The processor: pipelines of sources, operators and sinks, run on every shard.
//!
//! A [`Pipeline`] starts one pinned glommio executor per shard; on each, the build
//! function constructs the same graph with that shard's [`Scope`]. Within a shard, records
//! move between operators in batches of [`Event`]s by plain calls ([`Operator`]), with no
//! copy or serialization; `key_by` is an exchange that moves whole batches through the
//! rings to the shard owning each key. Watermarks, idleness and the end of a stream follow
//! the data through the same paths, and every operator with several inputs passes on the
//! minimum watermark of those that are not idle ([`Progress`]).
//!
//! One task per shard (the driver) runs it all: it drains the rings, pulls sources while
//! nothing downstream is pending, and runs processing-time duties when due. No lock is
//! taken on the data path; nothing is shared between shards but the rings.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy};
//! use sluice_io::EventTime;
//!
//! let total = Arc::new(Mutex::new(0u64));
//! let sink = total.clone();
//! Pipeline::new(PipelineConfig::with_shards(2))
//!     .run(move |scope| {
//!         let sink = sink.clone();
//!         scope
//!             .source(
//!                 Generator::new(scope.shard(), scope.shards(), 1000, |i| i),
//!                 WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
//!             )
//!             .filter(|i| i % 2 == 0)
//!             .key_by(|i| i % 10)
//!             .into_stream()
//!             .for_each(move |e| *sink.lock().unwrap() += e.value);
//!     })
//!     .unwrap();
//! assert_eq!(*total.lock().unwrap(), (0..1000).filter(|i| i % 2 == 0).sum::<u64>());
//! ```

pub mod changelog;
pub mod checkpoint;
mod driver;
mod event;
mod exchange;
mod join;
mod metrics;
mod operator;
mod pipeline;
mod process;
mod scatter;
mod scope;
mod shared_generator;
mod sink;
mod source;
mod stream;
pub mod topic;
mod twophase;
mod watermark;
pub mod window;

pub use changelog::{Change, ChangeError, ChangeOp, RowKind, Table};
pub use checkpoint::{Barrier, CheckpointConfig, CheckpointFailure, CheckpointMode, CheckpointStats, Data, Savepoint};
pub use event::Event;
pub use exchange::{key_group, shard_of_group};
pub use metrics::Metrics;
pub use operator::{Operator, Output, Port, Progress};
pub use pipeline::{Pipeline, PipelineConfig, RunningPipeline};
pub use process::{
    DEFAULT_SWEEP_KEYS, TtlClock, TtlConfig, TtlError, TtlListState, TtlMapState, TtlPolicy, TtlUpdate, TtlValueState,
};
pub use process::{
    KeyedProcessFunction, KeyedState, ListState, MapState, ProcessContext, TimeDomain, Timer, ValueState,
};
pub use scope::Scope;
pub use shared_generator::{SharedGenerator, SharedSequence};
pub use source::{ChannelSource, EmittedBefore, Generator, ResidueSplit, RestoreError, Source};
pub use stream::{BoxedKey, KeyedStream, Stream};
pub use twophase::{TwoPhaseCommitSink, Upsert};

/// An error from code a pipeline calls at its extension points (a two-phase-commit
/// sink's transaction steps, a source's restore): any error type, boxed, with its
/// `source()` chain. A `String` or `&str` converts with `.into()` (or `?` on a
/// `Result<_, String>`).
pub type UserError = Box<dyn std::error::Error + Send + Sync + 'static>;
pub use watermark::WatermarkStrategy;
pub use window::{
    Aggregate, CombiningStream, CombiningWindows, Count, CountTrigger, Firing, LatePolicy, Trigger, TriggerAction,
    Window, WindowResult, WindowedStream, Windows,
};
