"""Build the unittest suite of one test module for one loop kind."""

import fnmatch
import importlib
import inspect
import unittest


def import_module(spec):
    """The test module, or raise unittest.SkipTest / ImportError."""
    return importlib.import_module(spec.qualname)


def synthesize(module, spec, kind):
    """The concrete test class built from the module's generic mixins whose
    loop factory method (create_event_loop) returns a new loop of ``kind``."""
    from test.test_asyncio import utils as test_utils

    if spec.template_class:
        bases = (getattr(module, spec.template_class),)
    else:
        mixins = tuple(getattr(module, name) for name in spec.generic_mixins
                       if hasattr(module, name))
        if not mixins:
            return None
        bases = mixins + ({"test_utils": test_utils.TestCase,
                           "unittest": unittest.TestCase}[spec.base],)

    def new_loop(self):
        return kind.new_loop()

    return type(spec.generic_class, bases, {
        spec.factory_method: new_loop,
        "__module__": module.__name__,
        "__qualname__": spec.generic_class,
        "__doc__": f"{', '.join(spec.generic_mixins)} on the loop under test",
    })


def _loop_specific(spec, module):
    """Classes whose subclasses are the module's per-selector test classes."""
    names = list(spec.generic_mixins) + list(spec.deferred_mixins)
    return tuple(getattr(module, n) for n in names if hasattr(module, n))


def flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def excluded_reason(spec, test_id):
    for pattern, reason in spec.exclude_tests.items():
        if fnmatch.fnmatchcase(test_id, pattern):
            return reason
    return None


def build(module, spec, kind):
    """The module's tests for ``kind`` as a flat list, and {excluded test id:
    reason}.  (A flat unittest.TestSuite of them still runs class and
    module fixtures: TestSuite.run tracks them test by test.)"""
    loader = unittest.TestLoader()
    tests = list(flatten(loader.loadTestsFromModule(module)))
    specific = _loop_specific(spec, module)
    if specific:
        tests = [t for t in tests if not isinstance(t, specific)]
        generic = synthesize(module, spec, kind)
        if generic is not None:
            tests += list(flatten(loader.loadTestsFromTestCase(generic)))
    kept, excluded = [], {}
    for test in tests:
        reason = excluded_reason(spec, test.id())
        if reason:
            excluded[test.id()] = reason
        else:
            kept.append(test)
    return kept, excluded


def describe_classes(module, spec):
    """(class name, kept?) for each TestCase class defined in the module:
    used by the docs to list what runs and what is dropped."""
    specific = _loop_specific(spec, module)
    rows = []
    for name, obj in vars(module).items():
        if (inspect.isclass(obj) and issubclass(obj, unittest.TestCase)
                and obj.__module__ == module.__name__):
            rows.append((name, not (specific and issubclass(obj, specific))))
    return rows
