"""The best pinned host-to-device and device-to-host copy rates PyTorch
reaches on this GPU (cudaMemcpyAsync from page-locked memory, timed with
CUDA events), the reference for `fateplan profile`'s pcie figures.

    python benches/pinned_copy.py [--mib 64 256 1024] [--repeats 20]

Prints one JSON line per size and direction; then one per size for both
directions at once (a host-to-device and a device-to-host copy of the same
size, each on a stream of its own, timed from before both to after both:
how much the two lanes move together, which host memory may cap); then
the best of each.
"""
import argparse
import json
import statistics

import torch


def rate(src, dst, repeats):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return src.numel() * src.element_size() / statistics.median(times)


def both(host_in, dev_in, dev_out, host_out, repeats):
    """Bytes per second of both directions at once (their sum), and the median seconds."""
    up, down = torch.cuda.Stream(), torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for k in range(repeats + 3):
        torch.cuda.synchronize()
        start.record()
        up.wait_event(start)
        down.wait_event(start)
        with torch.cuda.stream(up):
            dev_in.copy_(host_in, non_blocking=True)
        with torch.cuda.stream(down):
            host_out.copy_(dev_out, non_blocking=True)
        torch.cuda.current_stream().wait_stream(up)
        torch.cuda.current_stream().wait_stream(down)
        end.record()
        end.synchronize()
        if k >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    moved = 2 * host_in.numel() * host_in.element_size()
    return moved / statistics.median(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    best = {"h2d": 0.0, "d2h": 0.0}
    for mib in args.mib:
        n = mib << 18  # f32 values
        host = torch.rand(n).pin_memory()
        dev = torch.empty(n, device="cuda")
        for name, src, dst in (("h2d", host, dev), ("d2h", dev, host)):
            r = rate(src, dst, args.repeats)
            best[name] = max(best[name], r)
            print(json.dumps({"direction": name, "mib": mib, "bytes_per_s": r}))
    best_both = 0.0
    for mib in args.mib:
        n = mib << 18
        host_in, host_out = torch.rand(n).pin_memory(), torch.empty(n).pin_memory()
        dev_in, dev_out = torch.empty(n, device="cuda"), torch.rand(n, device="cuda")
        r, s = both(host_in, dev_in, dev_out, host_out, args.repeats)
        best_both = max(best_both, r)
        print(json.dumps({"direction": "both", "mib": mib, "bytes_per_s": r, "seconds": s}))
    print(json.dumps({"best_h2d_bytes_per_s": best["h2d"], "best_d2h_bytes_per_s": best["d2h"],
                      "best_both_bytes_per_s": best_both,
                      "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
