"""Standard file formats: ours (detaudit), miles_diffusion's, and the golden-value files of
Megatron-LM, TorchTitan and NeMo-RL.

``registry`` says which format a file is and reads and writes through it. Each format module
imports ``detaudit.standards.standard`` (the model), never the reverse. Conversions are exact: where a
format cannot hold a value bit for bit (NaN in Megatron's files, a float step in a format
keyed by integer steps, more than one series in a TorchTitan loss file), writing fails with
an ``InputError`` naming the series and step; nothing is rounded or dropped silently.
"""

from detaudit.standards.formats.registry import (
    FORMATS,
    SAMPLED_FORMATS,
    align_run_series,
    detect_format,
    drop_nan_series,
    load_any,
    render_as,
    write_as,
)

__all__ = [
    "FORMATS",
    "SAMPLED_FORMATS",
    "align_run_series",
    "detect_format",
    "drop_nan_series",
    "load_any",
    "render_as",
    "write_as",
]
