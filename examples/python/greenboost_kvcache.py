"""greenboost_kvcache: the name the tests beside this file import for greenboost.kvcache,
the package in python/greenboost (pip install ./python/greenboost gives import greenboost).

The tests check the package's source in this tree, not whatever copy pip installed,
unless GREENBOOST_TEST_INSTALLED=1: then the installed package (make
python-package-test installs the wheel in a venv and runs them so). This module is
replaced by greenboost.kvcache in sys.modules, so what the tests patch or read is the
package's module itself."""

import os
import sys

if os.environ.get("GREENBOOST_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "greenboost", "src"))

import greenboost.kvcache  # noqa: E402

sys.modules[__name__] = greenboost.kvcache
