//! The loop's I/O registry: which descriptors are watched, for whom (`add_reader`-style
//! watchers, a native transport that owns the descriptor, or a socket operation's lingering
//! registration), and keeping epoll in line with it.

use super::{LoopCore, State};
use crate::call_args::CallArgs;
use crate::handles::{hand_back, Handle};
use crate::pyutil::{fd_from_number, fileobj_number, fileobj_to_fd, os_error};
use crate::reactor;
use crate::transport::IoTarget;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

/// A native transport that owns a descriptor, and what it wants to hear about.
pub(super) struct Owner {
    pub(super) target: IoTarget,
    pub(super) read: bool,
    pub(super) write: bool,
}

/// A registration left in epoll after the socket operation that used it finished, for the
/// next operation on the same socket: a task that loops over `sock_recv` would otherwise
/// add and delete the registration every time (two `epoll_ctl` calls, an eighth of the
/// server's time in a ping-pong). It expires after two loop iterations without use.
pub(super) struct Linger {
    pub(super) interest: mio::Interest,
    /// The socket object: the registration is reused only for the same object, which this
    /// keeps alive, so a closed descriptor whose number went to a new socket (and which
    /// epoll dropped) is never taken for registered.
    pub(super) sock: Py<PyAny>,
    pub(super) since: u64,
}

#[derive(Default)]
pub(super) struct IoEntry {
    pub(super) reader: Option<Py<Handle>>,
    pub(super) writer: Option<Py<Handle>>,
    pub(super) owner: Option<Owner>,
    /// Only while the entry is otherwise unused.
    pub(super) linger: Option<Linger>,
    /// The object the first `add_reader`/`add_writer` of the descriptor was given, by which
    /// it can still be removed once closed (its `fileno()` is then -1), as in the stdlib.
    pub(super) fileobj: Option<Py<PyAny>>,
}

impl IoEntry {
    pub(super) fn interest(&self) -> Option<mio::Interest> {
        let (r, w) = self.owner.as_ref().map_or((false, false), |o| (o.read, o.write));
        reactor::interest(self.reader.is_some() || r, self.writer.is_some() || w)
    }

    /// What epoll holds for the descriptor.
    pub(super) fn registered(&self) -> Option<mio::Interest> {
        self.interest().or_else(|| self.linger.as_ref().map(|l| l.interest))
    }

    pub(super) fn is_unused(&self) -> bool {
        self.reader.is_none() && self.writer.is_none() && self.owner.is_none()
    }

    pub(super) fn slot(&mut self, which: Which) -> &mut Option<Py<Handle>> {
        match which {
            Which::Reader => &mut self.reader,
            Which::Writer => &mut self.writer,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Which {
    Reader,
    Writer,
}

impl LoopCore {
    pub(super) fn add_watcher(
        slf: &Bound<'_, Self>,
        fileobj: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        which: Which,
    ) -> PyResult<Py<Handle>> {
        let fd = fileobj_to_fd(fileobj)?;
        let context = Self::handle_context(slf, callback, None);
        let handle = Self::new_handle(slf, callback, CallArgs::from_tuple(args)?, context, None)?;
        let handle = Self::watch(slf, fd, handle, which, None)?;
        if !fileobj.is_instance_of::<PyInt>() {
            let py = slf.py();
            if let Some(entry) = slf.get().state.lock(py)?.io.get_mut(&fd) {
                entry.fileobj.get_or_insert_with(|| fileobj.clone().unbind());
            }
        }
        Ok(handle)
    }

    pub(super) fn remove_watcher(slf: &Bound<'_, Self>, fileobj: &Bound<'_, PyAny>, which: Which) -> PyResult<bool> {
        let this = slf.get();
        let py = slf.py();
        let fd = match fileobj_number(fileobj)? {
            // A closed file object: look for the descriptor it was registered with.
            n if n < 0 && !fileobj.is_instance_of::<PyInt>() => {
                let st = this.state.lock(py)?;
                let found = st.io.iter().find(|(_, e)| e.fileobj.as_ref().is_some_and(|o| o.is(fileobj)));
                match found {
                    Some((&fd, _)) => fd,
                    None => return Err(PyValueError::new_err(format!("Invalid file descriptor: {n}"))),
                }
            }
            n => fd_from_number(n)?,
        };
        if this.closed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        this.check_no_transport(py, fd)?;
        this.unwatch(py, fd, which, |_| true, None)
    }

    /// Deregister what lingered unused for two iterations (see `Linger`); the caller drops
    /// what this returns once the state is unlocked (it holds socket objects).
    pub(super) fn expire_lingering(&self, st: &mut State) -> Vec<Linger> {
        let State { io, lingering, iteration, .. } = st;
        let mut expired = Vec::new();
        lingering.retain(|&(fd, since)| {
            if *iteration - since < 2 {
                return true;
            }
            // A newer entry in the list stands for a registration that was reused since.
            if let Some(entry) = io.get_mut(&fd) {
                if let Some(l) = entry.linger.take_if(|l| l.since == since) {
                    let _ = reactor::update(&self.registry, fd, Some(l.interest), None);
                    io.remove(&fd);
                    expired.push(l);
                }
            }
            false
        });
        expired
    }

    pub(super) fn check_no_transport(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        let target = {
            let st = self.state.lock(py)?;
            match st.io.get(&fd).and_then(|e| e.owner.as_ref()) {
                Some(o) => o.target.clone_ref(py),
                None => return Ok(()),
            }
        };
        match target.busy_message(py, fd) {
            Some(msg) => Err(PyRuntimeError::new_err(msg)),
            None => Ok(()),
        }
    }

    /// A native transport takes ownership of `fd` (not watched until `io_update`).
    pub(crate) fn io_attach(&self, py: Python<'_>, fd: RawFd, target: IoTarget) -> PyResult<()> {
        self.check_closed()?;
        let old = {
            let mut st = self.state.lock(py)?;
            let entry = st.io.entry(fd).or_default();
            let before = entry.registered();
            let linger = entry.linger.take();
            let old = entry.owner.replace(Owner { target, read: false, write: false });
            let after = entry.interest();
            let res = reactor::update(&self.registry, fd, before, after);
            drop(st);
            drop(linger);
            res.map_err(|e| os_error(py, e))?;
            old
        };
        drop(old);
        Ok(())
    }

    /// What the owning transport of `fd` wants to be told about.
    pub(crate) fn io_update(&self, py: Python<'_>, fd: RawFd, read: bool, write: bool) -> std::io::Result<()> {
        let mut st = self.state.lock(py).map_err(|_| std::io::Error::from(std::io::ErrorKind::WouldBlock))?;
        let Some(entry) = st.io.get_mut(&fd) else { return Ok(()) };
        let before = entry.interest();
        let Some(o) = entry.owner.as_mut() else { return Ok(()) };
        let (was_read, was_write) = (o.read, o.write);
        o.read = read;
        o.write = write;
        let after = entry.interest();
        if let Err(e) = reactor::update(&self.registry, fd, before, after) {
            if let Some(o) = entry.owner.as_mut() {
                o.read = was_read;
                o.write = was_write;
            }
            return Err(e);
        }
        Ok(())
    }

    /// The owning transport of `fd` lets go of it.
    pub(crate) fn io_detach(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        let old = {
            let mut st = self.state.lock(py)?;
            let Some(entry) = st.io.get_mut(&fd) else { return Ok(()) };
            let before = entry.interest();
            let old = entry.owner.take();
            let after = entry.interest();
            let unused = entry.is_unused();
            if unused {
                st.io.remove(&fd);
            }
            let _ = reactor::update(&self.registry, fd, before, after);
            old
        };
        drop(old);
        let _ = py;
        Ok(())
    }

    /// Ask for `fd` to be re-armed before the next poll (it may still be ready).
    pub(crate) fn io_rearm(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        self.state.lock(py)?.rearm.push(fd);
        Ok(())
    }

    /// Make `handle` the reader or writer of `fd`, replacing (and cancelling) the one before.
    /// `drained`: the socket object whose operation just found `fd` would block. Then no
    /// data can be waiting unseen, and a lingering registration for that socket is used as
    /// it is (epoll is edge-triggered: whatever arrives from now on raises an event).
    pub(crate) fn watch(
        slf: &Bound<'_, Self>,
        fd: RawFd,
        handle: Handle,
        which: Which,
        drained: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        this.check_no_transport(py, fd)?;
        let handle = Py::new(py, handle)?;
        handle.get().mark_repeating();
        this.hold(handle.bind(py).as_any());
        let (replaced, linger) = {
            let mut st = this.state.lock(py)?;
            let entry = st.io.entry(fd).or_default();
            let old_interest = entry.registered();
            let linger = entry.linger.take();
            // Only `add_reader`/`add_writer` watchers: if epoll has dropped the descriptor,
            // it was closed without them being removed, and its number now names another
            // file. The stdlib's selector then fails to modify it, forgets those watchers
            // and raises; so does this, rather than carry them over to the new file.
            let watchers_only =
                drained.is_none() && entry.owner.is_none() && linger.is_none() && old_interest.is_some();
            let slot = entry.slot(which);
            let previous = slot.replace(handle.clone_ref(py));
            let new_interest = entry.interest();
            let in_place =
                new_interest == old_interest && matches!((&linger, drained), (Some(l), Some(s)) if l.sock.is(s));
            let res = match new_interest {
                _ if in_place => Ok(()),
                Some(i) if watchers_only && new_interest != old_interest => reactor::modify(&this.registry, fd, i),
                _ => reactor::update(&this.registry, fd, old_interest, new_interest),
            };
            let res = match res {
                Err(e) if watchers_only && e.raw_os_error() == Some(libc::ENOENT) => {
                    let forgotten = st.io.remove(&fd);
                    drop(st);
                    if let Some(entry) = forgotten {
                        for h in [entry.reader, entry.writer, previous].iter().flatten() {
                            hand_back(h.bind(py));
                        }
                    }
                    return Err(os_error(py, e));
                }
                res => res,
            };
            if let Err(e) = res {
                // Put things back as they were.
                // The entry was inserted above, under the same lock; were it gone, neither
                // handle would be in the table any more.
                let out_of_table = match st.io.get_mut(&fd) {
                    Some(entry) => {
                        let ours = std::mem::replace(entry.slot(which), previous);
                        if entry.is_unused() {
                            st.io.remove(&fd);
                        }
                        [ours, None]
                    }
                    None => [Some(handle.clone_ref(py)), previous],
                };
                drop(st);
                for h in out_of_table.iter().flatten() {
                    hand_back(h.bind(py));
                }
                drop((out_of_table, linger));
                return Err(os_error(py, e));
            }
            (previous, linger)
        };
        drop(linger);
        if let Some(old) = replaced {
            Handle::retire(old.bind(py))?;
        }
        Ok(handle)
    }

    /// Remove the reader or writer of `fd` if `is_it` says it is the one to remove. `sock`:
    /// the socket whose finished operation it served; if nothing else uses `fd`, its
    /// registration lingers for that socket's next operation (see `Linger`).
    pub(crate) fn unwatch(
        &self,
        py: Python<'_>,
        fd: RawFd,
        which: Which,
        is_it: impl FnOnce(&Handle) -> bool,
        sock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let removed = {
            let mut st = self.state.lock(py)?;
            let iteration = st.iteration;
            let Some(entry) = st.io.get_mut(&fd) else { return Ok(false) };
            let old_interest = entry.interest();
            let slot = entry.slot(which);
            if !slot.as_ref().is_some_and(|h| is_it(h.get())) {
                return Ok(false);
            }
            let removed = slot.take();
            let mut new_interest = entry.interest();
            if entry.is_unused() {
                match (sock, old_interest) {
                    (Some(sock), Some(interest)) => {
                        entry.linger = Some(Linger { interest, sock: sock.clone().unbind(), since: iteration });
                        st.lingering.push((fd, iteration));
                        new_interest = old_interest;
                    }
                    _ => {
                        st.io.remove(&fd);
                    }
                }
            }
            // Deregistering cannot fail in a way the caller could act on (the fd may be
            // closed already); modifying to the remaining interest can, so report that.
            let res = if new_interest == old_interest {
                Ok(())
            } else {
                reactor::update(&self.registry, fd, old_interest, new_interest)
            };
            if let Err(e) = res {
                drop(st);
                if let Some(h) = &removed {
                    Handle::retire(h.bind(py))?;
                }
                return Err(os_error(py, e));
            }
            removed
        };
        match removed {
            Some(h) => {
                Handle::retire(h.bind(py))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
