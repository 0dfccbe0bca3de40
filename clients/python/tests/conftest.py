import os
import sys

# The package from this checkout, unless the tests run against an installed
# one (the integration test installs it into a venv and sets this).
if not os.environ.get("TETHER_PYTHON_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
