"""`mrqa bench generate`: time `generate --all` on a synthetic world with the neighbours computed.

Untimed (or timed separately): building the synthetic world with its image `neighbours` table, and
the title `text_neighbours` (built once per encoder). Timed: exactly what `mrqa generate --all`
runs (vectors from LanceDB, representatives, KNN arrays, skeletons, 44 datasets (32 with --paper-only) registered in
DuckDB), per dataset and in total. The ratio is the vectorised knob-2/3 cloze distractor selection
against the obvious per-question Python loop over the same candidate lists (identical picks checked).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from etl.config import Paths


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f}, {b:.2f}, {c:.2f} on {os.cpu_count()} cores"


def bench_generate(home: Path, n_recipes: int, dim: int = 128, k: int = 100, seed: int = 0,
                   loop_questions: int = 5000, balanced: bool = True) -> dict:
    from etl.warehouse import connect
    from features.datasets.generate import Generator, ensure_text_neighbours, generate_datasets, generation_settings
    from features.datasets.knobs import KnobParams
    from features.datasets.synthetic import build_world
    paths = Paths.from_env(home).ensure()
    con = connect(paths)
    lines = []
    marker = paths.home / "world.json"
    if not marker.exists():
        t0 = time.perf_counter()
        info = build_world(con, paths.lance, n_recipes=n_recipes, seed=seed, dim=dim, k=k)
        info["seconds"] = round(time.perf_counter() - t0, 1)
        marker.write_text(json.dumps(info))
        lines.append(f"built synthetic world (with image neighbours) in {info['seconds']}s, not timed below")
    info = json.loads(marker.read_text())
    enc = info["encoder_id"]
    lines.append(f"world: {info['recipes']:,d} recipes, {info['image_vectors']:,d} image vectors, "
                 f"{info['title_vectors']:,d} title vectors, {info['neighbours']:,d} neighbour rows")
    t0 = time.perf_counter()
    pre = Generator(con, enc, paths.lance)
    n_tn = ensure_text_neighbours(con, enc, pre.space("title"), k)
    lines.append(f"title neighbours (once per encoder, not timed below): {n_tn:,d} rows built in "
                 f"{time.perf_counter() - t0:.1f}s" if n_tn else "title neighbours: already built")
    del pre
    before = _load()
    t0, c0 = time.perf_counter(), time.process_time()
    gen = Generator(con, enc, paths.lance)
    summaries = generate_datasets(con, generation_settings(balanced=balanced), seed=seed, encoder_id=enc,
                                  lance_uri=paths.lance, progress=False, generator=gen)
    t_all, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_q = sum(s["n_questions"] for s in summaries)
    lines.append(f"generate --all: {len(summaries)} datasets, {n_q:,d} questions from {n_recipes:,d} recipes "
                 f"in {t_all:.1f}s total, {cpu:.1f} CPU-s over all threads "
                 f"({t_all / len(summaries):.2f}s per dataset on "
                 f"average; target "
                 f"<= 120s at 20,000 recipes); {before} before, {_load()} after")

    # vectorised vs per-question loop: knob-2/3 cloze distractors of vc (0,1,1), paper coin flip
    from features.datasets.questions import _cloze_pool, _fill
    params = KnobParams.preset_for("visual_cloze", 0, 1, 1)
    b = gen.batch("visual_cloze", params, seed)
    sp = gen.space("image")
    pool = _cloze_pool(b, sp, gen.prepare("image", seed, params.k).knn)
    n = min(loop_questions, len(b.qids))
    first = np.zeros(pool["C"].shape, dtype=bool)
    first[:n] = pool["C"][:n] >= 0
    _fill(pool, sp, first)                         # distances to the question: same input for both
    pool = {**pool, "closer": (1.0 - pool["dd"][..., 0]) < pool["d_ans_q"][:, None]}
    t0 = time.perf_counter()
    vec_picks = _vectorised_picks(pool, b, params, n)
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop_picks = _loop_picks(pool, b, params, n)
    t_loop = time.perf_counter() - t0
    same = vec_picks == loop_picks
    lines.append(f"cloze distractor selection (ball + coin knob 3, vc 0-1-1) on {n:,d} questions: vectorised "
                 f"{t_vec:.3f}s, per-question Python loop {t_loop:.3f}s, ratio {t_loop / max(t_vec, 1e-9):.1f}x "
                 f"(identical picks: {same})")
    con.close()
    return {"datasets": summaries, "lines": lines, "seconds_all": t_all, "cpu_seconds": cpu, "identical": same}


def _vectorised_picks(P: dict, b, params, n: int) -> list:
    from features.datasets.distractors import first_per_group, take_first
    from features.datasets.questions import _k3
    C, D, closer = P["C"][:n], P["D"][:n], P["closer"][:n]
    m, s = P["m_d"][:n], P["s_d"][:n]
    lo = np.zeros(n) if params.ball_lo_sd is None else m + params.ball_lo_sd * s
    hi = m + params.ball_hi_sd * s
    S = first_per_group((C >= 0) & (D > lo[:, None]) & (D < hi[:, None]), P["rec"][:n])
    need = _k3(type("D", (), {"params": params})(), b)[0][:n]
    close = S & closer
    ok = (S.sum(1) >= 3) & (close.sum(1) >= need)
    forced = take_first(close, need)
    sel = forced | take_first(S & ~forced, 3 - need)
    return [C[i][sel[i]].tolist() if ok[i] else None for i in range(n)]


def _loop_picks(P: dict, b, params, n: int) -> list:
    """The obvious alternative: walk each question's candidate list in Python."""
    from features.datasets.questions import _k3
    need = _k3(type("D", (), {"params": params})(), b)[0]
    out = []
    for i in range(n):
        m, s = P["m_d"][i], P["s_d"][i]
        lo = 0.0 if params.ball_lo_sd is None else m + params.ball_lo_sd * s
        hi = m + params.ball_hi_sd * s
        seen, cands = set(), []
        for c, d, rec, cl in zip(P["C"][i], P["D"][i], P["rec"][i], P["closer"][i]):
            if c < 0 or not lo < d < hi or rec in seen:
                continue
            seen.add(rec)
            cands.append((int(c), bool(cl)))
        forced = [c for c, cl in cands if cl][:need[i]]
        if len(cands) < 3 or len(forced) < need[i]:
            out.append(None)
            continue
        rest = [c for c, _ in cands if c not in forced][:3 - need[i]]
        chosen = set(forced) | set(rest)
        out.append([c for c, _ in cands if c in chosen])
    return out
