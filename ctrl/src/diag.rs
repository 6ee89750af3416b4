//! Diagnostics: field paths, source positions and the messages `sluice check` prints as
//! `file:line:col: Kind ns/name: field.path: message`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A path into a document, printed as `spec.servers[0].port.number`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(pub Vec<Seg>);

impl FieldPath {
    /// The document root.
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    /// Parses the printed form (`a.b[0].c`). Keys containing `.` or `[` cannot be
    /// expressed; callers that need them build paths with [`FieldPath::key`].
    pub fn parse(s: &str) -> Self {
        let mut segs = Vec::new();
        for part in s.split('.').filter(|p| !p.is_empty()) {
            let (key, rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_string()));
            }
            for idx in rest.split('[').filter(|x| !x.is_empty()) {
                match idx.trim_end_matches(']').parse() {
                    Ok(i) => segs.push(Seg::Index(i)),
                    Err(_) => segs.push(Seg::Key(idx.trim_end_matches(']').to_string())),
                }
            }
        }
        FieldPath(segs)
    }

    /// This path extended by a key.
    pub fn key(&self, k: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.to_string()));
        p
    }

    /// This path extended by an index.
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// The path with every index replaced by `[]`, for matching against field lists.
    pub fn pattern(&self) -> String {
        let mut out = String::new();
        for s in &self.0 {
            match s {
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(_) => out.push_str("[]"),
            }
        }
        out
    }

    /// The first key of the path, if any.
    pub fn first_key(&self) -> Option<&str> {
        match self.0.first() {
            Some(Seg::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// The path without its last step (the root stays the root).
    pub fn parent(&self) -> Self {
        let mut p = self.clone();
        p.0.pop();
        p
    }

    /// Whether the path is the root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in &self.0 {
            match s {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// A 1-based line and column in a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub col: usize,
}

/// Where every node of one document sits in its file: the key of a mapping entry for
/// fields, the value for sequence items and the root.
#[derive(Debug, Clone, Default)]
pub struct PosIndex {
    map: HashMap<FieldPath, Pos>,
}

impl PosIndex {
    /// Records the position of a path (the first record wins).
    pub fn insert(&mut self, path: FieldPath, pos: Pos) {
        self.map.entry(path).or_insert(pos);
    }

    /// The position of `path`, or of its nearest ancestor that exists (a missing field
    /// is reported where its parent object is).
    pub fn locate(&self, path: &FieldPath) -> Pos {
        let mut p = path.clone();
        loop {
            if let Some(pos) = self.map.get(&p) {
                return *pos;
            }
            if p.is_root() {
                return Pos { line: 1, col: 1 };
            }
            p = p.parent();
        }
    }
}

/// Where a document came from: its file and the positions of its nodes.
#[derive(Debug, Clone)]
pub struct Origin {
    /// File name as given (or `<stdin>`).
    pub file: Arc<str>,
    /// Positions of the document's nodes.
    pub positions: Arc<PosIndex>,
}

impl Origin {
    /// The position of a path in this document.
    pub fn locate(&self, path: &FieldPath) -> Pos {
        self.positions.locate(path)
    }
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The configuration is rejected (malformed: syntax, types, misspelt fields, broken
    /// references); the running tables keep serving.
    Error,
    /// One object (or one listener of a gateway) is left out of the tables: it uses a
    /// field or value sluice does not implement and whose absence would widen or
    /// redirect traffic, or it does not attach. Its traffic gets no route; everything
    /// else is served. `sluice check` exits 1.
    NotServed,
    /// The configuration loads; something was ignored or normalised.
    Warning,
}

impl Severity {
    /// The lower-case name used in JSON output (`error`, `not-served`, `warning`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::NotServed => "not-served",
            Severity::Warning => "warning",
        }
    }
}

/// One message about the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// File name.
    pub file: Arc<str>,
    /// Position in the file.
    pub pos: Pos,
    /// `Kind ns/name` of the object, when known.
    pub object: Option<String>,
    /// Field path inside the object, when the message is about a field.
    pub path: Option<String>,
    /// What is wrong, and where useful how to fix it.
    pub message: String,
    /// The Gateway API condition reason a not-served diagnostic stands for
    /// (`NoMatchingParent`, `UnsupportedValue`, ...), when there is one.
    pub reason: Option<&'static str>,
}

impl Diagnostic {
    /// Whether this is an error (the configuration is rejected).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Whether this leaves an object or listener out of the tables.
    pub fn is_not_served(&self) -> bool {
        self.severity == Severity::NotServed
    }

    /// The diagnostic as JSON, for `sluice check --output json`: `severity`, `file`,
    /// `line`, `column`, `object`, `field`, `message`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "severity": self.severity.as_str(),
            "file": &*self.file,
            "line": self.pos.line,
            "column": self.pos.col,
            "object": self.object,
            "field": self.path.as_deref().filter(|p| !p.is_empty()),
            "message": self.message,
            "reason": self.reason,
        })
    }
}

/// Text from input, shown with its control characters escaped (`\x1b`, `\r`, `\n`,
/// `\t`; C1 controls as `\u{9b}`), so that a manifest cannot move the cursor, clear or
/// retitle the terminal, or fake lines in the output that shows it. Everything else,
/// backslashes included, is shown as it is (values quoted with `{:?}` are escaped
/// already and stay readable).
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(char::is_control) {
            f.write_str(&rest[..i])?;
            let c = rest[i..].chars().next().unwrap_or_default();
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if (c as u32) < 0x80 => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "{}", c.escape_unicode())?,
            }
            rest = &rest[i + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.severity {
            Severity::Warning => f.write_str("warning: ")?,
            Severity::NotServed => match self.reason {
                Some(r) => write!(f, "not served ({r}): ")?,
                None => f.write_str("not served: ")?,
            },
            Severity::Error => {}
        }
        write!(
            f,
            "{}:{}:{}: ",
            Escaped(&self.file),
            self.pos.line,
            self.pos.col
        )?;
        if let Some(o) = &self.object {
            write!(f, "{}: ", Escaped(o))?;
        }
        if let Some(p) = &self.path {
            if !p.is_empty() {
                write!(f, "{}: ", Escaped(p))?;
            }
        }
        write!(f, "{}", Escaped(&self.message))
    }
}

/// Collects diagnostics for one object (or one document before it has a name).
#[derive(Debug)]
pub struct Reporter<'a> {
    /// Where the object came from.
    pub origin: &'a Origin,
    /// `Kind ns/name`.
    pub object: Option<String>,
    /// Where messages go.
    pub out: &'a mut Vec<Diagnostic>,
}

impl Reporter<'_> {
    /// Adds a message about a field.
    pub fn push(&mut self, severity: Severity, path: &FieldPath, message: impl Into<String>) {
        self.out.push(Diagnostic {
            severity,
            file: self.origin.file.clone(),
            pos: self.origin.locate(path),
            object: self.object.clone(),
            path: Some(path.to_string()),
            message: message.into(),
            reason: None,
        });
    }

    /// Adds an error about a field.
    pub fn error(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.push(Severity::Error, path, message);
    }

    /// Adds a warning about a field.
    pub fn warn(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.push(Severity::Warning, path, message);
    }

    /// Reports that the object (or, for a field under a gateway's listener or server,
    /// that listener) is not served because of a field.
    pub fn not_served(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.push(Severity::NotServed, path, message);
    }

    /// [`Reporter::not_served`] with the Gateway API condition reason it stands for.
    pub fn not_served_because(
        &mut self,
        path: &FieldPath,
        reason: &'static str,
        message: impl Into<String>,
    ) {
        self.push(Severity::NotServed, path, message);
        if let Some(d) = self.out.last_mut() {
            d.reason = Some(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_round_trip_and_pattern() {
        let p = FieldPath::parse("spec.servers[0].port.number");
        assert_eq!(p.to_string(), "spec.servers[0].port.number");
        assert_eq!(p.pattern(), "spec.servers[].port.number");
        let q = FieldPath::root().key("items").index(3).index(1).key("x");
        assert_eq!(q.to_string(), "items[3][1].x");
        assert_eq!(FieldPath::parse(&q.to_string()), q);
    }

    #[test]
    fn control_bytes_from_input_are_escaped() {
        let d = Diagnostic {
            severity: Severity::Error,
            file: "x\u{7}.yaml".into(),
            pos: Pos { line: 2, col: 3 },
            object: Some("Gateway ns/\u{1b}]0;pwned\u{7}".into()),
            path: Some("spec.listeners[0].hostname".into()),
            message: "bad name \"\u{1b}[2J\r\n\u{9b}31m\t\\x\" (héllo)".into(),
            reason: None,
        };
        assert_eq!(
            d.to_string(),
            "x\\x07.yaml:2:3: Gateway ns/\\x1b]0;pwned\\x07: spec.listeners[0].hostname: \
             bad name \"\\x1b[2J\\r\\n\\u{9b}31m\\t\\x\" (héllo)"
        );
    }

    #[test]
    fn locate_falls_back_to_ancestor() {
        let mut idx = PosIndex::default();
        idx.insert(FieldPath::parse("spec"), Pos { line: 4, col: 1 });
        idx.insert(FieldPath::parse("spec.a"), Pos { line: 5, col: 3 });
        assert_eq!(idx.locate(&FieldPath::parse("spec.a")).line, 5);
        assert_eq!(idx.locate(&FieldPath::parse("spec.b.c")).line, 4);
        assert_eq!(idx.locate(&FieldPath::parse("zzz")).line, 1);
    }
}

/// Why a configuration was rejected: every error and warning found, in order, and what
/// was read (for the summary line).
#[derive(Debug, Default)]
pub struct Diagnostics {
    /// Documents read.
    pub documents: usize,
    /// Every error and warning, in the order found.
    pub list: Vec<Diagnostic>,
}

impl Diagnostics {
    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter().filter(|d| d.is_error())
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter().filter(|d| d.severity == Severity::Warning)
    }

    /// What is left out of the tables.
    pub fn not_served(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter().filter(|d| d.is_not_served())
    }

    /// Each error as a printable line.
    pub fn error_lines(&self) -> Vec<String> {
        self.errors().map(ToString::to_string).collect()
    }

    /// A configuration-level diagnostic (no file or object to point at).
    pub fn config_level(severity: Severity, message: String) -> Diagnostic {
        Diagnostic {
            severity,
            file: "<config>".into(),
            pos: Pos::default(),
            object: None,
            path: None,
            message,
            reason: None,
        }
    }
}
