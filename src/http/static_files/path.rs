//! From the request path under the static route to an open regular file inside the
//! directory, or to nothing: a `..` segment (before or after percent-decoding), a NUL, a
//! `%` that encodes no byte, a path that ends in `/`, a symbolic link that leads out of the
//! directory, a missing file or anything but a regular file. Every one of them is the same
//! 404 to the client, which so learns nothing of what lies outside.

use super::super::target::percent_decode;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Whether every `%` in `raw` is followed by two hex digits (the target's own decoder keeps
/// a stray `%` as it is, which the app may accept; a file name is taken only when exact).
pub fn well_encoded(raw: &[u8]) -> bool {
    let mut i = 0;
    while let Some(p) = raw[i..].iter().position(|&b| b == b'%') {
        let at = i + p;
        match raw.get(at + 1..at + 3) {
            Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => i = at + 3,
            _ => return false,
        }
    }
    true
}

/// The path `decoded` (the percent-decoded rest of the request path after the route)
/// names below the directory, as relative segments; None if it may not name a file.
pub fn relative(decoded: &[u8]) -> Option<PathBuf> {
    if decoded.contains(&0) || decoded.ends_with(b"/") {
        return None;
    }
    let mut out = PathBuf::new();
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => return None,
            s => out.push(std::ffi::OsStr::from_bytes(s)),
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// `rel` under the directory `root` (canonical), opened, if it is a regular file whose real
/// path is inside `root`.
pub fn open(root: &Path, rel: &Path) -> Option<(File, Metadata)> {
    let real = root.join(rel).canonicalize().ok()?;
    if !real.starts_with(root) {
        return None;
    }
    // O_NONBLOCK: a FIFO would block the open (and so the loop) until a writer came; it is
    // refused below like any other file that is not regular. O_NOFOLLOW: the real path has
    // no link left in it, and one put there since is not followed.
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(&real).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta))
}

/// The file for the rest of a request path after the route (`raw`, as the client sent it).
pub fn resolve(root: &Path, raw: &[u8]) -> Option<(PathBuf, File, Metadata)> {
    if !well_encoded(raw) {
        return None;
    }
    let rel = relative(&percent_decode(raw))?;
    let (file, meta) = open(root, &rel)?;
    Some((rel, file, meta))
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
