#!/usr/bin/env python3
"""embed_test.py — the embedding API from PyTorch (python/kt_embed.py over lib/libkt.so): kt's
FP8 GEMM on torch tensors against torch's own float32 product of the dequantised operands, at
the five target shapes and M 1, 16, 64; fails on a relative L2 error over 1e-2 (the family's
tolerance). Needs a GPU and torch.   usage: embed_test.py [DB]"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import kt_embed  # noqa: E402

SHAPES = [(1536, 4096), (8192, 1024), (1024, 4096), (4096, 2048), (4096, 512)]


def main():
    s = kt_embed.Session(sys.argv[1] if len(sys.argv) > 1 else None)
    g = torch.Generator(device="cuda").manual_seed(7)
    bad = 0
    for n, k in SHAPES:
        for m in (1, 16, 64):
            kern = s.kernel("fp8_gemm", f"N={n},K={k}", m)
            a = (torch.rand(m, k, device="cuda", generator=g) * 2 - 1) * 448
            b = (torch.rand(n, k, device="cuda", generator=g) * 2 - 1) * 448
            A, B = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            As = (torch.rand(m, k // 128, device="cuda", generator=g) + 1) / 128
            Bs = (torch.rand(n // 128, k // 128, device="cuda", generator=g) + 1) / 128
            C = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            kern(A, As, B, Bs, C)
            torch.cuda.synchronize()
            ref = (A.float() * As.repeat_interleave(128, 1)) @ (
                B.float() * Bs.repeat_interleave(128, 0).repeat_interleave(128, 1)).t()
            err = ((C.float() - ref).norm() / ref.norm()).item()
            ok = err <= 1e-2
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {kern.describe()}: rel L2 {err:.2e}")
    print(f"{15 - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
