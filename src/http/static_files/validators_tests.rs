//! Unit tests of the validators, the preconditions and range parsing (RFC 9110 §13, §14).

use super::*;

// Sun, 06 Nov 1994 08:49:37 GMT
const MODIFIED: i64 = 784_111_777;

fn file() -> Validators {
    Validators::new(MODIFIED, 5, 1000)
}

fn eval(fields: &[(&str, &str)], get: bool) -> Outcome {
    let c = Conditions::from_fields(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    evaluate(&c, &file(), 1000, get)
}

#[test]
fn validators_of_a_file() {
    let v = file();
    assert_eq!(v.modified, MODIFIED as u64);
    assert!(v.etag.starts_with('"') && v.etag.ends_with("-3e8\""), "{}", v.etag);
    assert_ne!(Validators::new(MODIFIED, 6, 1000).etag, v.etag, "nanoseconds count");
    assert_ne!(Validators::new(MODIFIED, 5, 1001).etag, v.etag, "the size counts");
    assert_eq!(Validators::new(-1, 0, 0).modified, 0, "before the epoch");
}

#[test]
fn ranges() {
    use RangeAsk::*;
    let r = |v: &str, size| parse_range(v.as_bytes(), size);
    assert_eq!(r("bytes=0-99", 1000), Single { start: 0, end: 99 });
    assert_eq!(r("bytes=990-", 1000), Single { start: 990, end: 999 });
    assert_eq!(r("bytes=-10", 1000), Single { start: 990, end: 999 });
    assert_eq!(r("bytes=-5000", 1000), Single { start: 0, end: 999 }, "a suffix longer than the file");
    assert_eq!(r("bytes=500-5000", 1000), Single { start: 500, end: 999 }, "a last position past the end");
    assert_eq!(r(" Bytes = 1-1 ", 1000), Single { start: 1, end: 1 }, "the unit is case-insensitive");
    assert_eq!(r("bytes=1-2,", 1000), Single { start: 1, end: 2 }, "an empty list element");
    assert_eq!(r("bytes=999-999", 1000), Single { start: 999, end: 999 });
    assert_eq!(r("bytes=1000-", 1000), Unsatisfiable);
    assert_eq!(r("bytes=1000-2000", 1000), Unsatisfiable);
    assert_eq!(r("bytes=-0", 1000), Unsatisfiable);
    assert_eq!(r("bytes=0-", 0), Unsatisfiable, "no byte of an empty file");
    assert_eq!(r("bytes=-1", 0), Unsatisfiable);
    assert_eq!(r("bytes=99999999999999999999999-", 1000), Unsatisfiable, "past any file");
    assert_eq!(r("bytes=0-99999999999999999999999", 1000), Single { start: 0, end: 999 });
    for whole in [
        "bytes=0-1,5-6",
        "bytes=5-1",
        "items=0-1",
        "bytes=a-b",
        "bytes=1",
        "bytes=",
        "bytes=-",
        "bytes=--1",
        "bytes=+1-2",
        "bytes 0-1",
        "",
    ] {
        assert_eq!(r(whole, 1000), Whole, "{whole:?}");
    }
}

#[test]
fn if_none_match_compares_weakly() {
    let etag = file().etag;
    assert_eq!(eval(&[("If-None-Match", &etag)], true), Outcome::NotModified);
    assert_eq!(eval(&[("if-none-match", &format!("W/{etag}"))], false), Outcome::NotModified);
    assert_eq!(eval(&[("If-None-Match", "*")], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-None-Match", &format!("\"a\", W/\"b\" ,{etag}"))], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-None-Match", "\"a\""), ("If-None-Match", &etag)], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-None-Match", "\"a\", \"b\"")], true), Outcome::Full);
    assert_eq!(eval(&[("If-None-Match", &etag[1..])], true), Outcome::Full, "unquoted");
    assert_eq!(eval(&[("If-None-Match", &format!("junk, {etag}"))], true), Outcome::Full, "malformed before it");
}

#[test]
fn if_modified_since() {
    let at = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_eq!(eval(&[("If-Modified-Since", at)], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-Modified-Since", "Sunday, 06-Nov-94 08:49:38 GMT")], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-Modified-Since", "Sun Nov  6 08:49:37 1994")], true), Outcome::NotModified);
    assert_eq!(eval(&[("If-Modified-Since", "Sun, 06 Nov 1994 08:49:36 GMT")], true), Outcome::Full);
    assert_eq!(eval(&[("If-Modified-Since", "yesterday")], true), Outcome::Full);
    assert_eq!(eval(&[("If-Modified-Since", at), ("If-Modified-Since", at)], true), Outcome::Full, "sent twice");
    // §13.1.3: with If-None-Match, If-Modified-Since is not looked at.
    assert_eq!(eval(&[("If-None-Match", "\"other\""), ("If-Modified-Since", at)], true), Outcome::Full);
}

#[test]
fn if_match_and_if_unmodified_since() {
    let etag = file().etag;
    assert_eq!(eval(&[("If-Match", &etag)], true), Outcome::Full);
    assert_eq!(eval(&[("If-Match", "*")], true), Outcome::Full);
    assert_eq!(eval(&[("If-Match", &format!("W/{etag}"))], true), Outcome::PreconditionFailed, "strong comparison");
    assert_eq!(eval(&[("If-Match", "\"other\"")], true), Outcome::PreconditionFailed);
    assert_eq!(eval(&[("If-Unmodified-Since", "Sun, 06 Nov 1994 08:49:36 GMT")], true), Outcome::PreconditionFailed);
    assert_eq!(eval(&[("If-Unmodified-Since", "Sun, 06 Nov 1994 08:49:37 GMT")], true), Outcome::Full);
    // If-Match decides alone when present; a failed precondition comes before a 304.
    let old = ("If-Unmodified-Since", "Sun, 06 Nov 1994 08:49:36 GMT");
    assert_eq!(eval(&[("If-Match", &etag), old], true), Outcome::Full);
    assert_eq!(eval(&[("If-Match", "\"x\""), ("If-None-Match", "*")], true), Outcome::PreconditionFailed);
}

#[test]
fn range_and_if_range() {
    let etag = file().etag;
    let range = ("Range", "bytes=10-19");
    let partial = Outcome::Partial { start: 10, end: 19 };
    assert_eq!(eval(&[range], true), partial);
    assert_eq!(eval(&[range], false), Outcome::Full, "HEAD: no range");
    assert_eq!(eval(&[range, range], true), Outcome::Full, "Range twice");
    assert_eq!(eval(&[("Range", "bytes=2000-")], true), Outcome::Unsatisfiable);
    assert_eq!(eval(&[range, ("If-Range", &etag)], true), partial);
    assert_eq!(eval(&[range, ("If-Range", "\"old\"")], true), Outcome::Full);
    assert_eq!(eval(&[range, ("If-Range", &format!("W/{etag}"))], true), Outcome::Full, "a weak tag never");
    assert_eq!(eval(&[range, ("If-Range", "Sun, 06 Nov 1994 08:49:37 GMT")], true), partial);
    assert_eq!(eval(&[range, ("If-Range", "Sun, 06 Nov 1994 08:49:38 GMT")], true), Outcome::Full);
    assert_eq!(eval(&[range, ("If-Range", "nonsense")], true), Outcome::Full);
    // A 304 takes precedence over the range.
    assert_eq!(eval(&[range, ("If-None-Match", &etag)], true), Outcome::NotModified);
}

#[test]
fn dates() {
    assert_eq!(date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(MODIFIED as u64));
    assert_eq!(date(b" Sun, 06 Nov 1994 08:49:37 GMT "), Some(MODIFIED as u64));
    assert_eq!(date(b"Sun, 06 Nov 1994 08:49:37"), None);
    assert_eq!(date(b"\xff"), None);
}
