"""steps/s, peak RSS and prefill MFU of every bench-*.json here, one line each."""
import glob, json, os
here = os.path.dirname(os.path.abspath(__file__))
for f in sorted(glob.glob(os.path.join(here, "**", "bench-*.json"), recursive=True)):
    d = json.load(open(f))
    print(f"{os.path.relpath(f, here)}: {d['steps_per_second']:.4f} steps/s, peak RSS {d['peak_host_rss_bytes'] / 1e9:.2f} GB, "
          f"prefill MFU {d['mfu_prefill']:.3f} of {d['matmul_peak_flops'] / 1e9:.0f} GFLOP/s ({d['matmul_peak_source']}), "
          f"decode share of bandwidth {d.get('share_of_bandwidth')}")
