"""flows/malloc.py: the glibc settings reach child processes through the environment, take effect there
(freed large arrays are reused instead of being faulted in again), and yield to the user's own."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flows.malloc import OPT_OUT_ENV, SETTINGS, tune_malloc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc settings: Linux only")

# a child that keeps a few arrays of 256 KiB to 4 MiB alive while it makes and frees more (the shape of the
# generate stage's temporaries) and prints its minor page faults
CHURN = ("import resource, numpy as np\n"
         "rng = np.random.default_rng(0)\n"
         "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
         "keep = []\n"
         "for _ in range(400):\n"
         "    a = np.ones(int(rng.integers(1 << 15, 1 << 19)))\n"
         "    keep.append(a * 2)\n"
         "    del a\n"
         "    keep = keep[-3:]\n"
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != OPT_OUT_ENV}


def _faults(env: dict) -> int:
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_children_get_the_settings_and_stop_refaulting_freed_arrays():
    env = _clean_env()
    applied = tune_malloc(env)
    assert applied == {name: value for _, name, value in SETTINGS}
    assert all(env[name] == str(value) for name, value in applied.items())
    tuned, default = _faults(env), _faults(_clean_env())
    assert tuned * 4 < default, (tuned, default)     # freed blocks reused, not mapped and faulted in anew


def test_the_users_own_setting_wins_and_the_opt_out_sets_nothing():
    env = {**_clean_env(), "MALLOC_TOP_PAD_": "4096"}
    applied = tune_malloc(env)
    assert "MALLOC_TOP_PAD_" not in applied and env["MALLOC_TOP_PAD_"] == "4096"
    assert set(applied) == {name for _, name, _ in SETTINGS} - {"MALLOC_TOP_PAD_"}
    off = {**_clean_env(), OPT_OUT_ENV: "default"}
    assert tune_malloc(off) == {} and not any(k.startswith("MALLOC_") for k in off)


def test_a_mode_that_is_neither_tuned_nor_default_is_a_clear_error():
    env = {**_clean_env(), OPT_OUT_ENV: "defualt"}
    with pytest.raises(ValueError, match="MRQA_MALLOC='defualt' is not a malloc mode.*tuned.*default"):
        tune_malloc(env)
    assert not any(k.startswith("MALLOC_") for k in env)
    assert tune_malloc({**_clean_env(), OPT_OUT_ENV: "Tuned"}) == {name: value for _, name, value in SETTINGS}
    out = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "--help"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "is not a malloc mode" in out.stderr and "Traceback" not in out.stderr
