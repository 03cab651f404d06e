"""Fingerprints of module calls and ops (issue #42): a GPU tensor is digested on its device and
the digests come to the host in batches. The digest is device-agnostic torch code, so here it
runs on CPU tensors (``digest_devices=("cpu",)``), the same code path a GPU takes; the host path
(every CPU tensor of a traced run) keeps its exact bytes, so CPU traces compare as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from detaudit.trace.files import read_trace
from detaudit.trace.fingerprint import Pending, fingerprinter, resolve
from detaudit.trace.recorder import DEFERRED_BATCH, Recorder

on_device = fingerprinter(torch, digest_devices=("cpu",))
on_host = fingerprinter(torch, digest_devices=())


def digest(*values: object) -> str:
    found = on_device(*values)
    assert isinstance(found, Pending)
    resolve([found])
    return str(found)


def test_the_host_fingerprint_is_the_hash_of_dtype_shape_and_bytes() -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    expected = hashlib.blake2b(b"torch.float32(2, 3);" + t.numpy().tobytes() + b"int:3;", digest_size=8).hexdigest()
    assert on_host(t, 3) == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8])
def test_a_device_digest_changes_with_any_bit_and_any_move(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    t = (torch.randn(5, 7, generator=gen) * 100).to(dtype)
    base = digest(t)
    assert digest(t.clone()) == base  # a function of the bits alone
    flipped = t.clone()
    flipped.view(torch.uint8).view(-1)[3] ^= 1  # the lowest bit of one byte
    assert digest(flipped) != base
    swapped = t.clone()
    swapped[0, 0], swapped[2, 3] = t[2, 3], t[0, 0]  # the same values, two of them moved
    assert not torch.equal(swapped, t) and digest(swapped) != base
    assert digest(t.reshape(7, 5)) != base  # same bytes, another shape
    assert digest(t[1:]) != digest(t[:-1])  # views starting mid-storage


def test_device_digests_of_many_calls_resolve_in_one_copy_like_one_at_a_time() -> None:
    values = [torch.full((3,), float(i)) for i in range(5)] + [torch.zeros(0), torch.tensor([True, False]),
                                                               torch.complex(torch.ones(2), torch.zeros(2))]
    together = [on_device(v, {"k": v, "n": 1}) for v in values]
    resolve([p for p in together if isinstance(p, Pending)])
    apart = [digest(v, {"k": v, "n": 1}) if v.numel() else on_device(v, {"k": v, "n": 1}) for v in values]
    assert [str(p) for p in together] == [str(p) for p in apart]
    assert len(set(apart)) == len(apart)


def test_pending_records_are_written_in_order_before_any_other_record_and_in_batches(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), "modules", keep=2, main_pid=None)
    rec.module("m", "Linear", on_device(torch.ones(2)), on_device(torch.zeros(2)))
    rec.op("torch.add", "x.py:1 f", "x.py:1 f", on_device(torch.ones(1)), "0123456789abcdef")
    assert len(rec.deferred) == 2  # waiting on the device
    rec.draw("torch.cpu", "torch.rand", lambda: "state")  # another record: the queue goes first
    assert rec.deferred == []
    for i in range(DEFERRED_BATCH + 3):
        rec.module("m", "Linear", on_device(torch.full((2,), float(i))), on_device(torch.zeros(2)))
    assert len(rec.deferred) == 3  # a full batch was written at once
    rec.flush()
    lines = [json.loads(line) for line in Path(rec.path).read_text().splitlines()]
    kinds = [r["type"] for r in lines if r["type"] in ("module", "op", "draw")]
    assert kinds[:4] == ["module", "op", "draw", "module"]
    seqs = [r["seq"] for r in lines if "seq" in r and r["type"] != "end"]
    assert seqs == sorted(seqs)
    (proc,) = read_trace(tmp_path).processes
    assert proc.modules[0].inputs == digest(torch.ones(2)) and proc.ops[0].inputs == digest(torch.ones(1))
    assert proc.module_chains["m"].final == DEFERRED_BATCH + 4 - 2  # every call counted: kept 2, chained the rest


COMPILED = """import json
import torch, torch._dynamo.utils
from recipes.diffusion_nft.config import parse_args
from recipes.diffusion_nft.lora import add_lora
from recipes.diffusion_nft.models import build_transformer, compile_blocks
model = build_transformer("tiny", 0)
add_lora(model, parse_args(["--preset", "tiny", "--device", "cpu"]).model)
model.eval().requires_grad_(False)
gen = torch.Generator().manual_seed(0)
# A rollout's shapes on the tiny card (8 samples, 154 text tokens): the graphs the recipe's engines
# compile, so that a cold Inductor cache builds these kernels once for the suite (docs/testing.md).
x = dict(hidden_states=torch.randn(8, 4, 16, 16, generator=gen), encoder_hidden_states=torch.randn(8, 154, 64, generator=gen),
         pooled_projections=torch.randn(8, 64, generator=gen), timestep=torch.linspace(100.0, 900.0, 8), return_dict=False)
compile_blocks(model, True)
with torch.no_grad():
    model(**x)
counters = torch._dynamo.utils.counters
print(json.dumps({"breaks": sum(counters["graph_break"].values()), "graphs": counters["stats"]["unique_graphs"]}))
"""


@pytest.mark.slow
def test_blocks_compiled_in_place_are_fingerprinted_at_their_boundary_without_a_graph_break(tmp_path: Path) -> None:
    """The GPU card compiles each transformer block: the module hooks stand aside inside the
    compiled graph (no graph break: a break per submodule made a traced run crawl), and each
    block's call is recorded from the eager code that calls it."""
    from conftest import REPO, run_traced

    # Inductor's own cache dir, shared with the suite's other compiles of these blocks: the claim is
    # about Dynamo's graph and the hooks, which a warm Inductor cache does not change (only codegen).
    trace_dir, out = run_traced(tmp_path, COMPILED, mode="modules", pythonpath=[REPO])
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts == {"breaks": 0, "graphs": 2}
    main = next(p for p in read_trace(trace_dir).processes if p.kind == "main")
    names = {m.name for m in main.modules}
    assert {"SD3Transformer2DModel.transformer_blocks.0", "SD3Transformer2DModel.transformer_blocks.1",
            "SD3Transformer2DModel.pos_embed"} <= names
    assert not any(n.startswith("SD3Transformer2DModel.transformer_blocks.0.") for n in names)  # inside the graph


def test_a_tensor_is_taken_as_this_process_holds_it_detached_and_dense() -> None:
    import torch

    from detaudit.trace.fingerprint import local_tensor

    sparse = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    dense = local_tensor(torch, sparse)
    assert dense.layout == torch.strided and dense.tolist() == [[0.0, 2.0], [3.0, 0.0]]
    grad = torch.ones(2, requires_grad=True) * 2
    assert not local_tensor(torch, grad).requires_grad
