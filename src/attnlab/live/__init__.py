"""The live page (``attnlab serve``, ``attnlab.serve``): a local page that recomputes
attention as the reader types, for any model attnlab runs (the seed's layer, attnlab's
NumPy models, transformers models)::

    import attnlab as al
    from attnlab import models

    server = al.serve(models.load("builtin:coref"))   # prints the address; Ctrl-C stops it
    server = al.serve(model, block=False)             # in the background (a notebook's default)
    server.stop()
"""

from ._server import DEFAULT_TEXT, MAX_BODY, LiveServer, serve
from ._session import MAX_GENERATE, MAX_TEXT, Request, Session

__all__ = ["DEFAULT_TEXT", "MAX_BODY", "MAX_GENERATE", "MAX_TEXT", "LiveServer", "Request", "Session", "serve"]
