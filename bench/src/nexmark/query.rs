//! [`Query`]: what the harness knows about one Nexmark query (its name on the command line
//! and in reports, its `--help` line, when its results can first exist, the event time one
//! result spans, its option check, and how to build it), and what `sluice-bench nexmark`
//! makes of it. The queries themselves, and the table listing them ([`Query::ALL`]), are in
//! [`queries`](super::queries).

use clap::{ValueEnum, builder::PossibleValue};
use serde::{Serialize, Serializer};
use sluice_engine::dataflow::Stream;

use super::{QueryParams, ResultSink, model::Event};

/// Attaches a query to an event stream and its results to a sink.
pub type Build = fn(Stream<Event>, &QueryParams, &ResultSink);

/// Checks the query's parameters; the error names the options at fault.
pub type Check = fn(&QueryParams) -> Result<(), String>;

/// When a query's result can first exist, relative to the start of its event time's
/// millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// At once: a result of one event (or of a join, at the later record's time).
    Immediate,
    /// 1 ms later: a result fired when the watermark reaches its time (a window's, at the
    /// window's last instant, or q4's, at the auction's close), which needs every event of
    /// that millisecond in.
    OnWatermark,
}

/// The event time one result of a query spans ([`Query::span_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// A result of one event, or of a join.
    Instant,
    /// A window of [`QueryParams::window_ms`].
    Window,
    /// A session, closed by a gap of [`QueryParams::session_gap_ms`].
    Session,
    /// A day of [`QueryParams::day_ms`].
    Day,
}

/// A Nexmark query, as the harness sees it: one row of [`Query::ALL`]. Two queries are the
/// same if their names are.
#[derive(Clone, Copy)]
pub struct Query {
    name: &'static str,
    help: &'static str,
    completion: Completion,
    span: Span,
    build: Build,
    check: Check,
}

/// The check of a query without constraints on its parameters.
fn no_check(_: &QueryParams) -> Result<(), String> {
    Ok(())
}

impl Query {
    /// A row of [`Query::ALL`]: `name` on the command line and in reports, `help` in
    /// `--help`, and how to build it.
    #[must_use]
    pub const fn new(name: &'static str, completion: Completion, span: Span, build: Build, help: &'static str) -> Self {
        Query { name, help, completion, span, build, check: no_check }
    }

    /// The query with `check` run on its parameters before it is.
    #[must_use]
    pub const fn checked(self, check: Check) -> Self {
        Query { check, ..self }
    }

    /// The query's name, `q0`..`q22`.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.name
    }

    /// How long after its event time's millisecond starts a result can first exist, ms: 0
    /// for a result of one event (or of a join, at the later record's time); 1 for a result
    /// fired when the watermark reaches its time (a window's, at the window's last instant,
    /// or q4's, at the auction's close), which needs every event of that millisecond in.
    #[must_use]
    pub fn completion_delay_ms(self) -> i64 {
        match self.completion {
            Completion::Immediate => 0,
            Completion::OnWatermark => 1,
        }
    }

    /// The event time one result spans, ms: a window's size or a session's gap for the
    /// windowed queries, 0 for the others. A run shorter than this has no result that
    /// completed on its schedule.
    #[must_use]
    pub fn span_ms(self, params: &QueryParams) -> i64 {
        match self.span {
            Span::Instant => 0,
            Span::Window => params.window_ms,
            Span::Session => params.session_gap_ms,
            Span::Day => params.day_ms,
        }
    }

    /// Whether the query can run with `params`.
    ///
    /// # Errors
    ///
    /// What is wrong with them, naming the options at fault.
    pub fn check(self, params: &QueryParams) -> Result<(), String> {
        (self.check)(params)
    }

    /// Attaches the query to `events` and its results to `sink`.
    pub fn build(self, events: Stream<Event>, params: &QueryParams, sink: &ResultSink) {
        (self.build)(events, params, sink);
    }

    /// The queries' names with runs of consecutive numbers joined, in number order:
    /// `q0-q9, q11, ...`.
    #[must_use]
    pub fn listing() -> String {
        listing(Query::ALL.iter().map(|q| q.name))
    }
}

/// `names` (`q<number>`) in number order, runs of consecutive numbers joined: `q0-q2, q5`.
fn listing<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut numbers: Vec<u32> = names.filter_map(|name| name.strip_prefix('q')?.parse().ok()).collect();
    numbers.sort_unstable();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == n => *last = n,
            _ => runs.push((n, n)),
        }
    }
    let run =
        |&(first, last): &(u32, u32)| if first == last { format!("q{first}") } else { format!("q{first}-q{last}") };
    runs.iter().map(run).collect::<Vec<_>>().join(", ")
}

impl PartialEq for Query {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Query {}

impl std::hash::Hash for Query {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl std::fmt::Debug for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Query").field(&self.name).finish()
    }
}

impl std::fmt::Display for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// `--query`: the names of [`Query::ALL`], each with its help line.
impl ValueEnum for Query {
    fn value_variants<'a>() -> &'a [Self] {
        Query::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name).help(self.help))
    }
}

/// The name, as in `--json` reports.
impl Serialize for Query {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        for (i, query) in Query::ALL.iter().enumerate() {
            assert!(Query::ALL[..i].iter().all(|q| q.name != query.name), "{query} listed twice");
            assert_eq!(Query::from_str(query.name(), false), Ok(*query));
            assert_eq!(serde_json::to_value(query).unwrap(), query.name());
        }
        assert!(Query::from_str("q10", false).is_err());
    }

    #[test]
    fn the_listing_joins_consecutive_numbers() {
        assert_eq!(listing(["q7", "q0", "q2", "q1", "q5", "q8", "q11"].into_iter()), "q0-q2, q5, q7-q8, q11");
        assert_eq!(listing(std::iter::empty()), "");
    }
}
