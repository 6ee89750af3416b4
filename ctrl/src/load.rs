//! Loading manifests: files, directories (recursive, `.yaml`/`.yml`/`.json`), `-` for
//! stdin; multi-document YAML; `List` kinds. Every document is parsed with positions
//! kept, so that every later message can name `file:line:col` and the field path.
//!
//! YAML scalars are resolved with the YAML 1.2 core schema (`true`/`false`, `null`/`~`,
//! integers incl. `0x`/`0o`, floats); quoted scalars are always strings; `!!str` forces a
//! string. Anchors and aliases are expanded. Duplicate keys are an error (as in
//! Kubernetes). JSON is read by the same parser (JSON is YAML 1.2 flow syntax).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

use crate::diag::{Diagnostic, FieldPath, Origin, Pos, PosIndex, Reporter, Severity};
use crate::model::{self, Decoded, Object};

/// Nesting deeper than this is rejected (protects the recursive builder).
const MAX_DEPTH: usize = 128;

/// A decoded object and where it came from.
#[derive(Debug, Clone)]
pub struct Item {
    /// The object.
    pub object: Object,
    /// Its file and node positions.
    pub origin: Origin,
    /// Path of the object inside its document (`items[3]` for List members, else root).
    pub base: FieldPath,
}

impl Item {
    /// A reporter for messages about this object.
    pub fn reporter<'a>(&'a self, out: &'a mut Vec<Diagnostic>) -> Reporter<'a> {
        Reporter {
            origin: &self.origin,
            object: Some(self.object.label()),
            out,
        }
    }

    /// A path inside this object (prefixed with its place in a List).
    pub fn path(&self, rel: &str) -> FieldPath {
        let mut p = self.base.clone();
        p.0.extend(FieldPath::parse(rel).0);
        p
    }
}

/// Everything loaded from a set of sources.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Decoded objects, in source order.
    pub items: Vec<Item>,
    /// Errors and warnings found while loading.
    pub diagnostics: Vec<Diagnostic>,
    /// Documents read (including skipped and failed ones).
    pub documents: usize,
}

impl Loaded {
    /// Whether any error was found.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Loads every source (a file, a directory, or `-` for stdin).
pub fn load_paths(paths: &[PathBuf]) -> Loaded {
    let mut loaded = Loaded::default();
    for p in paths {
        if p.as_os_str() == "-" {
            let mut text = String::new();
            match std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
                Ok(_) => load_str("<stdin>", &text, &mut loaded),
                Err(e) => file_error(&mut loaded, "<stdin>", format!("cannot read: {e}")),
            }
        } else {
            load_path(p, true, &mut loaded);
        }
    }
    loaded
}

fn file_error(loaded: &mut Loaded, file: &str, message: String) {
    loaded.diagnostics.push(Diagnostic {
        severity: Severity::Error,
        file: file.into(),
        pos: Pos { line: 1, col: 1 },
        object: None,
        path: None,
        message,
    });
}

fn is_manifest_file(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

fn load_path(p: &Path, explicit: bool, loaded: &mut Loaded) {
    let name = p.display().to_string();
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(p) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => return file_error(loaded, &name, format!("cannot read directory: {e}")),
        };
        entries.sort();
        for e in entries {
            let hidden = e
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            if e.is_dir() || is_manifest_file(&e) {
                load_path(&e, false, loaded);
            }
        }
        return;
    }
    if !explicit && !is_manifest_file(p) {
        return;
    }
    match std::fs::read(p) {
        Err(e) => file_error(loaded, &name, format!("cannot read: {e}")),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => load_str(&name, &text, loaded),
            Err(_) => file_error(loaded, &name, "not UTF-8 text".into()),
        },
    }
}

/// Loads the documents of one text (a file's contents) into `loaded`.
pub fn load_str(file: &str, text: &str, loaded: &mut Loaded) {
    let file: Arc<str> = file.into();
    let docs = match parse_documents(text) {
        Ok(d) => d,
        Err((pos, message)) => {
            loaded.diagnostics.push(Diagnostic {
                severity: Severity::Error,
                file,
                pos,
                object: None,
                path: None,
                message,
            });
            return;
        }
    };
    for (value, positions) in docs {
        loaded.documents += 1;
        let origin = Origin {
            file: file.clone(),
            positions: Arc::new(positions),
        };
        decode_into(&value, FieldPath::root(), &origin, loaded);
    }
}

fn decode_into(value: &Value, base: FieldPath, origin: &Origin, loaded: &mut Loaded) {
    let mut rep = Reporter {
        origin,
        object: None,
        out: &mut loaded.diagnostics,
    };
    let rebase = |p: &FieldPath| {
        let mut full = base.clone();
        full.0.extend(p.0.iter().cloned());
        full
    };
    match model::decode(value) {
        Decoded::List(items) => {
            for (i, item) in items.iter().enumerate() {
                decode_into(item, base.key("items").index(i), origin, loaded);
            }
        }
        Decoded::Skipped(why) => rep.warn(&base, format!("skipped: {why}")),
        Decoded::Error(path, message) => {
            rep.object = object_label_of(value);
            rep.error(&rebase(&path), message);
        }
        Decoded::Object {
            object,
            unimplemented,
            unknown,
        } => {
            rep.object = Some(object.label());
            for p in unimplemented {
                rep.warn(
                    &rebase(&p),
                    "upstream field not implemented by sluice; ignored",
                );
            }
            for p in unknown {
                rep.error(
                    &rebase(&p),
                    format!(
                        "unknown field `{}` (no such field upstream; misspelt?)",
                        last_key(&p)
                    ),
                );
            }
            loaded.items.push(Item {
                object: *object,
                origin: origin.clone(),
                base,
            });
        }
    }
}

fn last_key(p: &FieldPath) -> String {
    match p.0.last() {
        Some(crate::diag::Seg::Key(k)) => k.clone(),
        Some(crate::diag::Seg::Index(i)) => format!("[{i}]"),
        None => String::new(),
    }
}

/// `Kind ns/name` from a raw document, for errors raised before it is typed.
fn object_label_of(v: &Value) -> Option<String> {
    let kind = v.get("kind")?.as_str()?;
    let meta = v.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    match meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
    {
        Some(ns) => Some(format!("{kind} {ns}/{name}")),
        None => Some(format!("{kind} {name}")),
    }
}

fn pos(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        col: span.start.col() + 1,
    }
}

/// Parses a multi-document YAML/JSON text into values with node positions.
pub fn parse_documents(text: &str) -> Result<Vec<(Value, PosIndex)>, (Pos, String)> {
    let mut b = Builder {
        parser: Parser::new_from_str(text),
        anchors: Vec::new(),
    };
    let mut docs = Vec::new();
    loop {
        let (ev, span) = b.next()?;
        match ev {
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                let mut index = PosIndex::default();
                let (ev, span) = b.next()?;
                if matches!(ev, Event::DocumentEnd) {
                    docs.push((Value::Null, index));
                    continue;
                }
                let v = b.node(ev, span, &FieldPath::root(), &mut index, 0)?;
                docs.push((v, index));
            }
            other => return Err((pos(&span), format!("unexpected YAML event {other:?}"))),
        }
    }
    // A bare `---` separator with nothing after it yields an empty document: drop those.
    Ok(docs
        .into_iter()
        .filter(|(v, _)| !v.is_null())
        .collect::<Vec<_>>())
}

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: Vec<(usize, Value)>,
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), (Pos, String)> {
        match self.parser.next_event() {
            Some(Ok(e)) => Ok(e),
            Some(Err(e)) => Err((
                Pos {
                    line: e.marker().line(),
                    col: e.marker().col() + 1,
                },
                format!("YAML syntax error: {}", e.info()),
            )),
            None => Err((Pos::default(), "unexpected end of input".into())),
        }
    }

    fn node(
        &mut self,
        ev: Event<'a>,
        span: Span,
        path: &FieldPath,
        index: &mut PosIndex,
        depth: usize,
    ) -> Result<Value, (Pos, String)> {
        if depth > MAX_DEPTH {
            return Err((
                pos(&span),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        index.insert(path.clone(), pos(&span));
        let (value, anchor) = match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let force_str = tag
                    .as_ref()
                    .is_some_and(|t| t.handle == "tag:yaml.org,2002:" && t.suffix == "str");
                (scalar(&text, style, force_str), anchor)
            }
            Event::Alias(id) => {
                let v = self
                    .anchors
                    .iter()
                    .rev()
                    .find(|(a, _)| *a == id)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| (pos(&span), "alias to an unknown anchor".to_string()))?;
                (v, 0)
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    let (ev, sp) = self.next()?;
                    if matches!(ev, Event::SequenceEnd) {
                        break;
                    }
                    let p = path.index(items.len());
                    items.push(self.node(ev, sp, &p, index, depth + 1)?);
                }
                (Value::Array(items), anchor)
            }
            Event::MappingStart(anchor, _) => {
                let mut map = Map::new();
                loop {
                    let (ev, sp) = self.next()?;
                    let key = match ev {
                        Event::MappingEnd => break,
                        Event::Scalar(k, ..) => k.into_owned(),
                        _ => {
                            return Err((
                                pos(&sp),
                                "only scalar mapping keys are supported".to_string(),
                            ))
                        }
                    };
                    if map.contains_key(&key) {
                        return Err((pos(&sp), format!("duplicate key `{key}`")));
                    }
                    let p = path.key(&key);
                    index.insert(p.clone(), pos(&sp));
                    let (ev, vsp) = self.next()?;
                    let v = self.node(ev, vsp, &p, index, depth + 1)?;
                    if key == "<<" {
                        // YAML merge key: fold the referenced mapping(s) in, own keys win.
                        for m in match v {
                            Value::Array(a) => a,
                            other => vec![other],
                        } {
                            if let Value::Object(o) = m {
                                for (k, v) in o {
                                    map.entry(k).or_insert(v);
                                }
                            }
                        }
                        continue;
                    }
                    map.insert(key, v);
                }
                (Value::Object(map), anchor)
            }
            other => return Err((pos(&span), format!("unexpected YAML event {other:?}"))),
        };
        if anchor != 0 {
            self.anchors.push((anchor, value.clone()));
        }
        Ok(value)
    }
}

/// Resolves a scalar with the YAML 1.2 core schema.
fn scalar(text: &str, style: ScalarStyle, force_str: bool) -> Value {
    if force_str || style != ScalarStyle::Plain {
        return Value::String(text.to_string());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(n) = parse_int(text) {
        return Value::Number(n.into());
    }
    if is_float(text) {
        if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_string())
}

fn parse_int(t: &str) -> Option<i64> {
    if let Some(h) = t.strip_prefix("0x") {
        return i64::from_str_radix(h, 16).ok();
    }
    if let Some(o) = t.strip_prefix("0o") {
        return i64::from_str_radix(o, 8).ok();
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn is_float(t: &str) -> bool {
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mantissa_ok = {
        let (int, frac) = match mantissa.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (mantissa, None),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        digits(int)
            && frac.is_none_or(digits)
            && (!int.is_empty() || frac.is_some_and(|f| !f.is_empty()))
    };
    let exp_ok = exp.is_none_or(|e| {
        let d = e.strip_prefix(['-', '+']).unwrap_or(e);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    });
    mantissa_ok && exp_ok && (mantissa.contains('.') || exp.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> (Value, PosIndex) {
        let mut d = parse_documents(text).expect("parses");
        assert_eq!(d.len(), 1);
        d.remove(0)
    }

    #[test]
    fn scalars_follow_core_schema() {
        let (v, _) = one("a: 1\nb: '1'\nc: true\nd: ~\ne: 1.5\nf: 0x1f\ng: 80/TCP\nh: !!str 7\n");
        assert_eq!(v["a"], Value::from(1));
        assert_eq!(v["b"], Value::from("1"));
        assert_eq!(v["c"], Value::from(true));
        assert_eq!(v["d"], Value::Null);
        assert_eq!(v["e"], Value::from(1.5));
        assert_eq!(v["f"], Value::from(31));
        assert_eq!(v["g"], Value::from("80/TCP"));
        assert_eq!(v["h"], Value::from("7"));
    }

    #[test]
    fn positions_point_at_keys_and_items() {
        let (_, idx) = one("kind: X\nspec:\n  servers:\n  - port:\n      number: 80\n");
        let at = |p: &str| idx.locate(&FieldPath::parse(p));
        assert_eq!(at("spec"), Pos { line: 2, col: 1 });
        assert_eq!(at("spec.servers[0]"), Pos { line: 4, col: 5 });
        assert_eq!(at("spec.servers[0].port.number"), Pos { line: 5, col: 7 });
    }

    #[test]
    fn multi_document_json_anchors_and_duplicates() {
        let d = parse_documents("---\na: 1\n---\n---\n{\"b\": [1, 2]}\n").expect("parses");
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].0["b"][1], Value::from(2));
        let (v, _) = one("x: &a {p: 1}\ny: *a\nz:\n  <<: *a\n  q: 2\n");
        assert_eq!(v["y"]["p"], Value::from(1));
        assert_eq!(v["z"]["p"], Value::from(1));
        let err = parse_documents("a: 1\na: 2\n").expect_err("duplicate");
        assert_eq!(err.0.line, 2);
        assert!(err.1.contains("duplicate key"));
    }

    #[test]
    fn tab_indented_json_parses() {
        let d = parse_documents("{\n\t\"a\": {\n\t\t\"b\": 1\n\t}\n}\n").expect("parses");
        assert_eq!(d[0].0["a"]["b"], Value::from(1));
    }
}
