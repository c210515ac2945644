//! The human-readable result table: one `name  value unit` row per measurement.

use std::fmt::{self, Display};

/// Rows of `(name, value, unit)` printed with names left-aligned, values right-aligned and
/// units left-aligned, each column as wide as its widest cell:
///
/// ```text
/// log: 1 shard, fsync interval:5
///   append throughput    512.3 MB/s
///   append latency p99     840 us
/// ```
#[derive(Debug, Clone, Default)]
pub struct Table {
    title: Option<String>,
    rows: Vec<Row>,
}

#[derive(Debug, Clone)]
struct Row {
    name: String,
    value: String,
    unit: String,
}

impl Table {
    /// An empty table without a title.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose first printed line is `title`.
    pub fn titled(title: impl Into<String>) -> Self {
        Self { title: Some(title.into()), rows: Vec::new() }
    }

    /// Appends a row. `value` is printed with its `Display` impl, so format numbers (e.g.
    /// `format!("{x:.1}")`) before passing them; `unit` may be empty.
    pub fn row(&mut self, name: impl Into<String>, value: impl Display, unit: impl Into<String>) {
        self.rows.push(Row { name: name.into(), value: value.to_string(), unit: unit.into() });
    }

    /// Prints the table to stdout.
    /// Rows `{what} p50`, `p99`, `p99.9` and `max` of a latency summary, in microseconds.
    pub fn latency_rows(&mut self, what: &str, l: &super::LatencySummary) {
        for (name, v) in [("p50", l.p50), ("p99", l.p99), ("p99.9", l.p999), ("max", l.max)] {
            self.row(format!("{what} {name}"), v, "us");
        }
    }

    pub fn print(&self) {
        print!("{self}");
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(title) = &self.title {
            writeln!(f, "{title}")?;
        }
        let width = |cell: fn(&Row) -> &str| self.rows.iter().map(|r| cell(r).chars().count()).max().unwrap_or(0);
        let name_w = width(|r| &r.name);
        let value_w = width(|r| &r.value);
        for Row { name, value, unit } in &self.rows {
            let line = format!("  {name:<name_w$}  {value:>value_w$} {unit}");
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}
