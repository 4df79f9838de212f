"""Step images: the step's content (vessel, ingredients in their current state, tool) drawn with PIL
on a per-recipe kitchen background (counter colour and texture, lighting, framing).

- a recipe's images share the background and light: the cue a context-free model exploits;
- the content layout is seeded by the content itself (action, items, states, vessel), so the same
  action on the same ingredients looks alike across recipes (hard negatives);
- each photo of a step gets a small jitter of position, scale and brightness.
`KitchenRenderer(style, seed, size)` is built once per recipe; `render(depicts) -> JPEG bytes`.
"""
from __future__ import annotations

import io
import math
import random

import numpy as np
from PIL import Image, ImageDraw

from etl.sample import vocab as V
from etl.sample.recipes import derive_seed

BROWN = (120, 70, 30)
MARGIN = 16        # background is drawn larger than the photo so framing can shift it


def _mix(a, b, t: float) -> tuple[int, int, int]:
    return tuple(int(a[k] * (1 - t) + b[k] * t) for k in range(3))


def _shade(c, f: float) -> tuple[int, int, int]:
    return tuple(max(0, min(255, int(v * f))) for v in c)


def state_colour(item: dict) -> tuple[int, int, int]:
    """The dominant colour of an item in its state (browned when cooked, tinted when frozen...)."""
    st = item["state"]
    base = tuple(item["colour"]) if st in ("whole",) else tuple(item["inner"])
    if st in ("baked", "roasted", "toasted", "fried", "sauteed", "grilled"):
        return _mix(base, BROWN, 0.45)
    if st in ("frozen", "chilled"):
        return _mix(base, (200, 225, 250), 0.3 if st == "frozen" else 0.12)
    if st in ("boiled", "simmered"):
        return _mix(base, (200, 180, 120), 0.2)
    if st == "melted":
        return _shade(base, 0.9)
    return base


def _background(style: dict, size: int, seed: int) -> np.ndarray:
    n = size + 2 * MARGIN
    rng = np.random.default_rng(seed)
    base = np.array(style["counter_rgb"], dtype=np.float32)
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32)
    tex = style["texture"]
    f = np.ones((n, n), np.float32)
    s = size / 128.0
    if tex == "wood":
        wobble = np.sin(xx / (23 * s) + rng.uniform(0, 6)) * 3
        f = 1 + 0.08 * np.sin((yy + wobble) / (2.2 * s)) + 0.05 * np.sin((yy + wobble) / (9 * s))
    elif tex == "marble":
        v = np.sin((xx * 0.6 + yy) / (11 * s) + 2.5 * np.sin(xx / (17 * s)))
        f = 1 - 0.22 * (np.abs(v) < 0.08)
    elif tex == "granite":
        f = 1 + rng.normal(0, 0.09, (n, n)).astype(np.float32)
    elif tex == "tile":
        step = int(32 * s)
        grout = ((xx.astype(int) % step) < 2) | ((yy.astype(int) % step) < 2)
        f = np.where(grout, 1.35, 1.0).astype(np.float32)
    elif tex == "cloth":
        step = int(16 * s)
        cx, cy = (xx.astype(int) // step) % 2, (yy.astype(int) // step) % 2
        f = np.where(cx & cy, 1.0, np.where(cx | cy, 1.28, 1.55)).astype(np.float32)
    else:
        f = 1 + rng.normal(0, 0.015, (n, n)).astype(np.float32)
    img = base[None, None, :] * f[:, :, None]
    if tex == "cloth":   # checker towards white, not just brighter
        img = np.where(f[:, :, None] > 1.5, 0.25 * img / 1.55 + 0.75 * 245, img)
    return np.clip(img, 0, 255).astype(np.uint8)


def _light(style: dict, size: int) -> np.ndarray:
    L = style["light"]
    t = np.linspace(-1, 1, size, dtype=np.float32)
    xx, yy = np.meshgrid(t, t)
    g = {"left": -xx, "right": xx, "top": -yy, "bottom": yy,
         "centre": -np.sqrt(xx ** 2 + yy ** 2) + 0.5}[L["direction"]]
    m = (L["brightness"] * (1 + 0.12 * g))[:, :, None] * np.ones(3, np.float32)
    m[:, :, 0] *= 1 + L["warmth"]
    m[:, :, 2] *= 1 - L["warmth"]
    return m.astype(np.float32)


class KitchenRenderer:
    def __init__(self, style: dict, seed: int, size: int = 128, quality: int = 85):
        self.style, self.size, self.quality = style, size, quality
        self.bg = _background(style, size, derive_seed("bg", seed) % 2 ** 32)
        self.light = _light(style, size)

    def render(self, depicts: dict) -> bytes:
        S = self.size
        fr, jit = self.style["framing"], depicts.get("jitter", {})
        ox = MARGIN + fr["dx"] + jit.get("dx", 0)
        oy = MARGIN + fr["dy"] + jit.get("dy", 0)
        im = Image.fromarray(self.bg[oy:oy + S, ox:ox + S])
        d = ImageDraw.Draw(im)
        scale = S / 128.0 * fr["zoom"] * jit.get("scale", 1.0)
        cx = S / 2 + (fr["dx"] + jit.get("dx", 0)) * 0.5
        cy = S / 2 + (fr["dy"] + jit.get("dy", 0)) * 0.5
        sig = (depicts.get("action"), depicts.get("vessel"),
               tuple((i["name"], i["state"]) for i in depicts.get("items", ())), depicts.get("ord", 0))
        rng = random.Random(derive_seed("layout", *sig))
        _scene(d, rng, depicts, cx, cy, 46 * scale, fr["tilt"])
        arr = np.asarray(im, dtype=np.float32) * self.light * jit.get("brightness", 1.0)
        out = io.BytesIO()
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=self.quality)
        return out.getvalue()


# ----------------------------------------------------------------------------------- drawing

def _scene(d: ImageDraw.ImageDraw, rng: random.Random, dep: dict, cx: float, cy: float, R: float, tilt: float):
    items = dep.get("items", [])
    if dep.get("kind") == "nonfood":
        _nonfood(d, rng, items, cx, cy, R, tilt)
        return
    if dep.get("kind") == "layout" or dep.get("vessel") == "counter":
        k = len(items)
        cols = 3 if k > 4 else 2
        for j, it in enumerate(items):
            gx, gy = j % cols, j // cols
            x = cx + (gx - (cols - 1) / 2) * R * 0.95
            y = cy + (gy - ((k - 1) // cols) / 2) * R * 0.8
            _whole(d, rng, it, (x - R * 0.4, y - R * 0.3, x + R * 0.4, y + R * 0.3), R * 0.35, tilt)
        return
    v = V.VESSELS.get(dep.get("vessel"), V.VESSELS["mixing bowl"])
    box = _vessel(d, v, cx, cy, R, tilt)
    _contents(d, rng, dep, items, box, R, v.kind)
    _tool(d, dep.get("tool", "none"), cx + R * 0.75, cy + R * 0.55 * tilt, R)


def _vessel(d, v: V.Vessel, cx, cy, R, t) -> tuple:
    """Draw the vessel; returns the contents box (x0, y0, x1, y1, 'ellipse' | 'rect')."""
    k = v.kind
    if k in ("bowl", "plate", "pot", "pan"):
        r = R * (1.1 if k == "plate" else 1.0)
        if k == "pan":
            d.rounded_rectangle((cx + r * 0.8, cy - R * 0.09, cx + r * 1.7, cy + R * 0.09), R * 0.05, fill=v.rim)
        if k == "pot":
            for s in (-1, 1):
                d.rectangle((cx + s * r * 0.95 - R * 0.15, cy - R * 0.07, cx + s * r * 0.95 + R * 0.15, cy + R * 0.07), fill=v.rim)
        d.ellipse((cx - r, cy - r * t, cx + r, cy + r * t), fill=v.rim)
        inner = 0.84 if k != "plate" else 0.72
        d.ellipse((cx - r * inner, cy - r * inner * t, cx + r * inner, cy + r * inner * t), fill=v.colour)
        ri = r * (inner - 0.08)
        return (cx - ri, cy - ri * t, cx + ri, cy + ri * t, "ellipse")
    if k in ("dish", "tray", "board", "bag", "tin"):
        w, h = R * 1.15, R * 0.85 * t
        d.rounded_rectangle((cx - w, cy - h, cx + w, cy + h), R * 0.12, fill=v.rim)
        d.rounded_rectangle((cx - w * 0.9, cy - h * 0.86, cx + w * 0.9, cy + h * 0.86), R * 0.1, fill=v.colour)
        if k == "board":
            d.ellipse((cx + w * 0.72, cy - h * 0.7, cx + w * 0.84, cy - h * 0.5), fill=v.rim)
        if k == "tin":
            for i in range(3):
                for j in range(2):
                    x, y = cx + (i - 1) * w * 0.58, cy + (j - 0.5) * h * 0.9
                    d.ellipse((x - R * 0.28, y - R * 0.28 * t, x + R * 0.28, y + R * 0.28 * t), fill=v.rim)
            return (cx - w * 0.8, cy - h * 0.75, cx + w * 0.8, cy + h * 0.75, "tin")
        return (cx - w * 0.8, cy - h * 0.75, cx + w * 0.8, cy + h * 0.75, "rect")
    # tall vessels: glass, jar, blender
    w, h = R * 0.55, R * 1.05
    if k == "blender":
        d.rectangle((cx - w * 1.1, cy + h * 0.8, cx + w * 1.1, cy + h * 1.15), fill=v.rim)
        d.polygon([(cx - w * 1.1, cy - h), (cx + w * 1.1, cy - h), (cx + w * 0.8, cy + h * 0.8), (cx - w * 0.8, cy + h * 0.8)], fill=v.colour)
    else:
        d.rounded_rectangle((cx - w, cy - h, cx + w, cy + h), R * 0.1, fill=v.rim)
        d.rounded_rectangle((cx - w * 0.86, cy - h * 0.92, cx + w * 0.86, cy + h * 0.94), R * 0.08, fill=v.colour)
        if k == "jar":
            d.rectangle((cx - w * 1.02, cy - h * 1.08, cx + w * 1.02, cy - h * 0.86), fill=(200, 170, 60))
    return (cx - w * 0.8, cy - h * 0.45, cx + w * 0.8, cy + h * 0.88, "rect")


def _fill(d, box, colour):
    x0, y0, x1, y1, shape = box
    edge = _shade(colour, 0.72)
    if shape == "ellipse":
        d.ellipse((x0, y0, x1, y1), fill=colour, outline=edge, width=2)
    elif shape == "tin":
        cx, cy, w, h = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
        for i in range(3):
            for j in range(2):
                x, y = cx + (i - 1) * w * 0.72, cy + (j - 0.5) * h * 1.05
                r = min(w, h) * 0.3
                d.ellipse((x - r, y - r * 0.9, x + r, y + r * 0.9), fill=colour, outline=edge)
    else:
        d.rounded_rectangle((x0, y0, x1, y1), max(1, (x1 - x0) * 0.08), fill=colour, outline=edge, width=2)


def _points(rng, box, n):
    x0, y0, x1, y1, shape = box
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    pts = []
    while len(pts) < n:
        u, v = rng.uniform(-1, 1), rng.uniform(-1, 1)
        if shape != "ellipse" or u * u + v * v <= 1:
            pts.append((cx + u * rx * 0.9, cy + v * ry * 0.9))
    return pts


def _pieces(d, rng, box, colour, size, n, kind="square"):
    edge = _shade(colour, 0.75)
    for x, y in _points(rng, box, n):
        s = size * rng.uniform(0.7, 1.3)
        if kind == "disc":
            d.ellipse((x - s, y - s * 0.8, x + s, y + s * 0.8), fill=colour, outline=edge)
        elif kind == "strand":
            a = rng.uniform(0, math.pi)
            d.line((x, y, x + math.cos(a) * s * 3, y + math.sin(a) * s * 3), fill=colour, width=max(1, int(s * 0.6)))
        elif kind == "dot":
            d.ellipse((x - s, y - s, x + s, y + s), fill=colour)
        else:
            d.rectangle((x - s, y - s, x + s, y + s), fill=colour, outline=edge)


def _contents(d, rng, dep, items, box, R, vkind):
    if not items:
        return
    base, tops = items[0], items[1:]
    _state(d, rng, base, box, R, vkind)
    for t in tops:
        if t["state"] in ("sprinkled", "garnished"):
            _pieces(d, rng, _shrink(box, 0.85), tuple(t["colour"]), R * 0.035, 40, "dot")
        else:
            _state(d, rng, t, _shrink(box, 0.6), R, vkind)


def _shrink(box, f):
    x0, y0, x1, y1, s = box
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2 * f, (y1 - y0) / 2 * f
    return (cx - rx, cy - ry, cx + rx, cy + ry, s)


def _state(d, rng, it, box, R, vkind):
    st, col = it["state"], state_colour(it)
    x0, y0, x1, y1, _ = box
    if st == "whole" or (it["shape"] != "mixture" and st in ("peeled", "marinated", "roasted", "grilled", "fried",
                                                             "sauteed", "toasted", "boiled", "baked", "melted")
                         and it["shape"] not in ("liquid", "paste", "powder", "grain")):
        _whole(d, rng, dict(it, colour=list(col) if st != "whole" else it["colour"]), box[:4], R * 0.32, 1.0)
        if st == "grilled":
            for k in range(4):
                yy = y0 + (y1 - y0) * (0.25 + 0.15 * k)
                d.line((x0 + (x1 - x0) * 0.2, yy, x1 - (x1 - x0) * 0.2, yy + R * 0.1), fill=(40, 25, 15), width=max(1, int(R * 0.05)))
        if st == "marinated":
            _pieces(d, rng, box, (150, 60, 30), R * 0.03, 14, "dot")
        return
    if st in ("chopped", "diced", "minced", "crushed"):
        size = {"chopped": 0.085, "diced": 0.06, "minced": 0.03, "crushed": 0.045}[st] * R
        _pieces(d, rng, box, col, size, {"chopped": 26, "diced": 40, "minced": 90, "crushed": 60}[st])
    elif st == "sliced":
        _pieces(d, rng, box, col, R * 0.16, 12, "disc")
    elif st == "grated":
        _pieces(d, rng, box, col, R * 0.05, 70, "strand")
    elif st == "rolled":
        _fill(d, _shrink(box, 1.0), col)
        d.line((x0, y1, x1, y0 + (y1 - y0) * 0.7), fill=(214, 176, 120), width=max(2, int(R * 0.16)))
    elif st == "kneaded":
        r = min(x1 - x0, y1 - y0) * 0.38
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        d.ellipse((cx - r, cy - r * 0.85, cx + r, cy + r * 0.85), fill=col, outline=_shade(col, 0.8))
        d.arc((cx - r * 0.6, cy - r * 0.5, cx + r * 0.6, cy + r * 0.5), 200, 340, fill=_shade(col, 0.8), width=2)
    elif st == "layered":
        h = (y1 - y0) / 3
        for k, f in enumerate((1.0, 0.75, 1.15)):
            _fill(d, (x0, y0 + k * h, x1, y0 + (k + 1) * h, "rect"), _shade(col, f))
    else:   # fluid-like states: fill the vessel, then the state's marks
        _fill(d, box, col)
        if st in ("mixed", "stirred", "folded", "served", "spread"):
            _pieces(d, rng, _shrink(box, 0.9), _shade(col, 0.8), R * 0.03, 25, "dot")
        if st in ("whisked", "beaten"):
            for k in range(4):
                r = R * (0.12 + 0.1 * k)
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                d.arc((cx - r, cy - r * 0.7, cx + r, cy + r * 0.7), 20 + 40 * k, 250 + 30 * k, fill=_shade(col, 1.2), width=1)
        if st in ("boiled", "simmered"):
            _pieces(d, rng, _shrink(box, 0.9), _shade(col, 1.25), R * 0.05, 14, "disc")
        if st in ("melted", "poured"):
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            d.ellipse((cx - R * 0.25, cy - R * 0.18, cx, cy - R * 0.05), fill=_mix(col, (255, 255, 255), 0.55))
        if st in ("baked", "roasted", "toasted", "fried", "sauteed", "grilled"):
            x0i, y0i, x1i, y1i, s = _shrink(box, 0.97)
            if s == "ellipse":
                d.ellipse((x0i, y0i, x1i, y1i), outline=_shade(col, 0.65), width=max(2, int(R * 0.08)))
            else:
                d.rectangle((x0i, y0i, x1i, y1i), outline=_shade(col, 0.65), width=max(2, int(R * 0.08)))
            _pieces(d, rng, _shrink(box, 0.8), _shade(col, 0.8), R * 0.04, 12, "dot")
        if st == "frozen":
            _pieces(d, rng, box, (240, 248, 255), R * 0.02, 30, "dot")


def _whole(d, rng, it, bbox, r, tilt):
    x0, y0, x1, y1 = bbox
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    col, shape = tuple(it["colour"]), it["shape"]
    edge = _shade(col, 0.7)
    if shape in ("round", "oval"):
        n = 2 if shape == "round" else 3
        for k in range(n):
            x, y = cx + (k - (n - 1) / 2) * r * 0.9, cy + rng.uniform(-0.2, 0.2) * r
            rx, ry = (r * 0.55, r * 0.55) if shape == "round" else (r * 0.45, r * 0.32)
            d.ellipse((x - rx, y - ry, x + rx, y + ry), fill=col, outline=edge)
    elif shape == "long":
        for k in range(3):
            y = cy + (k - 1) * r * 0.35
            d.rounded_rectangle((cx - r, y - r * 0.11, cx + r, y + r * 0.11), r * 0.1, fill=col, outline=edge)
    elif shape == "leafy":
        for k in range(6):
            a = k * math.pi / 3 + rng.uniform(-0.2, 0.2)
            x, y = cx + math.cos(a) * r * 0.45, cy + math.sin(a) * r * 0.3
            d.ellipse((x - r * 0.35, y - r * 0.2, x + r * 0.35, y + r * 0.2), fill=col, outline=edge)
    elif shape in ("block", "flat"):
        h = r * (0.45 if shape == "block" else 0.25)
        d.rounded_rectangle((cx - r * 0.8, cy - h, cx + r * 0.8, cy + h), r * 0.08, fill=col, outline=edge)
    elif shape in ("cluster", "small"):
        n, s = (5, 0.22) if shape == "cluster" else (9, 0.15)
        for _k in range(n):
            x, y = cx + rng.uniform(-0.6, 0.6) * r, cy + rng.uniform(-0.4, 0.4) * r
            d.ellipse((x - r * s, y - r * s, x + r * s, y + r * s), fill=col, outline=edge)
    elif shape in ("liquid", "paste"):   # in a small jar/cup on the counter
        d.rounded_rectangle((cx - r * 0.4, cy - r * 0.6, cx + r * 0.4, cy + r * 0.6), r * 0.1, fill=(225, 235, 240))
        d.rectangle((cx - r * 0.33, cy - r * 0.1, cx + r * 0.33, cy + r * 0.52), fill=col)
    else:                                 # powder / grain: a mound
        d.ellipse((cx - r * 0.8, cy - r * 0.4, cx + r * 0.8, cy + r * 0.4), fill=col, outline=edge)
        for _k in range(8):
            x, y = cx + rng.uniform(-0.5, 0.5) * r, cy + rng.uniform(-0.2, 0.2) * r
            d.point((x, y), fill=_shade(col, 0.8))


def _tool(d, tool: str, x: float, y: float, R: float):
    if tool in ("none", None):
        return
    c = V.TOOLS.get(tool, (120, 120, 120))
    w = max(1, int(R * 0.07))
    if "knife" in tool:
        d.line((x - R * 0.4, y - R * 0.25, x + R * 0.1, y + R * 0.05), fill=c, width=w * 2)
        d.line((x + R * 0.1, y + R * 0.05, x + R * 0.4, y + R * 0.22), fill=(40, 30, 25), width=w * 2)
    elif tool == "whisk":
        d.line((x, y, x + R * 0.45, y + R * 0.3), fill=(60, 60, 60), width=w * 2)
        for k in range(3):
            d.ellipse((x - R * 0.35 + k * 3, y - R * 0.22, x + R * 0.05 - k * 3, y + R * 0.08), outline=c, width=1)
    elif tool in ("wooden spoon", "spoon", "ladle", "rubber spatula", "spatula"):
        d.line((x - R * 0.1, y - R * 0.05, x + R * 0.45, y + R * 0.3), fill=c, width=w * 2)
        d.ellipse((x - R * 0.3, y - R * 0.2, x, y + R * 0.02), fill=c)
    elif tool == "rolling pin":
        d.line((x - R * 0.6, y, x + R * 0.4, y - R * 0.15), fill=c, width=w * 3)
    elif tool == "box grater":
        d.rectangle((x - R * 0.2, y - R * 0.3, x + R * 0.2, y + R * 0.3), fill=c, outline=(90, 90, 90))
        for k in range(5):
            d.line((x - R * 0.12, y - R * 0.2 + k * R * 0.1, x + R * 0.12, y - R * 0.2 + k * R * 0.1), fill=(90, 90, 90))
    elif tool == "hand mixer":
        d.rounded_rectangle((x - R * 0.3, y - R * 0.15, x + R * 0.3, y + R * 0.15), R * 0.08, fill=c, outline=(150, 150, 150))
    elif tool == "oven mitt":
        d.rounded_rectangle((x - R * 0.22, y - R * 0.3, x + R * 0.22, y + R * 0.3), R * 0.15, fill=c)
    elif tool == "hands":
        d.ellipse((x - R * 0.3, y - R * 0.18, x + R * 0.25, y + R * 0.18), fill=c)
    else:   # peeler, tongs and the rest: a handle
        d.line((x - R * 0.3, y - R * 0.2, x + R * 0.35, y + R * 0.25), fill=c, width=w * 2)


def _nonfood(d, rng, items, cx, cy, R, tilt):
    for _k, it in enumerate(items or [{"name": "plywood", "colour": [214, 180, 130]}]):
        col = tuple(it["colour"])
        if it["name"] == "circuit board":
            d.rectangle((cx - R, cy - R * 0.6, cx + R, cy + R * 0.6), fill=col, outline=(10, 60, 30))
            for _j in range(6):
                x, y = cx + rng.uniform(-0.8, 0.6) * R, cy + rng.uniform(-0.4, 0.3) * R
                d.rectangle((x, y, x + R * 0.25, y + R * 0.15), fill=(20, 20, 20))
                d.line((x, y + R * 0.2, x + R * 0.25, y + R * 0.2), fill=(220, 190, 60))
        else:
            for j in range(3):
                y = cy + (j - 1) * R * 0.45
                d.rectangle((cx - R * 1.1, y - R * 0.18, cx + R * 1.1, y + R * 0.18), fill=col, outline=_shade(col, 0.7))
                d.line((cx - R, y, cx + R, y + 2), fill=_shade(col, 0.85))
    d.line((cx + R * 0.4, cy + R * 0.8, cx + R * 1.1, cy + R * 0.5), fill=(230, 180, 20), width=4)  # a drill/screwdriver


def truncate_jpeg(data: bytes, rng: random.Random) -> bytes:
    """A broken image: the file stops part-way (as after an interrupted upload)."""
    return data[: int(len(data) * rng.uniform(0.3, 0.6))]
