"""Where the tests beside this file find the greenboost package: this tree's source
(python/greenboost/src), so that they check the code as it is here, or, with
GREENBOOST_TEST_INSTALLED=1, the installed package (make python-package-test installs
the wheel in a venv and runs them so)."""

import os
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "greenboost", "src")

if os.environ.get("GREENBOOST_TEST_INSTALLED") != "1":
    sys.path.insert(0, SOURCE)
