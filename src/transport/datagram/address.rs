//! Socket addresses between Python's forms and the kernel's, for the forms that need no
//! name resolution (the rest go through the socket module).

use super::*;

/// A socket address in the kernel's format.
#[derive(Clone, Copy)]
pub(super) struct SockAddr {
    pub(super) storage: libc::sockaddr_storage,
    pub(super) len: libc::socklen_t,
}

impl SockAddr {
    pub(super) fn empty() -> SockAddr {
        SockAddr {
            // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
            storage: unsafe { std::mem::zeroed() },
            len: std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }

    pub(super) fn as_ptr(&self) -> *const libc::sockaddr {
        &self.storage as *const libc::sockaddr_storage as *const libc::sockaddr
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        &mut self.storage as *mut libc::sockaddr_storage as *mut libc::sockaddr
    }

    /// The storage as raw bytes (for the Unix path and the generic `(family, data)` form).
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: sockaddr_storage is plain data of this size.
        unsafe {
            std::slice::from_raw_parts(
                &self.storage as *const libc::sockaddr_storage as *const u8,
                std::mem::size_of::<libc::sockaddr_storage>(),
            )
        }
    }
}

/// The numeric address a string holds (`inet_pton`), or None.
pub(super) fn parse_ip(family: libc::c_int, host: &Bound<'_, PyAny>, out: *mut libc::c_void) -> Option<()> {
    let host = host.cast_exact::<PyString>().ok()?.to_str().ok()?;
    if host.len() > 64 {
        return None;
    }
    let c = std::ffi::CString::new(host).ok()?;
    // SAFETY: `out` points to an in_addr/in6_addr as `family` requires; `c` is NUL-ended.
    (unsafe { inet_pton(family, c.as_ptr(), out) } == 1).then_some(())
}

pub(super) fn exact_int(obj: &Bound<'_, PyAny>, max: u64) -> Option<u64> {
    if !obj.is_exact_instance_of::<PyInt>() {
        return None;
    }
    let v: u64 = obj.extract().ok()?;
    (v <= max).then_some(v)
}

/// Convert a destination address natively, for the forms whose meaning needs no name
/// resolution: IPv4/IPv6 literals with in-range numbers, Unix paths. None means "let the
/// socket module do it" (it then also produces its own error messages).
pub(super) fn native_sockaddr(family: libc::c_int, addr: &Bound<'_, PyAny>) -> Option<SockAddr> {
    let mut sa = SockAddr::empty();
    match family {
        libc::AF_INET => {
            let t = addr.cast_exact::<PyTuple>().ok()?;
            if t.len() != 2 {
                return None;
            }
            let port = exact_int(&t.get_item(1).ok()?, 0xffff)?;
            // SAFETY: sockaddr_storage is large enough and aligned for a sockaddr_in.
            let sin = unsafe { &mut *(sa.as_mut_ptr() as *mut libc::sockaddr_in) };
            parse_ip(family, &t.get_item(0).ok()?, &mut sin.sin_addr as *mut libc::in_addr as *mut libc::c_void)?;
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = (port as u16).to_be();
            sa.len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        libc::AF_INET6 => {
            let t = addr.cast_exact::<PyTuple>().ok()?;
            if !(2..=4).contains(&t.len()) {
                return None;
            }
            let port = exact_int(&t.get_item(1).ok()?, 0xffff)?;
            let flowinfo = match t.len() >= 3 {
                true => exact_int(&t.get_item(2).ok()?, 0xfffff)?,
                false => 0,
            };
            let scope_id = match t.len() == 4 {
                true => exact_int(&t.get_item(3).ok()?, u32::MAX as u64)?,
                false => 0,
            };
            // SAFETY: as above, for a sockaddr_in6.
            let sin6 = unsafe { &mut *(sa.as_mut_ptr() as *mut libc::sockaddr_in6) };
            parse_ip(family, &t.get_item(0).ok()?, &mut sin6.sin6_addr as *mut libc::in6_addr as *mut libc::c_void)?;
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = (port as u16).to_be();
            sin6.sin6_flowinfo = (flowinfo as u32).to_be();
            sin6.sin6_scope_id = scope_id as u32;
            sa.len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        }
        libc::AF_UNIX => {
            // str paths only when ASCII (their file-system encoding is then certain).
            let path: &[u8] = if let Ok(s) = addr.cast_exact::<PyString>() {
                let s = s.to_str().ok()?;
                if !s.is_ascii() {
                    return None;
                }
                s.as_bytes()
            } else {
                addr.cast_exact::<PyBytes>().ok()?.as_bytes()
            };
            // SAFETY: as above, for a sockaddr_un.
            let sun = unsafe { &mut *(sa.as_mut_ptr() as *mut libc::sockaddr_un) };
            let room = sun.sun_path.len();
            let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
            // An empty name or a leading NUL is Linux's abstract namespace: no terminator.
            let abstract_name = path.first().is_none_or(|b| *b == 0);
            let len = if abstract_name {
                if path.len() > room {
                    return None;
                }
                base + path.len()
            } else {
                if path.len() >= room {
                    return None;
                }
                base + path.len() + 1
            };
            for (dst, src) in sun.sun_path.iter_mut().zip(path) {
                *dst = *src as libc::c_char;
            }
            sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
            sa.len = len as libc::socklen_t;
        }
        _ => return None,
    }
    Some(sa)
}

pub(super) fn ntop<'py>(
    py: Python<'py>,
    family: libc::c_int,
    src: *const libc::c_void,
) -> PyResult<Bound<'py, PyString>> {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: `src` points to an address of `family`; the buffer holds any textual form.
    let p = unsafe { inet_ntop(family, src, buf.as_mut_ptr(), buf.len() as libc::socklen_t) };
    if p.is_null() {
        return Err(os_error(py, io::Error::last_os_error()));
    }
    // SAFETY: inet_ntop wrote a NUL-terminated string into `buf`.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(PyString::new(py, &s.to_string_lossy()))
}

/// The sender's address as the socket module gives it (`makesockaddr`).
pub(super) fn sockaddr_to_py<'py>(py: Python<'py>, sa: &SockAddr) -> PyResult<Bound<'py, PyAny>> {
    if sa.len == 0 {
        // No address: an unnamed Unix socket.
        return Ok(py.None().into_bound(py));
    }
    match sa.storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET).
            let sin = unsafe { &*(sa.as_ptr() as *const libc::sockaddr_in) };
            let host = ntop(py, libc::AF_INET, &sin.sin_addr as *const libc::in_addr as *const libc::c_void)?;
            Ok((host, u16::from_be(sin.sin_port)).into_pyobject(py)?.into_any())
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6.
            let sin6 = unsafe { &*(sa.as_ptr() as *const libc::sockaddr_in6) };
            let host = ntop(py, libc::AF_INET6, &sin6.sin6_addr as *const libc::in6_addr as *const libc::c_void)?;
            let t = (host, u16::from_be(sin6.sin6_port), u32::from_be(sin6.sin6_flowinfo), sin6.sin6_scope_id);
            Ok(t.into_pyobject(py)?.into_any())
        }
        libc::AF_UNIX => {
            let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
            let raw = sa.bytes();
            let len = (sa.len as usize).min(raw.len());
            let path = &raw[base.min(len)..];
            if len > base && path[0] == 0 {
                // Abstract namespace: every byte counts, as bytes.
                return Ok(PyBytes::new(py, &path[..len - base]).into_any());
            }
            let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
            // SAFETY: a valid pointer and length; returns a new reference or NULL.
            let s = unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::PyUnicode_DecodeFSDefaultAndSize(path.as_ptr() as *const libc::c_char, end as ffi::Py_ssize_t),
                )?
            };
            Ok(s)
        }
        family => {
            // What the socket module gives for a family it does not know: (family, sa_data).
            let data = &sa.bytes()[2..16];
            Ok((family, PyBytes::new(py, data)).into_pyobject(py)?.into_any())
        }
    }
}
