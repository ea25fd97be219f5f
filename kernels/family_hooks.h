/* family_hooks.h — the part of a kernel family's descriptor (kt_family, runtime/kt.h) that
 * every family file (kernels/NAME.c) fills the same way, from static functions of the same
 * names: one list here instead of a copy per family. */
#ifndef KT_FAMILY_HOOKS_H
#define KT_FAMILY_HOOKS_H

/* The hooks every compiled family defines: problem and config checks, its tensors and how
 * they are filled, the host reference, the launch and the bytes it moves. */
#define KT_FAMILY_HOOKS                                                                                                \
    .check_problem = check_problem, .check_config = check_config, .config_fits = config_fits, .tensors = tensors,      \
    .fill = fill, .reference = reference, .launch = launch, .bytes = bytes

/* A family with a GPU reference kernel (launch_reference), used above `above` work units. */
#define KT_FAMILY_GPU_REFERENCE(above) .gpu_reference_above = (above), .launch_reference = launch_reference

#endif
