//! Where a message body ends: a byte counter for `Content-Length`, a state machine for
//! the chunked coding (RFC 9112 §7.1). The bytes themselves are forwarded unchanged.
//!
//! The chunked machine reads one byte at a time outside chunk data (which it skips in one
//! step), so any split of the stream gives the same result. Every line it has to read is
//! bounded: a chunk size of at most [`MAX_SIZE_DIGITS`] hex digits, a chunk-size line
//! (size and extensions) of at most [`MAX_CHUNK_LINE`] bytes, a trailer section of at
//! most [`MAX_TRAILER`] bytes. Lines end in CRLF exactly; a bare LF or CR, whitespace
//! after the size not followed by `;`, data not followed by CRLF, obsolete line folding
//! or a control character in a trailer line is [`BodyError::BadChunk`].

use super::Framing;

/// The most hex digits of a chunk size (leading zeros included): 16 hold a `u64`.
pub const MAX_SIZE_DIGITS: u32 = 16;
/// The most bytes of a chunk-size line before its CRLF (size and extensions).
pub const MAX_CHUNK_LINE: u32 = 4 * 1024;
/// The most bytes of the trailer section (its lines with their CRLFs and the final CRLF).
pub const MAX_TRAILER: u32 = 16 * 1024;

/// Why a chunked body was rejected; the connection cannot be used further.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum BodyError {
    /// The chunked framing is not valid syntax.
    #[error("invalid chunked framing")]
    BadChunk,
    /// A chunk size, chunk-size line or trailer section over its bound.
    #[error("chunk size, chunk extensions or trailers too long")]
    ChunkTooLarge,
}

/// Where a message body ends, fed the stream piece by piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    state: State,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Done,
    Failed(BodyError),
    Length(u64),
    UntilClose,
    /// In the hex digits of a chunk size (`digits` read so far).
    Size {
        size: u64,
        digits: u32,
    },
    /// Whitespace after the size: a `;` must follow.
    SizeSpace {
        size: u64,
        line: u32,
    },
    /// In the chunk extensions, up to CR.
    Ext {
        size: u64,
        line: u32,
    },
    /// CR of the chunk-size line seen.
    SizeLf {
        size: u64,
    },
    /// In chunk data, this many bytes left.
    Data(u64),
    /// Chunk data read: CR expected.
    DataCr,
    /// CR after chunk data: LF expected.
    DataLf,
    /// At the start of a trailer line or of the final empty line.
    TrailerStart {
        total: u32,
    },
    /// In a trailer field name.
    TrailerName {
        total: u32,
    },
    /// In a trailer field value, up to CR.
    TrailerValue {
        total: u32,
    },
    /// CR of a trailer line seen.
    TrailerLf {
        total: u32,
    },
    /// CR of the final empty line seen.
    EndLf,
}

impl Body {
    /// A body delimited as `framing` says. [`Framing::None`] and `Length(0)` are done at
    /// once; [`Framing::UntilClose`] never is (the connection's close ends it).
    pub fn new(framing: Framing) -> Body {
        let state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size { size: 0, digits: 0 },
            Framing::UntilClose => State::UntilClose,
        };
        Body { state }
    }

    /// Feeds the next bytes of the stream after the head (or after what earlier calls
    /// consumed). Returns how many of them belong to this message (they are forwarded
    /// unchanged, chunk framing and trailers included) and whether the message ended at
    /// that point. Once done, it takes nothing more; once failed, it fails again.
    pub fn advance(&mut self, bytes: &[u8]) -> Result<(usize, bool), BodyError> {
        match self.state {
            State::Done => Ok((0, true)),
            State::Failed(e) => Err(e),
            State::UntilClose => Ok((bytes.len(), false)),
            State::Length(left) => {
                let take = usize::try_from(left).map_or(bytes.len(), |l| l.min(bytes.len()));
                let left = left.saturating_sub(take as u64);
                self.state = if left == 0 {
                    State::Done
                } else {
                    State::Length(left)
                };
                Ok((take, left == 0))
            }
            _ => self.chunked(bytes),
        }
    }

    /// The connection's end came (every byte before it fed): a body framed by the end
    /// ([`Framing::UntilClose`]) is done; any other stays as it is (cut short).
    pub fn end_of_stream(&mut self) {
        if self.state == State::UntilClose {
            self.state = State::Done;
        }
    }

    /// Whether the message has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn chunked(&mut self, bytes: &[u8]) -> Result<(usize, bool), BodyError> {
        let mut i = 0;
        loop {
            if let State::Data(left) = self.state {
                let avail = bytes.len().saturating_sub(i);
                let take = usize::try_from(left).map_or(avail, |l| l.min(avail));
                i += take;
                let left = left.saturating_sub(take as u64);
                if left > 0 {
                    self.state = State::Data(left);
                    return Ok((i, false));
                }
                self.state = State::DataCr;
            }
            if self.state == State::Done {
                return Ok((i, true));
            }
            let Some(&b) = bytes.get(i) else {
                return Ok((i, false));
            };
            i += 1;
            match step(self.state, b) {
                Ok(next) => self.state = next,
                Err(e) => {
                    self.state = State::Failed(e);
                    return Err(e);
                }
            }
        }
    }
}

/// One byte of the chunked framing (never called in `Data`, `Done`, `Length`, ...).
fn step(state: State, b: u8) -> Result<State, BodyError> {
    use BodyError::{BadChunk, ChunkTooLarge};
    Ok(match state {
        State::Size { size, digits } => match (b as char).to_digit(16) {
            Some(d) => {
                if digits >= MAX_SIZE_DIGITS {
                    return Err(ChunkTooLarge);
                }
                State::Size {
                    size: (size << 4) | u64::from(d),
                    digits: digits + 1,
                }
            }
            None if digits == 0 => return Err(BadChunk),
            None => match b {
                b'\r' => State::SizeLf { size },
                b';' => State::Ext {
                    size,
                    line: digits + 1,
                },
                b' ' | b'\t' => State::SizeSpace {
                    size,
                    line: digits + 1,
                },
                _ => return Err(BadChunk),
            },
        },
        State::SizeSpace { size, line } => {
            let line = bump(line, MAX_CHUNK_LINE)?;
            match b {
                b' ' | b'\t' => State::SizeSpace { size, line },
                b';' => State::Ext { size, line },
                _ => return Err(BadChunk),
            }
        }
        State::Ext { size, line } => match b {
            b'\r' => State::SizeLf { size },
            b'\t' | 0x20..=0x7e | 0x80..=0xff => State::Ext {
                size,
                line: bump(line, MAX_CHUNK_LINE)?,
            },
            _ => return Err(BadChunk),
        },
        State::SizeLf { size } => match (b, size) {
            (b'\n', 0) => State::TrailerStart { total: 0 },
            (b'\n', size) => State::Data(size),
            _ => return Err(BadChunk),
        },
        State::DataCr => match b {
            b'\r' => State::DataLf,
            _ => return Err(BadChunk),
        },
        State::DataLf => match b {
            b'\n' => State::Size { size: 0, digits: 0 },
            _ => return Err(BadChunk),
        },
        State::TrailerStart { total } => {
            let total = bump(total, MAX_TRAILER)?;
            match b {
                b'\r' => State::EndLf,
                _ if is_tchar(b) => State::TrailerName { total },
                _ => return Err(BadChunk),
            }
        }
        State::TrailerName { total } => {
            let total = bump(total, MAX_TRAILER)?;
            match b {
                b':' => State::TrailerValue { total },
                _ if is_tchar(b) => State::TrailerName { total },
                _ => return Err(BadChunk),
            }
        }
        State::TrailerValue { total } => {
            let total = bump(total, MAX_TRAILER)?;
            match b {
                b'\r' => State::TrailerLf { total },
                b'\t' | 0x20..=0x7e | 0x80..=0xff => State::TrailerValue { total },
                _ => return Err(BadChunk),
            }
        }
        State::TrailerLf { total } => match b {
            b'\n' => State::TrailerStart {
                total: bump(total, MAX_TRAILER)?,
            },
            _ => return Err(BadChunk),
        },
        State::EndLf => match b {
            b'\n' => State::Done,
            _ => return Err(BadChunk),
        },
        State::Done | State::Failed(_) | State::Length(_) | State::UntilClose | State::Data(_) => {
            return Err(BadChunk)
        }
    })
}

/// `n + 1`, or [`BodyError::ChunkTooLarge`] past `max`.
fn bump(n: u32, max: u32) -> Result<u32, BodyError> {
    if n >= max {
        Err(BodyError::ChunkTooLarge)
    } else {
        Ok(n + 1)
    }
}

/// `tchar` of RFC 9110 §5.6.2.
pub(crate) fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_'
        | b'`' | b'|' | b'~' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}
