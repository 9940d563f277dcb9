//! `send()`: each ASGI message checked and given to the connection as a part of the
//! response (`http::respond`); `http.response.pathsend` hands the file to the server's
//! sender.

use super::super::app::AsgiDispatch;
use super::super::{ready_none, ClientDisconnected};
use super::messages::{read_message, Message};
use crate::carrier::Carrier;
use crate::http::respond::{OpenFile, Part, RespondError, Responded};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

pub(super) fn send(py: Python<'_>, carrier: &Carrier, gen: u64, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let state = carrier.state();
    let msg = read_message(state, message)?;
    let type_name = msg.type_name();
    let mut path = None;
    let part = match msg {
        Message::Start { head, trailers } => Part::head(head, trailers),
        Message::Body { body, more } => Part::Body { body, more },
        Message::Trailers { fields, more } => Part::trailers(fields, more),
        Message::PathSend { path: p, size } => match carrier {
            // An HTTP/2 stream reads the file into DATA frames itself.
            Carrier::H2(_) => {
                let file = std::fs::File::open(p.extract::<std::path::PathBuf>()?)?;
                Part::File { size, open: Some(OpenFile { file, offset: 0, sender: py.None() }) }
            }
            Carrier::H1(_) => {
                path = Some(p);
                Part::File { size, open: None }
            }
        },
    };
    match carrier.respond(py, gen, part)? {
        Ok(Responded::Ready) => ready_none(py),
        Ok(Responded::Drain(fut)) => Ok(fut),
        Ok(Responded::File(transport, size)) => {
            let app = AsgiDispatch::app_of(state.dispatch.as_ref())
                .ok_or_else(|| PyTypeError::new_err("not an ASGI server"))?;
            let t = transport.unwrap_or_else(|| py.None());
            app.pathsend.call1(py, (carrier.object(py), t, path, gen, size))
        }
        Err(e) => Err(error(e, type_name)),
    }
}

/// The exception an app gets for a message the response cannot take.
fn error(e: RespondError, type_name: &str) -> PyErr {
    let text = match e {
        RespondError::Gone => return ClientDisconnected::new_err("the client disconnected"),
        RespondError::Finished => {
            return PyRuntimeError::new_err(format!(
                "Unexpected ASGI message '{type_name}' sent, after response already completed."
            ))
        }
        RespondError::AlreadyStarted => {
            "Unexpected ASGI message 'http.response.start' sent, after response already started."
        }
        RespondError::NotStarted => "Expected ASGI message 'http.response.start', but got 'http.response.body'.",
        RespondError::BodyComplete => {
            "Unexpected ASGI message 'http.response.body' sent, after response already completed."
        }
        RespondError::NoTrailers => "Unexpected ASGI message 'http.response.trailers'.",
        RespondError::FileNotAllowed => "Unexpected ASGI message 'http.response.pathsend'.",
        RespondError::FileLength => "Content-Length does not match the file size",
        RespondError::TooLong => "Response content longer than Content-Length",
        RespondError::TooShort => "Response content shorter than Content-Length",
    };
    PyRuntimeError::new_err(text)
}
