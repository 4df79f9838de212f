"""`mrqa bench af-chunks`: AF's candidate features in cache-sized chunks against the 64 MiB chunks of before.

On a home's own vectors, in one run.

AF scores every knob-valid candidate of every question with the round's linear ensemble: it builds the
candidates' features (`adversarial._coherence_build`, the cloze pair features) chunk by chunk and takes each
chunk's dot products with the question's weights. Every row's features and scores are the same whatever the
chunk, so the chunk size is a matter of speed only: this bench generates the same AF datasets in memory (the
warehouse is opened read-only; nothing is registered) with each budget in turn, repeats, and prints the
seconds of each, the medians' ratio and whether the two budgets gave the same datasets (questions, choices,
answers, provenance and AF's statistics, compared as bytes)."""
from __future__ import annotations

import hashlib
import io
import json
import statistics
import time

import pyarrow as pa

OLD_BUDGETS = (1 << 24, 1 << 22)    # floats built at once before: the candidates' features, the slot loop's blocks
DEFAULT_SETTINGS = (("visual_cloze", "0-1-0-af"), ("visual_coherence", "0-1-0-af"), ("textual_cloze", "0-1-0-af"))


def fingerprint(ds) -> str:
    """sha256 of a generated dataset's rows, provenance, answers and AF statistics."""
    h = hashlib.sha256()
    cols = dict(ds.columns)
    for name in sorted(ds.prov):
        v = ds.prov[name]
        if isinstance(v, (pa.Array, pa.ChunkedArray)):
            cols[f"p_{name}"] = v
        else:
            h.update(f"{name}={json.dumps(v, sort_keys=True, default=str)}".encode())
    if cols:
        sink = io.BytesIO()
        tbl = pa.table(cols)
        with pa.ipc.new_stream(sink, tbl.schema) as w:
            w.write_table(tbl)
        h.update(sink.getvalue())
    h.update(ds.answers.tobytes())
    h.update(json.dumps({"adversarial": ds.adversarial, "skips": ds.skips}, sort_keys=True, default=str).encode())
    return h.hexdigest()


def bench_af_chunks(con, lance_uri: str, encoder_id: str, settings=DEFAULT_SETTINGS, repeats: int = 2,
                    seed: int = 0):
    """Yield the lines of the bench: per setting, the seconds of the chunks of before and of today's
    (`adversarial.FEATURE_BUDGET`, `SLOT_BUDGET`), `repeats` runs each, alternating, after one untimed run that
    reads the vectors and draws the questions; the medians' ratio; whether the datasets are the same."""
    from features.datasets import adversarial as A
    from features.datasets.generate import Generator, settings_for
    resolved = [(knobs, *settings_for(task, knobs)[0]) for task, knobs in settings]   # every bad name refused first
    new = (A.FEATURE_BUDGET, A.SLOT_BUDGET)
    gen = Generator(con, encoder_id, lance_uri)
    try:
        for knobs, task, params in resolved:
            gen.generate(task, params, seed)                          # the shared inputs, cached: not timed
            times, prints = {OLD_BUDGETS: [], new: []}, {OLD_BUDGETS: set(), new: set()}
            for _ in range(repeats):
                for budgets in (OLD_BUDGETS, new):
                    A.FEATURE_BUDGET, A.SLOT_BUDGET = budgets
                    t0 = time.perf_counter()
                    ds = gen.generate(task, params, seed)
                    times[budgets].append(time.perf_counter() - t0)
                    prints[budgets].add(fingerprint(ds))
            same = len(prints[OLD_BUDGETS] | prints[new]) == 1
            old_m, new_m = statistics.median(times[OLD_BUDGETS]), statistics.median(times[new])
            yield (f"{task} {knobs} ({ds.n_questions:,d} questions): chunks of {OLD_BUDGETS[0]:,d} / "
                   f"{OLD_BUDGETS[1]:,d} floats {', '.join(f'{t:.1f}' for t in times[OLD_BUDGETS])} s, of "
                   f"{new[0]:,d} / {new[1]:,d} {', '.join(f'{t:.1f}' for t in times[new])} s; medians "
                   f"{old_m:.1f} / {new_m:.1f} s, {old_m / max(new_m, 1e-9):.2f}x; "
                   + ("the same dataset, byte for byte" if same else "DIFFERENT datasets"))
    finally:
        A.FEATURE_BUDGET, A.SLOT_BUDGET = new
