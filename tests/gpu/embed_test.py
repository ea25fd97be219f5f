#!/usr/bin/env python3
"""embed_test.py — the embedding API from PyTorch (python/kt_embed.py over lib/libkt.so): kt's
FP8 GEMM on torch tensors against torch's own float32 product of the dequantised operands, at
the five target shapes and M 1, 16, 64, and kt's sparse-MLA decode on a V4 cache that torch
writes byte by byte in FlashMLA's MODEL1 layout (kernels/common/mla_layout.h), against torch's
own float64 attention over the dequantised cache (sinks, -1 holes, a request with no slot).
Fails on a relative L2 error over 1e-2 (out, C) or 1e-3 (lse), a +inf lse missing where no slot
is valid, or any output left unwritten (outputs start as NaN). Needs a GPU and torch.
usage: embed_test.py [DB]"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import kt_embed  # noqa: E402

SHAPES = [(1536, 4096), (8192, 1024), (1024, 4096), (4096, 2048), (4096, 512)]


PAGE, DATA, NOPE, TILE, WINDOW = 64, 576, 448, 64, 128
PAGE_BYTES = (PAGE * (DATA + 8) + DATA - 1) // DATA * DATA  # the page padded to whole 576-byte rows
SM_SCALE = 512 ** -0.5


def v4_cache(x):
    """FlashMLA MODEL1 pages of the latent vectors x [tokens, 512] (tokens a multiple of 64):
    448 e4m3 codes with one ue8m0 scale per 64, then 64 bf16 rope values; returns the bytes
    and the dequantised values the kernel must see."""
    n = x.shape[0]
    nope = x[:, :NOPE].reshape(n, NOPE // TILE, TILE)
    amax = nope.abs().amax(-1, keepdim=True)
    scale = torch.exp2(torch.ceil(torch.log2(torch.clamp(amax / 448, min=1e-4))))
    codes = (nope / scale).to(torch.float8_e4m3fn)
    rope = x[:, NOPE:].to(torch.bfloat16)
    pages = torch.zeros(n // PAGE, PAGE_BYTES, dtype=torch.uint8, device=x.device)
    data = pages[:, :PAGE * DATA].view(n // PAGE, PAGE, DATA)
    data[:, :, :NOPE] = codes.reshape(n, NOPE).view(torch.uint8).reshape(n // PAGE, PAGE, NOPE)
    data[:, :, NOPE:] = rope.view(torch.uint8).reshape(n // PAGE, PAGE, 2 * (512 - NOPE))
    foot = pages[:, PAGE * DATA:PAGE * (DATA + 8)].view(n // PAGE, PAGE, 8)
    foot[:, :, :NOPE // TILE] = (127 + torch.log2(scale).squeeze(-1)).to(torch.uint8).reshape(n // PAGE, PAGE, -1)
    value = torch.cat([(codes.double() * scale.double()).reshape(n, NOPE), rope.double()], 1)
    return pages.reshape(-1), value


def mla_case(s, g, B, HQ, TOPK, SQ):
    """One mla_decode V4 launch through the API against torch's float64 attention; True if good."""
    kern = s.kernel("mla_decode", f"LAYOUT=V4,HQ={HQ},TOPK={TOPK},SQ={SQ}", B)
    dev = "cuda"
    lists = {}
    for name, n in (("top", TOPK), ("win", WINDOW)):
        per = (n + PAGE - 1) // PAGE + 1  # pages a request's context holds (the family's sizes)
        x = torch.rand(B * per * PAGE, 512, device=dev, generator=g) * 2 - 1
        x[:, :NOPE] *= torch.exp2(torch.randint(-3, 3, (B * per * PAGE, NOPE // TILE), device=dev, generator=g)
                                  ).repeat_interleave(TILE, 1)
        cache, value = v4_cache(x)
        idx = torch.stack([torch.randperm(per * PAGE, device=dev, generator=g)[:n] + b * per * PAGE
                           for b in range(B) for _ in range(SQ)]).int()
        idx[torch.rand(idx.shape, device=dev, generator=g) < 0.05] = -1
        lens = torch.randint(1, n + 1, (B,), device=dev, generator=g).int()
        lens[1 % B] = 0 if name == "top" else lens[1 % B]
        lists[name] = (cache, value, idx, lens)
    if B > 1:
        lists["win"][3][1] = 0  # request 1 has no slot at all: out 0, lse +inf
    q = (torch.rand(B * SQ * HQ, 512, device=dev, generator=g) * 4 - 2).to(torch.bfloat16)
    sinks = torch.rand(HQ, device=dev, generator=g) * 3
    out = torch.full((B * SQ * HQ, 512), float("nan"), device=dev, dtype=torch.bfloat16)
    lse = torch.full((B * HQ * SQ,), float("nan"), device=dev)
    part = torch.empty(kern.tensors[10][2], device=dev)
    tick = torch.zeros(kern.tensors[11][2], device=dev, dtype=torch.int32)  # zeroed once; kt leaves it zero
    for _ in range(2):  # twice: the second launch needs the first to have left the tickets zero
        kern(q, lists["top"][0], lists["top"][2], lists["top"][3], lists["win"][0], lists["win"][2], lists["win"][3],
             sinks, out, lse, part, tick)
    torch.cuda.synchronize()
    ref_out = torch.zeros(B * SQ * HQ, 512, dtype=torch.float64, device=dev)
    ref_lse = torch.full((B, HQ, SQ), float("inf"), dtype=torch.float64, device=dev)
    for bs in range(B * SQ):
        b = bs // SQ
        keys = [value[idx[bs, :lens[b]][idx[bs, :lens[b]] >= 0].long()] for _, value, idx, lens in lists.values()]
        keys = torch.cat(keys)
        if keys.shape[0] == 0:
            continue
        sc = q[bs * HQ:(bs + 1) * HQ].double() @ keys.t() * SM_SCALE
        l = torch.logsumexp(sc, 1)
        ref_lse[b, :, bs % SQ] = l
        w = torch.softmax(sc, 1) / (1 + torch.exp(sinks.double() - l))[:, None]
        ref_out[bs * HQ:(bs + 1) * HQ] = w @ keys
    ref_lse = ref_lse.reshape(-1)
    fin = torch.isfinite(ref_lse)
    err = ((out.double() - ref_out).norm() / ref_out.norm()).item()
    lse_err = ((lse.double()[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp(min=1)).max().item()
    inf_ok = bool(torch.all(torch.isinf(lse[~fin]) & (lse[~fin] > 0))) and bool(torch.all(out[(~fin).reshape(B, HQ, SQ).permute(0, 2, 1).reshape(-1)] == 0))
    ok = err <= 1e-2 and lse_err <= 1e-3 and inf_ok and not torch.isnan(out).any() and not torch.isnan(lse).any()
    ok = ok and not tick.any()  # the tickets left zero
    print(f"{'ok  ' if ok else 'FAIL'} {kern.describe()}: out rel L2 {err:.2e}, lse rel {lse_err:.2e}, "
          f"{int((~fin).sum())} rows without a slot {'ok' if inf_ok else 'WRONG'}")
    return ok


def main():
    s = kt_embed.Session(sys.argv[1] if len(sys.argv) > 1 else None)
    g = torch.Generator(device="cuda").manual_seed(7)
    bad = 0
    cases = [(4, 64, 512, 1), (3, 16, 512, 2), (1, 16, 100, 1)]
    for c in cases:
        bad += not mla_case(s, g, *c)
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
    n = len(cases) + 3 * len(SHAPES)
    print(f"{n - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
