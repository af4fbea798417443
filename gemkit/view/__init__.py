"""`gemkit view`: a local, read-only web viewer over what gemkit writes.

Episodes (`gemkit eval`, `gemkit run --out`), QA records (`gemkit synth qa`), task tuples
(`gemkit synth tasks`) and the `datasets` folders they export, with filters, search, paging
from disk, per-record pages and plots. Not imported by `import gemkit` (it needs aiohttp).

    from gemkit.view import ViewServer
    with ViewServer("results/") as viewer:
        print(viewer.url)
"""

from gemkit.view.catalog import discover
from gemkit.view.files import ViewError
from gemkit.view.server import ViewServer, make_app, start

__all__ = ["ViewError", "ViewServer", "discover", "make_app", "start"]
