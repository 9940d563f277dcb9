//! Unit tests of the static path's resolution: what may name a file, and what is refused.

use super::*;
use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory tree: `outside/secret`, `root/a.txt`, `root/sub/b.txt`, and links in
/// `root` to the secret (out), to `sub/b.txt` (in) and to `sub` (a directory).
struct Tree {
    base: PathBuf,
    root: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("swordfish-static-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::create_dir_all(base.join("root/sub")).unwrap();
        std::fs::write(base.join("outside/secret"), b"secret").unwrap();
        std::fs::write(base.join("root/a.txt"), b"a").unwrap();
        std::fs::write(base.join("root/sub/b.txt"), b"b").unwrap();
        std::fs::write(base.join("root/with space"), b"s").unwrap();
        symlink(base.join("outside/secret"), base.join("root/out")).unwrap();
        symlink("sub/b.txt", base.join("root/in")).unwrap();
        symlink("sub", base.join("root/dirlink")).unwrap();
        symlink("../outside", base.join("root/escape")).unwrap();
        let root = base.join("root").canonicalize().unwrap();
        Tree { base, root }
    }

    fn get(&self, raw: &str) -> Option<Vec<u8>> {
        let (_, file, _) = resolve(&self.root, raw.as_bytes())?;
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut out).unwrap();
        Some(out)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn encoding() {
    assert!(well_encoded(b"/a%20b%2F"));
    assert!(well_encoded(b"/plain"));
    for bad in [&b"/a%"[..], b"/a%2", b"/a%zz", b"%%41"] {
        assert!(!well_encoded(bad), "{bad:?}");
    }
}

#[test]
fn relative_paths() {
    assert_eq!(relative(b"/a/./b//c"), Some(PathBuf::from("a/b/c")));
    for refused in [&b"/../a"[..], b"/a/../b", b"/..", b"/a/", b"/", b"", b"/a\0b", b"/."] {
        assert_eq!(relative(refused), None, "{refused:?}");
    }
    assert_eq!(relative(b"/..a/b.."), Some(PathBuf::from("..a/b..")), "dots inside a name are a name");
}

#[test]
fn files_inside_are_served() {
    let t = Tree::new();
    assert_eq!(t.get("/a.txt").as_deref(), Some(&b"a"[..]));
    assert_eq!(t.get("/sub/b.txt").as_deref(), Some(&b"b"[..]));
    assert_eq!(t.get("/sub%2Fb.txt").as_deref(), Some(&b"b"[..]), "an encoded slash separates");
    assert_eq!(t.get("/with%20space").as_deref(), Some(&b"s"[..]));
    assert_eq!(t.get("/in").as_deref(), Some(&b"b"[..]), "a link that stays inside");
    assert_eq!(t.get("/dirlink/b.txt").as_deref(), Some(&b"b"[..]));
}

#[test]
fn anything_else_is_nothing() {
    let t = Tree::new();
    for raw in [
        "/missing",
        "/sub",
        "/sub/",
        "/a.txt/",
        "/../outside/secret",
        "/%2e%2e/outside/secret",
        "/%2E%2E%2Foutside%2Fsecret",
        "/..%2foutside%2fsecret",
        "/sub/../../outside/secret",
        "/out",
        "/escape/secret",
        "/a.txt%00",
        "/a%2",
        "/a.txt%zz",
    ] {
        assert_eq!(t.get(raw), None, "{raw}");
    }
}
