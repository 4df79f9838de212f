"""`mrqa bench generate`: time `generate --all` on a synthetic world with neighbours precomputed,
and set-based SQL distractor selection (sql/queries/cloze_distractors.sql) against the obvious
alternative, a per-question Python loop over the same neighbour lists."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from etl.config import Paths


def bench_generate(home: Path, n_recipes: int, dim: int = 128, k: int = 100, seed: int = 0) -> dict:
    from etl.warehouse import connect
    from features.generate import Generator, generate_datasets, generation_settings, load_query
    from features.knobs import KnobParams
    from features.synthetic import build_world
    paths = Paths.from_env(home).ensure()
    con = connect(paths)
    lines = []
    marker = paths.home / "world.json"
    if not marker.exists():
        t0 = time.perf_counter()
        info = build_world(con, paths.lance, n_recipes=n_recipes, seed=seed, dim=dim, k=k)
        info["seconds"] = round(time.perf_counter() - t0, 1)
        marker.write_text(json.dumps(info))
        lines.append(f"built synthetic world in {info['seconds']}s: {info}")
    info = json.loads(marker.read_text())
    enc = info["encoder_id"]
    # first run also builds the title neighbours (once per encoder): time it separately
    t0 = time.perf_counter()
    gen = Generator(con, enc, paths.lance)
    gen.prepare("title", seed, 100)
    gen.prepare("image", seed, 100)
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    summaries = generate_datasets(con, generation_settings(), seed=seed, encoder_id=enc,
                                  lance_uri=paths.lance, progress=False)
    t_all = time.perf_counter() - t0
    lines.append(f"generate --all: {len(summaries)} datasets, {sum(s['n_questions'] for s in summaries):,d} "
                 f"questions from {n_recipes:,d} recipes in {t_all:.1f}s "
                 f"({t_all / len(summaries):.2f}s per dataset; inputs prepared once in {t_prep:.1f}s, "
                 f"total {t_all + t_prep:.1f}s; target <= 120s at 20,000 recipes)")

    # SQL vs Python loop on the knob-2/3 distractor selection of vc (0,1,1 all): same inputs
    gen2 = Generator(con, enc, paths.lance)
    params = KnobParams.preset_for("visual_cloze", 0, 1, 1)           # paper coin flip
    gen2.generate("visual_cloze", params, seed)          # leaves gen_questions for this setting
    t0 = time.perf_counter()
    sql_rows = con.execute(load_query("cloze_distractors"),
                           {"lo_sd": params.ball_lo_sd, "hi_sd": params.ball_hi_sd}).fetchall()
    t_sql = time.perf_counter() - t0
    t0 = time.perf_counter()
    py_rows = _python_loop(con, gen2, params)
    t_py = time.perf_counter() - t0
    per_q = {}
    for r in sql_rows:
        per_q[r[0]] = per_q.get(r[0], 0) + 1
    n_sql = sum(1 for v in per_q.values() if v == 3)
    n_q = con.execute("SELECT count(*) FROM gen_questions").fetchall()[0][0]
    lines.append(f"distractor selection (ball + knob 3, vc 0-1-1) for {n_q:,d} questions: SQL {t_sql:.2f}s, "
                 f"per-question Python loop {t_py:.2f}s, ratio {t_py / max(t_sql, 1e-9):.1f}x "
                 f"(feasible questions: SQL {n_sql:,d}, Python {py_rows:,d}; cores: {os.cpu_count()})")
    con.close()
    return {"datasets": summaries, "lines": lines, "seconds_all": t_all, "seconds_prepare": t_prep}


def _python_loop(con, gen, params) -> int:
    """The obvious alternative: fetch each question's neighbour list and filter it in Python."""
    sp = gen.space("image")
    qs = con.execute("SELECT qid, answer_id, qvec, d_answer_q, n_closer FROM gen_questions").fetchall()
    ok = 0
    for qid, answer_id, qvec, d_ans_q, n_closer in qs:
        rows = con.execute("SELECT cand_id, cand_recipe_id, distance, m_d, s_d FROM gen_knn_stats "
                           "WHERE item_id = ? ORDER BY rank", [answer_id]).fetchall()
        if not rows:
            continue
        m_d, s_d = rows[0][3], rows[0][4]
        lo = 0.0 if params.ball_lo_sd is None else m_d + params.ball_lo_sd * s_d
        hi = m_d + params.ball_hi_sd * s_d
        qv = np.asarray(qvec, dtype=np.float32)
        seen, closer, other = set(), [], []
        for cand, rec, dist, _, _ in rows:
            if not lo < dist < hi or rec in seen:
                continue
            seen.add(rec)
            v = sp.vecs[sp.index[cand]]
            dq = 1 - float(v @ qv) / (np.linalg.norm(qv) + 1e-12)
            (closer if dq < d_ans_q else other).append(cand)
        if len(closer) >= n_closer and len(closer) + len(other) >= 3:
            ok += 1
    return ok
