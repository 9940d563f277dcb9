//! `Exchange`: one request between the loop thread, which owns the connection, and the app
//! thread serving it. They share the request body that has arrived and the state of the
//! response's flow (paused while the connection's write buffer is full, or the client gone)
//! under one lock; the app thread waits on its condition variable with the GIL released.
//! What the app thread sends goes by its `Route`: to the loop thread (`bridge`), or, where
//! the app thread owns the connection itself (the thread engine, `engine`), straight to it.

use super::bridge::{Post, WsgiBridge};
use super::request::WsgiRequest;
use crate::carrier::Carrier;
use crate::http::conn::BodyBuf;
use crate::http::head::HeadRules;
use crate::http::settings::Settings;
use crate::sync::{lock_unpoisoned, wait_unpoisoned};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Where what the app thread sends goes.
pub enum Route {
    /// To the loop thread, which owns the connection (HTTP/1.x, or HTTP/2's stream).
    Loop { carrier: Carrier, bridge: Py<WsgiBridge> },
    /// To the connection, on the app thread itself.
    Direct(Arc<dyn Sink>),
}

/// A connection the app thread serving it owns: a post is applied there and then, on the
/// app thread (waiting, with the GIL released, where the loop would have paused it).
pub trait Sink: Send + Sync {
    fn apply(&self, py: Python<'_>, post: Post) -> PyResult<()>;
    fn settings(&self) -> &Settings;
}

pub struct Exchange {
    pub route: Route,
    pub gen: u64,
    pub request: Py<WsgiRequest>,
    shared: Mutex<Shared>,
    changed: Condvar,
}

#[derive(Default)]
pub struct Shared {
    /// Body bytes arrived and not read by the app yet: `body[body_pos..]`.
    pub body: Vec<u8>,
    pub body_pos: usize,
    /// The whole body has arrived, or nothing more will.
    pub body_ended: bool,
    /// The body ended before its end: the client left, or the connection refused the rest.
    pub truncated: bool,
    /// The app asked the loop for more of the body and has not been answered yet.
    pub asked: bool,
    /// The app has the request (before: the loop is still collecting the body's start).
    pub submitted: bool,
    /// The connection's write buffer is above its high-water mark: the app waits.
    pub paused: bool,
    /// Nothing more reaches the client (it left, or the connection ended the response).
    pub gone: bool,
    /// The file sent as the body is out (or failed): the app's iterable may be closed.
    pub file_done: bool,
    /// Body bytes the app thread posted that the loop has not given the connection yet:
    /// the app waits past `IN_FLIGHT`, or it could queue without bound before the loop
    /// learns that writing is paused.
    pub in_flight: usize,
    /// The app thread waits on the condition variable.
    waiting: bool,
}

/// Most body bytes posted by the app thread and not yet handed to the connection.
pub const IN_FLIGHT: usize = 256 * 1024;

impl Shared {
    /// The app may post more of its response.
    pub fn writable(&self) -> bool {
        self.gone || (!self.paused && self.in_flight < IN_FLIGHT)
    }

    pub fn buffered(&self) -> usize {
        self.body.len() - self.body_pos
    }

    /// Add body bytes (compacting what the app has read).
    pub fn push_body(&mut self, data: &[u8], more: bool) {
        if self.body_pos > 0 && self.body_pos == self.body.len() {
            self.body.clear();
            self.body_pos = 0;
        }
        self.body.extend_from_slice(data);
        self.body_ended |= !more;
    }

    /// Add body bytes in a buffer of their own, kept rather than copied when nothing is
    /// buffered.
    pub fn push_buf(&mut self, data: BodyBuf, more: bool) {
        if self.buffered() == 0 {
            (self.body, self.body_pos) = data.into_parts();
            self.body_ended |= !more;
        } else {
            self.push_body(data.bytes(), more);
        }
    }

    /// Take up to `n` bytes of the body that has arrived.
    pub fn take_body(&mut self, n: usize) -> &[u8] {
        let start = self.body_pos;
        let end = start + n.min(self.buffered());
        self.body_pos = end;
        self.body.get(start..end).unwrap_or_default()
    }
}

impl Exchange {
    pub fn new(route: Route, gen: u64, request: Py<WsgiRequest>) -> Exchange {
        Exchange { route, gen, request, shared: Mutex::new(Shared::default()), changed: Condvar::new() }
    }

    /// The loop's connection (only a loop-routed exchange has one).
    pub fn carrier(&self) -> PyResult<&Carrier> {
        match &self.route {
            Route::Loop { carrier, .. } => Ok(carrier),
            Route::Direct(_) => Err(PyRuntimeError::new_err("the request is not served by the loop")),
        }
    }

    /// Send `post` on its way (see `Route`).
    pub fn post(&self, py: Python<'_>, post: Post) -> PyResult<()> {
        match &self.route {
            Route::Loop { bridge, .. } => WsgiBridge::post(bridge.bind(py), post),
            Route::Direct(sink) => sink.apply(py, post),
        }
    }

    /// The response head's rules (date, server, default fields) of the connection's server.
    pub fn with_rules<R>(&self, f: impl FnOnce(&HeadRules<'_>) -> R) -> R {
        let settings = match &self.route {
            Route::Loop { carrier, .. } => &carrier.state().settings,
            Route::Direct(sink) => sink.settings(),
        };
        f(&settings.head_rules())
    }

    /// Whether a `wsgi.file_wrapper` file can be sent by `sendfile` (`Post::File`): over
    /// HTTP/1.x (an HTTP/2 stream's file is read into DATA frames, as any iterable).
    pub fn sends_files(&self) -> bool {
        match &self.route {
            Route::Loop { bridge, carrier } => bridge.get().sendfile.is_some() && carrier.h1().is_some(),
            Route::Direct(_) => true,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain data, still consistent enough to end
        // the exchange.
        lock_unpoisoned(&self.shared)
    }

    /// Change the shared state and wake the app thread if it waits.
    pub fn update(&self, f: impl FnOnce(&mut Shared)) {
        let mut g = self.lock();
        f(&mut g);
        if g.waiting {
            drop(g);
            self.changed.notify_all();
        }
    }

    /// On the app thread: wait, with the GIL released, until `ready`; then `then` on the
    /// state.
    pub fn wait_for<R: Send>(
        &self,
        py: Python<'_>,
        ready: impl Fn(&Shared) -> bool + Send + Sync,
        then: impl FnOnce(&mut Shared) -> R + Send,
    ) -> R {
        {
            let mut g = self.lock();
            if ready(&g) {
                return then(&mut g);
            }
        }
        py.detach(|| {
            let mut g = self.lock();
            while !ready(&g) {
                g.waiting = true;
                g = wait_unpoisoned(&self.changed, g);
            }
            g.waiting = false;
            then(&mut g)
        })
    }
}
