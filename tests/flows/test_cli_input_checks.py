"""Bad input to `mrqa` commands through the real Typer app: one `error:` line with rc 2 (or a recorded
reject), never a traceback, and nothing deleted or registered on the way (audit D4, D5, D7, D8, D9,
D13-D15, D20, D21); an option given twice is refused, not read as its last value."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app


def run(*args: str):
    return CliRunner().invoke(app, ["--no-prefect", *args])


def refused(r, *needles: str) -> str:
    """The one `error:` line of a refused command (rc 2, no traceback), checked to hold `needles`."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("MRQA_HOME", str(h))
    return h


@pytest.fixture
def afile(tmp_path):
    f = tmp_path / "afile"
    f.write_text("precious\n")
    return f


# ------------------------------------------------------------------ D4: roles truth keeps the truth layer

@pytest.fixture
def truth_home(home, tmp_path):
    """A warehouse with 12 sample-kitchen recipes and their `truth` (and `rules`) role rows."""
    from etl.load import load_recipe
    from etl.records import RecipeRecord, StepRecord
    from etl.roles.store import extract_roles, load_truth
    from etl.sample.generate import ground_truth, plan_all
    from etl.warehouse import connect
    gt = tmp_path / "ground_truth.jsonl"
    gt.write_text("".join(json.dumps(ground_truth(p)) + "\n" for p in plan_all(12, 0)))
    con = connect()
    try:
        for line in gt.read_text().splitlines():
            g = json.loads(line)
            if g["expected"]["stage"] is None:
                load_recipe(con, RecipeRecord(g["recipe_id"], g["url_path"], g["title"], steps=[
                    StepRecord(s["step_idx"], s["title_clean"], s["body_clean"]) for s in g["steps"]]),
                    source="sample")
        extract_roles(con, progress=False)
        load_truth(con, gt)
    finally:
        con.close()
    return gt


def _roles_rows():
    from etl.warehouse import connect
    con = connect()
    try:
        return con.execute("SELECT * FROM step_roles ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_roles_truth_with_an_empty_or_foreign_file_replaces_nothing(truth_home, tmp_path):
    before = _roles_rows()
    assert sum(r[2] == "truth" for r in before) > 50
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    refused(run("roles", "truth", "--ground-truth", str(empty)), str(empty), "no records", "nothing replaced")
    foreign = tmp_path / "foreign.jsonl"          # another kitchen: none of its recipes are in the warehouse
    foreign.write_text("".join(json.dumps({**json.loads(line), "recipe_id": "Other-" + json.loads(line)["recipe_id"]})
                               + "\n" for line in truth_home.read_text().splitlines()))
    refused(run("roles", "truth", "--ground-truth", str(foreign)),
            "no record matches a recipe in the warehouse (12 read); nothing replaced")
    no_steps = tmp_path / "no_steps.jsonl"
    no_steps.write_text('{"recipe_id": "x"}\n')
    refused(run("roles", "truth", "--ground-truth", str(no_steps)), "nothing replaced")
    shape = tmp_path / "list.jsonl"
    shape.write_text("[1, 2]\n")
    refused(run("roles", "truth", "--ground-truth", str(shape)), f"{shape}:1: not a sample kitchen ground-truth")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    refused(run("roles", "truth", "--ground-truth", str(binary)), "not UTF-8", "nothing replaced")
    assert _roles_rows() == before
    r = run("roles", "truth", "--ground-truth", str(truth_home))     # the real one still loads, the same rows
    assert r.exit_code == 0, r.output
    assert _roles_rows() == before


# ------------------------------------------------------------------ D5: sample build --out

def test_sample_build_refuses_a_folder_of_other_files_and_a_path_inside_a_file(tmp_path, afile):
    other = tmp_path / "mine"
    (other / "site").mkdir(parents=True)
    (other / "site" / "index.html").write_text("my site")
    (other / "manifest.json").write_text('{"mine": true}')
    (other / "notes.txt").write_text("keep")
    refused(run("sample", "build", "--recipes", "3", "--workers", "1", "--no-progress", "--out", str(other)),
            f"--out {other} holds other files")
    assert (other / "site" / "index.html").read_text() == "my site"
    assert (other / "manifest.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in other.iterdir()) == ["manifest.json", "notes.txt", "site"]
    refused(run("sample", "build", "--recipes", "3", "--out", str(afile / "sub")), f"--out: {afile} is a file")
    refused(run("sample", "build", "--recipes", "3", "--out", str(afile)), f"--out: {afile} is a file")
    assert afile.read_text() == "precious\n"


def test_sample_build_replaces_its_own_build_and_an_interrupted_one(tmp_path):
    out = tmp_path / "kitchen"
    args = ("sample", "build", "--recipes", "3", "--workers", "1", "--no-progress", "--out", str(out))
    assert run(*args).exit_code == 0
    first = json.loads((out / "manifest.json").read_text())["content_sha256"]
    (out / "manifest.json").unlink()                    # as a build stopped before its manifest leaves it
    (out / "site" / "stale.html").write_text("half")
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "manifest.json").read_text())["content_sha256"] == first
    assert not (out / "site" / "stale.html").exists()


# ------------------------------------------------------------------ D8, D9: generate parameters and seed

@pytest.mark.parametrize("args, needle", [
    (["--knobs", "0-0-1", "--k3-prob", "-1"], "k3_prob (--k3-prob) must be in [0, 1], got -1.0"),
    (["--k3-prob", "2"], "k3_prob (--k3-prob) must be in [0, 1], got 2.0"),
    (["--ball-hi-sd", "nan"], "ball_hi_sd (--ball-hi-sd) must be a finite number, got nan"),
    (["--ball-hi-sd", "inf"], "ball_hi_sd (--ball-hi-sd) must be a finite number, got inf"),
    (["--knobs", "0-1-0", "--ball-lo-sd", "-inf"], "ball_lo_sd (--ball-lo-sd) must be a finite number, got -inf"),
    (["--seed", "-1"], "--seed must be an integer in 0..4294967295 (2**32 - 1), got -1"),
    (["--seed", str(2**32)], "--seed must be an integer in 0..4294967295"),
    (["--knobs", "0-0-1-af", "--knobs", "1-0-1-af"], "--knobs 0-0-1-af and --knobs 1-0-1-af: `mrqa generate` "
     "takes one of these and would keep only the last"),   # not the last one alone, silently
])
def test_generate_refuses_bad_parameters_before_any_work(home, args, needle):
    refused(run("generate", "--task", "visual_cloze", *args), needle)
    assert not (home / "warehouse.duckdb").exists()            # nothing opened, nothing registered


@pytest.mark.parametrize("args, needle", [
    (["af-pool", "--linear", "--no-linear"], "--linear and --no-linear: `mrqa af-pool` takes one"),
    (["query", "SELECT 1", "--format", "csv", "--format=json"], "--format csv and --format=json: `mrqa query`"),
    (["generate", "--task", "visual_cloze", "--setting", "0-1-0", "--knobs", "0-1-0"],
     "--setting 0-1-0 and --knobs 0-1-0: `mrqa generate`"),                    # one option by its two names
    (["bench", "train", "--size", "paper", "--size", "small"], "--size paper and --size small: `mrqa bench train`"),
])
def test_an_option_given_twice_is_refused_before_any_work(home, args, needle):
    """Click keeps the last of an option given twice: a run would silently do less than asked."""
    refused(run(*args), needle, "would keep only the last")
    assert not (home / "warehouse.duckdb").exists()


def test_an_option_that_takes_several_values_may_be_repeated(home):
    r = run("redraw", "--knobs", "0-1-1-af", "--knobs", "0-1-0-af")
    refused(r, "no warehouse")                     # past the check: the command itself refuses the empty home
    refused(run("generate", "--task", "visual_cloze", "--knobs", "0-1-0", "--", "--knobs"), "extra argument")


def test_generate_refuses_a_non_finite_ordering_weight_power(home):
    refused(run("generate", "--task", "visual_ordering", "--ordering-weight-power", "nan"),
            "ordering_weight_power (--ordering-weight-power) must be a finite number, got nan")


# ------------------------------------------------------------------ D13, D14: vocab-report

@pytest.mark.parametrize("content, needle", [
    (b'{bad json', ":1: not JSON (Expecting property name enclosed in double quotes)"),
    (b'[1, 2, 3]\n', ":1: not a sample kitchen ground-truth record (a JSON list, not an object)"),
    (b'{"recipe_id": "x", "steps": [{"step_idx": 1}]}\n', ":1: not a sample kitchen ground-truth record (step 1 "
                                                          "has no text title_raw, body_raw, title_clean, body_clean)"),
    (b'\n{"recipe_id": "x"}\n', ":2: not a sample kitchen ground-truth record (no 'steps' list)"),
    (b'\xff\xd8\xff\xe0 binary', ": not UTF-8 text (invalid start byte at byte 0)"),
    (b'\n\n', ": no records"),
])
def test_vocab_report_refuses_a_file_that_is_not_a_ground_truth(home, tmp_path, content, needle):
    f = tmp_path / "gt.jsonl"
    f.write_bytes(content)
    refused(run("vocab-report", "--ground-truth", str(f)), f"--ground-truth {f}{needle}")


def test_vocab_report_refuses_a_negative_top(home):
    refused(run("vocab-report", "--top", "-1"), "--top")


# ------------------------------------------------------------------ D15: unparseable listing URL, slug-less lines

def test_ingest_records_a_reject_for_an_unparseable_listing_and_slugless_url_lines(home, tmp_path):
    from etl.warehouse import connect
    r = run("ingest", "instructables", "--listing", "http://[::1", "--no-progress")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert json.loads(r.output[r.output.index("{"):])["rejected"] == {"ingest/bad_url": 1}
    urls = tmp_path / "urls.txt"
    urls.write_text("# comment\n\nhttps://www.instructables.com/\nhttps://[::2/Egg-Drop/\n")
    r = run("ingest", "instructables", "--urls", str(urls), "--no-progress")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    con = connect()
    try:
        rows = con.execute("SELECT key, reason, detail FROM rejects WHERE stage = 'ingest' ORDER BY key").fetchall()
    finally:
        con.close()
    assert ("http://[::1", "bad_url", "listing URL cannot be parsed: Invalid IPv6 URL") in rows
    assert ("https://www.instructables.com/", "bad_recipe_id", f"{urls}:3: no recipe slug in the URL") in rows
    assert ("https://[::2/Egg-Drop/", "bad_url", f"{urls}:4: not a URL (Invalid IPv6 URL)") in rows
    assert len(rows) == 3


# ------------------------------------------------------------------ D7, D20, D21: competence and roles

def test_competence_evaluate_refuses_an_unknown_format(home):
    refused(run("competence", "evaluate", "--format", "bogus"), "--format must be table or json")
    assert not (home / "warehouse.duckdb").exists()


def test_competence_export_refuses_a_file_or_a_path_inside_one(home, afile):
    refused(run("competence", "export", "--out", str(afile)), f"--out: {afile} is a file, not a folder")
    refused(run("competence", "export", "--out", str(afile / "sub")), f"--out: {afile} is a file, not a folder")
    assert afile.read_text() == "precious\n"


@pytest.mark.parametrize("labels, needle", [
    ("[1, 2]", "not a hand-label file (a JSON list without a 'recipes' list)"),
    ('{"recipes": [{"recipe_id": "r", "steps": [{"id": 1, "events": "boil"}]}]}',
     "not a hand-label file (step 1 of r: events, tools, habitats, times, temperatures not lists of strings)"),
    ("{nope", "not JSON (Expecting property name enclosed in double quotes at line 1)"),
])
def test_roles_eval_refuses_labels_of_another_shape(tmp_path, labels, needle):
    lab = tmp_path / "labels.json"
    lab.write_text(labels)
    rq = tmp_path / "rq.json"
    rq.write_text('{"data": []}')
    refused(run("roles", "eval", "--labels", str(lab), "--records", str(rq)), f"cannot score: {lab}: {needle}")
    lab.write_text('{"recipes": []}')
    rq.write_text("[]")
    refused(run("roles", "eval", "--labels", str(lab), "--records", str(rq)), f"{rq}: not a RecipeQA JSON file")
