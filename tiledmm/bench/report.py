"""Turns a benchmark results JSON into a Markdown table and a PNG chart.

    python -m tiledmm.bench.report bench/results/<device>-<date>.json [--readme] [--png chart.png]

--readme: only the README's rows (README_ROWS), in its order, without the heading line.

The chart: tiledmm's speed relative to torch.matmul per problem (left), and the TFLOP/s of both
against the GPU's peak for that dtype (right). Needs matplotlib for the PNG.

A model-suite JSON (--suite models, <device>-<date>-models.json): the table of its summary, per
model, dtype and precision, and a chart of each product's speedup, one panel per dtype.

A --host JSON (<device>-<date>-host.json): the table of its per-call times.
"""

import argparse
import json
import statistics

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


def speedup_summary(rows):
    """Per model suite, dtype, precision and pass of the tiledmm rows: how many, the geometric mean
    of their speedups (torch ms / tiledmm ms; the mean that treats a 2x gain and a 2x loss as
    cancelling) and the worst speedup with its problem, in the rows' order."""
    groups = {}
    for r in rows:
        if r["impl"] == "tiledmm":
            groups.setdefault((r["suite"], r["dtype"], r["precision"], r["pass"]), []).append(r)
    summary = []
    for (suite, dtype, precision, pass_), group in groups.items():
        worst = min(group, key=lambda r: r["speedup"])
        summary.append({"suite": suite, "dtype": dtype, "precision": precision, "pass": pass_, "rows": len(group),
                        "geomean_speedup": round(statistics.geometric_mean(r["speedup"] for r in group), 3),
                        "worst_speedup": worst["speedup"], "worst_problem": worst["problem"]})
    return summary


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
    lines = [] if rows is not None else [heading(result), ""]
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


def heading(result):
    return (f"{result['device']}, torch {result['torch']}, commit {result['commit']}, {result.get('date', '')}"
            f"{', cold L2' if result.get('cold_l2') else ''}"
            f"{', each run synchronized (host launch latency included)' if result.get('timing') == 'serialized' else ''}:")


def summary_markdown(result, with_heading=True):
    """The model suite's summary as a table (with_heading: under the run's heading line)."""
    lines = [heading(result), ""] if with_heading else []
    lines += ["| model | dtype / precision | pass | products | speedup, geometric mean | worst (problem) |",
              "|---|---|---|---:|---:|---|"]
    for s in result["summary"]:
        lines.append(f"| {s['suite']} | {series(s)} | {s['pass']} | {s['rows']} | {s['geomean_speedup']:.3f}x | "
                     f"{s['worst_speedup']:.3f}x ({s['worst_problem']}) |")
    return "\n".join(lines)


def host_pairs(rows):
    """A --host run's (tiledmm row, torch row) per entry point, pass, size and dtype."""
    for t in (r for r in rows if r["impl"] == "tiledmm"):
        yield t, next(r for r in rows if r["impl"] == "torch" and all(r[k] == t[k] for k in ("entry", "pass", "n", "dtype")))


def host_markdown(result):
    """A --host run's table: per entry point, pass, size and dtype, the host's time per call."""
    lines = [heading(result), "", "| entry | pass | n | dtype | torch us | tiledmm us | tiledmm / torch |",
             "|---|---|---:|---|---:|---:|---:|"]
    for t, ref in host_pairs(result["rows"]):
        lines.append(f"| {t['entry']} | {t['pass']} | {t['n']} | {t['dtype']} | {ref['us']:.2f} | {t['us']:.2f} | "
                     f"{t['ratio']:.2f}x |")
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


def models_chart(result, path):
    """Each forward product's speedup over torch.matmul, one panel per dtype (and float32
    precision), the bars coloured by model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fwd = [t for t, _ in pairs(result, "fwd")]
    panels = list(dict.fromkeys(series(t) for t in fwd))
    problems = list(dict.fromkeys(t["problem"] for t in fwd))
    suites = list(dict.fromkeys(t["suite"] for t in fwd))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 0.45 * len(problems)), 2.6 * len(panels) + 1.5),
                             sharex=True, squeeze=False)
    for axis, panel in zip(axes[:, 0], panels):
        by_problem = {t["problem"]: t for t in fwd if series(t) == panel}
        for i, suite in enumerate(suites):
            present = [(j, by_problem[p]) for j, p in enumerate(problems) if by_problem.get(p, {}).get("suite") == suite]
            axis.bar([j for j, _ in present], [t["speedup"] for _, t in present], color=f"C{i}", label=suite)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_ylim(0, 1.1 * max(1.0, *(t["speedup"] for t in by_problem.values())))  # the line at 1 in view
        axis.set_ylabel("speedup")
        axis.set_title(f"{panel}: torch.matmul ms / tiledmm ms (higher is better)", fontsize=10)
        axis.legend(fontsize=8)
    axes[-1, 0].set_xticks(range(len(problems)), problems, rotation=70, ha="right", fontsize=8)
    fig.suptitle(f"model training products: {result['device']}, torch {result['torch']}, commit {result['commit']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(prog="python -m tiledmm.bench.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--readme", action="store_true",
                        help="only the README's rows (README_ROWS), in its order (models: the summary without the heading)")
    parser.add_argument("--png", help="write the chart here")
    args = parser.parse_args()
    with open(args.results) as f:
        result = json.load(f)
    if result.get("suite") == "host":
        if args.png or args.readme:
            parser.error("a --host run has a table only")
        print(host_markdown(result))
        return
    models = "summary" in result
    if models:
        print(summary_markdown(result, with_heading=not args.readme))
    else:
        print(markdown(result, README_ROWS if args.readme else None))
    if args.png:
        (models_chart if models else chart)(result, args.png)
        print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
