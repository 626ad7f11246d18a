import ctypes, time, os, numpy as np
lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "x/mkl-2026.2.1.data/data/lib/libmkl_rt.so.3"  # the wheel unzipped beside this file))
f = lib.cblas_gemm_bf16bf16f32
f.restype = None
f.argtypes = [ctypes.c_int]*6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
def bf16(x):
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
for (m,k,n) in [(5088,1280,3840),(5088,3420,1280),(5088,1280,6840),(1306,896,4864),(2048,2048,2048)]:
    a = bf16(np.random.randn(m,k)); w = bf16(np.random.randn(n,k)); c = np.zeros((m,n), np.float32)
    best = 1e9
    for _ in range(4):
        t0 = time.perf_counter()
        f(101, 111, 112, m, n, k, 1.0, a.ctypes.data, k, w.ctypes.data, k, 0.0, c.ctypes.data, n)
        best = min(best, time.perf_counter() - t0)
    print(f"MKL cblas_gemm_bf16bf16f32 {m} x {k} x {n}: {best*1e3:.1f} ms, {2*m*k*n/best/1e9:.0f} GFLOP/s")
