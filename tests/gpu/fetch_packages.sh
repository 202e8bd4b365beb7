#!/usr/bin/env bash
# Fetch the packages of the real-package GPU run (run_packages.py) from
# PyPI into the folders it reads, for a GPU machine that has no network:
#
#   .whl/      liger-kernel 0.8.5, fla-core 0.6.0 (pure-Python wheels);
#              .whl/flaggems/: flag-gems 5.0.2 and its imports (run_flaggems.py)
#              .whl/helion/: Helion 1.5.0 (1.5.1 needs a torch newer than
#              2.11) and its imports, scikit-learn and
#              scipy left out (run_helion.py)
#              .whl/hf/: transformers 5.25.0 and what it imports to build a
#              LlamaForCausalLM (run_hf_llama.py; numpy comes with torch)
#   .pkgsrc/   mamba_ssm 2.3.2.post1 (its Python package only: the Triton
#              kernels need none of its CUDA extensions) and
#              gemlite-0.6.0.post2/gemlite, unpacked from their sdists
#
#   tests/gpu/fetch_packages.sh
#
# Both folders are git-ignored: name them in what travels to the GPU
# machine. mamba_ssm's sdist imports torch to describe itself, so its
# download runs with $PYTHON (default: the Triton 3.6.0 venv of
# tests/python/run_matrix.sh, else python3), which must have torch;
# MAMBA_SKIP_CUDA_BUILD keeps it from compiling anything.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENVS=${DETD_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detd-venvs}
PY=${PYTHON:-}
if [[ -z $PY ]]; then
    PY=python3
    [[ -x $VENVS/triton-3.6.0/bin/python ]] && PY=$VENVS/triton-3.6.0/bin/python
fi
"$PY" -c 'import torch' 2>/dev/null || {
    echo "fetch_packages: $PY cannot import torch (mamba_ssm's sdist needs it); set PYTHON" >&2
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$REPO"
mkdir -p .whl .pkgsrc

python3 -m pip download -q --no-deps --only-binary=:all: -d .whl \
    liger-kernel==0.8.5 fla-core==0.6.0
# flag-gems and what it imports, for the GPU machine's Python 3.12
# (run_flaggems.py installs .whl/flaggems/ on its own).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .whl/flaggems \
    flag_gems==5.0.2 sqlalchemy==2.0.48 PyYAML==6.0.3 greenlet==3.5.6 typing_extensions==4.16.0 packaging==26.4
# Helion and what it imports at its default search (scikit-learn, only
# imported by some searches, and scipy stay home: 50 MiB).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .whl/helion \
    helion==1.5.0 filecheck==1.0.6 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 psutil==7.2.2 \
    typing_extensions==4.16.0
# transformers and what `from transformers import LlamaForCausalLM` imports
# (huggingface_hub 2.x imports httpx2 at start; its CLI's typer, hf-xet and
# transformers' `kernels` are not imported to build and train a model).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl/hf \
    transformers==5.25.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19 \
    PyYAML==6.0.4 tqdm==4.70.1 filelock==4.3.2 fsspec==2026.9.0 packaging==26.4 typing_extensions==4.16.0 \
    httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 idna==3.20 truststore==0.10.5
python3 -m pip download -q --no-deps --no-binary=:all: -d "$tmp" gemlite==0.6.0.post2
MAMBA_SKIP_CUDA_BUILD=TRUE "$PY" -m pip download -q --no-deps --no-build-isolation \
    --no-binary=:all: -d "$tmp" mamba_ssm==2.3.2.post1

rm -rf .pkgsrc/gemlite-0.6.0.post2 .pkgsrc/mamba_ssm
tar -xzf "$tmp/gemlite-0.6.0.post2.tar.gz" -C .pkgsrc
tar -xzf "$tmp/mamba_ssm-2.3.2.post1.tar.gz" -C "$tmp"
mv "$tmp/mamba_ssm-2.3.2.post1/mamba_ssm" .pkgsrc/mamba_ssm

for p in .whl/helion/helion-1.5.0-py3-none-any.whl .whl/hf/transformers-5.25.0-py3-none-any.whl .whl/liger_kernel-0.8.5-py3-none-any.whl .whl/fla_core-0.6.0-py3-none-any.whl \
    .pkgsrc/gemlite-0.6.0.post2/gemlite/__init__.py .pkgsrc/mamba_ssm/ops/triton/ssd_combined.py; do
    [[ -e $p ]] || { echo "fetch_packages: $p missing after the download" >&2; exit 1; }
done
du -sh .whl .pkgsrc
