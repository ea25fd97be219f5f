/* registry.h — the kernel families built into kt, one line each: adding a family is
 * kernels/NAME.cu + kernels/NAME.c + one line here. */
KT_FAMILY(fp8_gemm)
KT_FAMILY(act_quant)
KT_FAMILY(quant_fp8_gemm)
KT_FAMILY(selftest)
KT_FAMILY(probe)
KT_FAMILY(act_quant_fp8_gemm)
KT_FAMILY(mla_decode)
KT_FAMILY(moe_route)
KT_FAMILY(moe_gemm)
KT_FAMILY(moe_step)
KT_FAMILY(mla_indexer)
