"""A decoding step's attention on the CPU: torch's fused `scaled_dot_product_attention` against the explicit
products speechmt uses for at most `FEW_QUERIES` queries a row out of training
(`speechmt.models.layers._few_query_attention`), for the shapes of Whisper base's cross-attention in the default
model's search (20 utterances x 8 heads, 750 keys: 15 s of audio, 64 channels a head), over a range of query
counts, in float32 and bfloat16, with the keys/values contiguous (as the decoder now caches them) or as the
transposed views a (B, S, H, Dh) projection gives. One process; the settings alternate within each repeat; the
report gives each one's median milliseconds and the products' time as a ratio of the fused kernel's.

    python benchmarks/bench_step_attention.py [--queries 1 4 16 64] [--keys 750] [--rows 20] [--repeats 5]
        [--calls 20] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from speechmt.models.layers import FEW_QUERIES, _few_query_attention, key_padding_mask


def inputs(
    rows: int, queries: int, keys: int, dtype: torch.dtype, contiguous: bool, heads: int = 8, channels: int = 64
) -> tuple[torch.Tensor, ...]:
    """q (B, H, T, Dh), k and v (B, H, S, Dh) (contiguous, or transposed views of (B, S, H, Dh)), and a key
    mask with a quarter of each row's keys padded."""
    q = torch.randn(rows, heads, queries, channels, dtype=dtype)
    k, v = (torch.randn(rows, keys, heads, channels, dtype=dtype).transpose(1, 2) for _ in range(2))
    if contiguous:
        k, v = k.contiguous(), v.contiguous()
    return q, k, v, key_padding_mask(torch.full((rows,), keys - keys // 4), keys)


def timed_ms(fn, calls: int) -> float:
    """Mean milliseconds of `calls` calls, after one untimed call."""
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--keys", type=int, default=750)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    settings = [
        (dtype, contiguous, n)
        for dtype in (torch.float32, torch.bfloat16)
        for contiguous in (True, False)
        for n in args.queries
    ]
    times: dict[tuple, dict[str, list[float]]] = {s: {"fused": [], "products": []} for s in settings}
    with torch.no_grad():
        for _ in range(args.repeats):
            for setting in settings:
                q, k, v, mask = inputs(args.rows, setting[2], args.keys, setting[0], setting[1])
                times[setting]["fused"].append(
                    timed_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), args.calls)
                )
                times[setting]["products"].append(timed_ms(lambda: _few_query_attention(q, k, v, mask), args.calls))
    rows = []
    print(
        f"{args.rows} rows x 8 heads, {args.keys} keys, {args.threads} threads; products used for <= {FEW_QUERIES} "
        "queries"
    )
    print(
        "| dtype | keys/values | queries | fused ms | products ms | products / fused |\n|---|---|---:|---:|---:|---:|"
    )
    for (dtype, contiguous, n), t in times.items():
        fused, products = statistics.median(t["fused"]), statistics.median(t["products"])
        rows.append(
            {
                "dtype": str(dtype).removeprefix("torch."),
                "contiguous": contiguous,
                "queries": n,
                "fused_ms": round(fused, 3),
                "products_ms": round(products, 3),
                "ratio": round(products / fused, 3),
            }
        )
        print(
            f"| {rows[-1]['dtype']} | {'contiguous' if contiguous else 'transposed view'} | {n} | {fused:.2f} | "
            f"{products:.2f} | {products / fused:.2f} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
