//! The one description of what `status` shows, and its two renderings. A `Section` is
//! a JSON member of `--json` and a part of the text; its fields each carry their JSON
//! key and, where the text has a table column for them, that column. `to_json` and
//! `text` walk the same sections, so a figure added to the description appears in both
//! (or, by its key and column, deliberately in one).

use crate::size::format_bytes;
use serde_json::{json, Map, Value};

/// A value as both outputs show it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// JSON: a number or null; text: `1.50 GiB`, or the column's placeholder.
    Bytes(Option<u64>),
    /// JSON: a number or null; text: the number, or the column's placeholder.
    Count(Option<u64>),
    /// JSON: a string or null; text: the string, or the column's placeholder.
    Text(Option<String>),
    /// JSON: true, false or null.
    Flag(Option<bool>),
    /// A PCIe link figure now and at most; JSON: `{"current": .., "max": ..}` or null.
    Link(Option<(u32, u32)>),
    /// JSON only, as it is (lists and raw maps).
    Json(Value),
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Cell {
        Cell::Text(Some(text.into()))
    }

    fn json(&self) -> Value {
        match self {
            Cell::Bytes(value) | Cell::Count(value) => json!(value),
            Cell::Text(value) => json!(value),
            Cell::Flag(value) => json!(value),
            Cell::Link(value) => value.map_or(Value::Null, |(current, max)| json!({"current": current, "max": max})),
            Cell::Json(value) => value.clone(),
        }
    }

    /// The text in a column; `None` where the column shows its placeholder.
    fn shown(&self) -> Option<String> {
        match self {
            Cell::Bytes(value) => value.map(format_bytes),
            Cell::Count(value) => value.map(|n| n.to_string()),
            Cell::Text(value) => value.clone(),
            Cell::Flag(value) => value.map(|b| b.to_string()),
            Cell::Link(_) | Cell::Json(_) => None,
        }
    }
}

/// A column of a text table: `gap` before it, its header, its width and side.
pub struct Column {
    pub header: &'static str,
    pub width: usize,
    pub right: bool,
    pub gap: &'static str,
    /// What an absent value shows.
    pub missing: &'static str,
}

impl Column {
    pub const fn left(header: &'static str, width: usize, gap: &'static str) -> Column {
        Column { header, width, right: false, gap, missing: "-" }
    }

    pub const fn right(header: &'static str, width: usize, gap: &'static str) -> Column {
        Column { header, width, right: true, gap, missing: "-" }
    }

    pub const fn missing(self, missing: &'static str) -> Column {
        Column { missing, ..self }
    }

    fn pad(&self, text: &str) -> String {
        let width = self.width;
        if self.right {
            format!("{}{text:>width$}", self.gap)
        } else {
            format!("{}{text:<width$}", self.gap)
        }
    }
}

/// One figure: its JSON member (`None`: the text only) and the header of the text
/// column it fills (`None`: JSON only).
pub struct Field {
    pub key: Option<&'static str>,
    pub column: Option<&'static str>,
    pub cell: Cell,
}

/// In JSON and in the text column `column`.
pub fn both(key: &'static str, column: &'static str, cell: Cell) -> Field {
    Field { key: Some(key), column: Some(column), cell }
}

/// In JSON only.
pub fn json(key: &'static str, cell: Cell) -> Field {
    Field { key: Some(key), column: None, cell }
}

/// In the text column `column` only (labels and figures the text combines).
pub fn shown(column: &'static str, cell: Cell) -> Field {
    Field { key: None, column: Some(column), cell }
}

pub(super) fn object(fields: &[Field]) -> Value {
    Value::Object(fields.iter().filter_map(|f| f.key.map(|key| (key.to_owned(), f.cell.json()))).collect())
}

/// What the text shows for an empty table.
pub enum Empty {
    /// The header, then this line.
    Header(&'static str),
    /// This line instead of the header.
    Instead(&'static str),
}

/// Rows of fields: in JSON an array of objects (or, when every row has a key, an object
/// of them); in the text a table of `columns`, unless `hidden`.
pub struct Table {
    pub columns: &'static [Column],
    pub rows: Vec<(Option<&'static str>, Vec<Field>)>,
    pub empty: Empty,
    pub hidden: bool,
}

impl Table {
    fn json(&self) -> Value {
        if !self.rows.is_empty() && self.rows.iter().all(|(key, _)| key.is_some()) {
            Value::Object(
                self.rows.iter().map(|(key, row)| (key.unwrap_or_default().to_owned(), object(row))).collect(),
            )
        } else {
            Value::Array(self.rows.iter().map(|(_, row)| object(row)).collect())
        }
    }

    fn line(&self, cell: impl Fn(&Column) -> String) -> String {
        let line: String = self.columns.iter().map(|column| column.pad(&cell(column))).collect();
        line + "\n"
    }

    fn text(&self, out: &mut String) {
        if self.hidden {
            return;
        }
        match (&self.empty, self.rows.is_empty()) {
            (Empty::Instead(line), true) => return out.push_str(&format!("{line}\n")),
            _ => out.push_str(&self.line(|column| column.header.to_owned())),
        }
        for (_, row) in &self.rows {
            out.push_str(&self.line(|column| {
                row.iter()
                    .find(|f| f.column == Some(column.header))
                    .map_or_else(String::new, |f| f.cell.shown().unwrap_or_else(|| column.missing.to_owned()))
            }));
        }
        if let (Empty::Header(line), true) = (&self.empty, self.rows.is_empty()) {
            out.push_str(&format!("{line}\n"));
        }
    }
}

/// A section's content.
pub enum Body {
    Cell(Cell),
    Object(Vec<Field>),
    Table(Table),
    /// The text only.
    None,
}

/// A member of the JSON (unless its body is `Body::None`), and the text `lines` printed
/// before its table, if it has one.
pub struct Section {
    pub key: &'static str,
    pub body: Body,
    pub lines: Vec<String>,
}

pub fn to_json(sections: &[Section]) -> Value {
    let member = |section: &Section| {
        let value = match &section.body {
            Body::Cell(cell) => cell.json(),
            Body::Object(fields) => object(fields),
            Body::Table(table) => table.json(),
            Body::None => return None,
        };
        Some((section.key.to_owned(), value))
    };
    Value::Object(sections.iter().filter_map(member).collect::<Map<_, _>>())
}

/// The text: the sections named in `order` (an empty name: a blank line), each as its
/// lines and then its table.
pub fn text(sections: &[Section], order: &[&str]) -> String {
    let mut out = String::new();
    for name in order {
        if name.is_empty() {
            out.push('\n');
        }
        for section in sections.iter().filter(|s| s.key == *name) {
            section.lines.iter().for_each(|line| out.push_str(&format!("{line}\n")));
            if let Body::Table(table) = &section.body {
                table.text(&mut out);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static COLUMNS: [Column; 3] =
        [Column::left("name", 6, ""), Column::right("size", 10, " "), Column::right("n", 3, " ").missing("?")];

    fn table(rows: Vec<(Option<&'static str>, Vec<Field>)>, empty: Empty) -> Section {
        Section {
            key: "things",
            body: Body::Table(Table { columns: &COLUMNS, rows, empty, hidden: false }),
            lines: vec![],
        }
    }

    fn row(name: &str, size: Option<u64>, n: Option<u64>) -> Vec<Field> {
        vec![
            both("name", "name", Cell::text(name)),
            both("size", "size", Cell::Bytes(size)),
            shown("n", Cell::Count(n)),
            json("hidden", Cell::Flag(Some(true))),
        ]
    }

    #[test]
    fn one_description_two_renderings() {
        let sections = vec![
            Section { key: "title", body: Body::Cell(Cell::text("T")), lines: vec!["Title: T".into()] },
            table(vec![(None, row("a", Some(1536), Some(2))), (None, row("b", None, None))], Empty::Instead("none")),
            Section { key: "note", body: Body::None, lines: vec!["a note".into()] },
        ];
        assert_eq!(
            to_json(&sections).to_string(),
            r#"{"title":"T","things":[{"name":"a","size":1536,"hidden":true},{"name":"b","size":null,"hidden":true}]}"#
        );
        assert_eq!(
            text(&sections, &["title", "", "things", "note"]),
            "Title: T\n\nname         size   n\na        1.50 KiB   2\nb               -   ?\na note\n"
        );
    }

    #[test]
    fn keyed_rows_are_an_object_and_empty_tables_say_so() {
        let keyed = table(vec![(Some("x"), row("a", Some(1), None))], Empty::Instead("none"));
        assert_eq!(to_json(&[keyed]).to_string(), r#"{"things":{"x":{"name":"a","size":1,"hidden":true}}}"#);
        assert_eq!(text(&[table(vec![], Empty::Instead("none"))], &["things"]), "none\n");
        assert_eq!(text(&[table(vec![], Empty::Header("(empty)"))], &["things"]), "name         size   n\n(empty)\n");
        assert_eq!(to_json(&[table(vec![], Empty::Header("-"))]).to_string(), r#"{"things":[]}"#);
    }
}
