"""The HTTP protocol between the recipe and an sglang diffusion server (``sglang.multimodal_gen``).

Three calls, as the original system made them (miles_diffusion's ``SGLangDiffusionEngine``):

- ``GET /health``: 200 once the server's scheduler answers;
- ``POST /rollout/generate``: one sample per request (its own seed, ``num_outputs_per_prompt=1``),
  answered in msgpack, each tensor a safetensors blob (``{"__tensor__": True, "data": ...}``);
- ``POST /update_weights_from_tensor`` with ``weight_update_mode="lora_merge"``: the trainer's LoRA
  A/B tensors, pickled and base64-encoded, as sglang's ``MultiprocessingSerializer`` reads them.

Nothing here imports sglang: CI runs this module against a fake server that speaks the same
protocol (``tests/fake_sglang_server.py``). The wire format is sglang 0.5.23's
(``runtime/entrypoints/post_training/{io_struct,rollout_api,weights_api,utils}.py``).
"""

from __future__ import annotations

import base64
import json
import pickle
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# A generated sample's keys this recipe reads (sglang's ``RolloutResponse``).
RESPONSE_KEYS = ("seed", "generated_output", "rollout_log_probs", "denoising_env", "dit_trajectory")
LORA_MERGE = "lora_merge"  # sglang's weight_update_mode that wraps the DiT's linears in LoRA layers
TARGET_MODULE = "transformer"


class EngineError(RuntimeError):
    """The server refused a call or answered with something this recipe cannot use."""


@dataclass(frozen=True)
class SampleSpec:
    """One sample's request: the recipe's settings that sglang's rollout request carries."""

    prompt: str
    seed: int  # the sample's own generator seed (seeds.initial_noise): its initial and SDE noise
    steps: int
    resolution: int
    sde: bool  # Flow-GRPO: SDE steps with log-probs; NFT: the ODE (Euler) sampler
    noise_level: float


def rollout_request(spec: SampleSpec) -> dict[str, Any]:
    """The JSON body of ``POST /rollout/generate`` for one sample.

    No classifier-free guidance (``guidance_scale`` 1, as the recipe's own sampler); the noise
    comes from a CPU generator seeded with the sample's seed, so a sample does not depend on
    which other samples share its request or its batch. The ODE sampler reports log-probs
    without the constant (sglang refuses a "true" log-prob of a deterministic step).
    """
    return {
        "prompt": spec.prompt,
        "seed": spec.seed,
        "generator_device": "cpu",
        "width": spec.resolution,
        "height": spec.resolution,
        "num_inference_steps": spec.steps,
        "num_outputs_per_prompt": 1,
        "guidance_scale": 1.0,
        "rollout": True,
        "rollout_sde_type": "sde" if spec.sde else "ode",
        "rollout_noise_level": spec.noise_level,
        "rollout_log_prob_no_const": not spec.sde,
        "rollout_debug_mode": False,
        "rollout_return_denoising_env": True,
        "rollout_return_dit_trajectory": True,
        "suppress_logs": True,
    }


def lora_push_request(state: dict[str, torch.Tensor], alpha: int, rank: int) -> dict[str, Any]:
    """The JSON body of ``POST /update_weights_from_tensor`` that sets the DiT's LoRA to ``state``.

    ``state`` holds the trainer's names (``transformer_blocks.0.attn.to_q.lora_A.default.weight``);
    sglang pairs each layer's ``lora_A``/``lora_B`` by the name before ``.lora_A``. The tensors are
    pickled by value (CPU storages as bytes), in name order, so the payload does not depend on
    shared memory between the two processes, and the same state gives the same bytes.
    """
    named = [(name, state[name].detach().cpu().contiguous()) for name in sorted(state)]
    blob = base64.b64encode(pickle.dumps(named, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    return {
        "serialized_named_tensors": [blob],
        "load_format": None,
        "target_modules": [TARGET_MODULE],
        "weight_update_mode": LORA_MERGE,
        "lora_alpha": alpha,
        "lora_rank": rank,
    }


def decode_tensors(obj: Any) -> Any:
    """sglang's serialized tensors (safetensors blobs under ``__tensor__``) back to tensors."""
    from safetensors.torch import load

    if isinstance(obj, dict):
        if obj.get("__tensor__"):
            return load(bytes(obj["data"]))["t"]
        return {k: decode_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [decode_tensors(v) for v in obj]
    return obj


class SGLangClient:
    """Calls to one sglang diffusion server at ``base_url`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, base_url: str, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout_s: float | None = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def healthy(self) -> bool:
        """``GET /health`` answered 200 (False while the server starts or is unreachable)."""
        try:
            status, _ = self._call("GET", "/health", timeout_s=5.0)
        except (OSError, urllib.error.URLError):
            return False
        return status == 200

    def wait_healthy(self, alive: Callable[[], bool], timeout_s: float) -> float:
        """Poll ``/health`` until it answers; the seconds it took. Fails when the server process
        ends (``alive()`` false) or ``timeout_s`` passes."""
        started = time.monotonic()
        while not self.healthy():
            if not alive():
                raise EngineError(f"the sglang server at {self.base_url} exited before it was healthy")
            if time.monotonic() - started > timeout_s:
                raise EngineError(f"the sglang server at {self.base_url} was not healthy after {timeout_s:.0f} s")
            time.sleep(0.5)
        return time.monotonic() - started

    def generate(self, spec: SampleSpec) -> dict[str, Any]:
        """One sample: sglang's ``RolloutResponse`` fields, tensors decoded."""
        import msgpack

        status, payload = self._call("POST", "/rollout/generate", rollout_request(spec))
        if status != 200:
            raise EngineError(f"/rollout/generate answered {status}: {_message(payload)}")
        responses = msgpack.unpackb(payload, raw=False)
        if not isinstance(responses, list) or len(responses) != 1 or not isinstance(responses[0], dict):
            raise EngineError(f"/rollout/generate: expected one sample, got {type(responses).__name__} "
                              f"of {len(responses) if isinstance(responses, list) else '?'}")
        sample = decode_tensors(responses[0])
        missing = [k for k in RESPONSE_KEYS if sample.get(k) is None]
        if missing:
            raise EngineError(f"/rollout/generate: the sample lacks {', '.join(missing)}")
        if sample["seed"] != spec.seed:
            raise EngineError(f"/rollout/generate: asked for seed {spec.seed}, the sample says {sample['seed']}")
        return sample

    def push_lora(self, state: dict[str, torch.Tensor], alpha: int, rank: int) -> str:
        """Set the server's DiT LoRA to ``state``; sglang's message (it names the layers updated)."""
        status, payload = self._call("POST", "/update_weights_from_tensor", lora_push_request(state, alpha, rank))
        answer = _json(payload)
        if status != 200 or not answer.get("success"):
            raise EngineError(f"/update_weights_from_tensor answered {status}: {answer.get('message', _message(payload))}")
        return str(answer.get("message", ""))


def _json(payload: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return answer if isinstance(answer, dict) else {}


def _message(payload: bytes) -> str:
    answer = _json(payload)
    text = answer.get("detail") or answer.get("message") or payload[:300].decode("utf-8", "replace")
    return str(text).strip().splitlines()[0] if str(text).strip() else "(no message)"

