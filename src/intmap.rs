//! Maps keyed by small integers that the kernel or a protocol hands out: descriptors (the
//! loop's readiness table) and HTTP/2 stream ids. They are looked up several times per
//! event or request, where std's default SipHash showed 2 % of an HTTP/2 hello's CPU; FNV
//! (already in the tree through `h2`) hashes an integer in a few multiplies. SipHash's
//! resistance to chosen keys is not needed: descriptors are the lowest free numbers, and a
//! client's stream ids live in the map only while open, at most the connection's
//! concurrent-stream limit of them.

use std::collections::HashMap;

pub type IntMap<K, V> = HashMap<K, V, fnv::FnvBuildHasher>;
