"""kt_embed.py — kt's embedding API (runtime/kt_api.h) from Python through ctypes: get the tuned
kernel of a family for a shape and batch, launch it on PyTorch tensors on the current stream.

    import torch, kt_embed
    s = kt_embed.Session("kt.db")                        # None: family defaults
    k = s.kernel("fp8_gemm", "N=1536,K=4096", m=16)      # the DB winner; k.describe() says which
    k(A, As, B, Bs, C)                                   # torch CUDA tensors in the family's order

A serving stack (SGLang, vLLM) calls it where it calls its own FP8 block GEMM: one Session per
process at startup, one kernel per (shape, batch bucket) cached by the caller, and the launch
on the stream of its forward pass (CUDA-graph capturable: kt launches with cuLaunchKernelEx).
"""
import ctypes
import os

_DTYPES = {"e4m3": "float8_e4m3fn", "bf16": "bfloat16", "f32": "float32", "i32": "int32", "u8": "uint8"}


def _lib(path=None):
    here = os.path.dirname(os.path.abspath(__file__))
    lib = ctypes.CDLL(path or os.environ.get("KT_LIB", os.path.join(here, "..", "lib", "libkt.so")))
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    lib.kt_session_open.argtypes = [cp, ctypes.c_int, ctypes.POINTER(vp)]
    lib.kt_session_kernel.argtypes = [vp, cp, cp, ctypes.c_long, ctypes.POINTER(vp)]
    lib.kt_kernel_n_tensors.argtypes = [vp]
    lib.kt_kernel_tensor.argtypes = [vp, ctypes.c_int, ctypes.POINTER(cp), ctypes.POINTER(ctypes.c_size_t)]
    lib.kt_kernel_tensor.restype = cp
    lib.kt_kernel_describe.argtypes = [vp]
    lib.kt_kernel_describe.restype = cp
    lib.kt_kernel_launch.argtypes = [vp, ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, vp]
    lib.kt_kernel_free.argtypes = [vp]
    lib.kt_session_close.argtypes = [vp]
    lib.kt_api_error.restype = cp
    return lib


class KtError(RuntimeError):
    pass


class Kernel:
    def __init__(self, lib, handle):
        self._lib, self._h = lib, handle
        self.tensors = []
        for i in range(lib.kt_kernel_n_tensors(handle)):
            dt, n = ctypes.c_char_p(), ctypes.c_size_t()
            name = lib.kt_kernel_tensor(handle, i, ctypes.byref(dt), ctypes.byref(n))
            self.tensors.append((name.decode(), dt.value.decode(), n.value))

    def describe(self):
        return self._lib.kt_kernel_describe(self._h).decode()

    def __call__(self, *tensors, stream=None):
        import torch
        if len(tensors) != len(self.tensors):
            raise KtError(f"{self.describe()}: {len(tensors)} tensors given, it takes {len(self.tensors)}")
        for t, (name, dt, n) in zip(tensors, self.tensors):
            if not t.is_cuda or not t.is_contiguous() or t.dtype != getattr(torch, _DTYPES[dt]) or t.numel() < n:
                raise KtError(f"tensor {name}: needs a contiguous CUDA {dt} tensor of {n} elements")
        ptr = (ctypes.c_uint64 * len(tensors))(*[t.data_ptr() for t in tensors])
        s = stream if stream is not None else torch.cuda.current_stream().cuda_stream
        if self._lib.kt_kernel_launch(self._h, ptr, len(tensors), ctypes.c_void_p(s)):
            raise KtError(self._lib.kt_api_error().decode())

    def __del__(self):
        if getattr(self, "_h", None):
            self._lib.kt_kernel_free(self._h)


class Session:
    def __init__(self, db=None, device=0, lib=None):
        self._lib = _lib(lib)
        h = ctypes.c_void_p()
        if self._lib.kt_session_open(db.encode() if db else None, device, ctypes.byref(h)):
            raise KtError(self._lib.kt_api_error().decode())
        self._h = h

    def kernel(self, family, shape, m):
        h = ctypes.c_void_p()
        if self._lib.kt_session_kernel(self._h, family.encode(), shape.encode(), m, ctypes.byref(h)):
            raise KtError(self._lib.kt_api_error().decode())
        return Kernel(self._lib, h)

    def __del__(self):
        if getattr(self, "_h", None):
            self._lib.kt_session_close(self._h)
