//! Where reloads come from: configuration files changing on disk ([`FileWatch`]), SIGHUP
//! ([`Sighup`]) and the admin socket (`sluice ctl reload`, in [`crate::api`]). Each source
//! only says *that* a reload is wanted and why ([`Trigger`]); [`crate::reload`] decides
//! what to do with it.
//!
//! Files are watched by polling (once a second in `sluice run`): every file `sluice` would
//! read from the given paths — explicitly named files, and the non-hidden `.yaml`, `.yml`
//! and `.json` files under named directories, recursively — is fingerprinted by size,
//! modification time and inode. The files are found by the loader's walk
//! ([`crate::load::discover`]), with its limits and symlink-loop detection, so a poll
//! costs what a load's walk costs, never more. Polling needs no dependency and no kernel watch limits,
//! sees files replaced by rename (editors, `kubectl`-style atomic writes, Kubernetes
//! ConfigMap symlink swaps) and costs a few `stat` calls per second.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// Why a reload was attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A configuration file changed on disk.
    File,
    /// The process received SIGHUP.
    Sighup,
    /// `sluice ctl reload` on the admin socket.
    Ctl,
}

impl Trigger {
    /// The name used in `sluice ctl status` and in log lines.
    pub const fn name(self) -> &'static str {
        match self {
            Trigger::File => "file",
            Trigger::Sighup => "sighup",
            Trigger::Ctl => "ctl",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What identifies one version of a file: size, modification time, inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: Option<SystemTime>,
    ino: u64,
}

/// Every watched file and its stamp (`None`: named explicitly but missing or unreadable).
type Fingerprint = BTreeMap<PathBuf, Option<Stamp>>;

/// Polls the configuration files for changes.
///
/// [`FileWatch::poll`] reports a change once the files differ from the baseline (the
/// version last loaded) *and* have stayed the same since the previous poll, so a file
/// caught half-written is not loaded: the reload waits one more poll interval.
#[derive(Debug)]
pub struct FileWatch {
    paths: Vec<PathBuf>,
    baseline: Fingerprint,
    previous: Fingerprint,
}

impl FileWatch {
    /// Watches `paths` (stdin, `-`, is skipped); the current state is the baseline.
    pub fn new(paths: &[PathBuf]) -> FileWatch {
        let paths: Vec<PathBuf> = paths
            .iter()
            .filter(|p| p.as_os_str() != "-")
            .cloned()
            .collect();
        let now = fingerprint(&paths);
        FileWatch {
            paths,
            baseline: now.clone(),
            previous: now,
        }
    }

    /// Whether nothing is watched (no paths, or only stdin).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Makes the current state the baseline: call it just before loading the files, so a
    /// change made while they are loaded is seen by the next poll.
    pub fn rebase(&mut self) {
        self.baseline = fingerprint(&self.paths);
        self.previous = self.baseline.clone();
    }

    /// Looks at the files once; returns the changed ones (added, removed or modified
    /// since the baseline) when the change has settled, else `None`. The caller reloads
    /// and calls [`FileWatch::rebase`] first.
    pub fn poll(&mut self) -> Option<Vec<PathBuf>> {
        let now = fingerprint(&self.paths);
        let settled = now == self.previous;
        self.previous = now;
        if !settled || self.previous == self.baseline {
            return None;
        }
        let changed = self
            .previous
            .iter()
            .filter(|(p, s)| self.baseline.get(*p) != Some(*s))
            .map(|(p, _)| p.clone())
            .chain(
                self.baseline
                    .keys()
                    .filter(|p| !self.previous.contains_key(*p))
                    .cloned(),
            )
            .collect();
        Some(changed)
    }
}

fn stamp(p: &Path) -> Option<Stamp> {
    // `metadata` follows symlinks: a ConfigMap's `..data` swap changes the target.
    let m = std::fs::metadata(p).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime: m.modified().ok(),
        ino: m.ino(),
    })
}

/// The files `crate::load::load_paths` would read, with their stamps, found by the
/// loader's own bounded walk ([`crate::load::discover`]). A walk error (a symlink loop, a
/// limit) is kept as an entry without a stamp at the path it is about, so it shows up as
/// a change once, and the reload it triggers reports it.
fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let found = crate::load::discover(paths);
    let mut out: Fingerprint = found.files.iter().map(|p| (p.clone(), stamp(p))).collect();
    for (p, _) in found.errors {
        out.insert(p, None);
    }
    out
}

/// SIGHUP, as a flag the control thread polls.
#[derive(Debug, Clone)]
pub struct Sighup(Arc<AtomicBool>);

impl Sighup {
    /// Installs the handler (the signal only sets a flag).
    pub fn install() -> std::io::Result<Sighup> {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&flag))?;
        Ok(Sighup(flag))
    }

    /// Whether SIGHUP arrived since the last call.
    pub fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// Test helpers shared by the control plane's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct Scratch(pub PathBuf);

    impl Scratch {
        pub(crate) fn new(tag: &str) -> Scratch {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let d = std::env::temp_dir().join(format!(
                "sluice-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&d).expect("temp dir");
            Scratch(d)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Scratch;
    use super::*;

    #[test]
    fn a_change_is_reported_once_it_settles() {
        let d = Scratch::new("watch");
        let a = d.0.join("a.yaml");
        std::fs::write(&a, "x: 1\n").expect("write");
        std::fs::write(d.0.join("notes.txt"), "ignored").expect("write");
        std::fs::write(d.0.join(".hidden.yaml"), "ignored").expect("write");
        let mut w = FileWatch::new(std::slice::from_ref(&d.0));
        assert!(!w.is_empty());
        assert_eq!(w.poll(), None, "nothing changed");

        std::fs::write(&a, "x: 22\n").expect("write");
        assert_eq!(w.poll(), None, "just changed: wait for it to settle");
        assert_eq!(w.poll(), Some(vec![a.clone()]));
        assert_eq!(w.poll(), Some(vec![a.clone()]), "until rebased");
        w.rebase();
        assert_eq!(w.poll(), None);

        // Files that are not manifests, or hidden, do not count.
        std::fs::write(d.0.join("notes.txt"), "still ignored").expect("write");
        std::fs::write(d.0.join(".hidden.yaml"), "still ignored").expect("write");
        w.poll();
        assert_eq!(w.poll(), None);

        // A new file in a subdirectory, and a removed one.
        std::fs::create_dir(d.0.join("sub")).expect("mkdir");
        let b = d.0.join("sub/b.json");
        std::fs::write(&b, "{}").expect("write");
        std::fs::remove_file(&a).expect("rm");
        w.poll();
        let mut got = w.poll().expect("change");
        got.sort();
        assert_eq!(got, vec![a, b]);
    }

    #[test]
    fn an_explicit_file_is_watched_even_when_missing() {
        let d = Scratch::new("watch-missing");
        let f = d.0.join("config");
        let mut w = FileWatch::new(&[f.clone(), PathBuf::from("-")]);
        assert_eq!(w.poll(), None);
        std::fs::write(&f, "kind: x\n").expect("write");
        w.poll();
        assert_eq!(w.poll(), Some(vec![f]));
        assert!(FileWatch::new(&[PathBuf::from("-")]).is_empty());
    }
}
