//! Templates: the JSON values of a scenario (tool arguments, a resource
//! URI, a check's expected value) with `{{ ... }}` placeholders filled in
//! for each operation.
//!
//! A placeholder is one of:
//! - `NAME.FIELD`: the field of this operation's row of the data file
//!   `NAME` (`data.rs`); every placeholder of one operation, its checks
//!   included, sees the same row;
//! - `seq`: a counter over the whole run, from 1, one value per operation;
//! - `session`: the virtual session's number, from 0;
//! - `random_int A B`: an integer in A..=B, drawn for each placeholder;
//! - `random_choice W1 W2 ...`: one of the words;
//! - `random_string N`: N letters and digits;
//!
//! followed by an optional filter: `| number` (a text made a JSON number),
//! `| string` (any value made text), `| json` (a text parsed as JSON). A
//! string that is exactly one placeholder takes the placeholder's value and
//! type (`"{{random_int 1 7}}"` is a number); placeholders inside longer
//! text are written into it. Everything is checked when the scenario is
//! read: an unknown placeholder, a field some row lacks, or a cell a filter
//! cannot convert stop the run before it starts.

use anyhow::{Context, bail, ensure};
use serde_json::{Map, Value};

use crate::data::{DataSet, is_name};

/// Longest `random_string`.
const MAX_RANDOM_STRING: usize = 65_536;

/// A JSON value with placeholders, compiled.
#[derive(Debug, Clone)]
pub(crate) enum Template {
    /// No placeholder anywhere below.
    Literal(Value),
    /// A string that is exactly one placeholder: its value, typed.
    Whole(Expr),
    /// A string with placeholders among text.
    Text(Vec<Part>),
    Array(Vec<Template>),
    Object(Vec<(String, Template)>),
}

/// A piece of a [`Template::Text`].
#[derive(Debug, Clone)]
pub(crate) enum Part {
    Text(String),
    Expr(Expr),
}

/// One placeholder.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    source: Source,
    filter: Filter,
}

#[derive(Debug, Clone)]
enum Source {
    /// Index into the scenario's data sets, and the field.
    Field {
        data: usize,
        field: String,
    },
    Seq,
    Session,
    RandomInt(i64, i64),
    RandomChoice(Vec<String>),
    RandomString(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    None,
    Number,
    String,
    Json,
}

/// What one operation draws its values from: its session, and the rows
/// and counter value taken so far (taken on first use, then kept, so the
/// arguments and the checks of one operation agree).
#[derive(Debug)]
pub(crate) struct Draw<'a> {
    data: &'a [DataSet],
    session: usize,
    rows: Vec<Option<&'a Map<String, Value>>>,
    seq: Option<u64>,
    counter: &'a std::sync::atomic::AtomicU64,
}

impl<'a> Draw<'a> {
    /// For one operation of virtual session `session`; `counter` is the
    /// run's `seq`.
    pub(crate) fn new(
        data: &'a [DataSet],
        session: usize,
        counter: &'a std::sync::atomic::AtomicU64,
    ) -> Self {
        Self {
            data,
            session,
            rows: vec![None; data.len()],
            seq: None,
            counter,
        }
    }

    fn row(&mut self, data: usize) -> &'a Map<String, Value> {
        let set = &self.data[data];
        let session = self.session;
        self.rows[data].get_or_insert_with(|| set.draw(session))
    }

    fn seq(&mut self) -> u64 {
        let counter = self.counter;
        *self
            .seq
            .get_or_insert_with(|| counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1)
    }
}

impl Template {
    /// Compiles `value`, resolving data names against `data`; `what` names
    /// the value in errors (`arguments`, `check 2 equals`).
    ///
    /// # Errors
    /// A malformed or unknown placeholder, a field some row of its data
    /// file lacks, or a cell its filter cannot convert.
    pub(crate) fn compile(value: &Value, data: &[DataSet], what: &str) -> anyhow::Result<Self> {
        let template = Self::compile_value(value, data).with_context(|| what.to_owned())?;
        template.validate(data).with_context(|| what.to_owned())?;
        Ok(template)
    }

    fn compile_value(value: &Value, data: &[DataSet]) -> anyhow::Result<Self> {
        Ok(match value {
            Value::String(text) => Self::compile_text(text, data)?,
            Value::Array(items) => {
                let items = items
                    .iter()
                    .map(|item| Self::compile_value(item, data))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                if items.iter().all(|t| matches!(t, Template::Literal(_))) {
                    Template::Literal(value.clone())
                } else {
                    Template::Array(items)
                }
            }
            Value::Object(fields) => {
                let fields = fields
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), Self::compile_value(v, data)?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                if fields
                    .iter()
                    .all(|(_, t)| matches!(t, Template::Literal(_)))
                {
                    Template::Literal(value.clone())
                } else {
                    Template::Object(fields)
                }
            }
            other => Template::Literal(other.clone()),
        })
    }

    fn compile_text(text: &str, data: &[DataSet]) -> anyhow::Result<Self> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            let Some(close) = rest[open + 2..].find("}}") else {
                bail!("{text:?}: a placeholder opened with {{{{ is not closed with }}}}");
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let inner = &rest[open + 2..open + 2 + close];
            parts.push(Part::Expr(
                Expr::parse(inner, data).with_context(|| format!("{text:?}"))?,
            ));
            rest = &rest[open + 2 + close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(match parts.as_slice() {
            [] | [Part::Text(_)] => Template::Literal(Value::String(text.to_owned())),
            [Part::Expr(expr)] => Template::Whole(expr.clone()),
            _ => Template::Text(parts),
        })
    }

    /// Every row of every data file the template reads has the field, in a
    /// form the filter takes.
    fn validate(&self, data: &[DataSet]) -> anyhow::Result<()> {
        match self {
            Template::Literal(_) => Ok(()),
            Template::Whole(expr) => expr.validate(data),
            Template::Text(parts) => parts.iter().try_for_each(|part| match part {
                Part::Text(_) => Ok(()),
                Part::Expr(expr) => expr.validate(data),
            }),
            Template::Array(items) => items.iter().try_for_each(|t| t.validate(data)),
            Template::Object(fields) => fields.iter().try_for_each(|(_, t)| t.validate(data)),
        }
    }

    /// The value for one operation.
    pub(crate) fn render(&self, draw: &mut Draw<'_>) -> Value {
        match self {
            Template::Literal(value) => value.clone(),
            Template::Whole(expr) => expr.value(draw),
            Template::Text(parts) => {
                let mut out = String::new();
                for part in parts {
                    match part {
                        Part::Text(text) => out.push_str(text),
                        Part::Expr(expr) => push_text(&mut out, &expr.value(draw)),
                    }
                }
                Value::String(out)
            }
            Template::Array(items) => Value::Array(items.iter().map(|t| t.render(draw)).collect()),
            Template::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, t)| (k.clone(), t.render(draw)))
                    .collect(),
            ),
        }
    }
}

/// A value written into text: a string as it is, anything else as JSON.
fn push_text(out: &mut String, value: &Value) {
    match value {
        Value::String(text) => out.push_str(text),
        other => out.push_str(&other.to_string()),
    }
}

impl Expr {
    fn parse(inner: &str, data: &[DataSet]) -> anyhow::Result<Self> {
        let (body, filter) = match inner.split_once('|') {
            Some((body, filter)) => (
                body,
                match filter.trim() {
                    "number" => Filter::Number,
                    "string" => Filter::String,
                    "json" => Filter::Json,
                    other => bail!("unknown filter {other:?} (number, string, json)"),
                },
            ),
            None => (inner, Filter::None),
        };
        let words: Vec<&str> = body.split_whitespace().collect();
        let source = match words.as_slice() {
            [] => bail!("an empty placeholder {{{{}}}}"),
            ["seq"] => Source::Seq,
            ["session"] => Source::Session,
            ["random_int", low, high] => {
                let low: i64 = low.parse().context("random_int A B: A is not an integer")?;
                let high: i64 = high
                    .parse()
                    .context("random_int A B: B is not an integer")?;
                ensure!(low <= high, "random_int A B needs A <= B");
                Source::RandomInt(low, high)
            }
            ["random_choice", choices @ ..] if !choices.is_empty() => {
                Source::RandomChoice(choices.iter().map(|&c| c.to_owned()).collect())
            }
            ["random_string", n] => {
                let n: usize = n.parse().context("random_string N: N is not a count")?;
                ensure!(
                    n <= MAX_RANDOM_STRING,
                    "random_string N: N <= {MAX_RANDOM_STRING}"
                );
                Source::RandomString(n)
            }
            [word] => match word.split_once('.') {
                Some((name, field)) if is_name(name) && is_name(field) => {
                    let Some(index) = data.iter().position(|d| d.name == name) else {
                        bail!("{{{{{word}}}}}: no [[data]] named {name:?}");
                    };
                    Source::Field {
                        data: index,
                        field: field.to_owned(),
                    }
                }
                _ => bail!(
                    "unknown placeholder {{{{{word}}}}} (NAME.FIELD, seq, session, random_int, random_choice, random_string)"
                ),
            },
            _ => bail!("unknown placeholder {{{{{}}}}}", body.trim()),
        };
        Ok(Self { source, filter })
    }

    fn validate(&self, data: &[DataSet]) -> anyhow::Result<()> {
        let Source::Field { data: index, field } = &self.source else {
            return Ok(());
        };
        let set = &data[*index];
        for (n, row) in set.rows().iter().enumerate() {
            let Some(value) = row.get(field) else {
                bail!(
                    "row {} of data {:?} has no field {field:?}",
                    n + 1,
                    set.name
                );
            };
            if let Err(err) = self.filter.apply(value.clone()) {
                bail!(
                    "row {} of data {:?}, field {field:?}: {err}",
                    n + 1,
                    set.name
                );
            }
        }
        Ok(())
    }

    fn value(&self, draw: &mut Draw<'_>) -> Value {
        let raw = match &self.source {
            Source::Field { data, field } => {
                draw.row(*data).get(field).cloned().unwrap_or_default()
            }
            Source::Seq => Value::from(draw.seq()),
            Source::Session => Value::from(draw.session),
            Source::RandomInt(low, high) => Value::from(fastrand::i64(*low..=*high)),
            Source::RandomChoice(choices) => {
                Value::String(choices[fastrand::usize(0..choices.len())].clone())
            }
            Source::RandomString(n) => Value::String(
                std::iter::repeat_with(fastrand::alphanumeric)
                    .take(*n)
                    .collect(),
            ),
        };
        // Data cells were checked against the filter at start; the other
        // sources make values every filter takes but `json` of a non-JSON
        // word, which stays the text it was.
        match self.filter.apply(raw) {
            Ok(value) => value,
            Err(raw) => raw,
        }
    }
}

impl Filter {
    /// The value converted; on failure, the value as it came (as the error).
    fn apply(self, value: Value) -> Result<Value, Value> {
        match (self, value) {
            (Filter::None, value) => Ok(value),
            (Filter::String, Value::String(text)) => Ok(Value::String(text)),
            (Filter::String, other) => Ok(Value::String(other.to_string())),
            (Filter::Number, Value::Number(n)) => Ok(Value::Number(n)),
            (Filter::Number, Value::String(text)) => match serde_json::from_str(text.trim()) {
                Ok(Value::Number(n)) => Ok(Value::Number(n)),
                _ => Err(Value::String(text)),
            },
            (Filter::Json, Value::String(text)) => {
                serde_json::from_str(&text).map_err(|_| Value::String(text))
            }
            (Filter::Number | Filter::Json, other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use serde_json::json;

    use super::*;
    use crate::data::Order;

    fn cities() -> Vec<DataSet> {
        let rows = [("Paris", "3"), ("Lima", "5")]
            .into_iter()
            .map(|(city, days)| {
                Map::from_iter([
                    ("city".to_owned(), json!(city)),
                    ("days".to_owned(), json!(days)),
                ])
            })
            .collect();
        vec![DataSet::new("cities", Order::Sequential, rows).unwrap()]
    }

    #[test]
    fn placeholders_fill_in_with_their_types_and_one_row_per_operation() {
        let data = cities();
        let counter = AtomicU64::new(0);
        let args = Template::compile(
            &json!({
                "city": "{{cities.city}}",
                "days": "{{ cities.days | number }}",
                "note": "{{cities.city}} for {{cities.days}} days, run {{seq}}",
                "n": "{{random_int 2 2}}",
                "pick": "{{random_choice x}}",
                "s": "{{session}}",
                "list": ["{{seq}}", 1],
                "plain": "no placeholder",
            }),
            &data,
            "arguments",
        )
        .unwrap();
        let mut draw = Draw::new(&data, 7, &counter);
        let first = args.render(&mut draw);
        assert_eq!(
            first,
            json!({"city": "Paris", "days": 3, "note": "Paris for 3 days, run 1",
                   "n": 2, "pick": "x", "s": 7, "list": [1, 1], "plain": "no placeholder"})
        );
        // A check of the same operation sees the same row.
        let check = Template::compile(&json!("Forecast: {{cities.city}}"), &data, "check").unwrap();
        assert_eq!(check.render(&mut draw), json!("Forecast: Paris"));
        // The next operation, the next row and counter value.
        let second = args.render(&mut Draw::new(&data, 7, &counter));
        assert_eq!(second["city"], "Lima");
        assert_eq!(second["list"], json!([2, 1]));
        assert_eq!(
            Template::compile(&json!("{{random_string 12}}"), &data, "s")
                .unwrap()
                .render(&mut draw)
                .as_str()
                .map(str::len),
            Some(12)
        );
    }

    #[test]
    fn bad_placeholders_and_data_that_does_not_fit_are_refused_at_start() {
        let data = cities();
        for (bad, says) in [
            ("{{nope}}", "unknown placeholder"),
            ("{{other.city}}", "no [[data]] named \"other\""),
            ("{{cities.zip}}", "has no field \"zip\""),
            ("{{cities.city | number}}", "row 1 of data \"cities\""),
            ("{{seq | upper}}", "unknown filter"),
            ("{{random_int 5 1}}", "A <= B"),
            ("{{seq", "not closed"),
            ("{{}}", "empty placeholder"),
        ] {
            let err = Template::compile(&json!({"a": [bad]}), &data, "arguments").unwrap_err();
            let text = format!("{err:#}");
            assert!(text.contains(says), "{bad}: {text}");
            assert!(text.starts_with("arguments"), "{bad}: {text}");
        }
    }
}
