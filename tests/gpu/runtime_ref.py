#!/usr/bin/env python3
"""runtime_ref.py — the independent reference for `kt run` (tests/gpu/runtime.sh): `make` builds a
tiny random DeepseekV4 config (shapes kt's families take) with Hugging Face transformers, saves it
with save_pretrained and writes a seeded prompt; `compare` runs transformers' own forward token by token on the tokens
`kt run` fed (teacher-forced, B sequences), twice: on the saved weights in float32 ("fp32"), and
with kt's quantisation emulated ("qdq":
FP8 e4m3 weights in 128x128 blocks, activations in 1x128 groups before every FP8 GEMM, GEMM
outputs rounded to bf16, the sliding/compressed KV nope part in e4m3 with power-of-two scales
per 64 and its rope part in bf16, as kt's KV layout stores them), and prints the per-step
relative L2 of every pair of logits (kt's dumps and transformers') and the greedy agreement.
For V3.2 "qdq" emulates what transformers' expanded MLA shows of kt's formats (emulate_kt_v32: the
FP8 GEMMs, kv_b_proj's FP8 weights, the cached latent in the V32 layout, the routed experts).
The second model and the MXFP4 experts (tests/gpu/runtime_v32.sh, no GPU needed): `make --arch
v32` saves a tiny random DeepseekV32; `mxfp4 DIR OUT` writes DIR's V4 routed experts as the
release ships them (I8 e2m1 pairs + F8_E8M0 `scale` per 32) into OUT and their exact values
back into DIR as bf16; `hostcheck` runs transformers fp32 teacher-forced on the prompt and
compares the host reference's dumps (`kt run --reference exact|kt --steps 0`) with it.
  usage: runtime_ref.py make DIR [--arch v4|v32|v32fam] [--mxfp4 OUT] [--smooth] [--prompt P] [--batch B] [--seed N]
         runtime_ref.py compare DIR --kt-log LOG --dump NAME=FILE... [--limits JSON] [--require-greedy]
         runtime_ref.py fed LOG (the tokens kt fed, as a prompt file); runtime_ref.py flash DIR [--arch v4|v32]
         runtime_ref.py mxfp4 DIR OUT; runtime_ref.py hostcheck DIR --dump NAME=FILE... [--limits JSON]
         runtime_ref.py dumps A B --vocab V --limit X [--batch B] [--why TEXT] (two kt dumps, per step)
"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import DeepseekV32Config, DeepseekV32ForCausalLM, DeepseekV4Config, DeepseekV4ForCausalLM

FP8_LINEARS = ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_proj", "self_attn.o_a_proj",
               "self_attn.o_b_proj", "compressor.indexer.q_b_proj", "shared_experts.gate_proj",
               "shared_experts.up_proj", "shared_experts.down_proj")


def tiny_config(smooth=False):
    # 16 heads, 64 indexer heads of 128 and (routed) 32 experts: the smallest shapes kt's
    # families take (mla_decode HQ % 16, mla_indexer's 64 x 128, moe_route E % 32), so that
    # `kt run` runs them here and `kt run --plain-kernels` the plain kernels on the same model
    kw = dict(vocab_size=512, hidden_size=256, moe_intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=16, num_key_value_heads=1, head_dim=512, q_lora_rank=128,
              num_experts_per_tok=2, n_routed_experts=32, n_shared_experts=1,
              layer_types=["sliding_attention", "compressed_sparse_attention",
                           "heavily_compressed_attention", "compressed_sparse_attention"],
              compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
              sliding_window=16, o_groups=2, o_lora_rank=128, index_n_heads=64, index_head_dim=128,
              index_topk=4, mlp_layer_types=["hash_moe", "moe", "moe", "moe"], max_position_embeddings=4096,
              tie_word_embeddings=False, initializer_range=0.05, routed_scaling_factor=1.5, swiglu_limit=10.0)
    if smooth:  # no discrete choice can flip: every expert routed, every compressed entry kept
        # (2 experts: moe_route takes 32 or more, so the MoE stays plain here; kt run says so)
        kw.update(n_routed_experts=2, num_experts_per_tok=2, index_topk=64)
    return DeepseekV4Config(**kw)


def tiny_config_v32():
    """A tiny DeepseekV32: 3 layers (the first dense), MLA at kt's 512 + 64 latent, the indexer
    picking 8 of up to 40 tokens (16 heads: a score
    is 0, a tie, only where all 16 relu terms are), 8 experts in 2 groups (top-1 group, top-2 experts), YaRN."""
    return DeepseekV32Config(
        vocab_size=512, hidden_size=256, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1, n_routed_experts=8, n_group=2,
        topk_group=1, num_experts_per_tok=2, kv_lora_rank=512, q_lora_rank=128, qk_rope_head_dim=64,
        qk_nope_head_dim=64, v_head_dim=64, first_k_dense_replace=1, index_topk=8, index_head_dim=128,
        index_n_heads=16, max_position_embeddings=4096, tie_word_embeddings=False, initializer_range=0.05,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 1024,
                         "beta_fast": 32.0, "beta_slow": 1.0})


def tiny_config_v32_families():
    """A tiny DeepseekV32 at the smallest shapes kt's families take, so that `kt run` runs it on the
    GPU: 16 heads (mla_decode HQ % 16) of 128 nope + 64 rope with YaRN factor 40 and mscale_all_dim 1
    (V3.2's softmax scale, the constant mla_decode LAYOUT=V32 applies), 64 indexer heads of 128
    (mla_indexer) picking 16 tokens, 256 experts in 8 groups, the best 4 groups, top-8, x 2.5
    (moe_route's V3 router); 3 layers, the first dense."""
    return DeepseekV32Config(
        vocab_size=512, hidden_size=256, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=16, num_key_value_heads=16, n_shared_experts=1, n_routed_experts=256, n_group=8,
        topk_group=4, num_experts_per_tok=8, kv_lora_rank=512, q_lora_rank=128, qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128, first_k_dense_replace=1, index_topk=16, index_head_dim=128,
        index_n_heads=64, max_position_embeddings=4096, tie_word_embeddings=False, initializer_range=0.05,
        routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32.0, "beta_slow": 1.0})


def model_class(d):
    mt = json.load(open(os.path.join(d, "config.json")))["model_type"]
    return DeepseekV32ForCausalLM if mt == "deepseek_v32" else DeepseekV4ForCausalLM


def randomise(model, g):
    """HF initialises sinks, position biases, HC biases and tid2eid to constants; a test needs
    them random so every term of the math is exercised."""
    cfg = model.config
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks") or name.endswith("position_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith(".base") or name.endswith("hc_base"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            elif name.endswith(".scale") or name.endswith("hc_scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("k_norm.bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=g)[: cfg.num_experts_per_tok]
                        for _ in range(cfg.vocab_size)]
                b.copy_(torch.stack(rows).to(b.dtype))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)


def e4m3(x):
    return x.clamp(-448, 448).to(torch.float8_e4m3fn).float()


def qdq_weight(w):
    """kt's load-time rule: per 128x128 block s = amax / 448, code = e4m3(w / s); rows past a
    multiple of 128 (V3.2's kv_a, 576) make a partial block, as zero rows would."""
    shape = w.shape
    w2 = w.float().reshape(-1, shape[-1])
    n, k = w2.shape
    pad = -n % 128
    w2 = torch.cat([w2, w2.new_zeros(pad, k)]) if pad else w2
    b = w2.view((n + pad) // 128, 128, k // 128, 128)
    s = (b.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-10) / 448).float()
    return (e4m3(b / s) * s).view(n + pad, k)[:n].view(shape)


def qdq_act(x):
    """act_quant's rule on bf16 input: per 128 s = max(amax, 1e-10) / 448, code = e4m3(x / s)."""
    xb = x.to(torch.bfloat16).float()
    g = xb.view(*xb.shape[:-1], xb.shape[-1] // 128, 128)
    s = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10) / 448
    return (e4m3(g / s) * s).view(x.shape).to(x.dtype)


def qdq_kv(y, rope):
    """kt's KV layout: nope in e4m3 with a power-of-two scale per 64, rope in bf16."""
    nope, r = y[..., :-rope].float(), y[..., -rope:]
    g = nope.view(*nope.shape[:-1], nope.shape[-1] // 64, 64)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
    s = torch.exp2(torch.ceil(torch.log2(amax / 448)))
    nope = (e4m3(g / s) * s).view(nope.shape)
    return torch.cat([nope, r.to(torch.bfloat16).float()], dim=-1).to(y.dtype)


def qdq_latent_v32(y):
    """kt's V3.2 KV layout on the latent: per 128 e4m3 with a power-of-two scale, amax / 448
    clamped at 1e-4 (mla_layout.h)."""
    g = y.float().view(*y.shape[:-1], y.shape[-1] // 128, 128)
    s = torch.exp2(torch.ceil(torch.log2((g.abs().amax(dim=-1, keepdim=True) / 448).clamp(min=1e-4))))
    return (e4m3(g / s) * s).view(y.shape).to(y.dtype)


V32_FP8_LINEARS = ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.o_proj",
                   "indexer.wq_b", "indexer.wk", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                   "shared_experts.gate_proj", "shared_experts.up_proj", "shared_experts.down_proj")


def experts_v32_qdq(mod):
    """DeepseekV32Experts' forward with kt's formats: e4m3 input and SwiGLU output (moe_gemm)."""
    def forward(hidden_states, top_k_index, top_k_weights):
        x = qdq_act(hidden_states)
        out = torch.zeros_like(hidden_states)
        for e in top_k_index.unique().tolist():
            pos, tok = torch.where(top_k_index.t() == e)
            gate, up = torch.nn.functional.linear(x[tok], mod.gate_up_proj[e]).chunk(2, dim=-1)
            h = torch.nn.functional.linear(qdq_act(mod.act_fn(gate) * up), mod.down_proj[e])
            out.index_add_(0, tok, (h * top_k_weights[tok, pos, None]).to(out.dtype))
        return out
    mod.forward = forward


def emulate_kt_v32(model):
    """V3.2 in kt's formats, as far as transformers' expanded MLA shows them: the FP8 GEMMs
    (weights, e4m3 inputs, bf16 outputs), kv_b_proj's FP8 weights, the cached latent in the V32
    layout, the routed experts. Not emulated: the absorbed query and latent output in bf16, the
    rope key in bf16, the indexer's e4m3 scores (transformers' MLA is not in absorbed form)."""
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name.endswith(V32_FP8_LINEARS):
                mod.weight.copy_(qdq_weight(mod.weight))
                mod.register_forward_pre_hook(lambda m, a: (qdq_act(a[0]),) + tuple(a[1:]))
                mod.register_forward_hook(lambda m, a, y: y.to(torch.bfloat16).to(y.dtype))
            elif name.endswith("self_attn.kv_b_proj"):
                mod.weight.copy_(qdq_weight(mod.weight))
            elif name.endswith("self_attn.kv_a_layernorm"):
                mod.register_forward_hook(lambda m, a, y: qdq_latent_v32(y))
            elif name.endswith("mlp.experts"):
                mod.gate_up_proj.copy_(qdq_weight(mod.gate_up_proj))
                mod.down_proj.copy_(qdq_weight(mod.down_proj))
                experts_v32_qdq(mod)


def emulate_kt(model):
    cfg = model.config
    rope = int(cfg.head_dim * cfg.partial_rotary_factor)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name.endswith(FP8_LINEARS):
                mod.weight.copy_(qdq_weight(mod.weight))
                mod.register_forward_pre_hook(lambda m, a: (qdq_act(a[0]),) + tuple(a[1:]))
                mod.register_forward_hook(lambda m, a, y: y.to(torch.bfloat16).to(y.dtype))
            elif name.endswith("mlp.experts"):
                mod.gate_up_proj.copy_(qdq_weight(mod.gate_up_proj))
                mod.down_proj.copy_(qdq_weight(mod.down_proj))
                mod.register_forward_pre_hook(lambda m, a: (qdq_act(a[0]),) + tuple(a[1:]))
                gate = mod._apply_gate
                mod._apply_gate = lambda x, gate=gate: qdq_act(gate(x))
            elif name.endswith("self_attn.kv_norm") or (name.endswith("compressor.kv_norm")):
                mod.register_forward_hook(lambda m, a, y: qdq_kv(y, rope))


def run(model, prompt, steps):
    """Token-by-token forward with the model's own cache over the prompt, then `steps` greedy
    tokens; returns logits [steps, B, V] and the tokens fed at each step."""
    B, P = prompt.shape
    logits, fed, pkv = [], [], None
    tok = prompt[:, :1]
    with torch.no_grad():
        for t in range(P + steps):
            out = model(input_ids=tok, past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            lg = out.logits[:, -1, :].float()
            logits.append(lg.cpu())
            fed.append(tok[:, 0].tolist())
            tok = prompt[:, t + 1:t + 2] if t + 1 < P else lg.argmax(-1, keepdim=True)
    return torch.stack(logits), fed


def read_kt_log(path, batch):
    """The tokens `kt run` fed at each step and its argmax, from its "step t: a->b ..." lines."""
    fed, picks = [], []
    for line in open(path):
        if not line.startswith("step "):
            continue
        pairs = [p.rstrip("*").split("->") for p in line.split(":", 1)[1].split()]
        fed.append([int(a) for a, _ in pairs])
        picks.append([int(b) for _, b in pairs])
    return fed, picks


def rel(a, b):
    """Per-step relative L2 of logits a against b, [steps] (max over the batch)."""
    return ((a - b).norm(dim=-1) / b.norm(dim=-1)).max(dim=-1).values


def cmd_make(a):
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed)
    cfg = {"v32": tiny_config_v32, "v32fam": tiny_config_v32_families}.get(a.arch, lambda: tiny_config(a.smooth))()
    model = (DeepseekV32ForCausalLM if a.arch.startswith("v32") else DeepseekV4ForCausalLM)(cfg).eval()
    randomise(model, g)
    os.makedirs(a.dir, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(a.dir)
    prompt = torch.randint(0, cfg.vocab_size, (a.batch, a.prompt), generator=g)
    with open(os.path.join(a.dir, "prompt.txt"), "w") as f:
        for row in prompt.tolist():
            f.write(" ".join(map(str, row)) + "\n")
    print("made", a.dir, "transformers", transformers.__version__)
    if a.mxfp4:
        write_mxfp4(a.dir, a.mxfp4)


def cmd_compare(a):
    """transformers on the tokens kt fed (teacher-forced), fp32 and with kt's formats emulated,
    against kt's dumps; greedy agreement on the generated steps."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    fed, picks = read_kt_log(a.kt_log, a.batch)
    tokens = torch.tensor(fed).t().contiguous().to(dev)  # [B, steps]
    V = json.load(open(os.path.join(a.dir, "config.json")))["vocab_size"]
    dumps = {}
    for spec in a.dump:
        name, path = spec.split("=", 1)
        dumps[name] = torch.tensor(
            list(memoryview(open(path, "rb").read()).cast("f"))).view(len(fed), a.batch, V)
    hf = {}
    cls = model_class(a.dir)
    v32 = cls is DeepseekV32ForCausalLM
    for kind in ("fp32", "qdq"):
        extra = {"attn_implementation": "eager"} if v32 else {}
        m = cls.from_pretrained(a.dir, torch_dtype=torch.float32, **extra).to(dev).eval()
        if kind == "qdq":
            (emulate_kt_v32 if v32 else emulate_kt)(m)
        lg, _ = run(m, tokens, 0)
        hf[kind] = lg[: len(fed)]
    P = a.prompt
    ok = True
    print(f"{'pair':34s} {'median':>8s} {'max':>8s}  (per-step relative L2 of the logits, max over the batch)")
    rows = [(k, "hf_" + h, dumps[k], hf[h]) for k in dumps for h in hf] + \
           [(k, j, dumps[k], dumps[j]) for k in dumps for j in dumps if k < j]
    for k, j, x, y in rows:
        r = rel(x, y)
        print(f"{k + ' vs ' + j:34s} {r.median().item():8.4f} {r.max().item():8.4f}")
    for k, j, x, y in rows:  # the GPU's error step by step: where a wrong part shows first
        if "gpu" in (k, j):
            print(f"  {k} vs {j} per step: " + " ".join(f"{v:.3f}" for v in rel(x, y).tolist()))
    for name, (lim_med, ref) in json.loads(a.limits).items():
        k, j = name.split(":")
        y = hf[j[3:]] if j.startswith("hf_") else dumps[j]
        r = rel(dumps[k], y).median().item()
        good = r <= lim_med
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {name}: median {r:.4f} <= {lim_med} ({ref})")
    # the GPU run that generated the tokens: the families' ("gpu"), or the plain kernels' when
    # the families' run failed (runtime.sh)
    lead = "gpu" if "gpu" in dumps else "plain" if "plain" in dumps else None
    if "ktref" in dumps and "exact" in dumps and lead:
        # FP8's share: the host reference's kt formats vs its exact math on the same tokens
        budget = rel(dumps["ktref"], dumps["exact"]).median().item()
        r = rel(dumps[lead], hf["fp32"]).median().item()
        good = r <= 1.15 * budget + 0.01
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {lead} vs transformers fp32: median {r:.4f} <= 1.15 x {budget:.4f} + 0.01 "
              f"(what kt's formats explain: the host reference's kt-vs-exact on the same tokens)")
    for h in hf:
        steps = range(P - 1, len(fed))
        agree = sum(int(hf[h][t, b].argmax()) == picks[t][b] for t in steps for b in range(a.batch))
        total = len(steps) * a.batch
        # decisive steps: transformers' top-1 leads by more than 3x the RMS of kt's logit error
        # there (about 2 sigma of the difference of two logits' errors), so FP8 noise cannot
        # explain a different pick; on the first GPU run every step that differed had a lead
        # under 2.2x, and every step over 2.7x agreed
        decisive = wrong = 0
        for t in steps:
            for b in range(a.batch):
                top = hf[h][t, b].topk(2).values
                noise = (dumps[lead][t, b] - hf[h][t, b]).pow(2).mean().sqrt() if lead else 0
                if top[0] - top[1] > 3 * noise:
                    decisive += 1
                    wrong += int(hf[h][t, b].argmax()) != picks[t][b]
        print(f"greedy: kt's {total} generated tokens vs transformers {h} argmax on the same inputs: {agree} agree; "
              f"{decisive} decisive steps (top-1 lead > 3x kt's logit error RMS), {wrong} of them differ")
        if a.require_greedy and h == "fp32":  # the reference no one here wrote; qdq is reported
            ok &= wrong == 0
            print(f"{'PASS' if wrong == 0 else 'FAIL'} greedy tokens equal to transformers {h} at every decisive step")
    sys.exit(0 if ok else 1)


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def to_mxfp4(w):
    """[N, K] -> (I8 codes [N, K/2], even k in the low nibble; ue8m0 bytes [N, K/32]; the exact
    values): per 32 the power-of-two scale that puts the amax at or under 6, codes the nearest
    e2m1 magnitude with the sign in bit 3."""
    n, k = w.shape
    g = w.float().view(n, k // 32, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -100)
    e = torch.ceil(torch.log2(amax / 6)).clamp(-127, 127)
    x = g / torch.exp2(e)
    mag = (x.abs().unsqueeze(-1) - E2M1).abs().argmin(-1)
    code = (mag | ((x < 0) & (mag > 0)).long() << 3).view(n, k)
    packed = (code[:, 0::2] | code[:, 1::2] << 4).to(torch.uint8).view(torch.int8)
    values = (E2M1[mag] * torch.where(x < 0, -1.0, 1.0) * torch.exp2(e)).view(n, k)
    return packed, (e.view(n, k // 32) + 127).to(torch.uint8), values


def write_mxfp4(d, out):
    """The routed experts of d's saved V4 as the release ships them (out: I8 + F8_E8M0 scale),
    and their exact MXFP4 values back into d (bf16 holds every e2m1 * 2^e exactly), so that
    transformers on d and kt on out see the same numbers."""
    from safetensors.torch import load_file, save_file
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(d):
        if not f.endswith(".safetensors"):
            if os.path.isfile(os.path.join(d, f)):
                shutil.copy(os.path.join(d, f), out)
            continue
        t = load_file(os.path.join(d, f))
        mx, dq, n = {}, {}, 0
        for name, w in t.items():
            if ".ffn.experts." in name and name.endswith(".weight"):
                codes, scales, values = to_mxfp4(w)
                mx[name] = codes
                mx[name[: -len("weight")] + "scale"] = scales.view(torch.float8_e8m0fnu)
                dq[name] = values.to(w.dtype)
                assert torch.equal(dq[name].float(), values), "bf16 must hold the MXFP4 values exactly"
                n += 1
            else:
                mx[name] = dq[name] = w
        save_file(mx, os.path.join(out, f), metadata={"format": "pt"})
        save_file(dq, os.path.join(d, f), metadata={"format": "pt"})
        print(f"{f}: {n} routed expert matrices in MXFP4")


def cmd_mxfp4(a):
    write_mxfp4(a.dir, a.out)


def cmd_hostcheck(a):
    """transformers fp32 teacher-forced on DIR's prompt against the host reference's dumps."""
    prompt = torch.tensor([[int(x) for x in line.split()] for line in open(os.path.join(a.dir, "prompt.txt"))])
    m = model_class(a.dir).from_pretrained(a.dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    hf, _ = run(m, prompt, 0)
    V = hf.shape[-1]
    ok = True
    dumps = {}
    for spec in a.dump:
        name, path = spec.split("=", 1)
        dumps[name] = torch.tensor(list(memoryview(open(path, "rb").read()).cast("f"))).view(-1, prompt.shape[0], V)
        r = rel(dumps[name], hf)
        agree = (dumps[name].argmax(-1) == hf.argmax(-1)).float().mean().item()
        print(f"{name} vs hf_fp32: per-step rel L2 median {r.median().item():.2e} max {r.max().item():.2e}; "
              f"argmax agrees at {agree * 100:.0f}% of {r.numel() * prompt.shape[0]} positions")
    for key, (lim, why) in json.loads(a.limits).items():  # lim 0: bit-equal dumps; else a bound on the median
        k, j = key.split(":")
        r = rel(dumps[k], hf if j == "hf_fp32" else dumps[j])
        good = r.max().item() == 0 if lim == 0 else r.median().item() <= lim
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {key}: per-step rel L2 median {r.median().item():.2e} (max "
              f"{r.max().item():.2e}) {'== 0' if lim == 0 else '<= ' + str(lim)} ({why})")
    sys.exit(0 if ok else 1)


def cmd_dumps(a):
    """Two dumps of the same teacher-forced run (kt run --dump): every step's relative L2 (max over
    the batch) printed; passes when the median is at most --limit."""
    x, y = (torch.tensor(list(memoryview(open(f, "rb").read()).cast("f"))).view(-1, a.batch, a.vocab)
            for f in (a.a, a.b))
    r = rel(x, y)
    print("per-step rel L2: " + " ".join(f"{v:.2e}" for v in r.tolist()))
    good = r.median().item() <= a.limit
    print(f"{'PASS' if good else 'FAIL'} {os.path.basename(a.a)} vs {os.path.basename(a.b)}: median "
          f"{r.median().item():.2e} (max {r.max().item():.2e}) <= {a.limit} ({a.why})")
    sys.exit(0 if good else 1)


def cmd_fed(a):
    """The tokens kt fed, one line per sequence: the prompt for a teacher-forced host reference."""
    fed, _ = read_kt_log(a.kt_log, 0)
    for b in range(len(fed[0])):
        print(" ".join(str(step[b]) for step in fed))


def cmd_flash(a):
    """DeepSeek-V4-Flash's config.json (transformers' defaults) for `kt run --synthetic`; --arch v32:
    DeepSeek-V3.2's (transformers' defaults with the release's YaRN: factor 40 from 4096 positions,
    mscale = mscale_all_dim = 1)."""
    os.makedirs(a.dir, exist_ok=True)
    if a.arch == "v32":
        DeepseekV32Config(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
                                           "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                           "beta_fast": 32.0, "beta_slow": 1.0}).save_pretrained(a.dir)
    else:
        DeepseekV4Config().save_pretrained(a.dir)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    du = sub.add_parser("dumps")
    du.add_argument("a")
    du.add_argument("b")
    du.add_argument("--batch", type=int, default=2)
    du.add_argument("--vocab", type=int, required=True)
    du.add_argument("--limit", type=float, required=True)
    du.add_argument("--why", default="")
    fd = sub.add_parser("fed")
    fd.add_argument("kt_log")
    fl = sub.add_parser("flash")
    fl.add_argument("dir")
    fl.add_argument("--arch", choices=("v4", "v32"), default="v4")
    mk = sub.add_parser("make")
    mk.add_argument("dir")
    mk.add_argument("--smooth", action="store_true", help="every expert and every entry selected (no top-k flips)")
    mk.add_argument("--arch", choices=("v4", "v32", "v32fam"), default="v4",
                    help="v32fam: the tiny DeepseekV32 kt's GPU step runs (families' shapes)")
    mk.add_argument("--mxfp4", metavar="OUT", help="then write its routed experts as MXFP4 into OUT (as `mxfp4`)")
    mx = sub.add_parser("mxfp4")
    mx.add_argument("dir")
    mx.add_argument("out")
    hc = sub.add_parser("hostcheck")
    hc.add_argument("dir")
    hc.add_argument("--dump", action="append", default=[], help="NAME=FILE of kt run --reference ... --dump")
    hc.add_argument("--limits", default="{}", help='{"exact:hf_fp32": [median, "why"], "a:b": [0, "bit-equal"]}')
    cp = sub.add_parser("compare")
    cp.add_argument("dir")
    cp.add_argument("--kt-log", required=True)
    cp.add_argument("--dump", action="append", default=[], help="NAME=FILE of kt run --dump")
    cp.add_argument("--limits", default="{}", help='{"gpu:hf_qdq": [median, "why"], ...}')
    cp.add_argument("--require-greedy", action="store_true", help="fail if a decisive step's token differs")
    for p in (mk, cp):
        p.add_argument("--prompt", type=int, default=40)
        p.add_argument("--batch", type=int, default=2)
        p.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    {"make": cmd_make, "compare": cmd_compare, "fed": cmd_fed, "flash": cmd_flash, "mxfp4": cmd_mxfp4,
     "hostcheck": cmd_hostcheck, "dumps": cmd_dumps}[a.cmd](a)


if __name__ == "__main__":
    main()
