//! A static file's validators and the request fields that test them: its entity tag and
//! modification date (RFC 9110 §8.8), the preconditions in the order §13.2.2 gives them
//! (`If-Match`, `If-Unmodified-Since`, `If-None-Match`, `If-Modified-Since`), and one byte
//! range (`Range`, `If-Range`, §14). Pure: tested by `cargo test`.

use std::time::{Duration, UNIX_EPOCH};

/// What identifies a version of a file to caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// A strong entity tag, quotes included: a range of it may be combined with another
    /// range of the same tag (If-Range needs a strong one).
    pub etag: String,
    /// Seconds since the epoch (Last-Modified's resolution).
    pub modified: u64,
}

impl Validators {
    /// From the file's modification time (seconds and nanoseconds since the epoch, as
    /// `stat` gives them) and size. The nanoseconds are in the tag: a file rewritten within
    /// the second at the same size still gets a new one.
    pub fn new(mtime: i64, mtime_nsec: i64, size: u64) -> Validators {
        let nanos = (mtime as u64).wrapping_mul(1_000_000_000).wrapping_add(mtime_nsec as u64);
        Validators { etag: format!("\"{nanos:x}-{size:x}\""), modified: u64::try_from(mtime).unwrap_or(0) }
    }
}

/// The request fields the validators are tested by, each as the values of its field lines.
#[derive(Debug, Default)]
pub struct Conditions<'a> {
    pub if_match: Vec<&'a [u8]>,
    pub if_none_match: Vec<&'a [u8]>,
    pub if_modified_since: Vec<&'a [u8]>,
    pub if_unmodified_since: Vec<&'a [u8]>,
    pub range: Vec<&'a [u8]>,
    pub if_range: Vec<&'a [u8]>,
}

impl<'a> Conditions<'a> {
    pub fn from_fields(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Conditions<'a> {
        let mut c = Conditions::default();
        for (name, value) in fields {
            let list = match name.len() {
                5 if name.eq_ignore_ascii_case(b"range") => &mut c.range,
                8 if name.eq_ignore_ascii_case(b"if-match") => &mut c.if_match,
                8 if name.eq_ignore_ascii_case(b"if-range") => &mut c.if_range,
                13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut c.if_none_match,
                17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut c.if_modified_since,
                19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => &mut c.if_unmodified_since,
                _ => continue,
            };
            list.push(value);
        }
        c
    }
}

/// What the response to a request for the file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 200, the whole file.
    Full,
    /// 206, bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 304.
    NotModified,
    /// 412.
    PreconditionFailed,
    /// 416.
    Unsatisfiable,
}

/// The preconditions and the range of a GET (`get`) or HEAD for a file of `size` bytes.
pub fn evaluate(c: &Conditions<'_>, v: &Validators, size: u64, get: bool) -> Outcome {
    if !c.if_match.is_empty() {
        if !list_matches(&c.if_match, &v.etag, Compare::Strong) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(since) = single_date(&c.if_unmodified_since) {
        if v.modified > since {
            return Outcome::PreconditionFailed;
        }
    }
    if !c.if_none_match.is_empty() {
        if list_matches(&c.if_none_match, &v.etag, Compare::Weak) {
            return Outcome::NotModified;
        }
    } else if let Some(since) = single_date(&c.if_modified_since) {
        if v.modified <= since {
            return Outcome::NotModified;
        }
    }
    // §14.2: GET is the one method ranges are defined for; a Range sent twice is no range.
    let [range] = c.range[..] else { return Outcome::Full };
    if !get {
        return Outcome::Full;
    }
    if !c.if_range.is_empty() {
        let [if_range] = c.if_range[..] else { return Outcome::Full };
        if !if_range_matches(if_range, v) {
            return Outcome::Full;
        }
    }
    match parse_range(range, size) {
        RangeAsk::Whole => Outcome::Full,
        RangeAsk::Single { start, end } => Outcome::Partial { start, end },
        RangeAsk::Unsatisfiable => Outcome::Unsatisfiable,
    }
}

/// A `Range` field, for a representation of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAsk {
    /// The whole representation: no range the server takes (another unit, a malformed
    /// field, or several ranges, which §14.2 lets a server answer in full rather than as a
    /// multipart body).
    Whole,
    /// Bytes `start..=end`, within the representation.
    Single { start: u64, end: u64 },
    /// A valid range that starts past the end (or asks for a suffix of nothing).
    Unsatisfiable,
}

pub fn parse_range(value: &[u8], size: u64) -> RangeAsk {
    let value = value.trim_ascii();
    let Some(eq) = value.iter().position(|&b| b == b'=') else { return RangeAsk::Whole };
    if !value[..eq].trim_ascii().eq_ignore_ascii_case(b"bytes") {
        return RangeAsk::Whole;
    }
    // §5.6.1: empty list elements are allowed, and counted as nothing.
    let mut specs = value[eq + 1..].split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else { return RangeAsk::Whole };
    let Some(dash) = spec.iter().position(|&b| b == b'-') else { return RangeAsk::Whole };
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    if first.is_empty() {
        // A suffix: the last n bytes, all of them if there are fewer.
        let Some(n) = number(last) else { return RangeAsk::Whole };
        if n == 0 || size == 0 {
            return RangeAsk::Unsatisfiable;
        }
        return RangeAsk::Single { start: size.saturating_sub(n), end: size - 1 };
    }
    let Some(start) = number(first) else { return RangeAsk::Whole };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match number(last) {
            Some(end) if end >= start => end,
            // §14.1.1: a last position before the first makes the range invalid.
            _ => return RangeAsk::Whole,
        }
    };
    if start >= size {
        return RangeAsk::Unsatisfiable;
    }
    RangeAsk::Single { start, end: end.min(size - 1) }
}

/// Digits as a number; one too big for 64 bits is the largest (a position past any file).
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Strong,
    Weak,
}

/// Whether an `If-Match` or `If-None-Match` list names `etag` (a strong tag of ours), or is
/// `*` (the file exists). A malformed list matches by what was read before the fault.
fn list_matches(values: &[&[u8]], etag: &str, compare: Compare) -> bool {
    let etag = etag.as_bytes();
    for value in values {
        let mut rest = value.trim_ascii();
        if rest == b"*" {
            return true;
        }
        loop {
            rest = rest.trim_ascii_start();
            while let Some(r) = rest.strip_prefix(b",") {
                rest = r.trim_ascii_start();
            }
            if rest.is_empty() {
                break;
            }
            let Some((weak, tag, after)) = entity_tag(rest) else { break };
            // §8.8.3.2: weak comparison ignores the weakness; strong needs both strong.
            if tag == etag && (compare == Compare::Weak || !weak) {
                return true;
            }
            rest = after;
        }
    }
    false
}

/// The entity tag at the start of `s`: (weak, the opaque tag with its quotes, what follows).
fn entity_tag(s: &[u8]) -> Option<(bool, &[u8], &[u8])> {
    let (weak, s) = match s.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if s.first() != Some(&b'"') {
        return None;
    }
    let close = 1 + s[1..].iter().position(|&b| b == b'"')?;
    Some((weak, &s[..=close], &s[close + 1..]))
}

/// `If-Range`: an entity tag, compared strongly, or a date, which must be the file's own.
fn if_range_matches(value: &[u8], v: &Validators) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return matches!(entity_tag(value), Some((false, tag, b"")) if tag == v.etag.as_bytes());
    }
    date(value) == Some(v.modified)
}

/// The one value of a date field; a field sent twice, or not a date, is ignored (§13.1.3).
fn single_date(values: &[&[u8]]) -> Option<u64> {
    match values {
        [value] => date(value),
        _ => None,
    }
}

/// An HTTP date in any of its three forms, as seconds since the epoch.
pub fn date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value.trim_ascii()).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    time.duration_since(UNIX_EPOCH).ok().as_ref().map(Duration::as_secs)
}

#[cfg(test)]
#[path = "validators_tests.rs"]
mod tests;
