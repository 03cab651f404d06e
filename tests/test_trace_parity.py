"""Trainer-engine parity within one run: module calls of two processes paired by module name and
inputs, their outputs compared (``trace --modules --parity A:B``), on tests/recipes/parity_recipe.py
(a model in a multiprocessing child named ``engine`` and in the main process)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.trace.parity import max_ulp

PARITY = REPO / "tests" / "recipes" / "parity_recipe.py"


def f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def bf16(*values: float) -> bytes:
    return b"".join(struct.pack("<f", v)[2:] for v in values)  # the upper half of a float32 (exact values only)


def test_max_ulp_counts_places_in_the_coarser_dtype() -> None:
    one_up = struct.unpack("<f", struct.pack("<I", 0x3F800001))[0]  # the float32 after 1.0
    assert max_ulp(f32(1.0, 2.0), "float32", f32(one_up, 2.0), "float32") == (1.0, "float32")
    assert max_ulp(f32(1.0, -0.0), "float32", f32(1.0, 0.0), "float32") == (0.0, "float32")  # -0 and +0 adjacent
    assert max_ulp(f32(-1.0), "float32", f32(1.0), "float32")[0] == 2 * 0x3F800000
    # across dtypes: the difference in units of the bfloat16 place at the value (2^-7 at 1.0)
    assert max_ulp(bf16(1.0), "bfloat16", f32(1.0 + 2 * 2**-7), "float32") == (2.0, "bfloat16")
    assert max_ulp(bf16(1.0), "bfloat16", f32(float("nan")), "float32")[0] == float("inf")


@pytest.mark.slow
def test_parity_names_the_first_module_with_same_inputs_and_different_outputs(tmp_path: Path) -> None:
    card = write_card(tmp_path / "parity.toml", name="parity", recipe=PARITY, extra='parity = "engine:main"\n')
    clean = run_cli("trace", str(card), "--modules", "--json", "--workdir", str(tmp_path / "clean"))
    assert clean.code == 0, clean.text
    report = json.loads(clean.out)["parity"]
    assert report["ok"] and report["matched"] == report["agreed"] == 4 and report["first"] is None  # 3 layers + root
    assert report["summary"] == ["parity engine vs main: 4 module calls of engine matched a call of main by module "
                                 "name and inputs, and all 4 agreed bit for bit (0 calls had no partner)"]
    bug = run_cli("trace", str(card), "--modules", "--parity", "engine:main", "--workdir", str(tmp_path / "bug"),
                  "--", "--engine-autocast", "bf16")
    assert bug.code == 1, bug.text
    text = " ".join(bug.out.split())
    line = next(i for i, text in enumerate(PARITY.read_text().splitlines(), 1) if "return model(x)" in text)
    site = f"parity_recipe.py:{line} forward"
    assert (f"parity engine vs main: first module with the same inputs and different outputs: Sequential.0 (Linear), "
            f"call 1 in engine at {site}, call 1 in main at {site}: dtype bfloat16 in engine, float32 in main, max ")\
        in text
    # the root's inputs match too (its outputs differ); the layers after the first see bfloat16 inputs: no partner
    assert "ULP (of bfloat16); 0 of 2 matched pairs agreed bit for bit" in text
    usage = run_cli("trace", str(card), "--parity", "engine:main", "--workdir", str(tmp_path / "u"))
    assert usage.code == 2 and "--parity compares module calls: trace with --modules" in usage.err
    bad = run_cli("trace", str(card), "--modules", "--parity", "engine", "--workdir", str(tmp_path / "b"))
    assert bad.code == 2 and "give two different process labels" in bad.err
