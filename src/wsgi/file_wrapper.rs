//! `wsgi.file_wrapper` (PEP 3333, "Optional Platform-Specific File Handling"): an iterable
//! over a file-like object's blocks, whose `close()` closes the file. Returned by an app
//! for a regular file, it is sent with `sendfile` instead (`response::sendable`).

use pyo3::exceptions::PyStopIteration;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

#[pyclass(module = "swordfish._native", frozen)]
pub struct FileWrapper {
    filelike: Py<PyAny>,
    blksize: usize,
}

#[pymethods]
impl FileWrapper {
    #[new]
    #[pyo3(signature = (filelike, blksize=8192))]
    fn new(filelike: Py<PyAny>, blksize: usize) -> Self {
        FileWrapper { filelike, blksize: blksize.max(1) }
    }

    #[getter]
    pub fn filelike(&self, py: Python<'_>) -> Py<PyAny> {
        self.filelike.clone_ref(py)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let block = self.filelike.call_method1(py, intern!(py, "read"), (self.blksize,))?.into_bound(py);
        if block.is_truthy()? {
            Ok(block)
        } else {
            Err(PyStopIteration::new_err(()))
        }
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(close) = self.filelike.bind(py).getattr_opt(intern!(py, "close"))? {
            close.call0()?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.filelike)
    }
}
