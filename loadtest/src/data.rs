//! Data files of a scenario: rows that operation templates draw values from
//! (`{{users.name}}`), read once at start from CSV (a header row names the
//! columns; every value is a string) or JSON Lines (one object per line; the
//! values keep their JSON types).
//!
//! Bounds: a file is read whole into memory, so it may hold at most
//! [`MAX_DATA_BYTES`] and [`MAX_ROWS`] rows; a scenario names at most
//! [`MAX_DATA_SETS`] files. Every row must have every field the scenario's
//! templates use (checked at start by `template.rs`), so a run never finds
//! a hole half-way.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail, ensure};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Largest data file read.
pub(crate) const MAX_DATA_BYTES: u64 = 256 * 1024 * 1024;
/// Most rows of one data file.
pub(crate) const MAX_ROWS: usize = 10_000_000;
/// Most data files of one scenario.
pub(crate) const MAX_DATA_SETS: usize = 16;

/// Which row an operation gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Order {
    /// The rows in file order, one per operation across the whole run,
    /// starting again after the last.
    #[default]
    Sequential,
    /// A row drawn at random for each operation.
    Random,
    /// The virtual session's own row: session `i` always gets row
    /// `i mod rows` (credentials or a tenant per session).
    PerSession,
}

/// A `[[data]]` entry of the scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DataSpec {
    /// How templates refer to it: `{{NAME.FIELD}}`.
    pub(crate) name: String,
    /// CSV (`.csv`) or JSON Lines (`.jsonl`, `.ndjson`), relative to the
    /// scenario file.
    pub(crate) file: String,
    #[serde(default)]
    pub(crate) order: Order,
}

/// One data file, loaded.
#[derive(Debug)]
pub(crate) struct DataSet {
    pub(crate) name: String,
    order: Order,
    /// Each row an object, field name to value; never empty.
    rows: Vec<Map<String, Value>>,
    /// The next row for [`Order::Sequential`].
    cursor: AtomicUsize,
}

impl DataSet {
    /// Reads `spec.file` (relative to `dir`).
    ///
    /// # Errors
    /// The file cannot be read, is too big, has no rows, or a row does not
    /// parse (its line number is given).
    pub(crate) fn load(spec: &DataSpec, dir: &Path) -> anyhow::Result<Self> {
        ensure!(
            is_name(&spec.name),
            "data name {:?}: letters, digits and _ only",
            spec.name
        );
        let path = dir.join(&spec.file);
        let size = std::fs::metadata(&path)
            .with_context(|| format!("data {:?}: {}", spec.name, path.display()))?
            .len();
        ensure!(
            size <= MAX_DATA_BYTES,
            "data {:?}: {} holds {size} bytes, more than the {MAX_DATA_BYTES} a data file may",
            spec.name,
            path.display()
        );
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("data {:?}: {}", spec.name, path.display()))?;
        let rows = match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => csv_rows(&text),
            Some("jsonl" | "ndjson") => jsonl_rows(&text),
            _ => Err(anyhow::anyhow!(
                "a data file must end in .csv, .jsonl or .ndjson"
            )),
        };
        rows.and_then(|rows| Self::new(&spec.name, spec.order, rows))
            .with_context(|| format!("data {:?}: {}", spec.name, path.display()))
    }

    /// A data set of `rows`.
    ///
    /// # Errors
    /// No rows, or more than [`MAX_ROWS`].
    pub(crate) fn new(
        name: &str,
        order: Order,
        rows: Vec<Map<String, Value>>,
    ) -> anyhow::Result<Self> {
        ensure!(!rows.is_empty(), "data {name:?} has no rows");
        ensure!(
            rows.len() <= MAX_ROWS,
            "data {name:?} has {} rows, more than {MAX_ROWS}",
            rows.len()
        );
        Ok(Self {
            name: name.to_owned(),
            order,
            rows,
            cursor: AtomicUsize::new(0),
        })
    }

    /// Every row, to check that each has the fields templates use.
    pub(crate) fn rows(&self) -> &[Map<String, Value>] {
        &self.rows
    }

    /// The row for one operation of virtual session `session`.
    pub(crate) fn draw(&self, session: usize) -> &Map<String, Value> {
        let n = self.rows.len();
        let index = match self.order {
            Order::Sequential => self.cursor.fetch_add(1, Ordering::Relaxed) % n,
            Order::Random => fastrand::usize(0..n),
            Order::PerSession => session % n,
        };
        &self.rows[index]
    }
}

/// Letters, digits and `_`, not empty: a data set's or a field's name as
/// templates write it.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn csv_rows(text: &str) -> anyhow::Result<Vec<Map<String, Value>>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .context("the header row")?
        .iter()
        .map(|h| h.trim().to_owned())
        .collect();
    ensure!(
        !headers.iter().any(String::is_empty),
        "the header row has an empty column name"
    );
    let mut rows = Vec::new();
    for record in reader.records() {
        // The reader insists on the header's number of fields.
        let record = record?;
        ensure!(rows.len() < MAX_ROWS, "more than {MAX_ROWS} rows");
        rows.push(
            headers
                .iter()
                .zip(record.iter())
                .map(|(h, v)| (h.clone(), Value::String(v.to_owned())))
                .collect(),
        );
    }
    Ok(rows)
}

fn jsonl_rows(text: &str) -> anyhow::Result<Vec<Map<String, Value>>> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        ensure!(rows.len() < MAX_ROWS, "more than {MAX_ROWS} rows");
        match serde_json::from_str(line) {
            Ok(Value::Object(row)) => rows.push(row),
            Ok(_) => bail!("line {}: not a JSON object", n + 1),
            Err(err) => bail!("line {}: {err}", n + 1),
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> DataSpec {
        std::fs::write(dir.join(name), text).unwrap();
        DataSpec {
            name: "d".into(),
            file: name.into(),
            order: Order::Sequential,
        }
    }

    #[test]
    fn csv_and_jsonl_rows_load_and_bad_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("mcp-loadtest-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let csv = DataSet::load(
            &write(&dir, "a.csv", "city, days\nParis,3\n\"Rio, BR\",5\n"),
            &dir,
        )
        .unwrap();
        assert_eq!(csv.rows().len(), 2);
        assert_eq!(csv.rows()[1]["city"], "Rio, BR");
        assert_eq!(csv.rows()[1]["days"], "5");
        // Sequential: in order, then from the start again.
        let drawn: Vec<&str> = (0..3)
            .map(|_| csv.draw(0)["city"].as_str().unwrap())
            .collect();
        assert_eq!(drawn, ["Paris", "Rio, BR", "Paris"]);

        let jsonl = DataSet::load(
            &write(
                &dir,
                "b.jsonl",
                "{\"n\": 1, \"tags\": [\"x\"]}\n\n{\"n\": 2}\n",
            ),
            &dir,
        )
        .unwrap();
        assert_eq!(jsonl.rows()[0]["n"], 1);
        assert_eq!(jsonl.rows()[0]["tags"], serde_json::json!(["x"]));

        for (name, text) in [
            ("c.csv", "a,b\n1\n"),
            ("d.csv", "a,b\n"),
            ("e.jsonl", "{\"n\": 1}\n[1]\n"),
            ("f.jsonl", "{\"n\": \n"),
            ("g.txt", "a\n1\n"),
        ] {
            let err = DataSet::load(&write(&dir, name, text), &dir).unwrap_err();
            assert!(format!("{err:#}").contains(name), "{name}: {err:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn per_session_rows_stay_with_their_session() {
        let rows = (0..3)
            .map(|i| Map::from_iter([("i".to_owned(), Value::from(i))]))
            .collect();
        let set = DataSet::new("d", Order::PerSession, rows).unwrap();
        assert_eq!(set.draw(4)["i"], 1);
        assert_eq!(set.draw(4)["i"], 1);
        assert_eq!(set.draw(2)["i"], 2);
    }
}
