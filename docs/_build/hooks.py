"""MkDocs hooks of attnlab's site (mkdocs.yml: ``hooks:``).

The tutorial's cells are executed by markdown-exec while the pages are built. They write the
attnlab pages they embed as iframes into the built site, so the site's directory is handed to
them in ``ATTNLAB_SITE_DIR``; the shell cells run the ``attnlab`` of the Python that builds the
site, and matplotlib draws without a display.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def on_config(config: Any) -> Any:
    """Hand the site's directory, the builder's ``bin`` and a headless matplotlib to the cells.

    Args:
        config: the MkDocs configuration.
    """
    os.environ["ATTNLAB_SITE_DIR"] = str(Path(config.site_dir).resolve())
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ.setdefault("MPLBACKEND", "Agg")
    return config
