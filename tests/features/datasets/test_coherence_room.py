"""The coherence room diagnostic (features/datasets/coherence_room.py) on a synthetic world: its counts
agree with what the generator makes, and every swapped set it reports keeps knob 1 and puts a
knob-valid foreign photo outside the closest pair, checked from the vectors."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.coherence_room import coherence_room, room_table
from features.datasets.generate import Generator, generate_datasets
from features.datasets.knobs import parse_setting

ENC = "synthetic-enc-0001"
TASK = "visual_coherence"
SETTINGS = ("0-0-0", "0-1-0", "1-0-1")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "room_home", n_recipes=70, seed=1, dim=24, k=100) as (home, paths, con):
        plain = [(TASK, parse_setting(s).params(TASK)) for s in SETTINGS]
        summaries = generate_datasets(con, plain, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        gen = Generator(con, ENC, lance_uri=str(paths.lance))
        rooms = {s: coherence_room(gen, s) for s in SETTINGS}
        yield {"home": home, "con": con, "gen": gen, "rooms": rooms,
               "ids": {s: d["dataset_id"] for s, d in zip(SETTINGS, summaries)}}


def _min_pair(v: np.ndarray) -> float:
    g = v @ v.T
    return float(min(1 - g[0, 1], 1 - g[0, 2], 1 - g[1, 2]))


def test_valid_questions_are_the_plain_settings(world):
    for s, room in world["rooms"].items():
        n = world["con"].execute("SELECT count(*) FROM questions WHERE dataset_id = ?",
                                 [world["ids"][s]]).fetchall()[0][0]
        assert int(room.valid.sum()) == n > 0
        assert not (room.room_as_drawn & ~room.valid).any()
        assert not (room.room_as_drawn & ~room.room_with_swaps).any()     # swaps only add room
    assert any(r.room_with_swaps[r.valid].sum() > r.room_as_drawn.sum() for r in world["rooms"].values())


def test_a_pick_outside_the_closest_pair_is_counted(world):
    """Every generated question whose foreign photo lies outside the closest pair of the four is one the
    diagnostic counts as having room as drawn."""
    gen, con = world["gen"], world["con"]
    sp = gen._spaces["image"]
    row = {i: k for k, i in enumerate(sp.item_ids.tolist())}
    for s, room in world["rooms"].items():
        b = gen.batch(TASK, parse_setting(s).params(TASK), 0)
        at = {q: i for i, q in enumerate(b.qids)}
        outside = 0
        for qid, choices, ans in con.execute("SELECT qid, choice_list, answer FROM questions WHERE dataset_id = ?",
                                             [world["ids"][s]]).fetchall():
            v = sp.vecs[[row[c] for c in choices]].astype(np.float64)
            coherent = np.delete(v, ans, axis=0)
            if (1 - coherent @ v[ans]).min() > _min_pair(coherent):
                outside += 1
                assert room.room_as_drawn[at[qid]], qid
        assert outside <= room.room_as_drawn.sum()


def test_swapped_sets_keep_knob_one_and_leave_the_pair(world):
    gen = world["gen"]
    sp = gen._spaces["image"]
    checked = 0
    for s, room in world["rooms"].items():
        p = parse_setting(s).params(TASK)
        b = gen.batch(TASK, p, 0)
        prep = gen._prepared[("image", 0, p.k)]
        sk = b.sk
        for i in np.flatnonzero(room.room_with_swaps & ~room.room_as_drawn):
            rp, j = int(sk.recipe_pos[i]), int(sk.q_index[i])
            steps = room.swap_steps[i]
            assert len(steps) == 3 == len(set(steps)) and steps == sorted(steps)
            assert int(sk.answer_step[i]) in steps
            if p.extra_step_removal:
                assert int(sk.extra_removed[i]) in steps
            earlier = np.flatnonzero((sk.recipe_pos == rp) & (sk.q_index < j))
            gone = set(sk.answer_step[earlier].tolist()) | set(sk.extra_removed[earlier].tolist())
            assert not gone & set(steps)
            assert set(steps) <= set(prep.recipes[rp][2]) and steps != [int(x) for x in sk.steps[i]]
            v = sp.vecs[prep.rep_of[rp, steps]].astype(np.float64)
            f = room.swap_foreign[i]
            assert sp.recipe_ids[f] != b.recipe_ids[i] and sp.splits[f] == b.splits[i]
            assert (1 - v @ sp.vecs[f].astype(np.float64)).min() > _min_pair(v)
            checked += 1
    assert checked


@pytest.mark.slow      # the room measured on a home of its own (~13 s)
def test_cli_and_table(tmp_path_factory):
    """The command line on a home whose warehouse no other connection holds: one JSON row per setting whose
    figures are the table's, and clear refusals."""
    with synthetic_home(tmp_path_factory, "room_cli", n_recipes=40, seed=2, dim=24, k=100) as (home, paths, con):
        generate_datasets(con, [(TASK, parse_setting("0-0-0").params(TASK))], seed=0, encoder_id=ENC,
                          lance_uri=paths.lance, progress=False)
        n = con.execute("SELECT count(*) FROM questions").fetchall()[0][0]
        con.close()
        rows = room_table(str(home), ("0-0-0",), encoder_id=ENC)
        assert rows[0]["setting"] == "0-0-0" and rows[0]["questions"] == n > 0
        assert rows[0]["room_with_swaps"] >= rows[0]["room_as_drawn"]
        run = lambda *a: subprocess.run([sys.executable, "-m", "features.datasets.coherence_room", *a],
                                        capture_output=True, text=True)
        ok = run("--home", str(home), "--settings", "0-0-0")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout.strip().splitlines()[-1]) == rows[0]
        bad = run("--home", str(home), "--settings", "0-0-2")
        assert bad.returncode == 2 and "not a paper setting: 0-0-2" in bad.stderr
        none = run("--home", str(home / "nowhere"))
        assert none.returncode == 2 and "no warehouse" in none.stderr
    with synthetic_home(tmp_path_factory, "room_bare", n_recipes=12, seed=2, dim=16, k=20) as (bare, _, con):
        con.execute("DELETE FROM encoders")
        con.close()
        r = run("--home", str(bare))
        assert r.returncode == 2 and "no encoder in the warehouse" in r.stderr and "Traceback" not in r.stderr
