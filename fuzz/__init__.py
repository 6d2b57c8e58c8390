"""The differential fuzzer: random kernels x random Opts on every backend, compared bit for bit with the PYTHON
reference, crashes isolated in worker processes, failures shrunk and saved as JSON regressions (`python -m fuzz`)."""
