// Package pythonenv gives tests the Python client as its users install it:
// Debian's Python packages extracted by hack/testbin.sh python (nothing is
// installed on the system), a venv of /usr/bin/python3, and a copy of
// clients/python installed into it offline.
package pythonenv
