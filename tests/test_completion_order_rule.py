"""scan-rng DA401: results gathered in completion order (ray.wait, as_completed,
wait(FIRST_COMPLETED)) that reach a batch, followed inside the function that gathers them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from scan_tree import write_tree

from detaudit.scan import ScanConfig, scan

GATHERS = {
    "lib/__init__.py": "",
    "lib/gather.py": """
        import asyncio
        import concurrent.futures as cf

        import numpy as np
        import ray
        import torch


        def rollouts(engines, prompts):
            pending = [e.generate.remote(p) for e, p in zip(engines, prompts)]
            arrived = []
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)   # DA401: two hops to torch.cat
                arrived += ready
            outputs = ray.get(arrived)
            return {"x": torch.cat([o["x"] for o in outputs])}


        def pool(fn, items):
            with cf.ThreadPoolExecutor() as ex:
                return torch.stack([f.result() for f in cf.as_completed([ex.submit(fn, i) for i in items])])


        async def tasks(coros):
            pending, got = set(coros), []
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    got.append(task.result())
            return np.concatenate(got)


        def first_two(refs):
            return torch.cat(ray.get(ray.wait(refs, num_returns=2)[0]))   # no name between: still the batch


        def in_order(engines, prompts):
            refs = [e.generate.remote(p) for e, p in zip(engines, prompts)]
            ray.wait(refs, num_returns=len(refs))          # waits, but batches in submission order
            return torch.cat(ray.get(refs))


        def health(refs):
            ready, _ = ray.wait(refs, timeout=1.0)          # results never batched
            return len(ready)


        async def all_done(coros):
            done, _ = await asyncio.wait(coros)             # ALL_COMPLETED: a set, not an order
            return np.concatenate([d.result() for d in done])
    """,
}


def test_gathers_in_completion_order_that_reach_a_batch_are_found(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, GATHERS)
    monkeypatch.chdir(tmp_path)
    found = sorted((f.line, f.message) for f in scan(["lib"], ScanConfig(), use_cache=False).findings
                   if f.rule == "DA401")
    text = (tmp_path / "lib" / "gather.py").read_text().splitlines()

    def line(marker: str) -> int:
        return next(i for i, t in enumerate(text, 1) if marker in t)

    assert found == [
        (line("ready, pending = ray.wait(pending"), "ray.wait hands results back as their work completes, and they "
         f"reach torch.cat (line {line('torch.cat([o')}): the batch's order follows which work finished first"),
        (line("torch.stack(["), "concurrent.futures.as_completed hands results back as their work completes, and "
         f"they reach torch.stack (line {line('torch.stack([')}): the batch's order follows which work finished "
         "first"),
        (line("await asyncio.wait(pending"), "asyncio.wait hands results back as their work completes, and they "
         f"reach np.concatenate (line {line('return np.concatenate(got)')}): the batch's order follows which work "
         "finished first"),
        (line("num_returns=2"), "ray.wait hands results back as their work completes, and they reach torch.cat "
         f"(line {line('num_returns=2')}): the batch's order follows which work finished first"),
    ]


def test_the_recipes_injected_bug_is_found_and_the_rule_explains_itself(tmp_path: Path) -> None:
    """The recipe's --collect-in-completion-order (suppressed there, as a known, injected bug), scanned as
    it is written, without the suppression."""
    manager = (REPO / "recipes" / "diffusion_nft" / "actors" / "manager.py").read_text()
    assert "# detaudit: ignore[DA401] (the injected bug)" in manager
    tree = tmp_path / "recipes" / "diffusion_nft" / "actors"
    tree.mkdir(parents=True)
    for folder in (tmp_path / "recipes", tmp_path / "recipes" / "diffusion_nft", tree):
        (folder / "__init__.py").write_text("")
    (tree / "manager.py").write_text(manager.replace("  # detaudit: ignore[DA401] (the injected bug)", ""))
    result = run_cli("scan-rng", "recipes", "--format", "json", "--no-cache", "--select", "DA401", cwd=tmp_path)
    (finding,) = json.loads(result.out)["findings"]
    line = next(i for i, t in enumerate(manager.splitlines(), 1) if "ray.wait(pending" in t)
    assert (finding["path"], finding["line"], finding["rule"]) == ("recipes/diffusion_nft/actors/manager.py", line,
                                                                   "DA401")
    assert "they reach torch.cat" in finding["message"]
    clean = run_cli("scan-rng", "recipes", "--no-cache", "--select", "DA401", cwd=REPO)
    assert clean.code == 0 and "DA401" not in clean.out, clean.text  # suppressed where it is
    explain = run_cli("scan-rng", "--explain", "DA401")
    assert explain.code == 0 and "results gathered in completion order" in explain.out
    assert "--perturb-schedule" in explain.out and "ray.get(refs)" in explain.out
