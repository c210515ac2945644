//! Writing a report as pretty-printed JSON.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::Context;
use serde::Serialize;

/// Writes `value` to `path` as pretty-printed JSON followed by a newline, replacing any
/// existing file.
pub fn write_json(path: impl AsRef<Path>, value: &impl Serialize) -> anyhow::Result<()> {
    let path = path.as_ref();
    let write = || -> anyhow::Result<()> {
        let mut out = BufWriter::new(File::create(path)?);
        serde_json::to_writer_pretty(&mut out, value)?;
        out.write_all(b"\n")?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(())
    };
    write().with_context(|| format!("writing JSON report to {}", path.display()))
}

/// Serializes a field by its `Display` form, e.g. an fsync policy as `"interval:5"`.
pub fn serialize_display<T: std::fmt::Display, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}
