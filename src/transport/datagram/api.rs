//! What Python sees of `DatagramCore`: the methods `DatagramTransport` delegates to.

use super::*;

#[pymethods]
impl DatagramCore {
    /// Registers the descriptor with the loop (`_attach`) without watching it (`_start`).
    /// `address`: the default destination, None when there is none (or it is falsy);
    /// `connected`: the socket has a peer name; `header`: bytes counted per queued datagram;
    /// `drop_empty`: empty datagrams are not sent (before 3.13).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        lp: &Bound<'_, LoopCore>,
        sock: Py<PyAny>,
        fd: RawFd,
        family: libc::c_int,
        transport: &Bound<'_, PyAny>,
        address: Option<Bound<'_, PyAny>>,
        connected: bool,
        header: usize,
        drop_empty: bool,
    ) -> PyResult<Self> {
        if fd < 0 {
            return Err(PyValueError::new_err(format!("Invalid file descriptor: {fd}")));
        }
        let address_dest = match (&address, connected) {
            (Some(a), false) => native_sockaddr(family, a),
            _ => None,
        };
        Ok(DatagramCore {
            fd,
            family,
            native_read: matches!(family, libc::AF_INET | libc::AF_INET6 | libc::AF_UNIX),
            connected,
            header,
            drop_empty,
            lp: lp.clone().unbind(),
            inner: GilCell::new(Inner {
                transport: Some(PyWeakrefReference::new(transport)?.unbind()),
                protocol: None,
                sock: Some(sock),
                address: address.map(Bound::unbind),
                address_dest,
                read_context: Some(copy_context(py)?),
                write_context: None,
                attached: false,
                closed: false,
                lost_called: false,
                reader: false,
                writer: false,
                paused: false,
                closing: false,
                conn_lost: 0,
                protocol_paused: false,
                high: 65536.0,
                low: 16384.0,
                queue: VecDeque::new(),
                size: 0,
                reg_read: false,
                reg_write: false,
            }),
        })
    }

    /// Join the loop's descriptor table (the loop must not be closed).
    fn _attach(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let Some(transport) = this.transport_obj(py) else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("the transport is gone"));
        };
        this.lp.get().io_attach(py, this.fd, IoTarget::Datagram(slf.clone().unbind(), transport))?;
        this.inner(py)?.attached = true;
        Ok(())
    }

    /// Start reading (scheduled right after `connection_made`), unless closed or paused
    /// meanwhile.
    fn _start(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.inner(py)?;
        if inner.closing || inner.paused || inner.closed {
            return Ok(());
        }
        inner.reader = true;
        self.sync(py, &mut inner)
    }

    /// Claim the call of `connection_lost`: False when it was made already.
    fn _lose(&self, py: Python<'_>) -> PyResult<bool> {
        let mut inner = self.inner(py)?;
        Ok(!std::mem::replace(&mut inner.lost_called, true))
    }

    /// Leave the loop's descriptor table: the socket is about to be closed.
    fn _detach(&self, py: Python<'_>) -> PyResult<()> {
        let taken = {
            let mut inner = self.inner(py)?;
            if inner.attached {
                inner.attached = false;
                inner.reg_read = false;
                inner.reg_write = false;
                self.lp.get().io_detach(py, self.fd)?;
            }
            inner.closed = true;
            inner.reader = false;
            inner.writer = false;
            inner.size = 0;
            let queue: Vec<Queued> = inner.queue.drain(..).collect();
            (
                inner.protocol.take(),
                inner.transport.take(),
                inner.sock.take(),
                inner.read_context.take(),
                inner.write_context.take(),
                queue,
            )
        };
        drop(taken);
        Ok(())
    }

    fn set_protocol(&self, py: Python<'_>, protocol: Py<PyAny>) -> PyResult<()> {
        let old = self.inner(py)?.protocol.replace(protocol);
        drop(old);
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.inner(py)?.protocol.as_ref().map_or_else(|| py.None(), |p| p.clone_ref(py)))
    }

    #[pyo3(signature = (data, addr=None))]
    fn sendto(&self, py: Python<'_>, data: &Bound<'_, PyAny>, addr: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        if !(data.is_instance_of::<PyBytes>()
            || data.is_instance_of::<PyByteArray>()
            || data.is_instance_of::<PyMemoryView>())
        {
            let name = data.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "data argument must be a bytes-like object, not {}",
                name.repr()?
            )));
        }
        if self.drop_empty && !data.is_truthy()? {
            return Ok(());
        }
        // One look at the state: (default destination, its native form, whether the
        // connection is lost, whether the socket is closed, whether nothing is queued).
        let (address, address_dest, lost, closed, queue_empty) = {
            let inner = self.inner(py)?;
            (
                inner.address.as_ref().map(|a| a.clone_ref(py)),
                inner.address_dest,
                inner.conn_lost > 0,
                inner.closed,
                inner.queue.is_empty(),
            )
        };
        if let (Some(address), Some(a)) = (&address, &addr) {
            if !(a.is(address) || a.eq(address.bind(py))?) {
                return Err(PyValueError::new_err(format!(
                    "Invalid address: must be None or {}",
                    address.bind(py).str()?
                )));
            }
        }
        if lost && address.is_some() {
            let warn = {
                let mut inner = self.inner(py)?;
                let warn = inner.conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES;
                inner.conn_lost += 1;
                warn
            };
            if warn {
                py.import(intern!(py, "asyncio.log"))?
                    .getattr(intern!(py, "logger"))?
                    .call_method1(intern!(py, "warning"), ("socket.send() raised exception.",))?;
            }
            return Ok(());
        }
        if closed {
            // What the stdlib raises here: its transport has let go of its socket and its
            // loop, and reporting the failed send fails on the missing loop.
            return Err(PyAttributeError::new_err("'NoneType' object has no attribute 'call_exception_handler'"));
        }
        // The stdlib's choice: `send()` when the socket has a peer name, else `sendto()` to
        // the default destination or to `addr`.
        let dest = if self.connected {
            Dest::Connected
        } else if let Some(address) = address {
            match address_dest {
                Some(sa) => Dest::Native(sa),
                None => Dest::Python(Some(address)),
            }
        } else {
            match &addr {
                None => Dest::Python(None),
                Some(a) => match native_sockaddr(self.family, a) {
                    Some(sa) => Dest::Native(sa),
                    None => Dest::Python(Some(a.clone().unbind())),
                },
            }
        };
        if queue_empty {
            match self.send_now(py, data, &dest) {
                Ok(()) => return Ok(()),
                Err(Failure::WouldBlock) => {
                    let ctx = copy_context(py)?;
                    let old = {
                        let mut inner = self.inner(py)?;
                        inner.writer = true;
                        let old = inner.write_context.replace(ctx);
                        self.sync(py, &mut inner)?;
                        old
                    };
                    drop(old);
                }
                Err(Failure::Os(e)) => return self.error_received(py, e),
                Err(Failure::Exit(e)) => return Err(e),
                Err(Failure::Other(e)) => return self.fatal(py, e, FATAL_WRITE),
            }
        }
        let copy = bytes_of(data)?;
        let n = copy.bind(py).as_bytes().len() + self.header;
        {
            let mut inner = self.inner(py)?;
            inner.queue.push_back(Queued { data: copy, dest });
            inner.size += n;
        }
        self.maybe_pause_protocol(py)
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.inner(py)?.size)
    }

    fn is_closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.closing)
    }

    fn is_reading(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner(py)?;
        Ok(!inner.closing && !inner.paused)
    }

    /// True when reading was paused by this call.
    fn pause_reading(&self, py: Python<'_>) -> PyResult<bool> {
        let mut inner = self.inner(py)?;
        if inner.closing || inner.paused {
            return Ok(false);
        }
        inner.paused = true;
        inner.reader = false;
        self.sync(py, &mut inner)?;
        Ok(true)
    }

    /// True when reading was resumed by this call.
    fn resume_reading(&self, py: Python<'_>) -> PyResult<bool> {
        let ctx = copy_context(py)?;
        let old = {
            let mut inner = self.inner(py)?;
            if inner.closing || !inner.paused {
                drop(inner);
                drop(ctx);
                return Ok(false);
            }
            inner.paused = false;
            if inner.closed {
                return Ok(true);
            }
            inner.reader = true;
            let old = inner.read_context.replace(ctx);
            self.sync(py, &mut inner)?;
            old
        };
        drop(old);
        Ok(true)
    }

    /// Stop reading; lose the connection once the queue is flushed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let lost = {
            let mut inner = self.inner(py)?;
            if inner.closing {
                return Ok(());
            }
            inner.closing = true;
            inner.reader = false;
            let lost = inner.queue.is_empty();
            if lost {
                inner.conn_lost += 1;
                inner.writer = false;
            }
            self.sync(py, &mut inner)?;
            lost
        };
        match lost {
            true => self.schedule_lost(py, py.None()),
            false => Ok(()),
        }
    }

    /// Close at once, dropping the queue: `abort()` and fatal errors.
    #[pyo3(signature = (exc=None))]
    fn _force_close(&self, py: Python<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let exc = exc.unwrap_or_else(|| py.None());
        let dropped = {
            let mut inner = self.inner(py)?;
            if inner.conn_lost > 0 {
                return Ok(());
            }
            let dropped: Vec<Queued> = inner.queue.drain(..).collect();
            inner.size = 0;
            inner.writer = false;
            inner.closing = true;
            inner.reader = false;
            inner.conn_lost += 1;
            self.sync(py, &mut inner)?;
            dropped
        };
        drop(dropped);
        self.schedule_lost(py, exc)
    }

    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self._force_close(py, None)
    }

    /// Set validated write limits (the wrapper keeps the values the user gave).
    fn _set_limits(&self, py: Python<'_>, high: f64, low: f64) -> PyResult<()> {
        let mut inner = self.inner(py)?;
        inner.high = high;
        inner.low = low;
        Ok(())
    }

    fn _maybe_pause_protocol(&self, py: Python<'_>) -> PyResult<()> {
        self.maybe_pause_protocol(py)
    }

    /// (watching for reads, watching for writes, queued size): for `repr()`.
    fn _state(&self, py: Python<'_>) -> PyResult<(bool, bool, usize)> {
        let inner = self.inner(py)?;
        Ok((inner.reg_read, inner.reg_write, inner.size))
    }

    #[getter]
    fn _conn_lost(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.inner(py)?.conn_lost)
    }

    #[getter]
    fn _closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.closed)
    }

    #[getter]
    fn _transport_repr(&self, py: Python<'_>) -> PyResult<String> {
        crate::transport::describe_transport(py, self.transport_obj(py), self.fd)
    }

    fn fileno(&self) -> RawFd {
        self.fd
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        visit.call(&self.lp)?;
        if let Some(inner) = self.inner.try_lock(py) {
            visit.call(&inner.transport)?;
            visit.call(&inner.protocol)?;
            visit.call(&inner.sock)?;
            visit.call(&inner.address)?;
            visit.call(&inner.read_context)?;
            visit.call(&inner.write_context)?;
            for item in &inner.queue {
                if let Dest::Python(Some(a)) = &item.dest {
                    visit.call(a)?;
                }
            }
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        let taken = self.inner.try_lock(py).map(|mut i| {
            let queue: Vec<Queued> = i.queue.drain(..).collect();
            i.size = 0;
            (
                i.transport.take(),
                i.protocol.take(),
                i.sock.take(),
                i.address.take(),
                i.read_context.take(),
                i.write_context.take(),
                queue,
            )
        });
        drop(taken);
    }
}
