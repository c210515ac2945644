//! [`Tuple`]: one row's column values as the source reads them, in the table's column
//! order, sharing the table's column names (one allocation per row for the values, plus
//! each text value's own), rather than a JSON map per row (a node and a copy of every
//! column's name per row, made on the replication thread and freed on a shard). It
//! becomes a JSON object ([`Row`]) only where one is written: a Debezium message, a
//! changelog's row.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::change::TableInfo;
use crate::connectors::debezium::Row;

/// One row's values, in its table's column order.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuple {
    table: Arc<TableInfo>,
    values: Vec<Value>,
}

impl Tuple {
    /// A row of `table` with `values` in its column order: values past its columns are
    /// left out, and columns past the values are null.
    #[must_use]
    pub fn new(table: Arc<TableInfo>, mut values: Vec<Value>) -> Tuple {
        values.resize(table.columns.len(), Value::Null);
        Tuple { table, values }
    }

    /// The value of `column` (`None`: the table has no such column).
    #[must_use]
    pub fn get(&self, column: &str) -> Option<&Value> {
        let i = self.table.columns.iter().position(|(name, _)| name == column)?;
        self.values.get(i)
    }

    /// The values, in the table's column order.
    #[must_use]
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The table whose row this is (its columns name the values).
    #[must_use]
    pub fn table(&self) -> &Arc<TableInfo> {
        &self.table
    }

    /// The columns' names and values, in the table's column order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.table.columns.iter().map(|(name, _)| name.as_str()).zip(&self.values)
    }

    /// The row as a JSON object, column name to value.
    #[must_use]
    pub fn to_row(&self) -> Row {
        self.iter().map(|(name, value)| (name.to_owned(), value.clone())).collect()
    }

    /// The row as a JSON object, moving the values.
    #[must_use]
    pub fn into_row(self) -> Row {
        let names = self.table.columns.iter().map(|(name, _)| name.clone());
        names.zip(self.values).collect()
    }
}

/// As a JSON object of its columns, in the table's column order.
impl Serialize for Tuple {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.values.len()))?;
        for (name, value) in self.iter() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<TableInfo> {
        Arc::new(TableInfo {
            schema: "public".into(),
            name: "items".into(),
            columns: vec![("title".into(), 25), ("id".into(), 23)],
            key: vec!["id".into()],
        })
    }

    #[test]
    fn postgres_tuple_reads_by_column_and_becomes_a_json_row() {
        let tuple = Tuple::new(table(), vec![Value::from("a"), Value::from(1)]);
        assert_eq!(
            (tuple.get("id"), tuple.get("title"), tuple.get("nope")),
            (Some(&1.into()), Some(&"a".into()), None)
        );
        assert_eq!(tuple.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["title", "id"]);
        let row = tuple.to_row();
        assert_eq!(row, serde_json::json!({"id": 1, "title": "a"}).as_object().unwrap().clone());
        assert_eq!(tuple.clone().into_row(), row);
        // Serialized in the table's column order.
        assert_eq!(serde_json::to_string(&tuple).unwrap(), r#"{"title":"a","id":1}"#);
        // Short and long value lists fit the table's columns.
        assert_eq!(Tuple::new(table(), vec![Value::from("b")]).values(), [Value::from("b"), Value::Null]);
        assert_eq!(Tuple::new(table(), vec![1.into(), 2.into(), 3.into()]).values().len(), 2);
    }
}
