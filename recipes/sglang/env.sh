#!/usr/bin/env bash
# Build the sglang environment that recipes/sd3_pickscore_nft_sglang.toml runs in: a venv of its own
# (sglang pins a torch of its own, which cannot share the project's), from requirements.txt beside
# this script, every package pinned and installed with --no-deps.
#
#   recipes/sglang/env.sh            build it (or say it is up to date)
#   DETAUDIT_SGLANG_VENV=DIR ...     where (default: ${XDG_CACHE_HOME:-~/.cache}/detaudit/sglang-venv)
#   PYTHON=python3.11 ...            the interpreter the venv is made from (3.11, as sglang's wheel)
#
# About 6.5 GB (torch's CUDA libraries are most of it); minutes from a local wheel cache, ~16 from
# PyPI. pip's machine-wide constraints stay in force: where one caps torch below sglang's pin, lift
# it for this command only (PIP_CONSTRAINT= recipes/sglang/env.sh), never globally.
# recipes/sglang/python runs the venv's interpreter and refuses a missing or stale one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${DETAUDIT_SGLANG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/detaudit/sglang-venv}"
stamp="$venv/.detaudit-requirements.txt"
if [ -x "$venv/bin/python" ] && cmp -s "$here/requirements.txt" "$stamp"; then
    echo "sglang environment up to date: $venv"
    exit 0
fi
echo "building the sglang environment in $venv" >&2
rm -rf "$venv"
"${PYTHON:-python3.11}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --no-deps --no-input -r "$here/requirements.txt"
"$venv/bin/python" -c "import sglang.multimodal_gen.runtime.launch_server, torch, ray, diffusers, peft"
cp "$here/requirements.txt" "$stamp"  # last: a build cut short is rebuilt next time
echo "sglang environment ready: $venv ($("$venv/bin/python" -c 'import torch, sglang; print("sglang", sglang.__version__, "torch", torch.__version__)'))"
