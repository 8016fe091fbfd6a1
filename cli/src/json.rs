//! A minimal JSON value for `--json` output (the only JSON this tool writes, so no
//! serialisation framework is pulled in).

use std::fmt::{self, Display, Write};

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    /// Keys keep their insertion order, so the output reads like the table.
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn object() -> Self {
        Json::Object(Vec::new())
    }

    /// Adds a member to an object (a no-op on any other value).
    pub fn with(mut self, key: &str, value: impl Into<Json>) -> Self {
        if let Json::Object(members) = &mut self {
            members.push((key.to_owned(), value.into()));
        }
        self
    }
}

impl From<bool> for Json {
    fn from(v: bool) -> Self {
        Json::Bool(v)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Self {
        Json::UInt(v)
    }
}
impl From<u32> for Json {
    fn from(v: u32) -> Self {
        Json::UInt(v.into())
    }
}
impl From<i64> for Json {
    fn from(v: i64) -> Self {
        Json::Int(v)
    }
}
impl From<i32> for Json {
    fn from(v: i32) -> Self {
        Json::Int(v.into())
    }
}
impl From<f64> for Json {
    fn from(v: f64) -> Self {
        Json::Float(v)
    }
}
impl From<&str> for Json {
    fn from(v: &str) -> Self {
        Json::Str(v.to_owned())
    }
}
impl From<String> for Json {
    fn from(v: String) -> Self {
        Json::Str(v)
    }
}
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Self {
        v.map_or(Json::Null, Into::into)
    }
}
impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(v: Vec<T>) -> Self {
        Json::Array(v.into_iter().map(Into::into).collect())
    }
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl Display for Json {
    /// Compact output; `{:#}` indents by two spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn go(value: &Json, f: &mut fmt::Formatter<'_>, pretty: bool, depth: usize) -> fmt::Result {
            let newline = |f: &mut fmt::Formatter<'_>, depth: usize| -> fmt::Result {
                if pretty {
                    f.write_char('\n')?;
                    for _ in 0..depth {
                        f.write_str("  ")?;
                    }
                }
                Ok(())
            };
            match value {
                Json::Null => f.write_str("null"),
                Json::Bool(b) => write!(f, "{b}"),
                Json::Int(i) => write!(f, "{i}"),
                Json::UInt(u) => write!(f, "{u}"),
                Json::Float(x) if x.is_finite() => write!(f, "{x}"),
                Json::Float(_) => f.write_str("null"),
                Json::Str(s) => write_string(f, s),
                Json::Array(items) if items.is_empty() => f.write_str("[]"),
                Json::Object(members) if members.is_empty() => f.write_str("{}"),
                Json::Array(items) => {
                    f.write_char('[')?;
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            f.write_char(',')?;
                        }
                        newline(f, depth + 1)?;
                        go(item, f, pretty, depth + 1)?;
                    }
                    newline(f, depth)?;
                    f.write_char(']')
                }
                Json::Object(members) => {
                    f.write_char('{')?;
                    for (i, (key, item)) in members.iter().enumerate() {
                        if i > 0 {
                            f.write_char(',')?;
                        }
                        newline(f, depth + 1)?;
                        write_string(f, key)?;
                        f.write_str(if pretty { ": " } else { ":" })?;
                        go(item, f, pretty, depth + 1)?;
                    }
                    newline(f, depth)?;
                    f.write_char('}')
                }
            }
        }
        go(self, f, f.alternate(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_nests() {
        let value = Json::object()
            .with("name", "a \"quoted\"\\path\n\u{1}")
            .with("n", 42u64)
            .with("neg", -1i64)
            .with("none", Option::<u64>::None)
            .with("list", vec![1u64, 2])
            .with("empty", Json::Array(vec![]));
        assert_eq!(
            value.to_string(),
            r#"{"name":"a \"quoted\"\\path\n\u0001","n":42,"neg":-1,"none":null,"list":[1,2],"empty":[]}"#
        );
        assert_eq!(format!("{:#}", Json::object().with("a", vec![1u64])), "{\n  \"a\": [\n    1\n  ]\n}");
    }
}
