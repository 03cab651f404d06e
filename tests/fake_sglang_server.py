"""A fake sglang diffusion server: a real process speaking sglang 0.5.23's HTTP protocol, without sglang.

``python tests/fake_sglang_server.py --model-path DIR --port N`` serves what the recipe's sglang
adapter calls, with sglang's wire formats (and written independently of the adapter, so a bug in
the adapter's encoding is not mirrored here):

- ``GET /health``;
- ``POST /rollout/generate``: JSON in (sglang's ``RolloutRequest`` fields; unknown ones refused, as
  the adapter must send only what sglang reads), msgpack out, tensors as safetensors blobs. The
  sample's initial noise is ``torch.randn`` on a CPU generator seeded with the request's seed, as
  sglang draws it; the "denoiser" is a fixed function of the latent, the prompt and the LoRA pushed;
- ``POST /update_weights_from_tensor`` (``lora_merge``): base64 pickles read with an allow-list
  (sglang's ``SafeUnpickler``), LoRA A/B paired by layer name as sglang pairs them;
- ``GET /fake/log``: what it received (requests, and per push the names, shapes, alpha, rank and a
  digest of each tensor), for the tests.

It refuses a model path that is not a local diffusers SD3 folder, as the real server cannot
download one here.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import pickle
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import msgpack
import torch
from safetensors.torch import save

ROLLOUT_FIELDS = {
    "prompt", "negative_prompt", "seed", "generator_device", "width", "height", "num_inference_steps",
    "num_outputs_per_prompt", "guidance_scale", "true_cfg_scale", "num_frames", "fps", "rollout",
    "rollout_sde_type", "rollout_noise_level", "rollout_log_prob_no_const", "rollout_debug_mode",
    "rollout_return_denoising_env", "rollout_return_dit_trajectory", "rollout_sde_step_indices",
    "rollout_return_step_indices", "image_path", "suppress_logs", "extra_sampling_params",
}
PUSH_FIELDS = {"serialized_named_tensors", "payload_gpu_uuids", "load_format", "target_modules",
               "weight_update_mode", "lora_alpha", "lora_rank"}
ALLOWED_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch.storage", "_load_from_bytes"),
                   ("collections", "OrderedDict")}
SPATIAL_COMPRESSION = 8  # sglang's SD3 config: latents are pixels / 8, whatever the VAE
TEXT_TOKENS = 333  # CLIP 77 + T5 256, as sglang's SD3 encodes a prompt


class Refused(Exception):
    pass


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"Blocked unsafe global ({module}.{name}) during pickle deserialization")
        return super().find_class(module, name)


def tensor(t: torch.Tensor) -> dict[str, Any]:
    return {"__tensor__": True, "data": save({"t": t.detach().contiguous().cpu()}), "shape": list(t.shape),
            "dtype": str(t.dtype)}


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


class FakeEngine:
    def __init__(self, model_path: Path) -> None:
        index = model_path / "model_index.json"
        if not index.is_file():
            raise SystemExit(f"fake sglang: {model_path} is not a local diffusers folder (no model_index.json)")
        if json.loads(index.read_text())["_class_name"] != "StableDiffusion3Pipeline":
            raise SystemExit("fake sglang: not an SD3 pipeline")
        transformer = json.loads((model_path / "transformer" / "config.json").read_text())
        vae = json.loads((model_path / "vae" / "config.json").read_text())
        self.channels = transformer["in_channels"]
        self.pooled_dim = transformer["pooled_projection_dim"]
        self.text_dim = transformer["joint_attention_dim"]
        self.vae_factor = 2 ** (len(vae["block_out_channels"]) - 1)
        self.lora_effect = 0.0  # sum over layers of (B @ A) * alpha / rank: what the pushes changed
        self.log: dict[str, list[Any]] = {"generate": [], "push": []}

    def generate(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        unknown = set(body) - ROLLOUT_FIELDS
        if unknown:
            raise Refused(f"unknown rollout request fields {sorted(unknown)}")
        if body.get("num_outputs_per_prompt") != 1 or body.get("generator_device") != "cpu":
            raise Refused("this fake samples one output per request on a CPU generator")
        if body.get("rollout") is not True or body.get("rollout_sde_type") not in ("sde", "ode"):
            raise Refused("rollout with sde_type sde or ode expected")
        self.log["generate"].append(body)
        steps, seed = int(body["num_inference_steps"]), int(body["seed"])
        side = int(body["width"]) // SPATIAL_COMPRESSION
        generator = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn((self.channels, side, side), generator=generator, dtype=torch.float32)
        prompt_code = int.from_bytes(hashlib.sha256(body["prompt"].encode()).digest()[:4], "little") / 2**32
        sigmas = torch.linspace(1.0, 0.0, steps + 1)
        latents, log_probs = [x], []
        for i in range(steps):
            dt = sigmas[i + 1] - sigmas[i]
            velocity = -x + prompt_code + self.lora_effect
            x = x + dt * velocity
            if body["rollout_sde_type"] == "sde":
                eps = torch.randn(x.shape, generator=generator)
                x = x + 0.01 * float(body["rollout_noise_level"]) * eps
                log_probs.append(-(eps**2).mean() / 2)
            else:
                log_probs.append(torch.tensor(0.0))
            latents.append(x)
        pixels = side * self.vae_factor
        image = torch.sigmoid(x.mean(0)).expand(3, side, side)
        image = torch.nn.functional.interpolate(image[None], size=(pixels, pixels), mode="nearest")[0]
        conditioning = {"encoder_hidden_states": torch.full((TEXT_TOKENS, self.text_dim), prompt_code),
                        "pooled_projections": torch.full((self.pooled_dim,), prompt_code)}
        return [{
            "request_id": f"fake-{len(self.log['generate'])}", "prompt": body["prompt"], "seed": seed,
            "generated_output": tensor(image),
            "rollout_log_probs": tensor(torch.stack(log_probs)),
            "rollout_debug_tensors": None,
            "denoising_env": {"image_kwargs": None, "pos_cond_kwargs": {k: tensor(v) for k, v in conditioning.items()},
                              "neg_cond_kwargs": None, "guidance": None},
            "dit_trajectory": {"latents": tensor(torch.stack(latents)), "timesteps": tensor(sigmas * 1000),
                               "sigmas": tensor(sigmas)},
            "inference_time_s": None, "peak_memory_mb": None,
        }]

    def push(self, body: dict[str, Any]) -> str:
        unknown = set(body) - PUSH_FIELDS
        if unknown:
            raise Refused(f"unknown fields {sorted(unknown)}")
        if body.get("weight_update_mode") != "lora_merge" or body.get("target_modules") != ["transformer"]:
            raise Refused("lora_merge into the transformer expected")
        payloads = body.get("serialized_named_tensors")
        if not isinstance(payloads, list) or len(payloads) != 1:
            raise Refused("serialized_named_tensors size must be 1 or world_size (1)")
        named = SafeUnpickler(io.BytesIO(base64.b64decode(payloads[0], validate=True))).load()
        pairs: dict[str, dict[str, torch.Tensor]] = {}
        for name, t in named:
            for part in ("A", "B"):
                if f".lora_{part}" in name:
                    pairs.setdefault(name.split(f".lora_{part}", 1)[0], {})[part] = t
        incomplete = sorted(layer for layer, ab in pairs.items() if len(ab) != 2)
        if incomplete or not pairs:
            raise Refused(f"No LoRA A/B tensor pairs found in payload (incomplete: {incomplete[:3]})")
        alpha, rank = body.get("lora_alpha"), body.get("lora_rank")
        scale = (alpha or 1) / (rank or 1)
        self.lora_effect = float(sum((ab["B"].double() @ ab["A"].double()).sum() for ab in pairs.values())) * scale
        self.log["push"].append({"names": [n for n, _ in named], "shapes": [list(t.shape) for _, t in named],
                                 "dtypes": [str(t.dtype) for _, t in named], "digests": [digest(t) for _, t in named],
                                 "alpha": alpha, "rank": rank})
        return f"Updated {len(pairs)} LoRA layers in transformer from IPC tensors (skipped 0 unknown layers)."


def handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b'{"status": "ok"}')
            elif self.path == "/fake/log":
                self._send(200, json.dumps(engine.log).encode())
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                if self.path == "/rollout/generate":
                    self._send(200, msgpack.packb(engine.generate(body)), "application/msgpack")
                elif self.path == "/update_weights_from_tensor":
                    self._send(200, json.dumps({"success": True, "message": engine.push(body)}).encode())
                else:
                    self._send(404, b'{"detail": "Not Found"}')
            except (Refused, pickle.UnpicklingError, ValueError, KeyError) as exc:
                field = "detail" if self.path == "/rollout/generate" else "message"
                self._send(400, json.dumps({"success": False, field: f"{type(exc).__name__}: {exc}"}).encode())

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    engine = FakeEngine(args.model_path)
    server = HTTPServer(("127.0.0.1", args.port), handler(engine))
    print(f"fake sglang serving {args.model_path} on {args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
