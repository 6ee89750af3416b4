//! TLS ClientHello parser: SNI, ALPN, supported versions and ECH presence from the first
//! bytes of a TCP stream.
//!
//! [`parse`] takes the bytes received so far on a connection (a contiguous prefix of the
//! stream, starting at its first byte) and says one of: the hello ([`Outcome::Hello`]),
//! not TLS at all ([`Outcome::NotTls`]), a broken hello ([`Outcome::Malformed`], with a
//! precise [`Malformed`] reason), or "need more bytes" ([`Outcome::NeedMore`]). The caller
//! appends what arrives next and calls again; the parser keeps no state between calls.
//!
//! ## Contract
//!
//! - **No panic, no over-read, no allocation**, whatever the input. All reads go through
//!   `Reader`, a cursor that returns `None` instead of reading past its end.
//! - **Monotone**: every verdict other than `NeedMore` depends only on bytes before the
//!   point where it was decided, so once `parse(prefix)` returns a verdict, `parse` of any
//!   longer prefix returns the same verdict. `NeedMore { at_least }` is a lower bound on the
//!   total prefix length at which a verdict can be reached (exact when the hello is known to
//!   end in the current record).
//! - **Bounded**: the hello must be readable within the first [`MAX_HELLO_LEN`] bytes of the
//!   stream, record headers included; otherwise [`Malformed::TooLarge`]. A caller therefore
//!   never buffers more than that.
//!
//! ## What it handles
//!
//! A record spanning several TCP segments (the caller's prefix grows); a ClientHello spread
//! over several handshake records (the `Reader` walks from one record's payload to the
//! next, so even a length field split across two records is read correctly); GREASE
//! (RFC 8701) values in any list (skipped as unknown extension types, filtered out of the
//! reported ALPN and version lists); extensions in any order; padding; bytes after the
//! hello (ignored); Encrypted Client Hello (RFC 9849 extension `0xfe0d`: the outer
//! `server_name` is the public name, and that is what routing uses); an IP literal in
//! `server_name` (RFC 6066 §3 forbids it; reported as [`ServerName::IpLiteral`] and never
//! used for routing); SSLv2-compatible hellos and anything whose first record is not a
//! handshake record with major version 3 ([`Outcome::NotTls`]).
//!
//! ## Zero copy and what is copied
//!
//! - `server_name` is copied once into an inline, lowercased [`HostName`] (at most 253
//!   bytes): lowercasing needs a copy, and a name that straddles two records has no single
//!   slice to borrow.
//! - ALPN protocol names are borrowed from the input (slices) — up to
//!   [`MAX_ALPN_PROTOCOLS`] of them. Only a name that straddles a record boundary (possible
//!   only when the hello spans records) is copied into a small inline pool of 255 bytes.
//!   Protocols beyond those limits are counted but not kept ([`Alpn::is_truncated`]).
//! - Supported versions are kept as up to [`MAX_VERSIONS`] `u16` values.
//!
//! Duplicate extensions are rejected for the extension types this parser interprets
//! (server_name, ALPN, supported_versions, encrypted_client_hello), as RFC 8446 §4.2
//! requires; detecting duplicates of every other type would need a set per hello.

use core::fmt;

use super::name::{HostName, NameError, NameKind, MAX_NAME_LEN};

/// The most stream bytes (record headers included) a ClientHello may take.
pub const MAX_HELLO_LEN: usize = 16 * 1024;

/// How many ALPN protocol names a [`ClientHello`] keeps.
pub const MAX_ALPN_PROTOCOLS: usize = 8;

/// How many (non-GREASE) supported versions a [`ClientHello`] keeps.
pub const MAX_VERSIONS: usize = 8;

/// TLS record header length: type (1), legacy version (2), length (2).
const RECORD_HEADER_LEN: usize = 5;
/// Largest TLSPlaintext fragment (RFC 8446 §5.1).
const MAX_RECORD_PAYLOAD: usize = 1 << 14;
/// Handshake message header: type (1), length (3).
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_TYPE_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// Room in the ALPN pool for names that straddle records.
const ALPN_POOL_LEN: usize = 255;

/// Extension types this parser reads.
mod ext {
    pub const SERVER_NAME: u16 = 0;
    pub const ALPN: u16 = 16;
    pub const SUPPORTED_VERSIONS: u16 = 43;
    pub const ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
}

/// The result of [`parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // by design: no heap allocation on the parse path
pub enum Outcome<'a> {
    /// The prefix is a plausible start of a ClientHello but ends too early.
    NeedMore {
        /// No verdict is possible before the prefix has at least this many bytes.
        at_least: usize,
    },
    /// A complete, well-formed ClientHello.
    Hello(ClientHello<'a>),
    /// The stream does not start with a TLS handshake record (includes SSLv2-style hellos).
    NotTls,
    /// The stream starts like TLS but the hello is broken or too large.
    Malformed(Malformed),
}

/// Why a ClientHello was rejected.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The hello does not end within the first [`MAX_HELLO_LEN`] bytes of the stream.
    TooLarge,
    /// A handshake record of length zero (forbidden by RFC 8446 §5.1).
    EmptyRecord,
    /// A record longer than 2^14 bytes (RFC 8446 §5.1).
    RecordOverflow,
    /// A record after the first, before the hello ended, is not a handshake record; holds
    /// its content type.
    InterleavedRecord(u8),
    /// A record after the first has a major version other than 3.
    RecordVersion,
    /// The first handshake message is not a ClientHello; holds its type.
    NotClientHello(u8),
    /// A field runs past the end of what contains it.
    Truncated(Field),
    /// Bytes are left over at the end of a length-delimited field.
    TrailingBytes(Field),
    /// `legacy_session_id` is longer than 32 bytes.
    SessionIdTooLong,
    /// `cipher_suites` is empty or has an odd length.
    CipherSuites,
    /// `legacy_compression_methods` is empty.
    CompressionMethods,
    /// An extension this parser interprets appears twice; holds its type.
    DuplicateExtension(u16),
    /// The `server_name` extension has an empty list.
    EmptyServerNameList,
    /// The server name list has two `host_name` entries (RFC 6066 §3).
    DuplicateHostName,
    /// A `host_name` entry is empty.
    EmptyHostName,
    /// The ALPN extension has an empty protocol list (RFC 7301 §3.1).
    EmptyAlpnList,
    /// An ALPN protocol name is empty (RFC 7301 §3.1).
    EmptyAlpnProtocol,
    /// `supported_versions` is empty or has an odd length.
    SupportedVersions,
}

/// The part of the ClientHello a [`Malformed::Truncated`] or [`Malformed::TrailingBytes`]
/// refers to.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The ClientHello body as a whole.
    ClientHello,
    /// `legacy_version`.
    LegacyVersion,
    /// `random`.
    Random,
    /// `legacy_session_id`.
    SessionId,
    /// `cipher_suites`.
    CipherSuites,
    /// `legacy_compression_methods`.
    CompressionMethods,
    /// The extensions block.
    Extensions,
    /// One extension's header or body.
    Extension,
    /// The `server_name` extension's list.
    ServerNameList,
    /// One server name entry.
    ServerName,
    /// The ALPN extension's list.
    AlpnList,
    /// One ALPN protocol name.
    AlpnProtocol,
    /// The `supported_versions` extension.
    SupportedVersions,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::TooLarge => write!(f, "hello larger than {MAX_HELLO_LEN} bytes"),
            Malformed::EmptyRecord => f.write_str("empty handshake record"),
            Malformed::RecordOverflow => f.write_str("record longer than 2^14 bytes"),
            Malformed::InterleavedRecord(t) => {
                write!(f, "record of content type {t} inside the hello")
            }
            Malformed::RecordVersion => f.write_str("record major version is not 3"),
            Malformed::NotClientHello(t) => {
                write!(f, "first handshake message has type {t}, not ClientHello")
            }
            Malformed::Truncated(field) => write!(f, "{field:?} runs past its container"),
            Malformed::TrailingBytes(field) => write!(f, "bytes left over after {field:?}"),
            Malformed::SessionIdTooLong => f.write_str("session id longer than 32 bytes"),
            Malformed::CipherSuites => f.write_str("cipher_suites empty or odd length"),
            Malformed::CompressionMethods => f.write_str("compression_methods empty"),
            Malformed::DuplicateExtension(t) => write!(f, "extension {t} appears twice"),
            Malformed::EmptyServerNameList => f.write_str("empty server_name list"),
            Malformed::DuplicateHostName => f.write_str("two host_name entries"),
            Malformed::EmptyHostName => f.write_str("empty host_name"),
            Malformed::EmptyAlpnList => f.write_str("empty ALPN list"),
            Malformed::EmptyAlpnProtocol => f.write_str("empty ALPN protocol name"),
            Malformed::SupportedVersions => f.write_str("supported_versions empty or odd"),
        }
    }
}

/// The `server_name` of a ClientHello as far as routing is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // the name is inline by design: no allocation
pub enum ServerName {
    /// No `server_name` extension, or one without a `host_name` entry.
    Absent,
    /// A valid DNS name, lowercased: the routing name.
    Dns(HostName),
    /// An IP address literal. RFC 6066 §3 forbids it ("Literal IPv4 and IPv6 addresses
    /// are not permitted in HostName"); it is reported but routed as if there were no SNI.
    IpLiteral(core::net::IpAddr),
    /// A `host_name` that is not a DNS name; routed as if there were no SNI.
    Invalid(NameError),
}

impl ServerName {
    /// The name to route on: only a valid DNS name qualifies.
    pub fn routing_name(&self) -> Option<&HostName> {
        match self {
            ServerName::Dns(name) => Some(name),
            _ => None,
        }
    }
}

/// A parsed ClientHello (the fields routing and diagnostics need).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientHello<'a> {
    /// `legacy_version` of the hello body (0x0303 for TLS 1.2 and 1.3 hellos).
    pub legacy_version: u16,
    /// The `server_name` (the outer, public name when ECH is used).
    pub server_name: ServerName,
    /// The ALPN protocol names offered, in order, GREASE values left out.
    pub alpn: Alpn<'a>,
    /// The `supported_versions` offered, in order, GREASE values left out.
    pub supported_versions: Versions,
    /// Whether the `encrypted_client_hello` extension (0xfe0d) is present. Chrome sends it
    /// as GREASE too; either way the routing name is the outer `server_name`.
    pub ech: bool,
    /// How many stream bytes the hello took, from the first record header to the hello's
    /// last byte. Bytes after it belong to whatever follows.
    pub len: usize,
    /// How many TLS records the hello was spread over (1 for almost every client).
    pub records: usize,
}

impl ClientHello<'_> {
    /// The name to route on (see [`ServerName::routing_name`]).
    pub fn routing_name(&self) -> Option<&HostName> {
        self.server_name.routing_name()
    }
}

/// An ALPN protocol name kept by [`Alpn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AlpnSlot<'a> {
    /// Borrowed from the input.
    Input(&'a [u8]),
    /// Copied into the pool (the name straddled two records).
    Pool { start: u8, len: u8 },
}

/// The ALPN protocol names of a ClientHello: up to [`MAX_ALPN_PROTOCOLS`] kept, in order.
///
/// Two lists are equal when they hold the same names in the same order and the client
/// offered as many, wherever the bytes live.
#[derive(Clone)]
pub struct Alpn<'a> {
    slots: [AlpnSlot<'a>; MAX_ALPN_PROTOCOLS],
    kept: u8,
    offered: u16,
    pool: [u8; ALPN_POOL_LEN],
    pool_len: u8,
}

impl<'a> Alpn<'a> {
    const fn empty() -> Self {
        Alpn {
            slots: [AlpnSlot::Input(&[]); MAX_ALPN_PROTOCOLS],
            kept: 0,
            offered: 0,
            pool: [0; ALPN_POOL_LEN],
            pool_len: 0,
        }
    }

    /// The kept protocol names, in the client's order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.slots[..usize::from(self.kept)]
            .iter()
            .map(move |slot| match *slot {
                AlpnSlot::Input(s) => s,
                AlpnSlot::Pool { start, len } => {
                    let start = usize::from(start);
                    self.pool
                        .get(start..start + usize::from(len))
                        .unwrap_or_default()
                }
            })
    }

    /// How many protocol names are kept.
    pub fn len(&self) -> usize {
        usize::from(self.kept)
    }

    /// Whether no protocol names are kept (no ALPN extension, or only GREASE).
    pub fn is_empty(&self) -> bool {
        self.kept == 0
    }

    /// Whether the client offered `protocol`.
    pub fn contains(&self, protocol: &[u8]) -> bool {
        self.iter().any(|p| p == protocol)
    }

    /// Whether the client offered more (non-GREASE) names than are kept.
    pub fn is_truncated(&self) -> bool {
        usize::from(self.offered) > self.len()
    }

    fn push(&mut self, name: Reader<'a>) {
        self.offered = self.offered.saturating_add(1);
        let index = usize::from(self.kept);
        if index >= MAX_ALPN_PROTOCOLS {
            return;
        }
        let slot = if let Some(s) = name.clone().contiguous() {
            AlpnSlot::Input(s)
        } else {
            let start = usize::from(self.pool_len);
            let len = name.remaining();
            let Some(dst) = self.pool.get_mut(start..start + len) else {
                return;
            };
            if name.copy_to(dst).is_none() {
                return;
            }
            // start + len <= ALPN_POOL_LEN = 255, and len <= 255 (u8-prefixed).
            self.pool_len = (start + len) as u8;
            AlpnSlot::Pool {
                start: start as u8,
                len: len as u8,
            }
        };
        self.slots[index] = slot;
        self.kept += 1;
    }
}

impl PartialEq for Alpn<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.offered == other.offered && self.iter().eq(other.iter())
    }
}

impl Eq for Alpn<'_> {}

impl fmt::Debug for Alpn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// The `supported_versions` of a ClientHello: up to [`MAX_VERSIONS`] kept, GREASE left out.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Versions {
    list: [u16; MAX_VERSIONS],
    kept: u8,
    offered: u8,
}

impl Versions {
    /// The kept versions (e.g. 0x0304 for TLS 1.3), in the client's order.
    pub fn as_slice(&self) -> &[u16] {
        &self.list[..usize::from(self.kept)]
    }

    /// Whether the client offered more (non-GREASE) versions than are kept.
    pub fn is_truncated(&self) -> bool {
        self.offered > self.kept
    }

    fn push(&mut self, v: u16) {
        self.offered = self.offered.saturating_add(1);
        if let Some(slot) = self.list.get_mut(usize::from(self.kept)) {
            *slot = v;
            self.kept += 1;
        }
    }
}

impl fmt::Debug for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.as_slice().iter().map(|v| format!("{v:#06x}")))
            .finish()
    }
}

/// Whether `v` is a GREASE value (RFC 8701 §2: `0x?A?A` with both bytes equal).
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// Parses the start of a TCP stream as a TLS ClientHello (see the [module docs](self)).
pub fn parse(input: &[u8]) -> Outcome<'_> {
    match locate(input) {
        Ok(located) => match parse_hello(located) {
            Ok(hello) => Outcome::Hello(hello),
            Err(m) => Outcome::Malformed(m),
        },
        Err(Stop::NeedMore(at_least)) => Outcome::NeedMore { at_least },
        Err(Stop::NotTls) => Outcome::NotTls,
        Err(Stop::Malformed(m)) => Outcome::Malformed(m),
    }
}

/// A verdict reached before the hello is complete (a small [`Outcome`]).
enum Stop {
    NeedMore(usize),
    NotTls,
    Malformed(Malformed),
}

/// Where the hello message lies in the input, once it is all there.
struct Located<'a> {
    /// A reader over the handshake message, header included.
    message: Reader<'a>,
    /// Input bytes up to the hello's last byte.
    end: usize,
    /// Records the message spans.
    records: usize,
}

/// Walks the record layer until the whole ClientHello message is in the input.
///
/// Every verdict is decided on bytes before the position where it is returned, which is
/// what makes [`parse`] monotone.
fn locate(input: &[u8]) -> Result<Located<'_>, Stop> {
    let mut pos = 0usize; // start of the current record header
    let mut gathered = 0usize; // handshake-message bytes seen, in earlier records and this one
    let mut header = [0u8; HANDSHAKE_HEADER_LEN];
    let mut total: Option<usize> = None; // message length including its header
    let mut records = 0usize;
    loop {
        // The record header, byte by byte so that a wrong type or version is seen early.
        let first = records == 0;
        let Some(&content_type) = input.get(pos) else {
            return Err(Stop::NeedMore(pos + 1));
        };
        if content_type != CONTENT_TYPE_HANDSHAKE {
            return Err(if first {
                Stop::NotTls
            } else {
                Stop::Malformed(Malformed::InterleavedRecord(content_type))
            });
        }
        let Some(&major) = input.get(pos + 1) else {
            return Err(Stop::NeedMore(pos + 2));
        };
        if major != 3 {
            return Err(if first {
                Stop::NotTls
            } else {
                Stop::Malformed(Malformed::RecordVersion)
            });
        }
        let Some(len_bytes) = input.get(pos + 3..pos + RECORD_HEADER_LEN) else {
            return Err(Stop::NeedMore(pos + RECORD_HEADER_LEN));
        };
        let record_len = usize::from(u16::from_be_bytes([len_bytes[0], len_bytes[1]]));
        if record_len == 0 {
            return Err(Stop::Malformed(Malformed::EmptyRecord));
        }
        if record_len > MAX_RECORD_PAYLOAD {
            return Err(Stop::Malformed(Malformed::RecordOverflow));
        }
        let payload = pos + RECORD_HEADER_LEN;
        let record_end = payload + record_len;
        let mut p = payload;

        // The handshake message header, possibly split over records.
        while gathered < HANDSHAKE_HEADER_LEN && p < record_end {
            if p >= MAX_HELLO_LEN {
                return Err(Stop::Malformed(Malformed::TooLarge));
            }
            let Some(&b) = input.get(p) else {
                // The type byte alone can decide (not a ClientHello); after it, nothing can
                // be decided before the rest of the header is in.
                let at_least = if gathered == 0 {
                    p + 1
                } else {
                    record_end.min(p + HANDSHAKE_HEADER_LEN - gathered)
                };
                return Err(Stop::NeedMore(at_least));
            };
            if gathered == 0 && b != HANDSHAKE_CLIENT_HELLO {
                return Err(Stop::Malformed(Malformed::NotClientHello(b)));
            }
            header[gathered] = b;
            gathered += 1;
            p += 1;
            if gathered == HANDSHAKE_HEADER_LEN {
                let body = usize::from(header[1]) << 16
                    | usize::from(header[2]) << 8
                    | usize::from(header[3]);
                let t = HANDSHAKE_HEADER_LEN + body;
                // The rest cannot take fewer input bytes than it has message bytes.
                if p + (t - gathered) > MAX_HELLO_LEN {
                    return Err(Stop::Malformed(Malformed::TooLarge));
                }
                total = Some(t);
            }
        }

        if let Some(t) = total {
            let want = (record_end - p).min(t - gathered);
            let end = p + want;
            if end > MAX_HELLO_LEN {
                return Err(Stop::Malformed(Malformed::TooLarge));
            }
            if input.len() < end {
                return Err(Stop::NeedMore(end));
            }
            gathered += want;
            if gathered == t {
                let first_payload = input.get(RECORD_HEADER_LEN..).unwrap_or_default();
                let first_len = first_payload.len().min(first_record_len(input));
                return Ok(Located {
                    message: Reader {
                        cur: first_payload.get(..first_len).unwrap_or_default(),
                        rest: input
                            .get(RECORD_HEADER_LEN + first_len..end)
                            .unwrap_or_default(),
                        left: t,
                    },
                    end,
                    records: records + 1,
                });
            }
        }

        // This record is used up and the message goes on in the next one, which needs a
        // header and at least one payload byte.
        records += 1;
        pos = record_end;
        if pos + RECORD_HEADER_LEN + 1 > MAX_HELLO_LEN {
            return Err(Stop::Malformed(Malformed::TooLarge));
        }
    }
}

/// The first record's declared payload length (the header was validated by [`locate`]).
fn first_record_len(input: &[u8]) -> usize {
    match input.get(3..RECORD_HEADER_LEN) {
        Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
        _ => 0,
    }
}

fn parse_hello(located: Located<'_>) -> Result<ClientHello<'_>, Malformed> {
    use Malformed::Truncated;
    let mut msg = located.message;
    // Type and length were checked by `locate`.
    msg.skip(HANDSHAKE_HEADER_LEN)
        .ok_or(Truncated(Field::ClientHello))?;
    let mut body = msg;

    let legacy_version = body.u16().ok_or(Truncated(Field::LegacyVersion))?;
    body.skip(32).ok_or(Truncated(Field::Random))?;
    let session_id_len = body.u8().ok_or(Truncated(Field::SessionId))?;
    if session_id_len > 32 {
        return Err(Malformed::SessionIdTooLong);
    }
    body.skip(usize::from(session_id_len))
        .ok_or(Truncated(Field::SessionId))?;
    let suites_len = usize::from(body.u16().ok_or(Truncated(Field::CipherSuites))?);
    if suites_len == 0 || suites_len % 2 != 0 {
        return Err(Malformed::CipherSuites);
    }
    body.skip(suites_len)
        .ok_or(Truncated(Field::CipherSuites))?;
    let compression_len = body.u8().ok_or(Truncated(Field::CompressionMethods))?;
    if compression_len == 0 {
        return Err(Malformed::CompressionMethods);
    }
    body.skip(usize::from(compression_len))
        .ok_or(Truncated(Field::CompressionMethods))?;

    let mut hello = ClientHello {
        legacy_version,
        server_name: ServerName::Absent,
        alpn: Alpn::empty(),
        supported_versions: Versions {
            list: [0; MAX_VERSIONS],
            kept: 0,
            offered: 0,
        },
        ech: false,
        len: located.end,
        records: located.records,
    };
    // A hello without an extensions block is legal (RFC 5246 §7.4.1.2).
    if body.is_empty() {
        return Ok(hello);
    }
    let ext_len = usize::from(body.u16().ok_or(Truncated(Field::Extensions))?);
    let mut exts = body.sub(ext_len).ok_or(Truncated(Field::Extensions))?;
    if !body.is_empty() {
        return Err(Malformed::TrailingBytes(Field::ClientHello));
    }

    let mut seen = Seen::default();
    while !exts.is_empty() {
        let typ = exts.u16().ok_or(Truncated(Field::Extension))?;
        let len = usize::from(exts.u16().ok_or(Truncated(Field::Extension))?);
        let data = exts.sub(len).ok_or(Truncated(Field::Extension))?;
        match typ {
            ext::SERVER_NAME => {
                seen.mark(typ, Seen::SERVER_NAME)?;
                hello.server_name = parse_server_name(data)?;
            }
            ext::ALPN => {
                seen.mark(typ, Seen::ALPN)?;
                parse_alpn(data, &mut hello.alpn)?;
            }
            ext::SUPPORTED_VERSIONS => {
                seen.mark(typ, Seen::SUPPORTED_VERSIONS)?;
                parse_versions(data, &mut hello.supported_versions)?;
            }
            ext::ENCRYPTED_CLIENT_HELLO => {
                seen.mark(typ, Seen::ECH)?;
                hello.ech = true;
            }
            // Everything else, GREASE included, is skipped.
            _ => {}
        }
    }
    Ok(hello)
}

/// Which interpreted extensions were seen (for the duplicate check).
#[derive(Default)]
struct Seen(u8);

impl Seen {
    const SERVER_NAME: u8 = 1;
    const ALPN: u8 = 2;
    const SUPPORTED_VERSIONS: u8 = 4;
    const ECH: u8 = 8;

    fn mark(&mut self, typ: u16, bit: u8) -> Result<(), Malformed> {
        if self.0 & bit != 0 {
            return Err(Malformed::DuplicateExtension(typ));
        }
        self.0 |= bit;
        Ok(())
    }
}

/// RFC 6066 §3: `ServerName server_name_list<1..2^16-1>`, each a `name_type` byte and, for
/// `host_name` (0), a `HostName<1..2^16-1>`. Other name types are read as an opaque
/// u16-prefixed value (as rustls does) and ignored.
fn parse_server_name(mut data: Reader<'_>) -> Result<ServerName, Malformed> {
    use Malformed::Truncated;
    let list_len = usize::from(data.u16().ok_or(Truncated(Field::ServerNameList))?);
    let mut list = data.sub(list_len).ok_or(Truncated(Field::ServerNameList))?;
    if !data.is_empty() {
        return Err(Malformed::TrailingBytes(Field::ServerNameList));
    }
    if list.is_empty() {
        return Err(Malformed::EmptyServerNameList);
    }
    let mut result = ServerName::Absent;
    let mut have_host_name = false;
    while !list.is_empty() {
        let name_type = list.u8().ok_or(Truncated(Field::ServerName))?;
        let len = usize::from(list.u16().ok_or(Truncated(Field::ServerName))?);
        let name = list.sub(len).ok_or(Truncated(Field::ServerName))?;
        if name_type != 0 {
            continue;
        }
        if have_host_name {
            return Err(Malformed::DuplicateHostName);
        }
        have_host_name = true;
        if len == 0 {
            return Err(Malformed::EmptyHostName);
        }
        let kind = if let Some(bytes) = name.clone().contiguous() {
            NameKind::classify(bytes)
        } else {
            // The name straddles records: gather it first. One more than the longest
            // name, for an optional trailing dot.
            let mut buf = [0u8; MAX_NAME_LEN + 1];
            match buf.get_mut(..len) {
                None => NameKind::Invalid(NameError::TooLong),
                Some(dst) => {
                    name.copy_to(dst).ok_or(Truncated(Field::ServerName))?;
                    NameKind::classify(dst)
                }
            }
        };
        result = match kind {
            NameKind::Dns(n) => ServerName::Dns(n),
            NameKind::Ip(ip) => ServerName::IpLiteral(ip),
            NameKind::Invalid(e) => ServerName::Invalid(e),
        };
    }
    Ok(result)
}

/// RFC 7301 §3.1: `ProtocolName protocol_name_list<2..2^16-1>`, each `opaque
/// ProtocolName<1..2^8-1>`.
fn parse_alpn<'a>(mut data: Reader<'a>, alpn: &mut Alpn<'a>) -> Result<(), Malformed> {
    use Malformed::Truncated;
    let list_len = usize::from(data.u16().ok_or(Truncated(Field::AlpnList))?);
    let mut list = data.sub(list_len).ok_or(Truncated(Field::AlpnList))?;
    if !data.is_empty() {
        return Err(Malformed::TrailingBytes(Field::AlpnList));
    }
    if list.is_empty() {
        return Err(Malformed::EmptyAlpnList);
    }
    while !list.is_empty() {
        let len = usize::from(list.u8().ok_or(Truncated(Field::AlpnProtocol))?);
        if len == 0 {
            return Err(Malformed::EmptyAlpnProtocol);
        }
        let name = list.sub(len).ok_or(Truncated(Field::AlpnProtocol))?;
        if len == 2 {
            let mut two = name.clone();
            let id = two.u16().ok_or(Truncated(Field::AlpnProtocol))?;
            if is_grease(id) {
                continue;
            }
        }
        alpn.push(name);
    }
    Ok(())
}

/// RFC 8446 §4.2.1: `ProtocolVersion versions<2..254>` in a ClientHello.
fn parse_versions(mut data: Reader<'_>, versions: &mut Versions) -> Result<(), Malformed> {
    use Malformed::Truncated;
    let len = usize::from(data.u8().ok_or(Truncated(Field::SupportedVersions))?);
    if len == 0 || len % 2 != 0 {
        return Err(Malformed::SupportedVersions);
    }
    let mut list = data.sub(len).ok_or(Truncated(Field::SupportedVersions))?;
    if !data.is_empty() {
        return Err(Malformed::TrailingBytes(Field::SupportedVersions));
    }
    while !list.is_empty() {
        let v = list.u16().ok_or(Truncated(Field::SupportedVersions))?;
        if !is_grease(v) {
            versions.push(v);
        }
    }
    Ok(())
}

/// A cursor over the handshake-layer bytes that cannot over-read.
///
/// The bytes it reads are the concatenation of consecutive handshake records' payloads
/// (RFC 8446 §5.1 lets a handshake message span records): `cur` is what is left of the
/// current record's payload, `rest` the input from the next record header on, and `left`
/// how many bytes this reader (or sub-reader) may still read in all. Each read checks
/// `left` and returns `None` rather than reading past it; crossing into the next record
/// skips its 5-byte header. Sub-readers ([`Reader::sub`]) share the same input and
/// cannot read outside their range.
#[derive(Clone, Debug)]
pub(crate) struct Reader<'a> {
    cur: &'a [u8],
    rest: &'a [u8],
    left: usize,
}

impl<'a> Reader<'a> {
    /// A reader over one contiguous slice.
    #[cfg(test)]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader {
            cur: bytes,
            rest: &[],
            left: bytes.len(),
        }
    }

    /// Bytes this reader may still read.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.left
    }

    /// Whether nothing is left to read.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// Moves to the next record's payload once the current one is used up.
    fn refill(&mut self) -> Option<()> {
        while self.cur.is_empty() {
            let header = self.rest.get(..RECORD_HEADER_LEN)?;
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            let end = (RECORD_HEADER_LEN + len).min(self.rest.len());
            self.cur = self.rest.get(RECORD_HEADER_LEN..end)?;
            self.rest = self.rest.get(end..)?;
        }
        Some(())
    }

    /// Reads one byte.
    #[inline]
    pub(crate) fn u8(&mut self) -> Option<u8> {
        if self.left == 0 {
            return None;
        }
        self.refill()?;
        let (&b, tail) = self.cur.split_first()?;
        self.cur = tail;
        self.left -= 1;
        Some(b)
    }

    /// Reads a big-endian u16.
    #[inline]
    pub(crate) fn u16(&mut self) -> Option<u16> {
        if self.left < 2 {
            return None;
        }
        if let Some((&[hi, lo], tail)) = self.cur.split_first_chunk::<2>() {
            self.cur = tail;
            self.left -= 2;
            return Some(u16::from_be_bytes([hi, lo]));
        }
        let hi = self.u8()?;
        let lo = self.u8()?;
        Some(u16::from_be_bytes([hi, lo]))
    }

    /// Skips `n` bytes.
    #[inline]
    pub(crate) fn skip(&mut self, mut n: usize) -> Option<()> {
        if n > self.left {
            return None;
        }
        if let Some(tail) = self.cur.get(n..) {
            // Fast path: within the current record.
            self.cur = tail;
            self.left -= n;
            return Some(());
        }
        while n > 0 {
            self.refill()?;
            let step = n.min(self.cur.len());
            self.cur = self.cur.get(step..)?;
            self.left -= step;
            n -= step;
        }
        Some(())
    }

    /// Splits off the next `n` bytes as a reader of their own and skips them here.
    #[inline]
    pub(crate) fn sub(&mut self, n: usize) -> Option<Reader<'a>> {
        if n > self.left {
            return None;
        }
        if n <= self.cur.len() {
            // Fast path: within the current record.
            let (head, tail) = self.cur.split_at(n);
            self.cur = tail;
            self.left -= n;
            return Some(Reader {
                cur: head,
                rest: &[],
                left: n,
            });
        }
        let mut sub = self.clone();
        sub.left = n;
        self.skip(n)?;
        Some(sub)
    }

    /// All remaining bytes as one slice of the input, if they do not straddle a record
    /// boundary.
    pub(crate) fn contiguous(mut self) -> Option<&'a [u8]> {
        if self.left > 0 {
            self.refill()?;
        }
        self.cur.get(..self.left)
    }

    /// Copies all remaining bytes into `out`, which must be exactly as long.
    pub(crate) fn copy_to(mut self, out: &mut [u8]) -> Option<()> {
        if out.len() != self.left {
            return None;
        }
        let mut filled = 0;
        while filled < out.len() {
            self.refill()?;
            let step = (out.len() - filled).min(self.cur.len());
            out.get_mut(filled..filled + step)?
                .copy_from_slice(self.cur.get(..step)?);
            self.cur = self.cur.get(step..)?;
            filled += step;
        }
        self.left = 0;
        Some(())
    }
}

#[cfg(test)]
mod reader_tests {
    use super::Reader;

    #[test]
    fn cannot_over_read() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Some(0x0102));
        assert_eq!(r.u16(), None, "one byte left, a u16 needs two");
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.skip(2), None);
        assert_eq!(r.sub(2).map(|s| s.remaining()), None);
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.u8(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn reads_across_records() {
        // Payload [1, 2] | header | [3] | header | [4, 5, 6]; the reader covers 5 bytes.
        let rest = [0x16, 3, 1, 0, 1, 3, 0x16, 3, 1, 0, 3, 4, 5, 6];
        let r = Reader {
            cur: &[1, 2],
            rest: &rest,
            left: 5,
        };
        let mut a = r.clone();
        assert_eq!(a.u8(), Some(1));
        assert_eq!(a.u16(), Some(0x0203), "u16 straddling a record boundary");
        assert_eq!(a.u16(), Some(0x0405));
        assert_eq!(a.u8(), None, "limited to 5 bytes although 6 are there");

        let mut b = r.clone();
        let mut sub = b.sub(4).unwrap();
        assert_eq!(b.u8(), Some(5));
        assert!(sub.clone().contiguous().is_none(), "spans three records");
        let mut out = [0u8; 4];
        sub.clone().copy_to(&mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(sub.clone().copy_to(&mut [0u8; 3]), None, "wrong length");
        sub.skip(3).unwrap();
        assert_eq!(
            sub.contiguous(),
            Some(&[4u8][..]),
            "moved into the last record"
        );

        // A sub-reader starting exactly at a boundary is contiguous in the next record.
        let mut c = r.clone();
        c.skip(3).unwrap();
        assert_eq!(c.sub(2).unwrap().contiguous(), Some(&[4u8, 5][..]));
    }
}
