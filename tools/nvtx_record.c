/* nvtx_record.c — test tool: an NVTX injection library (NVTX_INJECTION64_PATH) that writes
 * every push/pop range the program opens to $NVTX_RECORD, one "push NAME" / "pop" a line, so
 * a test sees kt's ranges as a profiler would, with no profiler installed. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;

static int NVTX_API push(const char *name) {
    fprintf(out, "push %s\n", name);
    fflush(out);
    return 0;
}

static int NVTX_API pop(void) {
    fprintf(out, "pop\n");
    fflush(out);
    return 0;
}

/* Called by NVTX at the program's first NVTX call: hooks RangePushA and RangePop. */
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table;
    unsigned int size;
    const char *path = getenv("NVTX_RECORD");
    if (!cb || !path || !(out = fopen(path, "a")) || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
        size <= NVTX_CBID_CORE_RangePop)
        return 0;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
