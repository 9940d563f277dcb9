//! The WSGI thread engine: WSGI served without the asyncio loop and without a hand-off per
//! request. A pool of threads shares one poller, leader/followers: one thread at a time
//! polls (`poller`); it reads and parses without the GIL (`io`, over the shared connection
//! core) and keeps polling while requests are taken up; when a request needs a thread to
//! run it, the poller hands the poll to a follower and runs the request itself
//! (`runner`): the GIL only for the environ, the app and its iterable, the answer written
//! with the GIL released, and what the app sends applied to the connection on its own
//! thread (`sink`). `--threads` is the pool's size, so it still bounds the app calls at
//! once. docs/design.md, "A request path without hand-offs", has the measurements.
//!
//! It serves TCP and Unix sockets, TLS by rustls (`tls`), PROXY headers and static files,
//! through the same connection core as the loop. HTTP/2 is the loop's: a connection that
//! opens with its preface, or offers `h2` by ALPN, is moved there (`handoff`).

mod gate;
mod io;
mod lead;
mod poller;
mod runner;
mod sink;
mod slot;
mod socket;
mod timers;
mod tls;
mod wire;

use super::pool::AppContext;
use crate::http::config::HttpServerState;
use crate::http::settings::Settings;
use crate::sync::lock_unpoisoned;
use pyo3::exceptions::PyOSError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use runner::Baton;
use slot::{LogLine, Slot};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use timers::Timers;

/// Seconds a connection that has not sent its first request yet gets on graceful shutdown
/// (as on the loop's path).
const FIRST_REQUEST_GRACE: f64 = 1.0;

enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

/// The listening sockets, and whether the poller watches them (not while the connection
/// board says this worker has more than its share).
struct Listeners {
    held: Vec<Option<Listener>>,
    watching: bool,
}

impl Listener {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Listener::Tcp(l) => l,
            Listener::Unix(l) => l,
        }
    }
}

/// The connections, by token.
#[derive(Default)]
struct Table {
    slots: Vec<Option<Arc<Slot>>>,
    free: Vec<usize>,
}

pub struct Engine {
    state: Py<HttpServerState>,
    ctx: AppContext,
    logger: Py<PyAny>,
    /// The poller, polled by the thread that holds `lead`.
    poll: Mutex<mio::Poll>,
    lead: Arc<lead::Lead>,
    registry: mio::Registry,
    waker: mio::Waker,
    listeners: Mutex<Listeners>,
    /// The supervisor's connection board, with workers.
    gate: Mutex<Option<gate::Gate>>,
    table: Mutex<Table>,
    timers: Mutex<Timers>,
    baton: Mutex<Baton>,
    /// Threads inside an app call: one that gets the GIL while another is in one got it
    /// because that app blocked (or ran a whole switch interval); see `lead`.
    in_app: AtomicUsize,
    threads: usize,
    /// Threads still running, and the signal of each one's end.
    alive: Mutex<usize>,
    exited: Condvar,
    /// The server stops: threads leave as soon as they can.
    stop: AtomicBool,
    /// The interpreter's switch interval: how long a thread waits for the GIL before it
    /// asks the holder to let it go.
    switch_interval: Duration,
    open: AtomicUsize,
    /// Where a connection that opens with HTTP/2's preface goes (`handoff(fd, data)`: the
    /// loop serves HTTP/2); None where HTTP/2 is not served.
    handoff: Option<Py<PyAny>>,
    /// The listeners' TLS (rustls), if they serve it.
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Engine {
    pub fn settings(&self) -> &Settings {
        &self.state.get().settings
    }

    fn timers(&self) -> MutexGuard<'_, Timers> {
        lock_unpoisoned(&self.timers)
    }

    fn slot(&self, token: usize) -> Option<Arc<Slot>> {
        let i = token.checked_sub(poller::FIRST_CONNECTION)?;
        lock_unpoisoned(&self.table).slots.get(i)?.clone()
    }

    /// A new connection's token, for `make(token)`'s slot.
    fn insert(&self, make: impl FnOnce(usize) -> Arc<Slot>) -> Arc<Slot> {
        let mut t = lock_unpoisoned(&self.table);
        let i = match t.free.pop() {
            Some(i) => i,
            None => {
                t.slots.push(None);
                t.slots.len() - 1
            }
        };
        let slot = make(i + poller::FIRST_CONNECTION);
        if let Some(s) = t.slots.get_mut(i) {
            *s = Some(slot.clone());
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        slot
    }

    fn forget(&self, token: usize) {
        let Some(i) = token.checked_sub(poller::FIRST_CONNECTION) else { return };
        let mut t = lock_unpoisoned(&self.table);
        if let Some(s) = t.slots.get_mut(i) {
            if s.take().is_some() {
                t.free.push(i);
                self.open.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn all(&self) -> Vec<Arc<Slot>> {
        lock_unpoisoned(&self.table).slots.iter().flatten().cloned().collect()
    }

    /// Hand access-log lines to the access logger (taking the GIL if there are any).
    fn log(&self, lines: Vec<LogLine>) {
        if lines.is_empty() {
            return;
        }
        Python::attach(|py| self.log_with(py, lines));
    }

    fn log_with(&self, py: Python<'_>, lines: Vec<LogLine>) {
        let Some(log) = &self.state.get().access_log else { return };
        for (request, status, size, seconds, refused) in lines {
            // A request refused before it began is logged with no client (the engine's
            // connections have no Python address object to give).
            let _ = refused;
            if let Err(e) = log.call1(py, (request, status, size, seconds, py.None())) {
                e.write_unraisable(py, None);
            }
        }
    }

    /// Log an app's error the way the loop's path does.
    fn log_error(&self, py: Python<'_>, message: &str, exc: Option<Py<PyAny>>) {
        let r = (|| {
            let kwargs = PyDict::new(py);
            if let Some(e) = exc {
                kwargs.set_item("exc_info", e)?;
            }
            self.logger.call_method(py, intern!(py, "error"), (message,), Some(&kwargs)).map(drop)
        })();
        if let Err(e) = r {
            e.write_unraisable(py, None);
        }
    }
}

/// `WsgiEngine(app, state, listeners, *, environ, threads, logger, board=None,
/// handoff=None, tls=None)`: serves `app` on the listening sockets given (Python socket objects; the
/// engine takes duplicates of their descriptors) with `threads` threads, under the settings
/// of `state`; `board`: (descriptor, slot) of the supervisor's connection board, for a
/// worker; `handoff(fd, data)`: takes a connection that opened with HTTP/2's preface (its
/// descriptor and what it sent), or offered `h2` by ALPN, to the loop, where HTTP/2 is
/// served; `tls`: the listeners' `RustlsServerConfig`, if they serve TLS.
#[pyclass(module = "swordfish._native", frozen)]
pub struct WsgiEngine {
    engine: Arc<Engine>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn os_error(e: std::io::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

fn listener(sock: &Bound<'_, PyAny>) -> PyResult<Listener> {
    let py = sock.py();
    let fd: i32 = sock.call_method0(intern!(py, "fileno"))?.extract()?;
    let unix: bool = sock.getattr(intern!(py, "family"))?.eq(py.import("socket")?.getattr("AF_UNIX")?)?;
    // SAFETY: the socket object owns `fd` and keeps it open during this call.
    let owned: OwnedFd = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().map_err(os_error)?;
    Ok(if unix {
        let l = std::os::unix::net::UnixListener::from(owned);
        l.set_nonblocking(true).map_err(os_error)?;
        Listener::Unix(mio::net::UnixListener::from_std(l))
    } else {
        let l = std::net::TcpListener::from(owned);
        l.set_nonblocking(true).map_err(os_error)?;
        Listener::Tcp(mio::net::TcpListener::from_std(l))
    })
}

#[pymethods]
impl WsgiEngine {
    #[new]
    #[pyo3(signature = (app, state, listeners, *, environ, threads, logger, board=None, handoff=None, tls=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        app: Py<PyAny>,
        state: Py<HttpServerState>,
        listeners: Vec<Bound<'_, PyAny>>,
        environ: Bound<'_, PyDict>,
        threads: usize,
        logger: Py<PyAny>,
        board: Option<(RawFd, usize)>,
        handoff: Option<Py<PyAny>>,
        tls: Option<Bound<'_, crate::transport::tls::RustlsServerConfig>>,
    ) -> PyResult<Self> {
        let poll = mio::Poll::new().map_err(os_error)?;
        let registry = poll.registry().try_clone().map_err(os_error)?;
        let waker = mio::Waker::new(&registry, poller::WAKER).map_err(os_error)?;
        let mut held = Vec::new();
        for (i, sock) in listeners.iter().enumerate() {
            let mut l = listener(sock)?;
            let token = mio::Token(poller::FIRST_LISTENER + i);
            registry.register(l.source(), token, mio::Interest::READABLE).map_err(os_error)?;
            held.push(Some(l));
        }
        let gate = match board {
            Some((fd, slot)) => Some(gate::Gate::attach(fd, slot).map_err(os_error)?),
            None => None,
        };
        let threads = threads.max(1);
        let interval: f64 = environ.py().import("sys")?.call_method0("getswitchinterval")?.extract()?;
        let engine = Arc::new(Engine {
            state,
            ctx: AppContext::new(app, environ)?,
            logger,
            poll: Mutex::new(poll),
            lead: Arc::new(lead::Lead::default()),
            registry,
            waker,
            listeners: Mutex::new(Listeners { held, watching: true }),
            gate: Mutex::new(gate),
            table: Mutex::new(Table::default()),
            timers: Mutex::new(Timers::default()),
            baton: Mutex::new(Baton::default()),
            in_app: AtomicUsize::new(0),
            threads,
            alive: Mutex::new(threads),
            exited: Condvar::new(),
            stop: AtomicBool::new(false),
            switch_interval: Duration::try_from_secs_f64(interval).unwrap_or(Duration::from_millis(5)),
            open: AtomicUsize::new(0),
            handoff,
            tls: tls.map(|t| t.get().config()),
        });
        engine.lead.watch(engine.switch_interval);
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let e = engine.clone();
            let spawned = std::thread::Builder::new().name(format!("swordfish-wsgi-{i}")).spawn(move || e.work());
            match spawned {
                Ok(h) => handles.push(h),
                Err(err) => {
                    *lock_unpoisoned(&engine.alive) -= threads - i;
                    engine.stop.store(true, Ordering::Relaxed);
                    engine.lead.stop();
                    let _ = engine.waker.wake();
                    return Err(os_error(err));
                }
            }
        }
        Ok(WsgiEngine { engine, threads: Mutex::new(handles) })
    }

    /// Stop accepting: the listening sockets leave the poller (the engine's duplicates
    /// close; the server closes its own).
    fn close_listeners(&self) {
        let mut listeners = lock_unpoisoned(&self.engine.listeners);
        let watching = std::mem::replace(&mut listeners.watching, false);
        for l in listeners.held.iter_mut() {
            if let Some(mut l) = l.take() {
                if watching {
                    let _ = self.engine.registry.deregister(l.source());
                }
            }
        }
    }

    /// Graceful shutdown of the connections (after `HttpServerState.begin_shutdown()`):
    /// an idle one closes now, a busy one after its response, a new one gets its first
    /// request if it comes soon. Connections busy now are looked at again on the next call.
    fn shutdown(&self) {
        let e = &self.engine;
        let grace = e.settings().timeout_header.min(FIRST_REQUEST_GRACE);
        let drain = e.settings().draining.load(Ordering::Relaxed);
        for slot in e.all() {
            if !slot.try_own() {
                continue;
            }
            let mut acts = Vec::new();
            {
                let mut c = slot.lock();
                if !c.shutdown && !c.objects.closed {
                    c.shut_down(drain, grace, &mut acts);
                    e.stage(&slot, &mut c, &mut acts);
                }
            }
            if let Some(job) = e.settle(slot, false) {
                e.queue_job(job);
            }
        }
    }

    /// Close every connection not serving a request now (the graceful timeout ran out);
    /// one serving closes when its app returns.
    fn abort(&self) {
        let e = &self.engine;
        for slot in e.all() {
            if slot.try_own() {
                let mut c = slot.lock();
                e.close(&slot, &mut c);
            }
        }
    }

    /// Open connections.
    #[getter]
    fn connections(&self) -> usize {
        self.engine.open.load(Ordering::Relaxed)
    }

    #[getter]
    fn threads(&self) -> usize {
        self.engine.threads
    }

    /// Stop the threads: waits up to `timeout` seconds for those in the app; returns how
    /// many are still in it (left behind).
    fn stop(&self, py: Python<'_>, timeout: f64) -> usize {
        let e = &self.engine;
        e.stop.store(true, Ordering::Relaxed);
        e.lead.stop();
        let _ = e.waker.wake();
        let handles = std::mem::take(&mut *lock_unpoisoned(&self.threads));
        let wait = std::time::Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(std::time::Duration::MAX);
        py.detach(|| {
            let alive = lock_unpoisoned(&e.alive);
            let stuck = match e.exited.wait_timeout_while(alive, wait, |n| *n > 0) {
                Ok((n, _)) => *n,
                Err(p) => *p.into_inner().0,
            };
            // The threads that left are joined; one still in the app is left behind.
            for h in handles.into_iter().filter(|h| h.is_finished()) {
                let _ = h.join();
            }
            stuck
        })
    }
}
