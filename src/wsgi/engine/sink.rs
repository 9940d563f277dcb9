//! What a WSGI app sends, applied to its connection on the app's own thread (the thread
//! engine's `Route::Direct`): response parts framed by the connection core (a streamed
//! part written at once with the GIL released, the last one left for the runner to write
//! after the app returns), a `wsgi.file_wrapper` file by `sendfile`, more of the request
//! body read from the socket, and the app's end.

use super::slot::{Conn, Slot};
use super::socket::Filled;
use super::Engine;
use crate::http::conn::{Expect, Phase};
use crate::http::head::ResponseHead;
use crate::http::reading::{body_ready, take_body_buf, Next};
use crate::http::settings::Settings;
use crate::http::writing::{Part, Unfinished};
use crate::wsgi::bridge::{app_error, OutPart, Post, WSGI_APP_END};
use crate::wsgi::exchange::{Exchange, Sink};
use pyo3::intern;
use pyo3::prelude::*;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub struct Direct {
    engine: Arc<Engine>,
    slot: Arc<Slot>,
}

impl Direct {
    pub fn new(engine: Arc<Engine>, slot: Arc<Slot>) -> Direct {
        Direct { engine, slot }
    }

    /// Hand the body bytes in the read buffer (or the body's end) to the exchange; whether
    /// there were any.
    pub fn body_arrived(st: &Settings, c: &mut Conn, ex: &Exchange, acts: &mut Vec<super::slot::Act>) -> bool {
        if let Next::BodyRefused = c.next(st, acts) {
            end_body(ex);
            return true;
        }
        let Some(req) = c.current(ex.gen) else {
            end_body(ex);
            return true;
        };
        if !body_ready(req) {
            return false;
        }
        let (data, more) = take_body_buf(req);
        ex.update(|s| {
            s.asked = false;
            s.push_buf(data, more);
        });
        true
    }

    /// Write the output now, with the GIL released; false if the client is gone.
    fn write_now(&self, py: Python<'_>, c: &mut Conn) -> bool {
        let stop = &self.engine.stop;
        let link = &mut c.objects;
        let written = py.detach(|| link.write_all(stop));
        let st = self.engine.settings();
        let mut acts = Vec::new();
        let ok = match written {
            Ok(None) => true,
            Ok(Some((sent, gen))) => {
                if let Some(gen) = gen {
                    c.file_sent(st, gen, sent.is_ok(), &mut acts);
                }
                sent.is_ok()
            }
            Err(_) => false,
        };
        if !ok {
            c.phase = Phase::Lost;
        }
        self.engine.stage(&self.slot, c, &mut acts);
        ok
    }

    fn respond(&self, py: Python<'_>, ex: &Exchange, parts: Vec<OutPart>) -> PyResult<()> {
        let st = self.engine.settings();
        let mut acts = Vec::new();
        let mut streaming = false;
        let mut posted = 0;
        let mut error = None;
        let mut c = self.slot.lock();
        for part in parts {
            let taken = match part {
                OutPart::Head(head) => c.take_part(st, ex.gen, Part::Head { head, trailers: false }, &mut acts),
                OutPart::Body(body, more) => {
                    let data = body.bind(py).as_bytes();
                    posted += data.len();
                    streaming |= more;
                    c.take_part(st, ex.gen, Part::Body { data, object: &|| data.to_vec(), more }, &mut acts)
                }
            };
            if let Err(e) = taken {
                ex.update(|s| s.gone = true);
                error = app_error(e);
                break;
            }
        }
        self.engine.stage(&self.slot, &mut c, &mut acts);
        // A streamed part leaves now (the app waits while the client does not read); the
        // last one leaves once the app has returned, and so does one that completes the
        // announced length (an app that gives its body as an iterator of one part).
        let streaming = streaming && !c.length_reached(ex.gen);
        if streaming && !c.lost() && !self.write_now(py, &mut c) {
            ex.update(|s| s.gone = true);
        }
        drop(c);
        ex.update(|s| s.in_flight = s.in_flight.saturating_sub(posted));
        if let Some(text) = error {
            self.engine.log_error(py, text, None);
        }
        Ok(())
    }

    fn send_file(
        &self,
        py: Python<'_>,
        ex: &Exchange,
        head: ResponseHead,
        file: Py<PyAny>,
        offset: u64,
        size: u64,
    ) -> PyResult<()> {
        let st = self.engine.settings();
        let fd: i32 = file.call_method0(py, intern!(py, "fileno"))?.extract(py)?;
        // SAFETY: the file object owns `fd` and keeps it open: the app thread waits here,
        // holding it, until the file is sent.
        let dup = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
        let mut acts = Vec::new();
        let mut c = self.slot.lock();
        let taken = c.take_part(st, ex.gen, Part::Head { head, trailers: false }, &mut acts).and_then(|_| {
            c.take_part(st, ex.gen, Part::File { size, open: Some((std::fs::File::from(dup), offset)) }, &mut acts)
        });
        self.engine.stage(&self.slot, &mut c, &mut acts);
        let ok = taken.is_ok() && !c.lost() && self.write_now(py, &mut c);
        drop(c);
        ex.update(|s| {
            s.file_done = true;
            s.gone |= !ok;
        });
        Ok(())
    }

    /// More of the body for the app: what the read buffer holds, or what the socket brings
    /// (waiting with the GIL released).
    fn read(&self, py: Python<'_>, ex: &Exchange) -> PyResult<()> {
        let st = self.engine.settings();
        let stop = &self.engine.stop;
        loop {
            let mut acts = Vec::new();
            let mut c = self.slot.lock();
            let lost = c.lost();
            let Some(req) = c.current(ex.gen) else {
                end_body(ex);
                return Ok(());
            };
            if req.expect == Expect::Waiting && !req.writing.head_written() && !lost {
                req.expect = Expect::Answered;
                c.objects.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                if !self.write_now(py, &mut c) {
                    end_body(ex);
                    return Ok(());
                }
            }
            let arrived = Direct::body_arrived(st, &mut c, ex, &mut acts);
            self.engine.stage(&self.slot, &mut c, &mut acts);
            if arrived {
                return Ok(());
            }
            if c.lost() || c.current(ex.gen).is_none_or(|r| r.complete()) || c.closing() {
                end_body(ex);
                return Ok(());
            }
            let conn: &mut Conn = &mut c;
            let (link, rbuf) = (&mut conn.objects, &mut conn.rbuf);
            let (filled, n) = py.detach(|| loop {
                match link.fill(rbuf) {
                    Filled::Data { n, drained } => {
                        link.drained = drained;
                        return (true, n);
                    }
                    Filled::Drained if link.stream.wait(libc::POLLIN, stop) => {}
                    Filled::Drained | Filled::Closed => return (false, 0),
                }
            });
            if let Some(m) = st.metrics() {
                m.received(n);
            }
            if !filled {
                c.phase = Phase::Lost;
            }
        }
    }

    fn finished(&self, py: Python<'_>, ex: &Exchange, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let st = self.engine.settings();
        st.active_requests.fetch_sub(1, Ordering::Relaxed);
        let disconnected = exc.is_none() && ex.lock().truncated;
        let mut acts = Vec::new();
        let (lost, unfinished) = {
            let mut c = self.slot.lock();
            let lost = c.lost();
            let unfinished = c.app_unfinished(st, ex.gen, exc.is_some(), &mut acts);
            self.engine.stage(&self.slot, &mut c, &mut acts);
            (lost, unfinished)
        };
        let words = &WSGI_APP_END;
        match unfinished {
            Some(_) if lost => {}
            Some(how) => {
                let text = match how {
                    Unfinished::Raised => words.raised,
                    Unfinished::ReturnedBeforeStart => words.returned_before_start,
                    Unfinished::ReturnedBeforeEnd => words.returned_before_end,
                };
                self.engine.log_error(py, text, exc);
            }
            // The response is complete: an exception after it is still the app's error,
            // unless it is the one raised because the client is gone.
            None => {
                if let Some(e) = exc.filter(|_| !disconnected) {
                    self.engine.log_error(py, words.raised, Some(e));
                }
            }
        }
        Ok(())
    }
}

/// Nothing more of the body comes: cut short unless it had ended.
fn end_body(ex: &Exchange) {
    ex.update(|s| {
        s.asked = false;
        s.truncated |= !s.body_ended;
        s.body_ended = true;
    });
}

impl Sink for Direct {
    fn apply(&self, py: Python<'_>, post: Post) -> PyResult<()> {
        match post {
            Post::Respond(ex, parts) => self.respond(py, &ex, parts),
            Post::File { ex, head, file, offset, size } => self.send_file(py, &ex, head, file, offset, size),
            Post::Read(ex) => self.read(py, &ex),
            Post::Finished(ex, exc) => self.finished(py, &ex, exc),
        }
    }

    fn settings(&self) -> &Settings {
        self.engine.settings()
    }
}
