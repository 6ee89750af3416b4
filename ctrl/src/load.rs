//! Loading manifests: files, directories (recursive, `.yaml`/`.yml`/`.json`), `-` for
//! stdin; multi-document YAML; `List` kinds. Every document is parsed with positions
//! kept, so that every later message can name `file:line:col` and the field path.
//!
//! YAML scalars are resolved with the YAML 1.2 core schema (`true`/`false`, `null`/`~`,
//! integers incl. `0x`/`0o`, floats); quoted scalars are always strings; `!!str` forces a
//! string. Anchors and aliases are expanded. Duplicate keys are an error (as in
//! Kubernetes). JSON is read by the same parser (JSON is YAML 1.2 flow syntax).
//!
//! Loading is bounded: what a configuration may cost to read is capped by the limits
//! below ([`MAX_FILE_BYTES`], [`MAX_TOTAL_BYTES`], [`MAX_FILES`], [`MAX_DIR_ENTRIES`],
//! [`MAX_DIR_DEPTH`], [`MAX_DEPTH`], [`MAX_ALIASES`], [`MAX_ALIAS_NODES`]). A
//! configuration over a limit is rejected with an error naming the file (and
//! `line:col` where the parser knows it), never half-read. Directories are walked once
//! each: a symlink back to a directory being walked (`ln -s .. d/up`) is a loop and an
//! error, found by device and inode; a directory reached twice by other links is read
//! once. The file watch ([`crate::sources::FileWatch`]) walks with the same code
//! ([`discover`]), so it is bounded the same way.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

use crate::diag::{Diagnostic, FieldPath, Origin, Pos, PosIndex, Reporter, Severity};
use crate::model::{self, Decoded, Object};

/// Deepest nesting of sequences and mappings in a document; deeper is rejected (the
/// builder recurses once a level).
pub const MAX_DEPTH: usize = 128;

/// Largest manifest file read, in bytes (16 MiB; a Kubernetes object is at most 1.5 MiB
/// in etcd). Also the most read from stdin.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Most bytes read from all manifest files of one load together (64 MiB).
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;

/// Most manifest files read in one load.
pub const MAX_FILES: usize = 10_000;

/// Most directory entries looked at in one load (manifests or not), so a huge directory
/// cannot make a load, or each poll of the file watch, unbounded.
pub const MAX_DIR_ENTRIES: usize = 100_000;

/// Deepest directory below a directory named on the command line (`-c dir`: `dir/a/b`
/// is depth 2).
pub const MAX_DIR_DEPTH: usize = 16;

/// Most aliases (`*name`) in one load (all files together): each alias copies its
/// anchor's nodes, so aliases of aliases grow exponentially ("billion laughs").
pub const MAX_ALIASES: usize = 10_000;

/// Most nodes (scalars, sequences and mappings) that expanding aliases may add in one
/// load (all files together). Nodes written out in a file are bounded by the file size.
pub const MAX_ALIAS_NODES: usize = 100_000;

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
    /// What this load has spent of its limits so far.
    pub budget: Budget,
}

/// What one load has spent of its limits (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes read from files (and stdin).
    pub bytes: u64,
    /// Aliases expanded.
    pub aliases: usize,
    /// Nodes added by expanding aliases.
    pub alias_nodes: usize,
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
    let mut walk = Walk::default();
    for p in paths {
        if p.as_os_str() == "-" {
            match read_bounded(std::io::stdin().lock(), loaded.budget.bytes) {
                Ok(text) => load_str("<stdin>", &text, &mut loaded),
                Err(e) => file_error(&mut loaded, "<stdin>", e),
            }
            continue;
        }
        walk.path(p);
    }
    for (path, message) in &walk.errors {
        file_error(&mut loaded, &path.display().to_string(), message.clone());
    }
    if !walk.errors.is_empty() {
        // A configuration cut short by a limit or a loop is not the configuration.
        return loaded;
    }
    for p in walk.files {
        load_file(&p, &mut loaded);
    }
    loaded
}

/// Every manifest file `paths` name, as [`load_paths`] would read them (stdin, `-`,
/// skipped), and the errors met on the way (a limit, a symlink loop, a directory that
/// cannot be read). Bounded by [`MAX_FILES`], [`MAX_DIR_ENTRIES`] and [`MAX_DIR_DEPTH`].
pub fn discover(paths: &[PathBuf]) -> Discovery {
    let mut walk = Walk::default();
    for p in paths.iter().filter(|p| p.as_os_str() != "-") {
        walk.path(p);
    }
    Discovery {
        files: walk.files,
        errors: walk.errors,
    }
}

/// What [`discover`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Manifest files, in load order.
    pub files: Vec<PathBuf>,
    /// Errors, each with the path it is about.
    pub errors: Vec<(PathBuf, String)>,
}

/// The directory walk shared by the loader and the file watch.
#[derive(Debug, Default)]
struct Walk {
    /// Files to read, in order.
    files: Vec<PathBuf>,
    errors: Vec<(PathBuf, String)>,
    /// Directories walked, by device and inode.
    seen: HashSet<(u64, u64)>,
    /// The directories being walked, outermost first (device, inode, path).
    ancestors: Vec<(u64, u64, PathBuf)>,
    entries: usize,
    /// A limit was hit: walk no further.
    stopped: bool,
}

impl Walk {
    fn path(&mut self, p: &Path) {
        self.visit(p, true, 0);
    }

    fn fail(&mut self, p: &Path, message: String) {
        self.errors.push((p.to_path_buf(), message));
    }

    fn stop(&mut self, p: &Path, message: String) {
        self.fail(p, message);
        self.stopped = true;
    }

    fn visit(&mut self, p: &Path, explicit: bool, depth: usize) {
        if self.stopped {
            return;
        }
        // `metadata` follows symlinks: a link to a directory is walked as one.
        let meta = match std::fs::metadata(p) {
            Ok(m) => m,
            // Missing or dangling: reading it reports why (for explicit paths and
            // manifest-named entries alike).
            Err(_) => return self.file(p, explicit),
        };
        if !meta.is_dir() {
            if !explicit && !meta.file_type().is_file() {
                if is_manifest_file(p) {
                    let what = file_kind(&meta.file_type());
                    self.fail(p, format!("{what}, not a regular file; not read"));
                }
                return;
            }
            return self.file(p, explicit);
        }
        let id = (meta.dev(), meta.ino());
        if let Some((.., outer)) = self.ancestors.iter().find(|(d, i, _)| (*d, *i) == id) {
            let message = format!(
                "symlink loop: this is directory {} again (same device and inode); \
                 remove the link",
                outer.display()
            );
            return self.fail(p, message);
        }
        if !self.seen.insert(id) {
            return; // reached again by another link: read once
        }
        if depth > MAX_DIR_DEPTH {
            return self.stop(
                p,
                format!("directories nested deeper than MAX_DIR_DEPTH ({MAX_DIR_DEPTH})"),
            );
        }
        let rd = match std::fs::read_dir(p) {
            Ok(rd) => rd,
            Err(e) => return self.fail(p, format!("cannot read directory: {e}")),
        };
        let mut entries = Vec::new();
        for e in rd {
            self.entries += 1;
            if self.entries > MAX_DIR_ENTRIES {
                return self.stop(
                    p,
                    format!("more than MAX_DIR_ENTRIES ({MAX_DIR_ENTRIES}) directory entries"),
                );
            }
            match e {
                Ok(e) => entries.push(e.path()),
                Err(e) => return self.fail(p, format!("cannot read directory: {e}")),
            }
        }
        entries.sort();
        self.ancestors.push((id.0, id.1, p.to_path_buf()));
        for e in entries {
            let hidden = e
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if !hidden && (e.is_dir() || is_manifest_file(&e)) {
                self.visit(&e, false, depth + 1);
            }
        }
        self.ancestors.pop();
    }

    fn file(&mut self, p: &Path, explicit: bool) {
        if !explicit && !is_manifest_file(p) {
            return;
        }
        if self.files.len() >= MAX_FILES {
            return self.stop(
                p,
                format!("more than MAX_FILES ({MAX_FILES}) manifest files"),
            );
        }
        self.files.push(p.to_path_buf());
    }
}

fn file_kind(t: &std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Reads at most [`MAX_FILE_BYTES`] (and what is left of [`MAX_TOTAL_BYTES`] after
/// `spent`) as UTF-8 text; more is an error, not a truncation.
fn read_bounded(r: impl Read, spent: u64) -> Result<String, String> {
    let room = MAX_FILE_BYTES.min(MAX_TOTAL_BYTES.saturating_sub(spent));
    let mut bytes = Vec::new();
    r.take(room + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > room {
        return Err(if room < MAX_FILE_BYTES {
            format!(
                "the configuration is larger than MAX_TOTAL_BYTES ({MAX_TOTAL_BYTES} bytes) in all"
            )
        } else {
            format!("larger than MAX_FILE_BYTES ({MAX_FILE_BYTES} bytes)")
        });
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

fn file_error(loaded: &mut Loaded, file: &str, message: String) {
    loaded.diagnostics.push(Diagnostic {
        severity: Severity::Error,
        file: file.into(),
        pos: Pos { line: 1, col: 1 },
        object: None,
        path: None,
        message,
        reason: None,
    });
}

fn is_manifest_file(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

fn load_file(p: &Path, loaded: &mut Loaded) {
    let name = p.display().to_string();
    let text = std::fs::File::open(p)
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|f| read_bounded(f, loaded.budget.bytes));
    match text {
        Err(e) => file_error(loaded, &name, e),
        Ok(text) => {
            loaded.budget.bytes += text.len() as u64;
            load_str(&name, &text, loaded)
        }
    }
}

/// Loads the documents of one text (a file's contents) into `loaded`.
pub fn load_str(file: &str, text: &str, loaded: &mut Loaded) {
    let file: Arc<str> = file.into();
    let docs = match parse_documents_within(text, &mut loaded.budget) {
        Ok(d) => d,
        Err((pos, message)) => {
            loaded.diagnostics.push(Diagnostic {
                severity: Severity::Error,
                file,
                pos,
                object: None,
                path: None,
                message,
                reason: None,
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
        Decoded::NotServed(why) => {
            rep.object = object_label_of(value);
            rep.not_served(&base.key("kind"), why);
        }
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
            for (p, effect) in unimplemented {
                match effect {
                    model::Effect::Tunes => rep.warn(
                        &rebase(&p),
                        "upstream field not implemented by sluice; ignored (it only tunes \
                         behaviour)",
                    ),
                    model::Effect::Redirects => rep.not_served(
                        &rebase(&p),
                        format!(
                            "upstream field `{}` is not implemented by sluice, and ignoring it \
                             would serve traffic wider or elsewhere",
                            last_key(&p)
                        ),
                    ),
                }
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
    parse_documents_within(text, &mut Budget::default())
}

/// [`parse_documents`], spending from `budget` (aliases against [`MAX_ALIASES`] and
/// [`MAX_ALIAS_NODES`]).
pub fn parse_documents_within(
    text: &str,
    budget: &mut Budget,
) -> Result<Vec<(Value, PosIndex)>, (Pos, String)> {
    let mut b = Builder {
        parser: Parser::new_from_str(text),
        anchors: Vec::new(),
        nodes: 0,
        budget,
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

struct Builder<'a, 'b> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    /// Anchors: id, value, and the nodes it holds (what an alias of it costs).
    anchors: Vec<(usize, Value, usize)>,
    /// Nodes built so far (written out and expanded).
    nodes: usize,
    budget: &'b mut Budget,
}

impl<'a> Builder<'a, '_> {
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
        let nodes_before = self.nodes;
        self.nodes += 1;
        let (value, anchor) = match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let force_str = tag
                    .as_ref()
                    .is_some_and(|t| t.handle == "tag:yaml.org,2002:" && t.suffix == "str");
                (scalar(&text, style, force_str), anchor)
            }
            Event::Alias(id) => {
                let (v, size) = self
                    .anchors
                    .iter()
                    .rev()
                    .find(|(a, _, _)| *a == id)
                    .map(|(_, v, size)| (v, *size))
                    .ok_or_else(|| (pos(&span), "alias to an unknown anchor".to_string()))?;
                // Count before copying: the copy is what costs.
                self.budget.aliases += 1;
                if self.budget.aliases > MAX_ALIASES {
                    return Err((
                        pos(&span),
                        format!("more than MAX_ALIASES ({MAX_ALIASES}) aliases"),
                    ));
                }
                self.budget.alias_nodes = self.budget.alias_nodes.saturating_add(size);
                if self.budget.alias_nodes > MAX_ALIAS_NODES {
                    return Err((
                        pos(&span),
                        format!(
                            "aliases expand to more than MAX_ALIAS_NODES ({MAX_ALIAS_NODES}) nodes"
                        ),
                    ));
                }
                let v = v.clone();
                self.nodes = self.nodes.saturating_add(size - 1);
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
            let size = self.nodes - nodes_before;
            self.anchors.push((anchor, value.clone(), size));
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

    /// Nine levels of nine aliases: 9^9 scalars if expanded ("billion laughs").
    pub(crate) const ALIAS_BOMB: &str = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
";

    #[test]
    fn alias_expansion_is_bounded() {
        let err = parse_documents(ALIAS_BOMB).expect_err("a bomb");
        assert!(err.1.contains("MAX_ALIAS_NODES"), "{err:?}");
        // The alias that crossed the limit: 10 per level of 11 nodes up to `e` (11+99+
        // 99*9+...), so it is on line 6 (`f`), which costs 9 * 7381 nodes.
        assert_eq!(err.0.line, 6, "{err:?}");
        // Many cheap aliases hit the count limit.
        let mut text = String::from("a: &a 1\nb: [");
        text.push_str(&"*a,".repeat(MAX_ALIASES + 1));
        text.push_str("]\n");
        let err = parse_documents(&text).expect_err("too many aliases");
        assert!(err.1.contains("MAX_ALIASES"), "{err:?}");
        assert_eq!(err.0.line, 2);
        // The budget is per load: two files of half the aliases each pass, a third fails.
        let mut half = String::from("a: &a 1\nb: [");
        half.push_str(&"*a,".repeat(MAX_ALIASES / 2));
        half.push_str("]\n");
        let mut loaded = Loaded::default();
        load_str("1.yaml", &half, &mut loaded);
        load_str("2.yaml", &half, &mut loaded);
        let limit = |l: &Loaded| l.diagnostics.iter().any(|d| d.message.contains("MAX_"));
        assert!(!limit(&loaded), "{:?}", loaded.diagnostics);
        assert_eq!(loaded.budget.aliases, MAX_ALIASES / 2 * 2);
        load_str("3.yaml", &half, &mut loaded);
        assert!(loaded
            .diagnostics
            .iter()
            .any(|d| d.is_error() && &*d.file == "3.yaml" && d.message.contains("MAX_ALIASES")));
    }

    #[test]
    fn directory_walk_is_bounded_and_finds_symlink_loops() {
        let d = crate::sources::testing::Scratch::new("load-walk");
        let conf = d.0.join("conf");
        std::fs::create_dir_all(conf.join("sub")).expect("mkdir");
        std::fs::write(conf.join("a.yaml"), "x: 1\n").expect("write");
        std::fs::write(conf.join("sub/b.yaml"), "x: 2\n").expect("write");
        // Another link to a directory already walked is read once, not twice.
        std::os::unix::fs::symlink("sub", conf.join("again")).expect("ln");
        let found = discover(std::slice::from_ref(&conf));
        assert!(found.errors.is_empty(), "{found:?}");
        assert_eq!(found.files.len(), 2, "{found:?}");

        // `ln -s .. conf/sub/up`: a loop, reported at the link, walked once.
        std::os::unix::fs::symlink("..", conf.join("sub/up")).expect("ln");
        let found = discover(std::slice::from_ref(&conf));
        assert_eq!(found.errors.len(), 1, "{found:?}");
        let (at, why) = &found.errors[0];
        assert!(at.ends_with("up"), "{at:?}");
        assert!(why.contains("symlink loop"), "{why}");
        let loaded = load_paths(std::slice::from_ref(&conf));
        assert!(loaded.has_errors());
        assert!(loaded.diagnostics[0].to_string().contains("symlink loop"));

        // Too deep.
        let mut deep = d.0.join("deep");
        for i in 0..=MAX_DIR_DEPTH + 1 {
            deep = deep.join(format!("{i}"));
        }
        std::fs::create_dir_all(&deep).expect("mkdir");
        let found = discover(&[d.0.join("deep")]);
        assert!(found.errors[0].1.contains("MAX_DIR_DEPTH"), "{found:?}");
    }

    #[test]
    fn file_size_is_bounded() {
        let d = crate::sources::testing::Scratch::new("load-size");
        let big = d.0.join("big.yaml");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(MAX_FILE_BYTES + 1).expect("sparse file");
        let loaded = load_paths(std::slice::from_ref(&big));
        let e = loaded.diagnostics[0].to_string();
        assert!(e.starts_with(&format!("{}:1:1", big.display())), "{e}");
        assert!(e.contains("MAX_FILE_BYTES"), "{e}");
        // A file that is not a regular file is not opened (a FIFO would block).
        let fifo = d.0.join("pipe.yaml");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success()));
        let loaded = load_paths(std::slice::from_ref(&d.0));
        assert!(loaded
            .diagnostics
            .iter()
            .any(|d| d.to_string().contains("a FIFO, not a regular file")));
    }

    #[test]
    fn tab_indented_json_parses() {
        let d = parse_documents("{\n\t\"a\": {\n\t\t\"b\": 1\n\t}\n}\n").expect("parses");
        assert_eq!(d[0].0["a"]["b"], Value::from(1));
    }
}
