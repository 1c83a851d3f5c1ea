# cuBLAS (through PyTorch) bf16 matmuls of the shapes bench_cuda_kernels times: the non-exact
# library rate, for the matmul-unit roofline. Median of CUDA-event timings; rotating weights.
import torch

def bench(fn, warm=5, reps=30):
    for i in range(warm):
        fn(i)
    ts = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(warm + i); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]

print(torch.cuda.get_device_name(), "torch", torch.__version__)
for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
    copies = max(2, (512 << 20) // (n * k * 2) + 1)
    ws = [torch.randn(n, k, device="cuda").bfloat16() for _ in range(copies)]
    for t in [1, 2048]:
        x = torch.randn(t, k, device="cuda").bfloat16()
        ms = bench(lambda i: torch.nn.functional.linear(x, ws[i % copies]), reps=200 if t == 1 else 30)
        gb = (n * k * 2 + t * k * 2 + t * n * 2) / (ms * 1e-3) / 1e9
        tf = 2 * t * n * k / (ms * 1e-3) / 1e12
        print(f"cublas T={t:5d} N={n:6d} K={k:6d} {ms*1e3:9.2f} us {gb:7.0f} GB/s {tf:7.1f} TFLOP/s")
a = torch.randn(8192, 8192, device="cuda").bfloat16(); b = torch.randn(8192, 8192, device="cuda").bfloat16()
ms = bench(lambda i: a @ b)
print(f"cublas 8192^3 {2*8192**3/(ms*1e-3)/1e12:.1f} TFLOP/s")
