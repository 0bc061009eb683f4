"""Turns a benchmark results JSON into a Markdown table and a PNG chart.

    python -m tiledmm.bench.report bench/results/<device>-<date>.json [--readme] [--png chart.png]

--readme: only the README's rows (README_ROWS), in its order, without the heading line.

The chart: tiledmm's speed relative to torch.matmul per problem (left), and the TFLOP/s of both
against the GPU's peak for that dtype (right). Needs matplotlib for the PNG.
"""

import argparse
import json

# Dense peaks of an H100/H200 SXM (datasheet, TFLOP/s) per series (dtype, and precision for
# float32), for the chart's reference lines: float32 on CUDA cores ('ieee', and 'highest', which
# runs the exact kernel on large outputs), 3xTF32 (three TF32 products per float32 product),
# TF32, 16-bit and FP64 tensor cores.
PEAK_TFLOPS = {"float32 ieee": 67.0, "float32 highest": 67.0, "float32 3xtf32": 165.0,
               "float32 tf32": 495.0, "float64": 67.0, "float16": 990.0, "bfloat16": 990.0}


# The README's table: per pass, the series shown, in order.
README_ROWS = {
    "fwd": ["float32 highest", "float32 3xtf32", "float32 tf32", "float32 ieee", "float64", "bfloat16"],
    "fwd+bwd": ["float32 highest", "bfloat16"],
}


def series(row):
    """The chart series of a row: the dtype, with the precision for float32."""
    return row["dtype"] if row["precision"] == "n/a" else f"{row['dtype']} {row['precision']}"


def pairs(result, pass_="fwd"):
    """(tiledmm row, torch row) per problem, dtype and precision, for one pass."""
    rows = [r for r in result["rows"] if r["pass"] == pass_]
    same = ("problem", "dtype", "precision")
    for t in (r for r in rows if r["impl"] == "tiledmm"):
        yield t, next(r for r in rows if r["impl"] == "torch" and all(r[key] == t[key] for key in same))


def spread_pct(*rows):
    """The widest interquartile range of the rows' times, in % of each one's median: a speedup
    closer to 1 than this is noise. None for results from before the quartiles were recorded."""
    if not all("ms_q1" in r for r in rows):
        return None
    return max(100.0 * (r["ms_q3"] - r["ms_q1"]) / r["ms"] for r in rows)


def selected_pairs(result, rows=None):
    """(pass, tiledmm row, torch row) of every pair, or of rows' series per pass in rows' order."""
    for pass_ in ("fwd", "fwd+bwd"):
        found = list(pairs(result, pass_))
        if rows is None:
            yield from ((pass_, t, ref) for t, ref in found)
        else:
            for name in rows.get(pass_, []):
                yield from ((pass_, t, ref) for t, ref in found if series(t) == name)


def markdown(result, rows=None):
    """The table of every pair, or (rows: README_ROWS) of the README's selection, without the heading line."""
    lines = [] if rows is not None else [
        f"{result['device']}, torch {result['torch']}, commit {result['commit']}, {result.get('date', '')}"
        f"{', cold L2' if result.get('cold_l2') else ''}"
        f"{', each run synchronized (host launch latency included)' if result.get('timing') == 'serialized' else ''}:",
        "",
    ]
    lines += [
        "| problem | m, k, n | layout | dtype | precision | pass | tiledmm ms | torch ms | speedup | spread | tiledmm TFLOP/s | error tiledmm | error torch |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pass_, t, ref in selected_pairs(result, rows):
        spread = spread_pct(t, ref)
        lines.append(
            f"| {t['problem']} | {t['m']}, {t['k']}, {t['n']} | {t['layout']} | {t['dtype']} | {t['precision']} | {pass_} | "
            f"{t['ms']:.3f} | {ref['ms']:.3f} | {t['speedup']:.2f}x | {'' if spread is None else f'{spread:.1f}%'} | "
            f"{t['tflops']:.1f} | {t['rel_err']:.1e} | {ref['rel_err']:.1e} |"
        )
    return "\n".join(lines)


def chart(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fwd = list(pairs(result, "fwd"))
    dtypes = sorted({series(t) for t, _ in fwd}, key=list(PEAK_TFLOPS).index)
    problems = list(dict.fromkeys(t["problem"] for t, _ in fwd))
    width = 0.8 / len(dtypes)
    fig, (left, right) = plt.subplots(1, 2, figsize=(18, 5.5))
    for i, dtype in enumerate(dtypes):
        by_problem = {t["problem"]: (t, ref) for t, ref in fwd if series(t) == dtype}
        xs = [j + i * width for j, p in enumerate(problems) if p in by_problem]
        present = [p for p in problems if p in by_problem]
        left.bar(xs, [by_problem[p][0]["speedup"] for p in present], width, label=dtype)
        right.bar(xs, [by_problem[p][0]["tflops"] for p in present], width, label=f"tiledmm {dtype}")
        right.scatter(xs, [by_problem[p][1]["tflops"] for p in present], marker="_", s=200, color="black",
                      label="torch.matmul" if i == 0 else None, zorder=3)
        right.axhline(PEAK_TFLOPS[dtype], linestyle=":", color=f"C{i}", label=f"{dtype} peak")
    for axis in (left, right):
        axis.set_xticks([j + width * (len(dtypes) - 1) / 2 for j in range(len(problems))], problems)
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_ylabel("speed relative to torch.matmul (higher is better)")
    left.set_title("tiledmm / torch.matmul, forward")
    left.legend(fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("TFLOP/s")
    right.set_title("throughput against the GPU's peak")
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{result['device']}, torch {result['torch']}, commit {result['commit']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(prog="python -m tiledmm.bench.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--readme", action="store_true", help="only the README's rows (README_ROWS), in its order")
    parser.add_argument("--png", help="write the chart here")
    args = parser.parse_args()
    with open(args.results) as f:
        result = json.load(f)
    print(markdown(result, README_ROWS if args.readme else None))
    if args.png:
        chart(result, args.png)
        print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
