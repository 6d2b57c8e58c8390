"""Imported first by the forkserver of oracles/procs.py, for its side effect: Ctrl-C (SIGINT) ignored in the server.
A forked worker restores the handlers the server had after its preloads, so with this it ignores Ctrl-C from its first
instruction; without it, a Ctrl-C in the instants between fork and the worker's own `signal.signal` call raised
KeyboardInterrupt inside multiprocessing's start-up code and printed a traceback. The parent (fuzz, conformance) gets
the Ctrl-C and stops its workers itself."""
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
