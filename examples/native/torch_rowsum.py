"""rowsum from PyTorch: a C++ extension (torch_ext/rowsum_ext.cpp and the
CUDA variants of rowsum_kernels.cu) that picks its variant with detd,
built with torch.utils.cpp_extension.load() at run time.

    python3 torch_rowsum.py --detd-include DIR --detd-lib DIR \
        [--shapes 4096x1024,2048x8192] [--out FILE] [--build-dir DIR]

--detd-include holds detd/autotune.h(pp) (a checkout's client/include);
--detd-lib holds libdetd.so. The daemon is $DETD_SOCKET. Prints one JSON
line per shape, as autotune_rowsum does (same kernel id, keys and
candidates: both programs share their decisions).
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def kernel_id():
    with open(os.path.join(HERE, "rowsum_kernels.cu"), "rb") as f:
        guard = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"native::examples::rowsum@{guard}"


def build(detd_include, detd_lib, build_dir=None):
    from torch.utils.cpp_extension import load

    if build_dir:
        os.makedirs(build_dir, exist_ok=True)
    return load(name="detd_rowsum_ext",
                sources=[os.path.join(HERE, "torch_ext", "rowsum_ext.cpp"),
                         os.path.join(HERE, "rowsum_kernels.cu")],
                extra_include_paths=[detd_include, HERE],
                extra_cflags=["-O2"], extra_cuda_cflags=["-O3"],
                extra_ldflags=[f"-L{detd_lib}", "-ldetd", f"-Wl,-rpath,{detd_lib}"],
                build_directory=build_dir, verbose=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--detd-include", required=True)
    ap.add_argument("--detd-lib", required=True)
    ap.add_argument("--shapes", default="4096x1024,2048x8192,1024x32768")
    ap.add_argument("--out")
    ap.add_argument("--build-dir")
    a = ap.parse_args()

    import numpy as np
    import torch

    ext = build(a.detd_include, a.detd_lib, a.build_dir)
    kid = kernel_id()
    out = open(a.out, "w") if a.out else sys.stdout
    for shape in filter(None, a.shapes.split(",")):  # "": build only
        rows, cols = (int(v) for v in shape.split("x"))
        # The C program's input, bit for bit: ((i * 2654435761) mod 2^32
        # mod 2001 - 1000) / 997, a float32 division on the host (torch on
        # the GPU divides by a scalar as a multiplication by its
        # reciprocal, which rounds differently).
        n = np.arange(rows * cols, dtype=np.uint64)
        v = (((n * np.uint64(2654435761)) % np.uint64(1 << 32)) % np.uint64(2001)).astype(np.int64) - 1000
        x = torch.from_numpy(v.astype(np.float32) / np.float32(997.0)).reshape(rows, cols).cuda()
        stream = torch.cuda.current_stream().cuda_stream
        y, index, timed = ext.rowsum(x, stream, kid)
        torch.cuda.synchronize()
        h = 1469598103934665603
        for b in y.cpu().numpy().tobytes():
            h = ((h ^ b) * 1099511628211) % (1 << 64)
        out.write(json.dumps({"kernel": kid, "key": f"rows={rows},cols={cols},dtype=float32", "index": index,
                              "config": ext.variants()[index], "timed_here": int(timed),
                              "digest": f"{h:016x}"}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
