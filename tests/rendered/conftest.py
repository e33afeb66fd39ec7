"""Tests of the rendered book: run after the smoke build (``make test`` does both).

``HETFL_BOOK_BUILD`` names the build folder (default ``_build/smoke``, the one ``make test``
renders); the tests fail, not skip, when it is missing.
"""
import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def build_dir() -> Path:
    path = Path(os.environ.get("HETFL_BOOK_BUILD", ROOT / "_build" / "smoke"))
    if not (path / "html" / "index.html").exists():
        pytest.fail(f"no rendered book in {path}: run 'python tools/build_book.py --scale smoke "
                    f"--build-dir {path} --student' first")
    return path


def serve(directory: Path):
    """An HTTP server for ``directory`` on a free localhost port, in a thread; returns it and its URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
