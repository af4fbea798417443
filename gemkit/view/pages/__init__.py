"""The viewer's HTML pages, built from escaped parts only (see `gemkit.view.markup`).

Each page function takes what the server found (the catalog, a collection, the request's
parameters) and returns the page as `Markup`. Pages read records only through the
collection, so a list page reads the records it shows and no others; plots read none.
"""

from gemkit.view.pages.list_page import list_page
from gemkit.view.pages.overview_page import overview
from gemkit.view.pages.parts import error_page, layout
from gemkit.view.pages.plots_page import plots_page
from gemkit.view.pages.record_page import record_page
from gemkit.view.pages.task_page import TaskCheck

__all__ = [
    "TaskCheck",
    "error_page",
    "layout",
    "list_page",
    "overview",
    "plots_page",
    "record_page",
]
