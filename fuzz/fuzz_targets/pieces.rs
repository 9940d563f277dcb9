//! Shared by the targets that feed a decoder its input as it arrives: the input cut where
//! the fuzzer's numbers say.

/// `bytes` cut into pieces, one cut per number (taken modulo what is left).
pub fn split<'a>(bytes: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    let mut rest = bytes;
    for &cut in cuts {
        let n = usize::from(cut) % (rest.len() + 1);
        let (a, b) = rest.split_at(n);
        pieces.push(a);
        rest = b;
    }
    pieces.push(rest);
    pieces
}
