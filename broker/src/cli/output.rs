//! What a client command prints: aligned tables under a few summary lines for people, or
//! one JSON document for scripts, made from the same [`Report`].

use serde_json::{Map, Value};

pub use crate::config::client::Format;

/// Rows under column headers; in JSON, an array of objects keyed by the lower-cased headers.
#[derive(Debug, Default)]
pub struct Table {
    /// The JSON key this table goes under (`partitions`, `brokers`, ...).
    pub key: &'static str,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    pub fn new(key: &'static str, headers: &[&'static str]) -> Table {
        Table {
            key,
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.headers.len(), "a row of {}", self.key);
        self.rows.push(row);
    }

    fn render(&self, out: &mut String) {
        let cells: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(cell).collect()).collect();
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.headers[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |out: &mut String, row: &[String]| {
            let last = row.len().saturating_sub(1);
            for (i, text) in row.iter().enumerate() {
                out.push_str(text);
                if i < last {
                    let pad = widths[i] - text.chars().count() + 2;
                    out.push_str(&" ".repeat(pad));
                }
            }
            out.push('\n');
        };
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        line(out, &headers);
        for row in &cells {
            line(out, row);
        }
    }

    fn json(&self) -> Value {
        let keys: Vec<String> = self
            .headers
            .iter()
            .map(|h| h.to_ascii_lowercase().replace([' ', '-'], "_"))
            .collect();
        Value::Array(
            self.rows
                .iter()
                .map(|row| Value::Object(keys.iter().cloned().zip(row.iter().cloned()).collect::<Map<_, _>>()))
                .collect(),
        )
    }
}

/// A table cell: strings bare, null and empty lists as `-`, lists comma-separated, objects as
/// `key=value,...`, numbers and booleans as is.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Object(map) if map.is_empty() => "-".into(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", cell(v)))
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

/// One command's answer.
#[derive(Debug)]
pub struct Report {
    /// `key: value` lines above the tables (and top-level JSON fields).
    pub fields: Vec<(&'static str, Value)>,
    pub tables: Vec<Table>,
    /// Free text lines for people (in JSON under `messages`).
    pub messages: Vec<String>,
    /// False makes the command exit 1 (`cluster health` when something is wrong).
    pub healthy: bool,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            fields: Vec::new(),
            tables: Vec::new(),
            messages: Vec::new(),
            healthy: true,
        }
    }
}

impl Report {
    pub fn message(text: String) -> Report {
        Report {
            messages: vec![text],
            ..Report::default()
        }
    }

    pub fn field(mut self, key: &'static str, value: impl Into<Value>) -> Report {
        self.fields.push((key, value.into()));
        self
    }

    pub fn table(mut self, table: Table) -> Report {
        self.tables.push(table);
        self
    }

    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => {
                let mut object = Map::new();
                for (key, value) in &self.fields {
                    object.insert((*key).to_owned(), value.clone());
                }
                for table in &self.tables {
                    object.insert(table.key.to_owned(), table.json());
                }
                if !self.messages.is_empty() {
                    object.insert("messages".into(), self.messages.clone().into());
                }
                let mut text = serde_json::to_string_pretty(&Value::Object(object)).expect("JSON values encode");
                text.push('\n');
                text
            }
            Format::Table => {
                let mut out = String::new();
                for message in &self.messages {
                    out.push_str(message);
                    out.push('\n');
                }
                let width = self.fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
                for (key, value) in &self.fields {
                    let label = key.replace('_', " ");
                    out.push_str(&format!("{label:<width$}  {}\n", cell(value)));
                }
                for (i, table) in self.tables.iter().enumerate() {
                    if i > 0 || !self.fields.is_empty() {
                        out.push('\n');
                    }
                    let title = table.key.replace('_', " ");
                    match (self.tables.len() > 1 || !self.fields.is_empty(), table.rows.is_empty()) {
                        (true, true) => out.push_str(&format!("{title}: none\n")),
                        (true, false) => {
                            out.push_str(&format!("{title}:\n"));
                            table.render(&mut out);
                        }
                        (false, _) => table.render(&mut out),
                    }
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns_and_json_keys_rows_by_header() {
        let mut t = Table::new("partitions", &["PARTITION", "LEADER", "ISR"]);
        t.push(vec![json!(0), json!(1), json!([1, 2, 3])]);
        t.push(vec![json!(10), Value::Null, json!([])]);
        let report = Report::default().table(t);
        assert_eq!(
            report.render(Format::Table),
            "PARTITION  LEADER  ISR\n0          1       1,2,3\n10         -       -\n"
        );
        let parsed: Value = serde_json::from_str(&report.render(Format::Json)).unwrap();
        assert_eq!(
            parsed["partitions"][0],
            json!({"partition": 0, "leader": 1, "isr": [1, 2, 3]})
        );
        assert_eq!(parsed["partitions"][1]["leader"], Value::Null);
    }

    #[test]
    fn fields_come_before_titled_tables() {
        let mut t = Table::new("brokers", &["ID"]);
        t.push(vec![json!(1)]);
        let empty = Table::new("partitions_needing_attention", &["TOPIC"]);
        let configs = json!({"retention.ms": "1000", "cleanup.policy": "compact"});
        let text = Report::default()
            .field("cluster_id", "abc")
            .field("configs", configs)
            .table(t)
            .table(empty)
            .render(Format::Table);
        assert_eq!(
            text,
            "cluster id  abc\nconfigs     cleanup.policy=compact,retention.ms=1000\n\nbrokers:\nID\n1\n\npartitions needing attention: none\n"
        );
    }
}
