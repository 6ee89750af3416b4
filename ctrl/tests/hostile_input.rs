//! Hostile configurations against `sluice check`, run under an address-space limit and a
//! time limit: each is rejected with a clear error naming the file, never an abort, an
//! explosion or a hang. (The limits only stop a broken build from eating the machine;
//! the assertions are about the answer.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Address space `sluice check` gets (KiB, for `ulimit -v`): 1 GiB.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;

/// `sluice check -c PATH` under `ulimit -v` and `timeout`.
fn check_bounded(path: &Path) -> Output {
    Command::new("timeout")
        .args(["-s", "KILL", "120", "sh", "-c"])
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB}; exec \"$@\""))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "-c"])
        .arg(path)
        .output()
        .expect("run sluice check")
}

/// A fresh directory, removed on drop (also when the test fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("sluice-hostile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Nine levels of nine aliases (9^9 scalars expanded): "billion laughs".
const ALIAS_BOMB: &str = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_alias_bomb_is_rejected_at_its_line() {
    let d = Scratch::new("bomb");
    let f = d.0.join("bomb.yaml");
    std::fs::write(&f, ALIAS_BOMB).expect("write");
    let o = check_bounded(&f);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{:?}: {err}", o.status);
    assert!(
        err.contains(&format!(
            "{}:6:8: aliases expand to more than MAX_ALIAS_NODES",
            f.display()
        )),
        "{err}"
    );
    assert!(err.contains("configuration rejected"), "{err}");
}

#[test]
fn a_symlink_loop_is_rejected_naming_the_link() {
    let d = Scratch::new("loop");
    let conf = d.0.join("conf");
    std::fs::create_dir_all(conf.join("d")).expect("mkdir");
    std::fs::write(
        conf.join("ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n",
    )
    .expect("write");
    std::fs::write(
        conf.join("d/ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
    )
    .expect("write");
    std::os::unix::fs::symlink("..", conf.join("d/up")).expect("ln -s .. d/up");
    let o = check_bounded(&conf);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{:?}: {err}", o.status);
    let link = conf.join("d/up");
    assert!(
        err.contains(&format!(
            "{}:1:1: symlink loop: this is directory {} again",
            link.display(),
            conf.display()
        )),
        "{err}"
    );
}

/// An Appliance with `spec` lines (indented two spaces) and one TAP port.
fn appliance(spec: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: m}}\nspec:\n{spec}  ports:\n  - name: p\n    tap: {{name: slm0}}\n"
    )
}

/// What `check` accepts, `run` can run: Appliance values the machine cannot serve are
/// errors at their field.
#[test]
fn appliance_values_are_checked_against_the_machine() {
    let d = Scratch::new("appliance");
    for (i, (spec, line_col, field, message)) in [
        (
            "  cores: [0, 9999]\n",
            "5:14",
            "spec.cores[1]",
            "core 9999 is beyond the highest CPU number",
        ),
        // Within the CPU set type, but no machine this runs on has it.
        (
            "  cores: [0, 1023]\n",
            "5:14",
            "spec.cores[1]",
            "core 1023 does not exist or is not allowed for this process (allowed: ",
        ),
        (
            "  cores: []\n",
            "5:3",
            "spec.cores",
            "cores is empty: give at least one core",
        ),
        (
            "  limits: {flowsPerWorker: 1000000000000}\n",
            "5:12",
            "spec.limits.flowsPerWorker",
            "limits.flowsPerWorker 1000000000000 is over the most a worker's flow table holds (67108864)",
        ),
        (
            "  limits: {flowsPerWorker: 1e12}\n",
            "5:12",
            "spec.limits.flowsPerWorker",
            "invalid type: floating point `1000000000000.0`, expected u64",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let f = d.0.join(format!("a{i}.yaml"));
        std::fs::write(&f, appliance(spec)).expect("write");
        let o = check_bounded(&f);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{spec}: {:?}: {err}", o.status);
        let want = format!(
            "{}:{line_col}: Appliance m: {field}: {message}",
            f.display()
        );
        assert!(err.contains(&want), "{spec}: want {want:?} in {err}");
    }
    // Leaving `cores` out is core 0.
    let f = d.0.join("ok.yaml");
    std::fs::write(&f, appliance("")).expect("write");
    let o = check_bounded(&f);
    assert!(o.status.success(), "{}", stderr(&o));
}
