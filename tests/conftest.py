"""Suite-wide set-up: Ctrl-C reaches the processes the tests start, however pytest was started."""

from __future__ import annotations

import signal

# A suite started in the background by a script (`pytest &`) inherits SIGINT ignored, and so
# would every process it starts, so the tests that press Ctrl-C on a `gemkit` command (and see
# it stop, say where its work is, keep the vector consistent) would wait for nothing. A Python
# handler here is reset to the default at `exec`: the children get Ctrl-C as a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
