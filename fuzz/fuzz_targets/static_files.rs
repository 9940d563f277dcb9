//! Static files: the path of a request under the route, resolved in a directory that has
//! links leading out of it; the Range field; the conditional fields; HTTP dates.
//! Properties: a resolved path is a regular file whose real path is inside the directory,
//! named by plain segments only; a range the server takes lies within the file, and a
//! `bytes=first-last` range is read as RFC 9110 §14.1.2 says; what the preconditions
//! decide is one of their outcomes, a partial one within the file; a date that is read
//! reads the same once written out again.
#![no_main]

use _native::fuzzing::{date, evaluate, parse_range, relative, resolve, Conditions, RangeAsk, Validators};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use std::path::{Component, PathBuf};
use std::sync::OnceLock;

#[derive(Arbitrary, Debug)]
struct Input {
    path: Vec<u8>,
    fields: Vec<(u8, Vec<u8>)>,
    size: u32,
    first: Option<u32>,
    last: Option<u32>,
    get: bool,
}

/// A directory with files, a subdirectory, a link to a file inside and links out of it.
fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("swordfish-fuzz-static-{}", std::process::id()));
        let dir = base.join("root");
        std::fs::create_dir_all(dir.join("sub/deeper")).expect("root");
        std::fs::write(dir.join("a.txt"), b"a").expect("a.txt");
        std::fs::write(dir.join("sub/b.txt"), b"b").expect("b.txt");
        std::fs::write(base.join("secret.txt"), b"outside").expect("secret");
        let link = |target: &str, name: &str| {
            let _ = std::os::unix::fs::symlink(target, dir.join(name));
        };
        link("a.txt", "inside-link");
        link("../secret.txt", "outside-link");
        link("/etc", "etc");
        link("..", "up");
        dir.canonicalize().expect("canonical root")
    })
}

const NAMES: [&[u8]; 6] =
    [b"if-match", b"if-none-match", b"if-modified-since", b"if-unmodified-since", b"range", b"if-range"];

fuzz_target!(|input: Input| {
    let root = root();
    if let Some((rel, _file, meta)) = resolve(root, &input.path) {
        assert!(meta.is_file());
        assert!(rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
        let real = root.join(&rel).canonicalize().expect("a resolved file exists");
        assert!(real.starts_with(root), "{:?} resolved to {real:?}", String::from_utf8_lossy(&input.path));
    }
    if let Some(rel) = relative(&input.path) {
        assert!(rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
    }

    let size = u64::from(input.size);
    let fields: Vec<(&[u8], &[u8])> =
        input.fields.iter().map(|(n, v)| (NAMES[usize::from(*n) % NAMES.len()], v.as_slice())).collect();
    for (_, value) in &fields {
        if let RangeAsk::Single { start, end } = parse_range(value, size) {
            assert!(start <= end && end < size, "{start}-{end} of {size}");
        }
        if let Some(t) = date(value) {
            let again = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t));
            assert_eq!(date(again.as_bytes()), Some(t));
        }
    }
    let conditions = Conditions::from_fields(fields.iter().copied());
    let validators = Validators::new(1_700_000_000, 5, size);
    if let _native::fuzzing::Outcome::Partial { start, end } = evaluate(&conditions, &validators, size, input.get) {
        assert!(start <= end && end < size);
    }

    let (first, last) = (input.first.map(u64::from), input.last.map(u64::from));
    let spec = format!(
        "bytes={}-{}",
        first.map_or(String::new(), |f| f.to_string()),
        last.map_or(String::new(), |l| l.to_string())
    );
    let expected = match (first, last) {
        (Some(f), Some(l)) if l < f => RangeAsk::Whole,
        (Some(f), _) if f >= size => RangeAsk::Unsatisfiable,
        (Some(f), Some(l)) => RangeAsk::Single { start: f, end: l.min(size - 1) },
        (Some(f), None) => RangeAsk::Single { start: f, end: size - 1 },
        (None, Some(0)) => RangeAsk::Unsatisfiable,
        (None, Some(_)) if size == 0 => RangeAsk::Unsatisfiable,
        (None, Some(n)) => RangeAsk::Single { start: size - n.min(size), end: size - 1 },
        (None, None) => RangeAsk::Whole,
    };
    assert_eq!(parse_range(spec.as_bytes(), size), expected, "{spec} of {size}");
});
