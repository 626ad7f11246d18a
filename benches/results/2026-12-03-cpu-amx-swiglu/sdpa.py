"""torch's SDPA in bf16 on the vision tower's attention shapes at max_pixels 1,003,520 (5,088 rows, 16 heads of 80):
the whole image, and windows of 64 rows batched and one call each; 2 threads, best of 3 after a warm-up."""
import torch, time, torch.nn.functional as F
torch.set_num_threads(2)
n, h, d = 5088, 16, 80
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, h, n, d, generator=g).to(torch.bfloat16) for _ in range(3))
def best(f, r=3):
    f(); ts = []
    for _ in range(r):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return min(ts)
print(f"torch {torch.__version__} sdpa full {n} rows, {h} heads of {d}: {best(lambda: F.scaled_dot_product_attention(q, k, v))*1e3:.1f} ms")
m = n // 64 * 64; qw, kw, vw = (t[0, :, :m].reshape(h, n // 64, 64, d).transpose(0, 1) for t in (q, k, v))
print(f"sdpa windows of 64 batched: {best(lambda: F.scaled_dot_product_attention(qw, kw, vw))*1e3:.1f} ms")
def per_window():
    for i in range(0, n // 64 * 64, 64):
        F.scaled_dot_product_attention(q[:, :, i:i+64], k[:, :, i:i+64], v[:, :, i:i+64])
print(f"sdpa windows of 64 one call each: {best(per_window)*1e3:.1f} ms")
