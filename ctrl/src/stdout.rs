//! Writing command output to stdout without panicking when the reader has gone away
//! (`sluice explain ... | head`): `println!` panics on a broken pipe; these do not.

use std::io::Write;

/// Writes `text` to stdout. A closed pipe ends the process quietly (status 0, as the
/// reader asked for no more); any other write error ends it with status 1.
pub fn write(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("sluice: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes `text` and a newline to stdout (see [`write()`]).
pub fn line(text: &str) {
    write(&format!("{text}\n"));
}
