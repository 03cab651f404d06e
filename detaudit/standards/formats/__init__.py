"""Standard file formats: detaudit's own, miles_diffusion's, and the golden files of Megatron-LM,
TorchTitan and NeMo-RL; one module each, found by ``registry`` (its table).

Each format module imports the model (``detaudit.standards.model``), never the reverse. A
format module defines ``FORMAT`` (``common.Format``): how its files are recognised, read and
written, how ``verify`` compares a run with one (its framework's checker), and what it holds.
Conversions are exact or refused: ``registry.convert`` reads what it wrote back and refuses,
naming it, anything that would be lost.
"""

from detaudit.standards.formats.registry import (
    FORMAT_NAMES,
    TABLE,
    Conversion,
    comparison_of,
    convert,
    detect_format,
    drop_nan_series,
    format_of,
    load_any,
    render_as,
    write_as,
    write_conversion,
)

__all__ = [
    "FORMAT_NAMES",
    "TABLE",
    "Conversion",
    "comparison_of",
    "convert",
    "detect_format",
    "drop_nan_series",
    "format_of",
    "load_any",
    "render_as",
    "write_as",
    "write_conversion",
]
