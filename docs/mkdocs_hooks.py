"""mkdocs hooks: the README as the site's home page, and fences rendered as plain code.

- The site's `index.md` is the repository's README: its links into `docs/` become links
  between pages, and its other relative links (LICENSE, ...) point at the repository.
- A page's fence may carry more than its language (```` ```bash notest: why ````,
  ```` ```python file=agent_func.py ````, ```` ```bash needs=docker ````; see
  docs/writing-docs.md). Python-Markdown's fenced code reads only a bare language, so the
  rest is cut before rendering.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<language>[\w+-]+)[ \t]+\S.*$", re.MULTILINE
)
DOCS_LINK = re.compile(r"\]\(docs/")
REPO_LINK = re.compile(r"\]\((?!https?:|#|mailto:)(?P<path>[^)\s]+)\)")


def on_files(files: Any, config: Any) -> Any:
    """Add the README as `index.md`."""
    from mkdocs.structure.files import File

    readme = Path(config["docs_dir"]).parent / "README.md"
    text = DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
    blob = f"{config['repo_url'].rstrip('/')}/blob/main/"
    text = REPO_LINK.sub(
        lambda m: m[0] if m["path"].split("#")[0].endswith(".md") else f"]({blob}{m['path']})",
        text,
    )
    files.append(File.generated(config, "index.md", content=text))
    return files


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Keep only the language of each fence's info string."""
    return FENCE.sub(r"\g<indent>\g<fence>\g<language>", markdown)
