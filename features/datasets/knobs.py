"""Knob settings as data: the paper's binary presets, the parameters behind them, setting names, dataset ids.

Definitions: docs/knobs.md. `setting_name` / `parse_setting` own the one name of a setting
(`0-0-1-balanced`, `0-1-1-af`, `recipeqa`) that ids, partitions, the CLI and the report use.
A dataset is (task, knobs, params, seed, encoder). `KnobParams` holds the underlying parameters;
`KnobParams.preset(task, k1, k2, k3)` gives the paper's values, `recipeqa_preset(task)` the biased
RecipeQA-style reference. Deterministic randomness helpers (stable 64-bit keys and a vectorised
splitmix64 stream) live here too, so every random decision is a function of (seed, task,
recipe/question) and never of iteration order.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, replace

import numpy as np

from etl.config import SEED_MAX

TASKS = ("visual_cloze", "visual_coherence", "visual_ordering", "textual_cloze")
TASK_CODES = {"visual_cloze": "vc", "visual_coherence": "vcoh", "visual_ordering": "vord",
              "textual_cloze": "tc"}
K3_MODES = ("off", "coin", "all", "balanced")
N_CHOICES = 4
AF_TASKS = ("visual_cloze", "visual_coherence", "textual_cloze", "visual_ordering")
AF_ALL_TASKS = ("visual_cloze", "visual_coherence", "textual_cloze")     # the AF variants `--all` makes
AF_DEFAULT_ROUNDS = 3
BEYOND = ("matched", "author", "kitchen", "redrawn", "matched-redrawn")  # distractor rules beyond the paper,
                                                                          # each its own setting name
MATCHED_KINDS = ("matched", "author")    # coherence's foreign photo matched to a held-out photo of the recipe
REDRAWN_KINDS = ("redrawn", "matched-redrawn")   # made by `mrqa redraw` from an AF dataset, never generated
KITCHEN_RULE = ("--distractors kitchen is defined for visual cloze at knob 2 = 0 and knob 3 = 0 (the question's "
                "own recipe replaces their ball: the setting is K1-0-0-kitchen, e.g. 0-0-0-kitchen-af)")
MATCHED_RULE = ("--distractors matched is defined for visual coherence at knob 2 = 0 and knob 3 = 0 (it replaces "
                "their distances: the setting is K1-0-0-matched, e.g. 0-0-0-matched-af)")
AUTHOR_RULE = ("--distractors author is defined for visual coherence at knob 2 = 0 and knob 3 = 0 (the foreign "
               "photo of another recipe by the question's author, matched to a held-out photo of the recipe, "
               "replaces their distances: the setting is K1-0-0-author, e.g. 0-0-0-author-af)")
REDRAWN_RULE = ("redrawn distractors (visual cloze) and foreign photos (visual coherence) are made by `mrqa redraw` "
                "from an AF dataset of the sample kitchen (e.g. `mrqa redraw --knobs 0-1-1-af` makes "
                "0-1-1-redrawn-af; `mrqa redraw --task visual_coherence --knobs 0-0-0-matched-af` makes "
                "0-0-0-matched-redrawn-af); `mrqa generate` does not draw photos")


@dataclass(frozen=True)
class KnobParams:
    """Everything that defines a dataset besides task, seed and encoder.

    knob1 / knob2 / knob3 are the paper's labels (None for the RecipeQA-style preset); the
    fields below them are what the generator actually uses, so users can go past two levels.
    """
    knob1: int | None = 0
    knob2: int | None = 0
    knob3: int | None = 0
    preset: str | None = None            # None (knob dataset) | "recipeqa"
    # knob 1 -- overlap between the questions of a recipe
    min_steps: int = 5                   # recipes need this many eligible (non-intro, with item) steps
    questions_per_step: float = 0.5      # at most floor(n_steps * ratio) questions per recipe
    remove_answer_step: bool = True      # the correct answer's step leaves the pool after a question
    extra_step_removal: bool = False     # k1=1: one random other step of the question leaves too
    # knob 2 -- distance of distractors from the correct answer (ball in units of s_d around m_d)
    distractors: str = "ball"            # ball (knob 2) | random_far (RecipeQA-style preset) | matched
                                         # (coherence, beyond the paper: features/datasets/matched.py) |
                                         # author (coherence: matched among the recipes of the question's author) |
                                         # kitchen (visual cloze, beyond the paper: the recipe's own photos) |
                                         # redrawn (visual cloze and coherence AF: the ball's photos drawn
                                         # again in the question's kitchen, features/datasets/redraw.py)
    k: int = 100                         # neighbours used for m_d, s_d and as candidates
    ball_lo_sd: float | None = None      # None: lower bound is distance 0
    ball_hi_sd: float = -1.0
    ordering_weight_power: float = 0.0   # ordering: wrong orderings drawn with weight S**power
    # knob 3 -- distance of distractors from the question
    k3_mode: str = "off"                 # off | coin (paper, p=k3_prob) | all | balanced
    k3_prob: float = 0.5
    k3_n_constrained: int = 1            # distractors closer to the question than the answer (coin/all)
    # beyond the paper: adversarial filtering (features/datasets/adversarial.py); 0 = off
    af_rounds: int = 0                   # rounds of a held-out question-only ensemble replacing distractors

    @classmethod
    def preset_for(cls, task: str, k1: int, k2: int, k3: int, k3_mode: str = "coin",
                   **overrides) -> KnobParams:
        """The paper's binary setting (k1, k2, k3) with `overrides` on the underlying parameters."""
        for name, v in (("k1", k1), ("k2", k2), ("k3", k3)):
            if v not in (0, 1):
                raise ValueError(f"{name} must be 0 or 1, got {v!r}")
        if task == "visual_ordering" and k3:
            raise ValueError("knob 3 is not defined for visual_ordering (no question to be close to); use k3=0")
        if k3 and k3_mode not in ("coin", "all", "balanced"):
            raise ValueError(f"--k3-mode must be coin, all or balanced, got {k3_mode!r}")
        p = cls(knob1=k1, knob2=k2, knob3=k3,
                questions_per_step=1 / 3 if k1 else 1 / 2,
                extra_step_removal=bool(k1),
                ball_lo_sd=None if k2 == 0 else -1.0,
                ball_hi_sd=-1.0 if k2 == 0 else 1.0,
                ordering_weight_power=float(k2),
                k3_mode=k3_mode if k3 else "off")
        return replace(p, **overrides) if overrides else p

    @classmethod
    def recipeqa_preset(cls, **overrides) -> KnobParams:
        """RecipeQA-style reference: steps reused across questions, random far distractors."""
        p = cls(knob1=None, knob2=None, knob3=None, preset="recipeqa", min_steps=4,
                questions_per_step=0.5, remove_answer_step=False, extra_step_removal=False,
                distractors="random_far", ordering_weight_power=0.0, k3_mode="off")
        return replace(p, **overrides) if overrides else p

    def validate(self, task: str) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; one of {', '.join(TASKS)}")
        if self.k3_mode not in K3_MODES:
            raise ValueError(f"k3_mode must be one of {K3_MODES}, got {self.k3_mode!r}")
        if task == "visual_ordering" and self.k3_mode != "off":
            raise ValueError("knob 3 is not defined for visual_ordering (no question to be close to)")
        if not 0 < self.questions_per_step <= 1:
            raise ValueError("questions_per_step must be in (0, 1]")
        if self.distractors not in ("ball", "random_far") + BEYOND:
            raise ValueError("distractors must be ball, random_far, matched, author, kitchen, redrawn or "
                             "matched-redrawn")
        if self.distractors in MATCHED_KINDS and (task != "visual_coherence" or self.preset
                                                  or self.knob2 or self.knob3 or self.k3_mode != "off"):
            raise ValueError(AUTHOR_RULE if self.distractors == "author" else MATCHED_RULE)
        if self.distractors == "kitchen" and (task != "visual_cloze" or self.preset
                                              or self.knob2 or self.knob3 or self.k3_mode != "off"):
            raise ValueError(KITCHEN_RULE)
        if self.distractors == "redrawn" and (task not in ("visual_cloze", "visual_coherence") or self.preset
                                              or not self.af_rounds):
            raise ValueError(REDRAWN_RULE)
        if self.distractors == "matched-redrawn" and (task != "visual_coherence" or self.preset or not self.af_rounds
                                                      or self.knob2 or self.knob3 or self.k3_mode != "off"):
            raise ValueError(REDRAWN_RULE)
        if self.distractors == "kitchen":       # options of the ball and knob 3, which the recipe replaces
            unused = [opt for opt, v, d in (("--k", self.k, 100), ("--ball-lo-sd", self.ball_lo_sd, None),
                                            ("--ball-hi-sd", self.ball_hi_sd, -1.0),
                                            ("--k3-constrained", self.k3_n_constrained, 1),
                                            ("--k3-prob", self.k3_prob, 0.5),
                                            ("--ordering-weight-power", self.ordering_weight_power, 0.0)) if v != d]
            if unused:
                raise ValueError(f"{', '.join(unused)}: kitchen distractors use no knob-2 ball and no knob 3 (the "
                                 "question's own recipe replaces them); leave these out")
        if self.k < 3:
            raise ValueError("k must be at least 3 (three distractors)")
        for name, option, v in (("ball_lo_sd", "--ball-lo-sd", self.ball_lo_sd),
                                ("ball_hi_sd", "--ball-hi-sd", self.ball_hi_sd),
                                ("ordering_weight_power", "--ordering-weight-power", self.ordering_weight_power),
                                ("k3_prob", "--k3-prob", self.k3_prob)):
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{name} ({option}) must be a finite number, got {v!r}")
        if not 0 <= self.k3_prob <= 1:
            raise ValueError(f"k3_prob (--k3-prob) must be in [0, 1], got {self.k3_prob!r}")
        if self.ball_lo_sd is not None and self.ball_lo_sd >= self.ball_hi_sd:
            raise ValueError("ball_lo_sd must be below ball_hi_sd")
        if not 0 <= self.k3_n_constrained <= N_CHOICES - 1:
            raise ValueError("k3_n_constrained must be in 0..3")
        if self.min_steps < 4:
            raise ValueError("min_steps must be at least 4 (a question shows 4 steps)")
        if self.af_rounds < 0:
            raise ValueError(f"af_rounds must be 0 (off) or more, got {self.af_rounds}")
        if self.af_rounds and (self.preset or task not in AF_TASKS):
            raise ValueError(f"adversarial filtering is defined for the knob settings of {', '.join(AF_TASKS)}, "
                             "not for a preset")
        ordering, coin_or_all = task == "visual_ordering", self.k3_mode in ("coin", "all")
        ball_lo, ball_hi = self._preset_ball()
        no_ball = ("visual ordering draws wrong orders, no distractors from a ball" if ordering else
                   {"random_far": "the preset's random far distractors replace it",
                    "matched": "the matched foreign image replaces it",
                    "author": "the matched foreign image of the author's recipes replaces it"}.get(
                       self.distractors, f"{self.distractors} distractors replace it"))
        # (option, set away from the preset, used by this setting, why not)
        rules = (("--k3-prob", self.k3_prob != 0.5, self.k3_mode == "coin", "knob 3's coin mode only"),
                 ("--k3-constrained", self.k3_n_constrained != 1, coin_or_all and task != "visual_coherence",
                  "visual coherence has one foreign image: knob 3 tests only it" if coin_or_all
                  else "knob 3's coin and all modes only"),
                 ("--ordering-weight-power", self.ordering_weight_power != self._preset_weight_power(), ordering,
                  "visual ordering only"),
                 ("--ball-lo-sd", self.ball_lo_sd != ball_lo, not ordering and self.distractors in ("ball", "redrawn"),
                  f"the knob-2 ball: {no_ball}"),
                 ("--ball-hi-sd", self.ball_hi_sd != ball_hi, not ordering and self.distractors in ("ball", "redrawn"),
                  f"the knob-2 ball: {no_ball}"),
                 ("--k", self.k != 100, not ordering and self.distractors not in (*MATCHED_KINDS, "matched-redrawn"),
                  "visual ordering uses no neighbours" if ordering
                  else "the matched foreign image is drawn from no neighbours"))
        unused = [f"{opt} ({why})" for opt, changed, used, why in rules if changed and not used]
        if unused:
            raise ValueError(f"{', '.join(unused)}: this setting does not use it, so it would only make a `-p` "
                             "dataset with the same questions under another id; leave it out")

    def _preset_ball(self) -> tuple[float | None, float]:
        """(ball_lo_sd, ball_hi_sd) as the preset of these knobs sets them (`preset_for`: knob 2)."""
        return (-1.0, 1.0) if self.knob2 == 1 and not self.preset else (None, -1.0)

    def _preset_weight_power(self) -> float:
        """ordering_weight_power as the preset of these knobs sets it (`preset_for`: knob 2; a preset: 0)."""
        return 0.0 if self.preset or self.knob2 is None else float(self.knob2)

    @property
    def setting(self) -> Setting:
        """The knob setting these parameters were made from (the id-, partition- and report name)."""
        if self.preset:
            return Setting(None, None, None, "off", False, self.preset)
        return Setting(self.knob1, self.knob2, self.knob3, self.k3_mode, self.af_rounds > 0,
                       distractors=self.distractors if self.distractors in BEYOND else "ball")

    @property
    def knobs_label(self) -> str:
        """The setting's one name (`setting_name`): `0-0-1-balanced`, `0-1-1-af`, `recipeqa`, ..."""
        return self.setting.name

    def to_json(self) -> dict:
        """The fields as a dict; `af_rounds` only when adversarial filtering is on, so the paper
        settings' params (and the `-p<hash>` of their variants) are what they were before it existed."""
        d = asdict(self)
        if not self.af_rounds:
            d.pop("af_rounds")
        return d




def check_seed(seed: int) -> None:
    """Raise ValueError (naming --seed) for a seed numpy cannot take: checked before any dataset is made."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= SEED_MAX:
        raise ValueError(f"--seed must be an integer in 0..{SEED_MAX} (2**32 - 1), got {seed!r}")


def dataset_id(task: str, params: KnobParams, seed: int, encoder_id: str) -> str:
    """Deterministic id `<code>-<setting name>-s<seed>-<enc8>`: `vc-0-1-0-s0-<enc8>`,
    `vc-0-0-1-balanced-s0-<enc8>`, `vc-0-1-1-af-s0-<enc8>`, `vc-recipeqa-s0-<enc8>`; a `-p<hash6>` suffix
    when the underlying parameters differ from the preset of that setting (`Setting.params`; AF with
    its default rounds counts as the preset)."""
    code = TASK_CODES[task]
    enc8 = hashlib.sha256(encoder_id.encode()).hexdigest()[:8]
    setting = params.setting
    did = f"{code}-{setting.name}-s{seed}-{enc8}"
    if params != setting.params(task):
        did += f"-p{params_hash(params)}"
    return did


def params_hash(params: KnobParams) -> str:
    """6 hex digits of sha256 over the parameters' JSON (the `-p` suffix of a dataset id)."""
    return hashlib.sha256(json.dumps(params.to_json(), sort_keys=True).encode()).hexdigest()[:6]


def legacy_dataset_id(task: str, params: KnobParams, seed: int, encoder_id: str) -> str:
    """The id the same dataset had before setting names (`vc-k010-s0-<enc8>`, `vc-k001-s0-<enc8>-p<hash6>`
    for balanced, `vc-k010-af-s0-<enc8>`): re-generating a dataset replaces the rows kept under it."""
    code = TASK_CODES[task]
    enc8 = hashlib.sha256(encoder_id.encode()).hexdigest()[:8]
    if params.preset:
        base, ref = f"{code}-{params.preset}", KnobParams.recipeqa_preset()
    else:
        base = f"{code}-k{params.knob1}{params.knob2}{params.knob3}" + ("-af" if params.af_rounds else "")
        ref = KnobParams.preset_for(task, params.knob1, params.knob2, params.knob3,
                                    af_rounds=AF_DEFAULT_ROUNDS if params.af_rounds else 0)
    did = f"{base}-s{seed}-{enc8}"
    return did + (f"-p{params_hash(params)}" if params != ref else "")


def previous_dataset_ids(task: str, params: KnobParams, seed: int, encoder_id: str) -> list[str]:
    """The ids the same dataset had under older names, replaced when it is generated again: before setting
    names (`legacy_dataset_id`), and for matched coherence before its setting name said `-matched`
    (`vcoh-0-0-0-af-s0-<enc8>-p<hash6>`)."""
    out = [legacy_dataset_id(task, params, seed, encoder_id)]
    if params.distractors == "matched" and not params.preset:
        enc8 = hashlib.sha256(encoder_id.encode()).hexdigest()[:8]
        name = replace(params.setting, distractors="ball").name
        out.append(f"{TASK_CODES[task]}-{name}-s{seed}-{enc8}-p{params_hash(params)}")
    return out


# ----------------------------------------------------------------------------- setting names

PRESETS = ("recipeqa",)
NAMED_MODES = ("all", "balanced")        # knob-3 modes a setting name spells; coin (the paper's) is the default
_SETTING_RE = re.compile(r"""^(?P<k1>\d+)\s*[-,]\s*(?P<k2>\d+)\s*[-,]\s*(?P<k3>\d+)
                             (?:[-:(]?(?P<mode>off|coin|all|balanced)\)?)?
                             (?P<beyond>-matched-redrawn|-matched|-author|-kitchen|-redrawn)?
                             (?P<af>-af)?$""", re.VERBOSE)


@dataclass(frozen=True)
class Setting:
    """A knob setting: (k1, k2, k3) with its knob-3 mode and adversarial filtering, or a preset.
    `name` is its one spelling everywhere (CLI, dataset ids, partitions, report, `mrqa datasets`)."""
    k1: int | None
    k2: int | None
    k3: int | None
    k3_mode: str = "off"                 # off (k3=0) | coin (the paper's) | all | balanced
    adversarial: bool = False
    preset: str | None = None
    distractors: str = "ball"            # ball (knob 2) | matched, author (coherence) | kitchen (visual cloze): knobs 2
                                         # and 3 = 0, beyond the paper | redrawn (visual cloze/coherence AF)

    @property
    def name(self) -> str:
        if self.preset:
            return self.preset
        return setting_name(self.k1, self.k2, self.k3, self.k3_mode, self.adversarial, self.distractors)

    def params(self, task: str, af_rounds: int = AF_DEFAULT_ROUNDS, **overrides) -> KnobParams:
        """The preset parameters of this setting for `task` (with `overrides`)."""
        if self.preset:
            p = KnobParams.recipeqa_preset(**overrides)
        else:
            if self.distractors != "ball":
                overrides = {"distractors": self.distractors, **overrides}
            p = KnobParams.preset_for(task, self.k1, self.k2, self.k3,
                                      k3_mode=self.k3_mode if self.k3 else "coin", **overrides)
        return replace(p, af_rounds=af_rounds) if self.adversarial else p


def setting_of(knobs: str) -> str:
    """The setting's name of an export's knobs= value: the value itself, or, where the export held several
    datasets of one setting, the value without the rest of the dataset's id (`0-1-1-s1-1a2b3c4d` -> `0-1-1`)."""
    return re.sub(r"-s[0-9]+-[0-9a-f]{8}(-p[0-9a-f]{6})?$", "", knobs)


def setting_kind(name: str) -> str:
    """Which distractors a setting's name says: `matched`, `author`, `kitchen`, `redrawn`, `matched-redrawn`
    (beyond the paper) or `ball`."""
    m = re.search(r"-(matched-redrawn|matched|author|kitchen|redrawn)\b", str(name or ""))
    return m[1] if m else "ball"


def setting_name(k1: int, k2: int, k3: int, k3_mode: str | None = None, adversarial: bool = False,
                 distractors: str = "ball") -> str:
    """The one name of a knob setting: `k1-k2-k3`, then `-all` or `-balanced` for a knob-3 mode other
    than the paper's coin flip, then `-matched` for coherence's matched foreign images (`-author`: matched among
    the recipes of the question's author) or `-kitchen` for
    visual cloze's distractors from the question's own recipe (knobs 2 and 3 = 0 only, beyond the paper) or
    `-redrawn` for visual cloze AF distractors (coherence: foreign photos) drawn again in the question's kitchen
    (`0-1-1-redrawn-af`),
    then `-af` for adversarial filtering: `0-0-1`, `0-0-1-balanced`, `0-1-1-af`, `0-1-1-balanced-af`,
    `1-0-0-matched-af`, `0-0-0-kitchen-af` (docs/knobs.md). The RecipeQA-style preset is `recipeqa`."""
    for label, v in (("k1", k1), ("k2", k2), ("k3", k3)):
        if v not in (0, 1):
            raise ValueError(f"{label} must be 0 or 1, got {v!r}")
    mode = k3_mode or ("coin" if k3 else "off")
    if mode not in K3_MODES:
        raise ValueError(f"knob-3 mode must be one of {', '.join(K3_MODES)}, got {k3_mode!r}")
    if k3 == 0 and mode not in ("off", "coin"):
        raise ValueError(f"knob-3 mode {mode!r} needs k3=1 (with k3=0 knob 3 is off)")
    if k3 == 1 and mode == "off":
        mode = "coin"
    if distractors not in ("ball",) + BEYOND:
        raise ValueError(f"a setting's distractors are ball, matched, author, kitchen, redrawn or matched-redrawn, got "
                         f"{distractors!r}")
    if distractors in MATCHED_KINDS and (k2 or k3):
        raise ValueError(AUTHOR_RULE if distractors == "author" else MATCHED_RULE)
    if distractors == "kitchen" and (k2 or k3):
        raise ValueError(KITCHEN_RULE)
    if distractors in REDRAWN_KINDS and not adversarial or distractors == "matched-redrawn" and (k2 or k3):
        raise ValueError(REDRAWN_RULE)
    return (f"{k1}-{k2}-{k3}" + (f"-{mode}" if mode in NAMED_MODES else "")
            + (f"-{distractors}" if distractors in BEYOND else "") + ("-af" if adversarial else ""))


def parse_setting(text: str, k3_mode: str | None = None, adversarial: bool | None = None,
                  distractors: str | None = None) -> Setting:
    """A setting from its name or an older spelling, normalised (`Setting.name` is the canonical name).

    Accepted: `0-0-1-balanced` (the name), `0,0,1` with `k3_mode="balanced"` (`--knobs 0,0,1
    --k3-mode balanced`), `0-0-1:balanced` (the old knob label), `0-0-1balanced` (the old partition),
    `0-0-1(balanced)`, `0-0-1-coin` (= `0-0-1`), any of them with `-af`, `K1-0-0-matched[-af]`,
    `K1-0-0-author[-af]` and `K1-0-0-kitchen[-af]` (or `K1-0-0[-af]` with `distractors="matched"`, `"author"` or
    `"kitchen"`), and `recipeqa`.
    `k3_mode` / `adversarial` / `distractors` given beside the text must agree with it. Raises ValueError otherwise."""
    raw = str(text)
    s = raw.strip().lower()
    if s in PRESETS:
        if (k3_mode not in (None, "off", "coin")) or adversarial:
            raise ValueError(f"the {s} preset has no knob-3 mode and no adversarial variant")
        return Setting(None, None, None, "off", False, s)
    m = _SETTING_RE.match(s)
    if not m:
        raise ValueError(f"not a knob setting: {raw!r}; expected K1-K2-K3 with each 0 or 1, optionally "
                         f"-all or -balanced (k3=1), -matched or -author (visual coherence) or -kitchen (visual "
                         f"cloze) at "
                         f"K2 = K3 = 0 or -redrawn (visual cloze and coherence AF), and -af, e.g. 0-1-0, "
                         f"0-0-1-balanced, 0-1-1-af, "
                         f"0-0-0-kitchen-af; or "
                         f"{', '.join(PRESETS)}")
    k1, k2, k3 = (int(m[g]) for g in ("k1", "k2", "k3"))
    mode = m["mode"]
    if mode and k3_mode and k3_mode != mode and {mode, k3_mode} != {"coin", "off"}:
        raise ValueError(f"{raw!r} says knob-3 mode {mode!r} but --k3-mode is {k3_mode!r}")
    mode = mode or k3_mode
    if k3 == 0 and mode == "coin" and m["mode"] is None:
        mode = None                         # --k3-mode coin is the default; it means nothing at k3=0
    af = bool(m["af"])
    if adversarial is False and af:
        raise ValueError(f"{raw!r} names an adversarially filtered setting but --no-adversarial was given")
    named = m["beyond"][1:] if m["beyond"] else None
    if named and distractors not in (None, named):
        raise ValueError(f"{raw!r} names {named} distractors but --distractors is {distractors!r}")
    dist = named or (distractors if distractors in BEYOND else "ball")
    setting_name(k1, k2, k3, mode, af, dist)          # validates values, mode and distractors
    return Setting(k1, k2, k3, (mode if mode in NAMED_MODES else "coin") if k3 else "off",
                   af or bool(adversarial), distractors=dist)


# ----------------------------------------------------------------------------- deterministic randomness

_MASK = (1 << 64) - 1


def stable_key(*parts) -> int:
    """A 64-bit key from the parts (sha256): the same on every machine and Python version."""
    h = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big")


def md5_key(text: str) -> int:
    """64-bit key of a string, identical to DuckDB's md5_number_lower(text) (used in bulk in SQL)."""
    return int.from_bytes(hashlib.md5(text.encode()).digest()[8:], "little")


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorised splitmix64 finaliser on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniforms(keys: np.ndarray, stream: int, n: int = 1) -> np.ndarray:
    """Uniforms in [0, 1), shape (len(keys), n): a pure function of (key, stream, column)."""
    keys = np.asarray(keys, dtype=np.uint64)
    base = splitmix64(keys ^ np.uint64(stream * 0x9E3779B1 & _MASK))
    cols = np.arange(n, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        z = splitmix64(base[:, None] + cols * np.uint64(0xD1B54A32D192ED03))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def recipe_rng(seed: int, task: str, variant: str, recipe_id: str) -> np.random.Generator:
    """Per-recipe generator: results never depend on the order recipes are visited in."""
    return np.random.default_rng([seed & _MASK, stable_key(task, variant, recipe_id)])
