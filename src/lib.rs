//! swordfish's native core: the event loop's scheduling, timers and I/O reactor, the
//! transports, the HTTP/1.1 connection, and the ASGI, WSGI and RSGI interfaces.

mod allocator;
mod asgi;
mod call_args;
mod carrier;
mod clock;
mod context;
mod event_loop;
#[cfg(fuzzing)]
pub mod fuzzing;
mod handles;
mod http;
mod http2;
mod intmap;
mod metrics;
mod pyutil;
mod reactor;
mod rsgi;
mod sock_ops;
mod spare;
mod sync;
mod tasks;
#[cfg(test)]
mod testing;
mod timers;
mod transport;
mod ws;
mod wsgi;

use pyo3::prelude::*;

/// The loop's clock (CLOCK_MONOTONIC), in seconds.
#[pyfunction]
fn monotonic() -> f64 {
    clock::monotonic()
}

#[pyfunction]
fn clock_resolution() -> f64 {
    clock::resolution()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    sync::require_gil(m.py())?;
    m.add_class::<event_loop::LoopCore>()?;
    m.add_class::<handles::Handle>()?;
    m.add_class::<handles::TimerHandle>()?;
    m.add_class::<sock_ops::SockOp>()?;
    m.add_class::<transport::stream::StreamCore>()?;
    m.add_class::<transport::datagram::DatagramCore>()?;
    m.add_class::<transport::tls::TlsCore>()?;
    m.add_class::<transport::tls::RustlsServerConfig>()?;
    http::register(m)?;
    http2::register(m)?;
    asgi::register(m)?;
    wsgi::register(m)?;
    rsgi::register(m)?;
    metrics::register(m)?;
    // The transport and the HTTP connection know nothing of what runs on them: the
    // native protocols and interfaces are wired here.
    transport::native::register(vec![
        transport::tls::native_reader,
        http::native_reader,
        http2::native_reader,
        ws::conn::native_reader,
    ]);
    http::dispatch::register(vec![
        asgi::app::AsgiDispatch::recognise,
        wsgi::app::WsgiDispatch::recognise,
        rsgi::app::RsgiDispatch::recognise,
    ]);
    tasks::register(m)?;
    m.add_function(wrap_pyfunction!(monotonic, m)?)?;
    m.add_function(wrap_pyfunction!(clock_resolution, m)?)?;
    m.add_function(wrap_pyfunction!(allocator::tune_allocator, m)?)?;
    Ok(())
}
