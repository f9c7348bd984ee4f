"""The compiled record codec (`_codec.pyx`), or one clear error: klake never falls back to a slow path.

The extension is built by the install (`pip install .`, `make test`, `make demo`, `make dist`).
"""

try:
    from engine.format import _codec as codec
except ImportError as exc:
    raise ImportError("klake's compiled record codec (engine.format._codec) is not built: install klake with "
                      f"`pip install .` (or run `make test`/`make demo`, which build it) [{exc}]") from None

__all__ = ["codec"]
