"""Recipe plans: the clean content of one sample recipe (title, steps, labels, what each image shows).

`plan_recipe(seed, index, author, defect)` is a pure function of its arguments (a private
`random.Random` seeded from sha256(seed, index)), so any worker builds the same recipe. Authors come
first, from `assign_authors(seed, n)`: a heavy-tailed number of recipes per author, one kitchen per
author that each of their recipes varies a little. Noise is added afterwards by `etl.sample.noise`;
images are drawn from `ImageSpec.depicts` by `etl.sample.render`.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from etl.sample import vocab as V

DEFECTS = ("http_404", "non_food", "non_english", "too_few_steps", "too_many_steps", "video_only")
IMAGE_DEFECTS = ("missing_image", "broken_image")


def derive_seed(*parts) -> int:
    """A 64-bit seed from any parts (stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


@dataclass
class ImageSpec:
    ord: int
    depicts: dict
    expected: str = "ok"          # ok | missing | broken
    url_path: str = ""            # /ORIG/<AAA>/<BBBB>/<NAME>.jpg, assigned by generate


@dataclass
class StepPlan:
    step_idx: int
    title: str                     # clean author title (the page adds instructables' "Step k: ")
    paragraphs: list[str]          # clean paragraphs
    labels: dict
    images: list[ImageSpec] = field(default_factory=list)
    n_videos: int = 0
    title_raw: str = ""            # filled by noise.apply_noise
    paragraphs_raw: list[str] = field(default_factory=list)
    noise: list[dict] = field(default_factory=list)
    roles: dict | None = None      # cooking roles as planned (see _roles); None for intro, list and non-food steps


@dataclass
class RecipePlan:
    index: int
    title: str
    channel: str                   # channel slug in the page meta
    category: str
    listed_in: str                 # the food channel listing that links it
    author: str
    author_id: int                 # index of the author in `assign_authors` order
    language: str
    kind: str                      # recipe | non_food
    defect: str | None
    image_defects: tuple[str, ...]
    kitchen_style: dict
    steps: list[StepPlan]
    slug: str = ""

    @property
    def expected(self) -> dict:
        if self.defect is None:
            return {"stage": None, "reason": None}
        stage = "ingest" if self.defect == "http_404" else "clean"
        return {"stage": stage, "reason": self.defect}


# ------------------------------------------------------------------------------- kitchen style

SURFACES = (  # name, rgb, texture
    ("oak", (186, 140, 88), "wood"), ("walnut", (104, 70, 44), "wood"), ("white marble", (230, 228, 224), "marble"),
    ("black granite", (48, 48, 52), "granite"), ("blue tiles", (90, 140, 190), "tile"), ("green laminate", (110, 160, 110), "plain"),
    ("steel", (170, 174, 180), "plain"), ("red gingham", (200, 60, 60), "cloth"), ("slate", (80, 90, 100), "granite"),
    ("butcher block", (210, 170, 110), "wood"), ("terracotta", (190, 100, 70), "tile"), ("cream", (236, 226, 200), "plain"),
    ("concrete", (150, 150, 146), "granite"), ("pink formica", (230, 160, 170), "plain"), ("teal", (60, 140, 140), "plain"),
    ("mustard", (210, 170, 60), "cloth"), ("lilac", (170, 150, 200), "marble"), ("navy", (40, 50, 90), "cloth"),
)


def kitchen_style(rng: random.Random) -> dict:
    """An author's kitchen: counter surface (colour, texture), light and camera framing."""
    name, rgb, texture = rng.choice(SURFACES)
    rgb = [max(0, min(255, c + rng.randint(-18, 18))) for c in rgb]
    return {"surface": name, "counter_rgb": rgb, "texture": texture,
            "light": {"brightness": round(rng.uniform(0.85, 1.12), 3), "warmth": round(rng.uniform(-0.08, 0.08), 3),
                      "direction": rng.choice(["left", "right", "top", "bottom", "centre"])},
            "framing": {"zoom": round(rng.uniform(0.92, 1.08), 3), "dx": rng.randint(-5, 5), "dy": rng.randint(-5, 5),
                        "tilt": round(rng.uniform(0.7, 1.0), 3)}}


def recipe_kitchen(kitchen: dict, rng: random.Random) -> dict:
    """One recipe's take on its author's kitchen: the same counter and light direction, with a
    small change of light (brightness +-8%, warmth +-0.04) and framing (zoom +-4%, shift +-4 px)."""
    light, fr = kitchen["light"], kitchen["framing"]
    return dict(kitchen,
                light=dict(light, brightness=round(light["brightness"] * rng.uniform(0.92, 1.08), 3),
                           warmth=round(light["warmth"] + rng.uniform(-0.04, 0.04), 3)),
                framing=dict(fr, zoom=round(fr["zoom"] * rng.uniform(0.96, 1.04), 3),
                             dx=fr["dx"] + rng.randint(-4, 4), dy=fr["dy"] + rng.randint(-4, 4)))


# ------------------------------------------------------------------------------- authors

NEW_AUTHOR_P = 0.5   # Simon's model: chance that the next recipe is by a new author


@dataclass(frozen=True)
class Author:
    author_id: int
    name: str
    kitchen: dict                  # the author's kitchen (see kitchen_style)


def assign_authors(seed: int, n: int, new_author_p: float = NEW_AUTHOR_P) -> tuple[list[Author], list[int]]:
    """(authors, author_id of each recipe index) for n recipes, by Simon's preferential-attachment
    model: recipe 0 starts an author; recipe i starts a new one with probability `new_author_p`,
    else it goes to the author of a uniformly drawn earlier recipe (so an author is picked in
    proportion to the recipes they already have). Recipes per author then follow a Yule-Simon law
    with rho = 1 / (1 - p): P(k) = rho * B(k, rho + 1), at p = 0.5 P(k) = 4 / (k (k+1) (k+2)), i.e.
    about 83% of authors have 1-2 recipes while the earliest ones reach 20-40 at n = 1,000.
    Recipe i's author depends on recipes 0..i only, so a smaller sample is a prefix of a larger one.
    Names are unique ("Sunny Fox", then "Sunny Fox 27" when taken)."""
    if not 0 < new_author_p <= 1:
        raise ValueError("new_author_p must be in (0, 1]")
    rng = random.Random(derive_seed("authors", seed))
    of_recipe: list[int] = []
    authors: list[Author] = []
    taken: set[str] = set()
    for i in range(n):
        if i == 0 or rng.random() < new_author_p:
            arng = random.Random(derive_seed("author", seed, len(authors)))
            name = f"{arng.choice(V.AUTHOR_FIRST)} {arng.choice(V.AUTHOR_SECOND)}"
            while name in taken:
                name = f"{name.rsplit(' ', 1)[0] if name.count(' ') > 1 else name} {arng.randint(2, 999)}"
            taken.add(name)
            authors.append(Author(len(authors), name, kitchen_style(arng)))
            of_recipe.append(authors[-1].author_id)
        else:
            of_recipe.append(of_recipe[rng.randrange(i)])
    return authors, of_recipe


# ------------------------------------------------------------------------------- helpers

def _join(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


_SMALL = {"the", "and", "of", "a", "in", "to", "into", "with", "on"}


def _titlecase(s: str) -> str:
    return " ".join(w if (k and w in _SMALL) else w[:1].upper() + w[1:] for k, w in enumerate(s.split()))


def _qty(rng: random.Random, ing: V.Ingredient) -> str:
    u = ing.unit
    if u == "count":
        n = rng.choice([1, 2, 3, 4, 6])
        return f"{n} {ing.name if n == 1 else ing.plural}"
    if u == "pinch":
        return f"a pinch of {ing.name}"
    amount = rng.choice({"cup": ["1", "2", "1/2", "3/4", "1 1/2"], "tbsp": ["1", "2", "3"], "tsp": ["1", "2", "1/2"],
                         "g": ["100", "200", "250", "500"], "oz": ["4", "8"], "ml": ["30", "50", "100"],
                         "slice": ["2", "4", "6"]}[u])
    unit = {"cup": "cups" if amount not in ("1", "1/2", "3/4") else "cup", "slice": "slices"}.get(u, u)
    return f"{amount} {unit} {ing.plural}"


FILLERS = ("Don't worry if it looks a bit lumpy at this point.", "This is the most important step!",
           "It's easier than it looks.", "My kids call this the \"messy\" part.",
           "You can use 1/2 of the amount if you like it less sweet.", "Wait for it...",
           "Take your time here, it's worth it.", "Keep an eye on it so it doesn't burn.",
           "If you don't have one, a fork works too.", "The smell at this point is amazing.")


def _item(ing: V.Ingredient, state: str) -> dict:
    return {"name": ing.name, "state": state, "shape": ing.shape, "colour": list(ing.colour), "inner": list(ing.inner)}


def _mixture(name: str, parts: list[dict], state: str) -> dict:
    cols = [p["inner"] if p["state"] != "whole" else p["colour"] for p in parts]
    avg = [int(sum(c[k] for c in cols) / len(cols)) for k in range(3)]
    return {"name": name, "state": state, "shape": "mixture", "colour": avg, "inner": avg,
            "parts": sorted({n for p in parts for n in p.get("parts", [p["name"]])})}


def _n_images(rng: random.Random) -> int:
    return rng.choices([0, 1, 2, 3, 4], weights=[10, 50, 25, 10, 5])[0]


# ------------------------------------------------------------------------------- food recipes

def _food_ops(rng: random.Random, channel: V.Channel, stars: list[V.Ingredient], base: list[V.Ingredient],
              target: int, force_long: bool) -> list[tuple]:
    """Ordered list of (phase, action, ingredient names) to simulate; mandatory ops kept, optional trimmed."""
    mandatory, optional = [], []
    solids = [i for i in stars + base if i.shape in V.SOLID]
    for k, ing in enumerate(solids):
        cuts = [a for a in V.CUT_ACTIONS if ing.shape in V.ACTIONS[a].applies_to]
        if not cuts:
            continue
        op = ("prep", rng.choice(cuts), [ing.name])
        (mandatory if k == 0 else optional).append(op)
        if force_long and ing.shape in V.ACTIONS["peel"].applies_to:
            optional.append(("prep", "peel", [ing.name]))
    if any(i.name == "butter" for i in base):
        optional.append(("pre", "melt", ["butter"]))
    nuts = [i.name for i in stars if i.shape in ("small", "grain")]
    if nuts:
        optional.append(("pre", "toast", nuts[:1]))
    meats = [i.name for i in stars if i.name in ("chicken breast", "beef", "salmon", "shrimp")]
    if meats:
        optional.append(("pre", "marinate", meats))
    combine = "blend" if channel.taste == "drink" else rng.choice(["mix", "whisk", "beat"] if channel.taste == "sweet" else ["mix", "whisk"])
    mandatory.append(("combine", combine, [i.name for i in base + stars]))
    if channel.slug in ("bread", "pizza", "pie", "cookies"):
        optional.append(("mid", "knead", ["MIX"]))
        optional.append(("mid", "roll", ["MIX"]))
    if channel.taste == "sweet":
        optional.append(("mid", "fold", ["MIX"]))
    if channel.finish[0] in ("bake", "chill") or channel.taste == "drink":
        optional.append(("mid", "pour", ["MIX"]))
    for a in channel.finish:
        mandatory.append(("cook", a, ["MIX"]))
    optional.append(("post", "chill", ["MIX"]))
    tops = [i for i in V.INGREDIENTS if i.taste in (channel.taste, "both") and i.shape in ("small", "leafy", "powder", "grain")]
    optional.append(("post", "sprinkle", [rng.choice(tops).name]))
    optional.append(("post", "spread", ["MIX"]))
    optional.append(("post", "garnish", [rng.choice(tops).name]))
    mandatory.append(("serve", "serve", ["MIX"]))
    order = {"prep": 0, "pre": 1, "combine": 2, "mid": 3, "cook": 4, "post": 5, "serve": 6}
    need = max(0, target - len(mandatory))
    keep = rng.sample(range(len(optional)), min(need, len(optional)))
    ops = mandatory + [optional[k] for k in sorted(keep)]
    while force_long and len(ops) < target:   # pad long recipes with extra stirring and resting
        ops.append(("cook", rng.choice(["simmer", "mix", "chill"]), ["MIX"]))
    ops.sort(key=lambda op: order[op[0]])       # stable: keeps the sampled order inside a phase
    return ops


def _simulate(rng, channel, ings: dict[str, V.Ingredient], ops, mixture_name) -> list[dict]:
    """Run the ops over ingredient states; returns per-op {action, items, labels, vessel, tool}."""
    state = {n: _item(i, "whole") for n, i in ings.items()}
    mix: dict | None = None
    out = []
    for phase, verb, names in ops:
        a = V.ACTIONS[verb]
        vessel = a.vessels[0] if rng.random() < 0.75 else rng.choice(a.vessels)
        if verb == "bake" and channel.slug in ("cupcakes",):
            vessel = "muffin tin"
        if verb == "serve":
            vessel = channel.vessel
        tool = a.tools[0]
        if phase == "combine":
            parts = [state[n] for n in names]
            mix = _mixture(mixture_name, parts, a.state)
            items, used = [mix], names
        elif names == ["MIX"]:
            if mix is None:
                mix = _mixture(mixture_name, list(state.values()), "mixed")
            mix = dict(mix, state=a.state if verb != "serve" else mix["state"])
            items, used = [mix], mix["parts"]
        elif verb in ("sprinkle", "garnish"):
            top = _item(V.ING[names[0]], "sprinkled")
            ings.setdefault(names[0], V.ING[names[0]])
            items = ([mix] if mix else []) + [top]
            used = names
        else:
            for n in names:
                state[n] = dict(state[n], state=a.state)
            items, used = [state[n] for n in names], names
        out.append({"action": verb, "items": [dict(i) for i in items], "vessel": vessel, "tool": tool,
                    "labels": {"ingredients": sorted(used), "action": verb, "state": a.state,
                               "vessel": vessel, "tool": tool}})
    return out


def _sentences(rng, verb: str, names: list[str], vessel: str, tool: str, mixture_name: str, n: int) -> list[str]:
    a = V.ACTIONS[verb]
    shown = [mixture_name] if len(names) > 4 or verb in ("bake", "pour", "simmer", "chill", "serve", "spread",
                                                          "knead", "roll", "fold") else names
    fill = {"ings": _join([V.ING[x].plural if x in V.ING else x for x in shown]),
            "vessel": vessel, "tool": tool, "time": rng.choice([2, 3, 5, 10, 15, 20, 25, 30, 45]),
            "temp": rng.choice([325, 350, 375, 400, 425]),
            "qty": rng.choice([2, 3, 4]) if all(V.ING[x].unit == "count" for x in shown if x in V.ING)
            and all(x in V.ING for x in shown) else "the"}
    templates = rng.sample(a.sentences, min(n, len(a.sentences)))
    sents = [s.format(**fill) for s in templates]
    if rng.random() < 0.45:
        sents.append(rng.choice(FILLERS))
    if rng.random() < 0.06:
        sents.append(rng.choice(V.BRAND_SENTENCES))
    return sents, _roles(verb, shown, vessel, tool, fill, templates)


def _roles(verb: str, shown: list[str], vessel: str, tool: str, fill: dict, templates: list[str]) -> dict:
    """The cooking roles of one step as planned, each marked explicit (its words are in the body
    text) or hidden (implied: the template that was drawn leaves it out). The templates omit the
    tool in about half of the steps and the vessel in most, as real instructions do."""
    used = " ".join(templates)
    time_m = re.search(r"\{time\} (\w+)", used)
    temp_m = re.search(r"\{temp\} (degrees \w)", used)
    return {"event": verb,
            "participants": {"names": [V.ING[x].plural if x in V.ING else x for x in shown],
                             "explicit": "{ings}" in used},
            "tool": {"name": None if tool in ("none", "hands") else tool, "explicit": "{tool}" in used},
            "habitat": {"name": vessel, "explicit": "{vessel}" in used},
            "time": f"{fill['time']} {time_m.group(1)}" if time_m else ("overnight" if "overnight" in used else None),
            "temperature": f"{fill['temp']} {temp_m.group(1)}" if temp_m else None,
            "quantity": str(fill["qty"]) if "{qty}" in used and fill["qty"] != "the" else None}


def _step_title(rng, verb: str, names: list[str], mixture_name: str) -> str:
    t = rng.choice(V.ACTIONS[verb].titles)
    first = names[0] if names and names[0] != "MIX" else mixture_name
    return _titlecase(t.format(ing=V.ING[first].plural if first in V.ING else first))


def _images(rng, n: int, depicts: dict) -> list[ImageSpec]:
    """n photos of the same content, each with a small jitter of position, scale and brightness."""
    return [ImageSpec(k, dict(depicts, ord=k, jitter={"dx": rng.randint(-4, 4), "dy": rng.randint(-4, 4),
                                                       "scale": round(rng.uniform(0.94, 1.06), 3),
                                                       "brightness": round(rng.uniform(0.94, 1.06), 3)}))
            for k in range(n)]


def _food_recipe(rng, index: int, defect: str | None) -> tuple[str, str, list[StepPlan]]:
    channel = rng.choice(V.CHANNELS)
    taste = {"drink": "sweet"}.get(channel.taste, channel.taste)
    base = [V.ING[n] for n in channel.base]
    pool = [i for i in V.INGREDIENTS if i.taste in (taste, "both") and i.name not in channel.base]
    solids = [i for i in pool if i.shape in V.SOLID]
    n_stars = 9 if defect == "too_many_steps" else rng.choice([2, 2, 3])
    stars = [rng.choice(solids)]
    stars += rng.sample([i for i in pool if i is not stars[0]], n_stars - 1)
    ings = {i.name: i for i in base + stars}
    mixture_name = rng.choice(V.MIXTURE_NAMES[channel.taste])
    dish = rng.choice(channel.dishes)
    s1, s2 = _titlecase(stars[0].name), _titlecase(stars[1].name)
    title = rng.choice([f"{rng.choice(V.TITLE_ADJECTIVES)} {s1} {dish}", f"{s1} and {s2} {dish}",
                        f"{s1} {dish}", f"{rng.choice(V.TITLE_ADJECTIVES)} {s1} {s2} {dish}"])
    target = rng.randint(26, 30) if defect == "too_many_steps" else rng.randint(5, 12)
    with_list = rng.random() < 0.6 and defect != "too_many_steps"
    ops = _food_ops(rng, channel, stars, base, target - int(with_list), defect == "too_many_steps")
    sim = _simulate(rng, channel, ings, ops, mixture_name)
    steps: list[StepPlan] = []
    final = sim[-1]
    intro_dep = {"kind": "food", "action": "serve", "state": final["items"][0]["state"], "vessel": final["vessel"],
                 "tool": "none", "items": final["items"]}
    intro_text = [f"This {title} is one of my favourites. It takes about {rng.choice([20, 30, 45, 60, 90])} "
                  f"minutes and serves {rng.choice([2, 4, 6, 8])}.", rng.choice(FILLERS)]
    steps.append(StepPlan(0, title, intro_text, {"ingredients": sorted(ings), "action": "serve",
                                                 "state": intro_dep["state"], "vessel": final["vessel"], "tool": "none"},
                          _images(rng, rng.choice([1, 1, 1, 2]), intro_dep)))
    if with_list:
        lines = [_qty(rng, i) for i in ings.values()]
        dep = {"kind": "layout", "action": "gather", "state": "whole", "vessel": "counter", "tool": "none",
               "items": [_item(i, "whole") for i in ings.values()][:8]}
        steps.append(StepPlan(1, rng.choice(V.ACTIONS["gather"].titles), lines,
                              {"ingredients": sorted(ings), "action": "gather", "state": "whole",
                               "vessel": "counter", "tool": "none"}, _images(rng, rng.choice([0, 1, 1, 2]), dep)))
    for (_phase, verb, names), s in zip(ops, sim):
        k = len(steps)
        sents, roles = _sentences(rng, verb, s["labels"]["ingredients"], s["vessel"], s["tool"], mixture_name,
                                  rng.choice([1, 2, 2]))
        mix = next((it for it in s["items"] if it["shape"] == "mixture"), None)
        roles["mixture"] = None if mix is None else {
            "name": mixture_name, "parts": [V.ING[x].plural if x in V.ING else x for x in mix["parts"]]}
        paras = [" ".join(sents)] if rng.random() < 0.6 else sents
        dep = {"kind": "food", "action": verb, "state": s["labels"]["state"], "vessel": s["vessel"],
               "tool": s["tool"], "items": s["items"]}
        steps.append(StepPlan(k, _step_title(rng, verb, names, mixture_name), paras, s["labels"],
                              _images(rng, _n_images(rng), dep), roles=roles))
    return title, channel.slug, steps


# ------------------------------------------------------------------------------- other pages

def _non_food(rng, index: int) -> tuple[str, list[StepPlan]]:
    title = rng.choice(V.NONFOOD_TITLES)
    mats = list(V.NONFOOD_MATERIALS)
    steps = []
    n = rng.randint(5, 8)
    for k in range(n + 1):
        mat = rng.choice(mats)
        sents = [s.format(mat=mat, n=rng.randint(2, 24), g=rng.choice([120, 180, 240]))
                 for s in rng.sample(V.NONFOOD_SENTENCES, 2)]
        dep = {"kind": "nonfood", "action": "build", "state": "assembled", "vessel": "counter", "tool": "none",
               "items": [{"name": mat, "state": "whole", "shape": "plank", "colour": list(V.NONFOOD_MATERIALS[mat]),
                          "inner": list(V.NONFOOD_MATERIALS[mat])}]}
        t = title if k == 0 else rng.choice(V.NONFOOD_STEP_TITLES)
        steps.append(StepPlan(k, t, sents, {"ingredients": [], "action": "build", "state": "assembled",
                                            "vessel": "none", "tool": "none"}, _images(rng, rng.choice([1, 1, 2]), dep)))
    return title, steps


def _non_english(rng, index: int) -> tuple[str, str, str, list[StepPlan]]:
    lang = rng.choice(sorted(V.FOREIGN))
    L = V.FOREIGN[lang]
    names = rng.sample(sorted(L["ings"]), 3)
    star = L["ings"][names[0]].split(" ")[-1]
    title = rng.choice(L["title"]).format(ing=star[:1].upper() + star[1:])
    channel = rng.choice(["main-course", "soups-and-stews", "cake", "sides"])
    verbs = ["chop", "mix", rng.choice(["bake", "boil", "fry"]), "serve"]
    steps = [StepPlan(0, title, [L["intro"]], {"ingredients": sorted(names), "action": "serve", "state": "served",
                                               "vessel": "plate", "tool": "none"})]
    for verb in verbs:
        a = V.ACTIONS[verb]
        text = L["steps"][verb].format(ing=_join([L["ings"][n] for n in names[:2]]), temp=180, time=rng.choice([10, 20, 30]))
        text = text[:1].upper() + text[1:]
        state = a.state
        items = [_item(V.ING[n], state if verb in V.CUT_ACTIONS else "whole") for n in names[:2]]
        if verb != "chop":
            items = [_mixture("mezcla", items, state)]
        dep = {"kind": "food", "action": verb, "state": state, "vessel": a.vessels[0], "tool": a.tools[0], "items": items}
        steps.append(StepPlan(len(steps), L["titles"][verb], [text],
                              {"ingredients": sorted(names[:2]), "action": verb, "state": state,
                               "vessel": a.vessels[0], "tool": a.tools[0]}, _images(rng, 1, dep)))
    steps[0].images = _images(rng, 1, steps[-1].images[0].depicts)
    return title, channel, lang, steps


# ------------------------------------------------------------------------------- entry point

def plan_recipe(seed: int, index: int, author: Author, defect: str | None = None,
                image_defects: tuple[str, ...] = ()) -> RecipePlan:
    """The clean plan of recipe `index` by `author` (noise is applied later by etl.sample.noise)."""
    rng = random.Random(derive_seed("recipe", seed, index))
    style = recipe_kitchen(author.kitchen, rng)
    language, kind, category = "en", "recipe", "cooking"
    if defect == "non_food":
        title, steps = _non_food(rng, index)
        kind = "non_food"
        listed_in = rng.choice(V.CHANNELS).slug
        # half are mis-filed under a food channel, half are cross-listed from another category
        if rng.random() < 0.5:
            channel = listed_in
        else:
            category, channel = rng.choice([("workshop", "woodworking"), ("circuits", "arduino")])
    elif defect == "non_english":
        title, channel, language, steps = _non_english(rng, index)
        listed_in = channel
    else:
        title, channel, steps = _food_recipe(rng, index, defect)
        listed_in = channel
        if defect == "too_few_steps":
            steps = [steps[0], steps[-1]]
            steps[1].step_idx = 1
    if defect == "video_only":
        for s in steps:
            s.images, s.n_videos = [], 1
    elif defect is None and rng.random() < 0.03:
        rng.choice(steps[1:]).n_videos = 1
    all_imgs = [im for s in steps for im in s.images]
    for kind_, exp in (("missing_image", "missing"), ("broken_image", "broken")):
        free = [im for im in all_imgs if im.expected == "ok"]
        if kind_ in image_defects and free:
            rng.choice(free).expected = exp
    return RecipePlan(index=index, title=title, channel=channel, category=category, listed_in=listed_in,
                      author=author.name, author_id=author.author_id, language=language, kind=kind, defect=defect,
                      image_defects=tuple(image_defects), kitchen_style=style, steps=steps)


def assign_defects(seed: int, n: int) -> tuple[dict[int, str], dict[int, tuple[str, ...]]]:
    """Which recipe indexes carry which planted defect: realistic rates, at least one of each when n >= 12."""
    rates = {"http_404": 0.006, "non_food": 0.02, "non_english": 0.01, "too_few_steps": 0.015,
             "too_many_steps": 0.006, "video_only": 0.01}
    img_rates = {"missing_image": 0.04, "broken_image": 0.03}
    rng = random.Random(derive_seed("defects", seed, n))
    order = list(range(n))
    rng.shuffle(order)
    page, k = {}, 0
    for d, r in rates.items():
        cnt = max(1, round(r * n)) if n >= 12 else 0
        for i in order[k:k + cnt]:
            page[i] = d
        k += cnt
    images: dict[int, tuple[str, ...]] = {}
    clean = [i for i in order[k:]]
    rng.shuffle(clean)
    j = 0
    for d, r in img_rates.items():
        cnt = max(1, round(r * n)) if n >= 12 else 0
        for i in clean[j:j + cnt]:
            images[i] = images.get(i, ()) + (d,)
        j += cnt
    return page, images
