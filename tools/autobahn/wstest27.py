"""Start Autobahn|Testsuite's wstest on Python 2.7 from the pip --target directory given in
PYTHONPATH (tools/autobahn/.py27/lib); arguments are wstest's.

    PYTHONPATH=tools/autobahn/.py27/lib python2.7 tools/autobahn/wstest27.py -m fuzzingclient -s spec.json

Python reads .pth files only in site directories, and zope.interface relies on one to make
`zope` a namespace package; without it Twisted cannot import. Each PYTHONPATH entry is
therefore made a site directory before wstest starts.
"""

import os
import site
import sys

for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if entry:
        site.addsitedir(entry)

from autobahntestsuite.wstest import run  # noqa: E402

sys.argv[0] = "wstest"
run()
