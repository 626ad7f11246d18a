#!/usr/bin/env python3
"""Make the probe sets of the reference rule presets (tests/data/probes/<preset>/).

Each probe set is a benchmark folder (data.jsonl: one single-step trajectory per probe), the model responses
(predictions.jsonl) and the verdict the reference evaluator's own published function gives each step
(verdicts.jsonl). tests/it/rules_reference.rs scores every set with its preset and checks agreement step by step.

The probe steps are generated deterministically here (fixed tables and a seeded generator). The verdicts come
from the reference code itself, run from a local copy whose folder is an argument; nothing of that code is kept
in this project. Usage (Python >= 3.10 with numpy, jsonschema, Levenshtein, pillow, tqdm and jax):

    python tests/data/probes/make_probes.py --refs DIR [--out tests/data/probes]

where DIR holds the reference repositories side by side:

    DIR/Reallm-Labs+InfiGUI-R1/eval/android_control/{evaluate_android_control,android_control}.py
    DIR/X-PLUG+MobileAgent/UI-S1/evaluation/qwenvl_utils.py
    DIR/OpenBMB+AgentCPM-GUI/eval/{run_predict_qwen2_5VL.py,utils/evaluator.py,utils/convert_output.py,
                                   utils/action_type.py,utils/schema/*.json}
    DIR/OpenGVLab+GUI-Odyssey/src/eval_mm/{GUIOdyssey_action_matching,evaluate_GUIOdyssey}.py,
                              data/format_converter.py
    DIR/google-research/android_in_the_wild/{__init__,action_matching,action_type}.py

Functions that sit in modules importing heavy dependencies (vLLM, torch) are taken out of the module's source
with `ast` and run alone; nothing is re-implemented except where a comment says so.
"""

import argparse
import ast
import contextlib
import copy
import io
import json
import math
import os
import random
import sys
import tempfile
import textwrap
import types

# --------------------------------------------------------------------------------------------------------------
# Loading reference functions


def defs_from(path, names, namespace, cls=None):
    """Execute the top-level functions `names` (or methods of class `cls`) of `path` in `namespace`."""
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    found = set()
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            exec(textwrap.dedent(ast.get_source_segment(src, node)), namespace)
            found.add(node.name)
    missing = set(names) - found
    if missing:
        raise SystemExit(f"{path}: functions not found: {sorted(missing)}")
    return namespace


def load_module(name, path, extra_paths=()):
    for p in extra_paths:
        if p not in sys.path:
            sys.path.insert(0, p)
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Refs:
    """The reference functions, loaded from the local copies under `root`."""

    def __init__(self, root):
        self.root = root
        j = lambda *p: os.path.join(root, *p)
        # InfiGUI-R1: the matcher module imports only numpy; compute_scores is a method of a class whose module
        # imports vLLM, so it is taken out alone and given the matcher's namespace.
        infigui_dir = j("Reallm-Labs+InfiGUI-R1", "eval", "android_control")
        self.infigui = load_module("evaluate_android_control", os.path.join(infigui_dir, "evaluate_android_control.py"))
        ns = dict(vars(self.infigui))
        import typing

        ns.update(json=json, os=os, tqdm=lambda it, **k: it, Dict=typing.Dict, Any=typing.Any, List=typing.List)
        from datetime import datetime

        ns["datetime"] = datetime
        defs_from(os.path.join(infigui_dir, "android_control.py"), ["compute_scores"], ns, cls="AndroidControl")
        self.infigui_compute_scores = ns["compute_scores"]
        self.infigui_ns = ns
        # UI-S1: qwenvl_utils imports torch and an x.qwen package only for its network client; its matcher
        # functions are taken out alone.
        uis1 = {"np": __import__("numpy"), "copy": copy}
        defs_from(
            j("X-PLUG+MobileAgent", "UI-S1", "evaluation", "qwenvl_utils.py"),
            ["check_text", "check_click", "predict_direction", "enlarge_bbox", "norm_coordinate",
             "evaluate_android_control_action"],
            uis1,
        )
        uis1["BBOX_ENLARGE_FACTOR"] = 1.2
        uis1["POINT_DISTANCE_THRESHOLD"] = 0.04
        self.uis1 = uis1
        # AgentCPM-GUI: evaluator.py imports utils.utils (PIL, colorama) only to draw images; a stub stands in.
        cpm_eval = j("OpenBMB+AgentCPM-GUI", "eval")
        utils_pkg = types.ModuleType("utils")
        utils_pkg.__path__ = [os.path.join(cpm_eval, "utils")]
        sys.modules["utils"] = utils_pkg
        stub = types.ModuleType("utils.utils")
        stub.annotate_and_save_image = lambda *a, **k: None
        sys.modules["utils.utils"] = stub
        sys.modules["utils.action_type"] = load_module("utils.action_type", os.path.join(cpm_eval, "utils", "action_type.py"))
        self.cpm_evaluator = load_module("utils.evaluator", os.path.join(cpm_eval, "utils", "evaluator.py"))
        self.cpm_convert = load_module("utils.convert_output", os.path.join(cpm_eval, "utils", "convert_output.py"))
        import jsonschema

        cpm = {"json": json, "jsonschema": jsonschema}
        cpm["ACTION_THOUGHT_SCHEMA"] = json.load(open(os.path.join(cpm_eval, "utils", "schema", "schema.json"), encoding="utf-8"))
        defs_from(os.path.join(cpm_eval, "run_predict_qwen2_5VL.py"), ["qwen2_5_2_minicpm", "extract_and_validate_json"], cpm)
        self.cpm = cpm
        # The same conversion with the grid values kept as floats (the `androidcontrol` presets): `int` is shadowed
        # in its namespace by `float`.
        exact = {"json": json, "int": float}
        defs_from(os.path.join(cpm_eval, "run_predict_qwen2_5VL.py"), ["qwen2_5_2_minicpm"], exact)
        self.cpm_exact = exact
        # GUI-Odyssey: action_matching imports numpy only; simple_decode and decode_action sit in modules that
        # import torch and transformers.
        self.odyssey = load_module("GUIOdyssey_action_matching", j("OpenGVLab+GUI-Odyssey", "src", "eval_mm", "GUIOdyssey_action_matching.py"))
        ody = {}
        defs_from(j("OpenGVLab+GUI-Odyssey", "src", "eval_mm", "evaluate_GUIOdyssey.py"), ["simple_decode"], ody)
        ody2 = {"np": __import__("numpy")}
        defs_from(j("OpenGVLab+GUI-Odyssey", "data", "format_converter.py"), ["decode_action"], ody2)
        self.ody_simple_decode = ody["simple_decode"]
        self.ody_decode_action = ody2["decode_action"]
        # AITW (jax).
        sys.path.insert(0, j("google-research"))
        from android_in_the_wild import action_matching, action_type

        self.aitw = action_matching
        self.aitw_types = action_type.ActionType
        # Each reference's norm as it computes on an FMA machine (see fused_norm64 / fused_norm32).
        self.uis1["np"] = FusedNumpy()
        self.cpm_evaluator.np = FusedNumpy()
        self.odyssey.np = FusedNumpy()
        self.aitw.jnp = FusedJnp(self.aitw.jnp)


# --------------------------------------------------------------------------------------------------------------
# Norms as the references compute them on an FMA machine
#
# numpy's `np.linalg.norm(v)` of a 2-vector is `sqrt(v.dot(v))`, a BLAS dot whose kernels on x86-64 with FMA
# accumulate with fused multiply-adds: `sqrt(fma(v1, v1, v0 * v0))` in 64 bits. JAX's float32 norm on such a CPU
# is the same in 32 bits over AITW's (y, x) vectors. The verdicts are made with these so that they do not depend on
# the machine running this script; fma is emulated exactly with fractions (Python < 3.13 has no math.fma).


def fma64(a, b, c):
    from fractions import Fraction

    if not all(math.isfinite(x) for x in (a, b, c)):  # NaN and infinities propagate as in any fused multiply-add
        return a * b + c
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def round32(v):
    """The float32 nearest the exact rational v, ties to even."""
    import numpy as np
    from fractions import Fraction

    c = np.float32(float(v))
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        err = abs(Fraction(float(cand)) - v)
        even = int(np.frombuffer(np.float32(cand).tobytes(), dtype=np.uint32)[0]) % 2 == 0
        key = (err, not even)
        if best is None or key < best[0]:
            best = (key, cand)
    return np.float32(best[1])


def fma32(a, b, c):
    import numpy as np
    from fractions import Fraction

    if not all(math.isfinite(float(x)) for x in (a, b, c)):
        return np.float32(a) * np.float32(b) + np.float32(c)
    return round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def fused_norm64(v):
    import numpy as np

    a, b = (float(x) for x in np.asarray(v, dtype=np.float64).ravel())
    return np.float64(math.sqrt(fma64(b, b, a * a)))


def fused_norm32(v):
    import numpy as np

    a, b = (np.float32(x) for x in np.asarray(v, dtype=np.float32).ravel())
    return np.sqrt(fma32(b, b, np.float32(a * a)))


class FusedNumpy:
    """numpy with `linalg.norm` fused as on an FMA machine."""

    def __init__(self):
        import numpy

        self._np = numpy
        self.linalg = types.SimpleNamespace(norm=fused_norm64)

    def __getattr__(self, name):
        return getattr(self._np, name)


class FusedJnp:
    """jax.numpy with `linalg.norm` fused in float32 as XLA computes it on an FMA machine."""

    def __init__(self, jnp):
        self._jnp = jnp
        self.linalg = types.SimpleNamespace(norm=fused_norm32)

    def __getattr__(self, name):
        return getattr(self._jnp, name)


# --------------------------------------------------------------------------------------------------------------
# Probe steps


def tool(args, name="mobile_use"):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def think(args):
    return "<think>Looking at the screen.</think>\n<action>Do it.</action>\n" + tool(args)


class Step:
    def __init__(self, cat, screen, image, gold, boxes, response):
        self.cat, self.screen, self.image, self.gold, self.boxes, self.response = cat, screen, image, gold, boxes, response

    def frame(self):
        return self.image or self.screen


SCREENS = [(1080, 2400), (720, 1600), (1000, 2000), (1600, 2560), (2400, 1080)]


def images_for(screen):
    """None (screen pixels), a smart-resize-like image, and images whose aspect differs from the screen."""
    w, h = screen
    s = max(1, round(math.sqrt(w * h / 1003520)))
    resized = (max(28, round(w / s / 28) * 28), max(28, round(h / s / 28) * 28))
    return [None, resized, (1008, 1008), (644, 1484)]


class Geometry:
    """A preset's own thresholds, used to place probe points on its edges."""

    def __init__(self, growth, scale, threshold, metric):
        self.growth, self.scale, self.threshold, self.metric = growth, scale, threshold, metric

    def enlarged(self, box, screen):
        """The enlarged box as normalised (x1, y1, x2, y2)."""
        W, H = screen
        if self.growth == "centre":
            x1, y1, x2, y2 = box[0] / W, box[1] / H, box[2] / W, box[3] / H
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            bw, bh = (x2 - x1) * self.scale, (y2 - y1) * self.scale
            return cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2
        if self.growth == "clipped":
            top, left, bh, bw = box[1] / H, box[0] / W, (box[3] - box[1]) / H, (box[2] - box[0]) / W
            dh, dw = (self.scale - 1) * bh, (self.scale - 1) * bw
            top, left = max(0, top - dh / 2), max(0, left - dw / 2)
            bh, bw = min(1, bh + dh), min(1, bw + dw)
            return left, top, left + bw, top + bh
        return box[0] / W, box[1] / H, box[2] / W, box[3] / H

    def ring(self, frame):
        """The threshold as normalised offsets per axis of the prediction frame: (rx, ry)."""
        w, h = frame
        if self.metric == "maxside":
            r = self.threshold * max(w, h)
            return r / w, r / h
        return self.threshold, self.threshold


def gold_click(x, y, kind="click"):
    if kind == "long_press":
        return {"action": "long_press", "coordinate": [x, y], "time": 2}
    return {"action": "click", "coordinate": [x, y]}


def pred_click(x, y, kind="click"):
    if kind == "long_press":
        return {"action": "long_press", "coordinate": [x, y], "time": 2}
    return {"action": "click", "coordinate": [x, y]}


BOXES = [
    [400, 900, 600, 1100],
    [30, 40, 150, 120],  # near the top-left corner: clipped growth moves it
    [0, 0, 220, 180],  # at the corner
    [300, 1500, 700, 1560],  # wide and flat
]


COMBOS = [((1080, 2400), None), ((1080, 2400), (1092, 2436)), ((1080, 2400), (644, 1484)),
          ((720, 1600), (1008, 1008)), ((2400, 1080), None)]


def click_probes(geo, rng, kind="click"):
    out = []
    k = 0
    for screen, image in COMBOS:
        W, H = screen
        fw, fh = image or screen
        for box in BOXES:
            b = [min(v, lim) for v, lim in zip(box, (W, H, W, H))]
            gx, gy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
            gold = gold_click(gx, gy, kind)
            ex1, ey1, ex2, ey2 = geo.enlarged(b, screen)
            cx, cy = gx / W, gy / H
            pts = [
                (ex1, cy), (ex2, cy), (cx, ey1), (cx, ey2),  # enlarged edges
                (ex1 - 1e-6, cy), (ex2 + 1e-6, cy), (cx, ey1 - 1e-6), (cx, ey2 + 1e-6),
                (ex1 + 1e-6, cy), (cx, ey2 - 1e-6),
                (b[0] / W, b[1] / H), (b[2] / W, b[3] / H),  # raw corners
                (ex1, ey1), (ex2, ey2),  # enlarged corners
            ]
            for _ in range(4):
                nx, ny = pts[k % len(pts)]
                k += 1
                out.append(Step(f"{kind}/box-edge", screen, image, gold, [b], tool(pred_click(nx * fw, ny * fh, kind))))
        # Distances around the threshold, without boxes and outside a small box.
        gx, gy = 0.37 * W, 0.61 * H
        rx, ry = geo.ring(image or screen)
        for ang in rng.sample((0, 45, 90, 135, 200, 300), 2):
            for f in (1 - 1e-3, 1 - 1e-7, 1 + 1e-7, 1 + 1e-3):
                a = math.radians(ang)
                nx, ny = gx / W + f * rx * math.cos(a), gy / H + f * ry * math.sin(a)
                small = [[gx - 2, gy - 2, gx + 2, gy + 2]] if ang in (45, 200) else []
                out.append(Step(f"{kind}/distance", screen, image, gold_click(gx, gy, kind), small,
                                tool(pred_click(nx * fw, ny * fh, kind))))
    # Boxes that do not contain the gold point; nested candidate boxes; more than five boxes.
    W, H = 1080, 2400
    nested = [[456, 2211, 624, 2337], [0, 473, 1080, 2337]]
    away = [[100, 100, 300, 300]]
    many = [[60 * i, 60 * i, 60 * i + 50, 60 * i + 50] for i in range(8)]
    for _ in range(8):
        gx, gy = rng.uniform(50, 1030), rng.uniform(50, 2350)
        for boxes in (nested, away):
            px, py = rng.uniform(0, W), rng.uniform(0, H)
            out.append(Step(f"{kind}/random", (W, H), None, gold_click(gx, gy, kind), boxes, tool(pred_click(px, py, kind))))
        b = rng.choice(many)
        out.append(Step(f"{kind}/many-boxes", (W, H), None, gold_click(gx, gy, kind), many,
                        tool(pred_click(rng.uniform(b[0], b[2]), rng.uniform(b[1], b[3]), kind))))
        out.append(Step(f"{kind}/many-boxes", (W, H), None, gold_click(b[0] + 20, b[1] + 25, kind), many,
                        tool(pred_click(rng.uniform(0, 600), rng.uniform(0, 600), kind))))
    # Points outside the image.
    for px, py in ((-0.4, 500), (-3, 500), (1080.6, 500), (1081.5, 500), (540, 2400.4)):
        out.append(Step(f"{kind}/off-image", (W, H), None, gold_click(5, 500, kind), [], tool(pred_click(px, py, kind))))
        out.append(Step(f"{kind}/off-image", (W, H), None, gold_click(1075, 2395, kind), [], tool(pred_click(px, py, kind))))
    return out


# Integer offsets (dx, dy) with dx² + dy² = r², for the radii a threshold gives on the square screens below.
def lattice(r):
    out = []
    for dx in range(0, r + 1):
        dy = math.isqrt(r * r - dx * dx)
        if dy * dy + dx * dx == r * r:
            out += [(sx * dx, sy * dy) for sx in (1, -1) for sy in (1, -1)]
    return sorted(set(out))


def on_threshold(name, screen, gold, pred):
    """The normalised (x, y) values of a gold and a predicted point as the preset's reference computes them (no
    image: the prediction is in screen pixels): (gold, pred, single precision)."""
    W, H = screen
    if name == "aitw":
        import numpy as np

        f = lambda p: (np.float32(p[0] / W), np.float32(p[1] / H))
        return f(gold), f(pred), True
    if name == "gui-odyssey":
        return (gold[0] / W * 1000 / 1000, gold[1] / H * 1000 / 1000), (pred[0] / W * 1000 / 1000, pred[1] / H * 1000 / 1000), False
    if name in ("androidcontrol", "androidcontrol-strict"):
        return (gold[0] / W, gold[1] / H), (pred[0] / W * 1000 / 1000, pred[1] / H * 1000 / 1000), False
    if name in ("cagui", "androidcontrol-agentcpm"):
        return (gold[0] / W, gold[1] / H), (int(pred[0] / W * 1000) / 1000, int(pred[1] / H * 1000) / 1000), False
    return (gold[0] / W, gold[1] / H), (pred[0] / W, pred[1] / H), False


def flips(name, screen, gold, pred, t):
    """Whether the fused and the separately rounded distance fall on different sides of the threshold."""
    import numpy as np

    g, p, single = on_threshold(name, screen, gold, pred)
    if single:
        dy, dx = np.float32(g[1] - p[1]), np.float32(g[0] - p[0])
        fused = fused_norm32([dy, dx])
        plain = np.sqrt(np.float32(np.float32(dy * dy) + np.float32(dx * dx)))
        return bool(fused <= np.float32(t)) != bool(plain <= np.float32(t))
    dx, dy = g[0] - p[0], g[1] - p[1]
    fused = fused_norm64([dx, dy])
    plain = math.sqrt(dx * dx + dy * dy)
    return bool(fused <= t) != bool(plain <= t)


def threshold_probes(name, t):
    """Integer clicks exactly on the distance threshold (no boxes), where the reference's fused distance and a
    separately rounded one disagree, and a few where they agree."""
    if name.startswith("qwen-ac-infigui"):
        # Its distance is np.sqrt(dx**2 + dy**2) on Python floats: nothing is fused.
        candidates = [((1000, 1000), (500, 500), (500 + dx, 500 + dy)) for dx, dy in lattice(40)]
        return [Step("click/on-threshold", sc, None, gold_click(*g), [], tool(pred_click(*p))) for sc, g, p in candidates]
    flipped, kept = [], []
    # (side, gold x range, gold y step): a 2500-pixel screen holds float64 cases at 0.14 the others lack.
    grids = [(1000, 7, 11, None), (500, 7, 11, None), (2000, 13, 17, None), (2500, 5, 9, 600)]
    for side, xstep, ystep, xmax in grids:
        r = round(t * side)
        offsets = lattice(r)
        for gx in range(r + 3, xmax or side - r - 3, xstep):
            for gy in range(r + 5, side - r - 5, ystep):
                for dx, dy in offsets:
                    step = ((side, side), (gx, gy), (gx + dx, gy + dy))
                    if flips(name, *step, t):
                        flipped.append(step)
                    elif len(kept) < 4 and (gx + gy) % 5 == 0:
                        kept.append(step)
                if len(flipped) >= 14:
                    break
            if len(flipped) >= 14:
                break
    return [Step("click/on-threshold", sc, None, gold_click(*g), [], tool(pred_click(*p))) for sc, g, p in flipped + kept]


def swipe(a, b):
    return {"action": "swipe", "coordinate": list(a), "coordinate2": list(b)}


def swipe_probes():
    out = []
    golds = {
        "up": ([540, 1800], [540, 600]),
        "down": ([540, 600], [540, 1800]),
        "left": ([810, 1200], [270, 1200]),
        "right": ([270, 1200], [810, 1200]),
    }
    dirs = [(0, -1), (1, -1), (1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (2, -1), (-1, 3)]
    k = 0
    for screen, image in (((1080, 2400), None), ((1080, 2400), (1008, 1008)), ((1000, 1000), None), ((2400, 1080), (540, 1200))):
        W, H = screen
        fw, fh = image or screen
        for name, (a, b) in golds.items():
            ga = [a[0] * W / 1080, a[1] * H / 2400]
            gb = [b[0] * W / 1080, b[1] * H / 2400]
            chosen = dirs if image is None and W == 1080 else [dirs[(k + i) % len(dirs)] for i in range(4)]
            k += 3
            for dx, dy in chosen:
                s = [fw / 2, fh / 2]
                e = [s[0] + dx * fw / 5, s[1] + dy * fw / 5]  # diagonals in pixels of the image
                out.append(Step("swipe/direction", screen, image, swipe(ga, gb), [], tool(swipe(s, e))))
            # Diagonals exact in normalised coordinates (a tie there), not in pixels; a zero-length swipe.
            s = [fw * 0.3, fh * 0.6]
            out.append(Step("swipe/normalised-tie", screen, image, swipe(ga, gb), [], tool(swipe(s, [fw * 0.5, fh * 0.4]))))
            out.append(Step("swipe/normalised-tie", screen, image, swipe(ga, gb), [], tool(swipe(s, [fw * 0.1, fh * 0.8]))))
            out.append(Step("swipe/zero", screen, image, swipe(ga, gb), [], tool(swipe(s, s))))
    # Short swipes (taps for AITW) against clicks and swipes.
    for length in (0.5, 10, 40, 90, 96, 97, 150):
        s = [500, 1000]
        out.append(Step("swipe/short", (1080, 2400), None, gold_click(505, 1004), [[450, 950, 560, 1050]], tool(swipe(s, [s[0], s[1] + length]))))
        out.append(Step("swipe/short", (1080, 2400), None, swipe([540, 1800], [540, 600]), [], tool(swipe(s, [s[0], s[1] - length]))))
    return out


TEXTS = [
    ("Hello World", ["Hello World", "hello world", "  HELLO WORLD\n", "Hello", "world", "Hello World and more",
                     "", "   ", "Goodbye", "Hallo Wrld", "Hello\x1f", "hello  world"]),
    ("蓝牙耳机", ["蓝牙耳机", "蓝牙", "无线蓝牙耳机推荐", "耳麦", ""]),
    ("weather: today", ["weather: tomorrow", "weather", "Weather: today", "climate: today"]),
    ("abcdefgh", ["abcdwxyz", "abcdewxy", "abcwxyzq", "ABCDEFGH"]),
    ("", ["", "anything"]),
]


def text_probes(kinds=("type", "open", "key")):
    out = []
    for kind in kinds:
        for gold, preds in TEXTS:
            if kind != "type" and gold == "":
                continue
            for p in preds:
                out.append(Step(f"{kind}/text", (1080, 2400), None, {"action": kind, "text": gold}, [], tool({"action": kind, "text": p})))
    return out


def open_click_probes(geo):
    out = []
    icon = [[830, 1650, 1010, 1830]]
    W, H = 1080, 2400
    for image in (None, (1092, 2436)):
        fw, fh = image or (W, H)
        ex1, ey1, ex2, ey2 = geo.enlarged(icon[0], (W, H))
        cx, cy = 920 / W, 1740 / H
        rx, ry = geo.ring(image or (W, H))
        pts = [(cx, cy), (ex1, cy), (ex2 + 1e-6, cy), (cx, ey1 - 1e-6), (ex2 + rx * 0.5, cy), (cx + rx * 1.001 + 0.2, cy),
               (cx + rx * 0.999, cy), (0.1, 0.1)]
        for nx, ny in pts:
            out.append(Step("open/click", (W, H), image, {"action": "open", "text": "Settings"}, icon, tool(pred_click(nx * fw, ny * fh))))
    out.append(Step("open/click-no-box", (W, H), None, {"action": "open", "text": "Settings"}, [], tool(pred_click(920, 1740))))
    out.append(Step("open/open", (W, H), None, {"action": "open", "text": "Settings"}, icon, tool({"action": "open", "text": "settings"})))
    return out


# Every action type once: each is the gold of one row and the prediction of one column of the type grid.
ACTIONS = [
    {"action": "click", "coordinate": [540, 1200]},
    {"action": "long_press", "coordinate": [540, 1200], "time": 2},
    {"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]},
    {"action": "type", "text": "hello"},
    {"action": "system_button", "button": "Back"},
    {"action": "system_button", "button": "Home"},
    {"action": "system_button", "button": "Enter"},
    {"action": "system_button", "button": "Menu"},
    {"action": "open", "text": "Maps"},
    {"action": "wait", "time": 2},
    {"action": "terminate", "status": "success"},
    {"action": "terminate", "status": "failure"},
    {"action": "key", "text": "volume_up"},
]


def type_probes():
    out = []
    for g in ACTIONS:
        for p in ACTIONS:
            out.append(Step("types", (1080, 2400), None, g, [], tool(p)))
    return out


def malformed_probes():
    click = {"action": "click", "coordinate": [540, 1200]}
    g = {"action": "click", "coordinate": [540, 1200]}
    j = lambda o: json.dumps(o, ensure_ascii=False)
    cases = [
        "",
        "I would tap the button.",
        "<think>only thinking</think>",
        '{"name": "mobile_use", "arguments": ' + j(click) + "}",
        "Answer: " + '{"name": "mobile_use", "arguments": ' + j(click) + "}",
        "<tool_call>\n" + j({"name": "mobile_use", "arguments": click}),
        "<tool_call>\n```json\n" + j({"name": "mobile_use", "arguments": click}) + "\n```\n</tool_call>",
        "<tool_call>" + json.dumps({"name": "mobile_use", "arguments": click}, separators=(",", ":")) + "</tool_call>",
        "<tool_call>\n" + json.dumps({"name": "mobile_use", "arguments": click}, separators=(",", ":")) + "\n</tool_call>",
        "<tool_call>\n" + j({"name": "mobile_use", "arguments": j(click)}) + "\n</tool_call>",
        tool(click, name="computer_use"),
        tool({"action": "click", "coordinate": [540, 1200, 0]}),
        tool({"action": "click", "coordinate": [540]}),
        tool({"action": "click", "coordinate": "540, 1200"}),
        tool({"action": "click"}),
        tool({"action": "tap", "coordinate": [540, 1200]}),
        tool({"action": "Click", "coordinate": [540, 1200]}),
        tool({"action": "CLICK", "coordinate": [540, 1200]}),
        tool(click) + "\n" + tool({"action": "click", "coordinate": [10, 10]}),
        tool(click) + "\n<conclusion>done</conclusion>",
        "<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [540, 1200]}\n</tool_call>",
        think(click),
        "<tool_call>\n" + j({"name": "mobile_use", "arguments": {"action": "click", "coordinate": [540.0, 1200.0]}}) + "\n</tool_call>",
    ]
    out = [Step("malformed/click", (1080, 2400), None, g, [[500, 1150, 580, 1250]], r) for r in cases]
    lp = {"action": "long_press", "coordinate": [540, 1200], "time": 2}
    for p in ({"action": "long_press", "coordinate": [540, 1200]}, {"action": "long_press", "coordinate": [540, 1200], "time": "2"},
              {"action": "long_press", "coordinate": [540, 1200], "time": 0.2}, {"action": "long_press", "coordinate": [540, 1200], "time": 0.1},
              {"action": "long_press", "coordinate": [540, 1200], "time": 1.5}):
        out.append(Step("malformed/long_press", (1080, 2400), None, lp, [], tool(p)))
    for p in ({"action": "wait"}, {"action": "wait", "time": "2"}, {"action": "wait", "time": 0.5}):
        out.append(Step("malformed/wait", (1080, 2400), None, {"action": "wait", "time": 2}, [], tool(p)))
    for b in ("back", "BACK", " Back ", "Backspace", "Power"):
        out.append(Step("malformed/button", (1080, 2400), None, {"action": "system_button", "button": "Back"}, [],
                        tool({"action": "system_button", "button": b})))
    for st in ("SUCCESS", "done"):
        out.append(Step("malformed/status", (1080, 2400), None, {"action": "terminate", "status": "success"}, [],
                        tool({"action": "terminate", "status": st})))
    return out


def reading_probes():
    """Answers a reference reads otherwise than a lenient reader: tool calls it does not find or cannot load, names
    it compares exactly, and arguments only some references read."""
    click = {"action": "click", "coordinate": [540, 1200]}
    call = {"name": "mobile_use", "arguments": click}
    j = lambda o, **k: json.dumps(o, ensure_ascii=False, **k)
    g = {"action": "click", "coordinate": [540, 1200]}
    boxes = [[500, 1150, 580, 1250]]
    cases = [
        j({"arguments": click, "name": "mobile_use"}),
        j(call, separators=(",", ":")),
        "<think>Maybe <tool_call>\n" + j({"name": "mobile_use", "arguments": {"action": "click", "coordinate": [10, 10]}})
        + "\n</tool_call> no.</think>\n" + tool(click),
        "<tool_call>\n" + j(call) + "\nDone: the {\"last\": {\"step\": 1}} is next.",
        "<tool_call>json\n" + j(call) + "\n</tool_call>",
        "<tool_call>\n" + j(call) + "\n</tool_call><tool_call>\n" + j(call) + "\n</tool_call>",
        tool({"action": "click ", "coordinate": [540, 1200]}),
        tool({"action": "click", "coordinate": [540, 1200], "coordinate2": "here"}),
        tool({"action": "click", "coordinate": [540.5, 1200.25]}),
    ]
    out = [Step("reading/click", (1080, 2400), None, g, boxes, r) for r in cases]
    sw = swipe([540, 1800], [540, 600])
    for p in ({"action": "swipe"}, {"action": "swipe", "coordinate": [540, 1800]},
              {"action": "swipe", "coordinate": [540, 1800, 1], "coordinate2": [540, 600]}):
        out.append(Step("reading/swipe", (1080, 2400), None, sw, [], tool(p)))
    ty = {"action": "type", "text": "hello 5"}
    for p in ({"action": "type", "text": 5}, {"action": "type", "text": None}, {"action": "type", "text": True},
              {"action": "type", "text": [5]}, {"action": "type", "text": "hello", "coordinate": [5]}):
        out.append(Step("reading/type", (1080, 2400), None, ty, [], tool(p)))
    for b in ("Back\n", "back"):
        out.append(Step("reading/button", (1080, 2400), None, {"action": "system_button", "button": "Back"}, [],
                        tool({"action": "system_button", "button": b})))
    # A type without text; an answer's own candidate_bbox (divided, never read, by the Qwen evaluator); Python's
    # NaN and infinities (json.loads reads them, json.dumps writes them); texts Python's str() writes in exponent
    # form. Appended last so that earlier step ids stay.
    out.append(Step("reading/type", (1080, 2400), None, ty, [], tool({"action": "type"})))
    for bb in ([], [[1, 2, 3]], [[1, 2, 3, 4, "x"]], 5, "ab", ""):
        out.append(Step("reading/click", (1080, 2400), None, g, boxes, tool({**click, "candidate_bbox": bb})))
    nan, inf = float("nan"), float("inf")
    out.append(Step("reading/click", (1080, 2400), None, g, boxes, tool({**click, "coordinate2": [nan, -inf]})))
    out.append(Step("reading/click", (1080, 2400), None, g, boxes, tool({"action": "click", "coordinate": [nan, 1200]})))
    out.append(Step("reading/wait", (1080, 2400), None, {"action": "wait"}, [], tool({"action": "wait", "time": nan})))
    for gold, p in (("nan", nan), ("inf", inf), ("-inf", -inf), ("1e+16", 1e16), ("1e-05", 1e-05), ("1.5e+16", 1.5e16)):
        out.append(Step("reading/type", (1080, 2400), None, {"action": "type", "text": gold}, [],
                        tool({"action": "type", "text": p})))
    return out


# --------------------------------------------------------------------------------------------------------------
# Reference verdicts


def qwen_extract(response):
    """The tool-call extraction of the Qwen AndroidControl evaluator as InfiGUI-R1 publishes it
    (eval/android_control/android_control.py, AndroidControl.compute_scores, thinking off). Transcribed here only
    to read responses for the references that have no reader of Qwen tool calls (AITW, GUI-Odyssey); returns the
    `arguments` value or raises."""
    pred = response
    if "<tool_call>" in pred:
        pred = pred.split("<tool_call>")[1]
    else:
        pred = '{"name": "mobile_use", "arguments":' + pred.split('{"name": "mobile_use", "arguments":', 1)[1]
    if "</tool_call>" in pred:
        pred = pred.split("</tool_call>")[0]
    else:
        pred = pred.split("<conclusion>")[0]
        pred = pred.rsplit("}}", 1)[0] + "}}"
    return json.loads(pred.strip())["arguments"]


def norm(p, frame):
    return [p[0] / frame[0], p[1] / frame[1]]


def check_pam(step, refs):
    """The InfiGUI/UI-S1 `check_options` of a gold step; a swipe's `direction` is the reference's own
    `predict_direction` of the gold coordinates, normalised by the screen."""
    g = dict(step.gold)
    a = g["action"]
    if a in ("click", "long_press", "open"):
        g["candidate_bbox"] = [list(b) for b in step.boxes]
    if a == "swipe":
        g["direction"] = refs.infigui.predict_direction(norm(g["coordinate"], step.screen), norm(g["coordinate2"], step.screen))
    return g


def exact_matches(compute, steps, refs):
    """Run an InfiGUI-R1-style `compute_scores` over the steps; its `extact_match` verdict per step."""
    jobs = []
    for i, s in enumerate(steps):
        fw, fh = s.frame()
        jobs.append({"question_id": i, "llm_output": s.response, "check_pams": check_pam(s, refs),
                     "width": s.screen[0], "height": s.screen[1], "resized_width": fw, "resized_height": fh})
    with tempfile.TemporaryDirectory() as tmp:
        fake = types.SimpleNamespace(thinking=False, model_path="probe", output_dir=tmp, eval_type="high", debug=False)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                compute(fake, jobs)
            except ZeroDivisionError:
                pass
    return [bool(j.get("extact_match", False)) for j in jobs]


def verdicts_infigui(steps, refs):
    return exact_matches(refs.infigui_compute_scores, steps, refs)


def verdicts_uis1(steps, refs):
    """UI-S1's evaluate_android_control_action on the tool call read as the Qwen evaluator reads it (UI-S1's own
    reader parses its `<action>` format, not Qwen tool calls): InfiGUI-R1's compute_scores with UI-S1's matcher."""
    ns = dict(refs.infigui_ns)
    uis1 = refs.uis1["evaluate_android_control_action"]
    ns["evaluate_android_control_action"] = lambda p, c, w, h, rw, rh, **_: uis1(p, c, w, h, rw, rh)
    return exact_matches(types.FunctionType(refs.infigui_compute_scores.__code__, ns), steps, refs)


def yxhw(box, screen):
    W, H = screen
    return [box[1] / H, box[0] / W, (box[3] - box[1]) / H, (box[2] - box[0]) / W]


def aitz_gold(step, refs):
    """A gold step in the AITZ layout AgentCPM-GUI's evaluator reads (normalised [y, x] points and boxes)."""
    T = refs.cpm_evaluator.ActionType
    g, (W, H) = step.gold, step.screen
    d = {"image_width": W, "image_height": H, "subset": "probe", "episode_id": "0", "step_id": 0, "instruction": "",
         "result_action_text": "", "result_touch_yx": "[-1.0, -1.0]", "result_lift_yx": "[-1.0, -1.0]",
         "ui_positions": json.dumps([yxhw(b, step.screen) for b in step.boxes]), "duration": 200}
    a = g["action"]
    if a in ("click", "long_press"):
        yx = json.dumps([g["coordinate"][1] / H, g["coordinate"][0] / W])
        d.update(result_touch_yx=yx, result_lift_yx=yx)
        d["result_action_type"] = T.DUAL_POINT if a == "click" else T.LONG_POINT
        if a == "long_press":
            d["duration"] = 1000
    elif a == "swipe":
        d.update(result_action_type=T.DUAL_POINT,
                 result_touch_yx=json.dumps([g["coordinate"][1] / H, g["coordinate"][0] / W]),
                 result_lift_yx=json.dumps([g["coordinate2"][1] / H, g["coordinate2"][0] / W]))
    elif a == "type":
        d.update(result_action_type=T.TYPE, result_action_text=g["text"])
    elif a == "system_button":
        d["result_action_type"] = {"Back": T.PRESS_BACK, "Home": T.PRESS_HOME, "Enter": T.PRESS_ENTER}[g["button"]]
    elif a == "terminate":
        d["result_action_type"] = T.STATUS_TASK_COMPLETE if g["status"] == "success" else T.STATUS_TASK_IMPOSSIBLE
    elif a == "wait":
        d.update(result_action_type=T.NO_ACTION, duration=2000)
    else:
        raise ValueError(a)
    return d


def cpm_pred(step, refs, exact):
    """A response through AgentCPM-GUI's Qwen2.5-VL conversion (qwen2_5_2_minicpm, which raises on a response it
    cannot read; get_qwen_response then returns the error text), then its schema checks and convert2aitz's
    parse_action. `exact` keeps grid values as floats and skips the integer schema."""
    fw, fh = step.frame()
    conv = refs.cpm_exact if exact else refs.cpm
    try:
        answer = json.dumps(conv["qwen2_5_2_minicpm"](step.response, fh, fw))
    except Exception as e:  # get_qwen_response returns str(e)
        answer = str(e)
    if exact:
        # The schemas check the structure as published; only the grid values, floats here, are exempt from
        # their integer type and 0-1000 range.
        try:
            data = json.loads(answer)
            shape = dict(data, POINT=[0, 0]) if isinstance(data, dict) and "POINT" in data else data
        except Exception:
            data = shape = answer
        with contextlib.redirect_stdout(io.StringIO()):
            checked = refs.cpm["extract_and_validate_json"](json.dumps(shape) if not isinstance(shape, str) else shape)
            ok = refs.cpm_convert.parse_action(checked)[0] is not None
        if ok:
            actions = {k: data[k] for k in ("POINT", "to", "PRESS", "TYPE") if k in data}
            params = {"duration": data.get("duration", 200)}
            if "to" in data:
                params["to"] = data["to"]
            action = {"ACTION": actions, "ARGS": params, "STATUS": data.get("STATUS", "continue")}
        else:
            action = {"ACTION": None, "ARGS": None, "STATUS": None}
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            pred = refs.cpm["extract_and_validate_json"](answer)
            actions, params, status = refs.cpm_convert.parse_action(pred)
        action = {"ACTION": actions, "ARGS": params, "STATUS": status}
    return {"action_predict": {"COA": {"txt": action}}}


def verdicts_cpm(steps, refs, android_control, exact):
    ev = refs.cpm_evaluator.ActionEvaluator(tempfile.gettempdir(), eval_android_control=android_control)
    out = []
    for s in steps:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                r = ev(aitz_gold(s, refs), cpm_pred(s, refs, exact))
                out.append(bool(r["exact_match"]))
            except Exception:
                out.append(False)
    return out


AITW_IDS = {"long_press": 0, "wait": 1, "open": 2, "key": 9}


def aitw_action(a, frame, T):
    """A mobile_use action as AITW's (touch_yx, lift_yx, action_type); actions AITW lacks get unused ids. Buttons
    and statuses are read as the Qwen evaluator reads buttons (`.lower().strip()`)."""
    w, h = frame
    none = [-1.0, -1.0]
    k = a["action"]
    if k == "click":
        yx = [a["coordinate"][1] / h, a["coordinate"][0] / w]
        return yx, yx, T.DUAL_POINT
    if k == "swipe":
        return ([a["coordinate"][1] / h, a["coordinate"][0] / w], [a["coordinate2"][1] / h, a["coordinate2"][0] / w], T.DUAL_POINT)
    if k == "type":
        return none, none, T.TYPE
    if k == "system_button":
        return none, none, {"back": T.PRESS_BACK, "home": T.PRESS_HOME, "enter": T.PRESS_ENTER, "menu": 8}[a["button"].lower().strip()]
    if k == "terminate":
        return none, none, {"success": T.STATUS_TASK_COMPLETE, "failure": T.STATUS_TASK_IMPOSSIBLE}[a["status"].lower().strip()]
    return none, none, AITW_IDS[k]


def verdicts_aitw(steps, refs):
    import numpy as np

    T = refs.aitw_types
    out = []
    for s in steps:
        try:
            pred = qwen_extract(s.response)
            p = aitw_action(pred, s.frame(), T)
        except Exception:
            out.append(False)
            continue
        g = aitw_action(s.gold, s.screen, T)
        # AITW screens always carry annotations; a step without gold boxes gets one empty box off the screen.
        boxes = [yxhw(b, s.screen) for b in s.boxes] or [[2.0, 2.0, 0.0, 0.0]]
        r = refs.aitw.check_actions_match(g[0], g[1], int(g[2]), p[0], p[1], int(p[2]), np.array(boxes))
        out.append(bool(r))
    return out


def odyssey_action(a, frame, refs):
    """A mobile_use action as a GUI-Odyssey action string (0-1000 grid; SCROLL named by its decode_action).
    Buttons and statuses are read as the Qwen evaluator reads buttons (`.lower().strip()`)."""
    w, h = frame
    k = a["action"]
    g = lambda p: (p[0] / w * 1000, p[1] / h * 1000)
    if k in ("click", "long_press"):
        return f"{k.upper()}: {g(a['coordinate'])}"
    if k == "swipe":
        return refs.ody_decode_action("SCROLL", [list(g(a["coordinate"])), list(g(a["coordinate2"]))])
    if k == "type":
        return f"TYPE: {a['text']}"
    if k == "system_button":
        return {"back": "PRESS_BACK", "home": "PRESS_HOME", "menu": "PRESS_RECENT", "enter": "PRESS_ENTER"}[a["button"].lower().strip()]
    if k == "terminate":
        return {"success": "COMPLETE", "failure": "IMPOSSIBLE"}[a["status"].lower().strip()]
    return {"wait": "WAIT", "open": "OPEN", "key": "KEY"}[k]


def verdicts_odyssey(steps, refs):
    """action_matching_evaluation's per-step body (evaluate_GUIOdyssey.py), on strings made by odyssey_action."""
    out = []
    for s in steps:
        W, H = s.screen
        gt = odyssey_action(s.gold, s.screen, refs)
        sam2 = [s.boxes[0][0] / W * 1000, s.boxes[0][1] / H * 1000, s.boxes[0][2] / W * 1000, s.boxes[0][3] / H * 1000] if s.boxes else None
        g = refs.ody_simple_decode(gt)
        try:
            pred = odyssey_action(qwen_extract(s.response), s.frame(), refs)
            p = refs.ody_simple_decode(pred)
        except Exception:
            out.append(False)
            continue
        try:
            r = refs.odyssey.action_matching(p["action"], p["info"], g["action"], g["info"], sam2)
        except Exception:
            r = {"is_correct": "no"}
        out.append(r["is_correct"] == "yes")
    return out


# --------------------------------------------------------------------------------------------------------------
# Probe sets per preset

PRESETS = {
    "qwen-ac-infigui": dict(geo=Geometry("centre", 1.2, 0.04, "maxside"), space={"click", "long_press", "swipe", "type", "system_button", "open", "wait", "terminate", "key"}, buttons={"Back", "Home", "Enter", "Menu"}),
    "qwen-ac-uis1": dict(geo=Geometry("centre", 1.2, 0.04, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "open", "wait", "terminate", "key"}, buttons={"Back", "Home", "Enter", "Menu"}),
    "androidcontrol": dict(geo=Geometry("clipped", 1.2, 0.14, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "wait", "terminate"}, buttons={"Back", "Home", "Enter"}),
    "androidcontrol-strict": dict(geo=Geometry("clipped", 1.2, 0.04, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "wait", "terminate"}, buttons={"Back", "Home", "Enter"}),
    "androidcontrol-agentcpm": dict(geo=Geometry("clipped", 1.2, 0.04, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "wait", "terminate"}, buttons={"Back", "Home", "Enter"}),
    "cagui": dict(geo=Geometry("clipped", 1.2, 0.14, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "wait", "terminate"}, buttons={"Back", "Home", "Enter"}),
    "aitw": dict(geo=Geometry("clipped", 2.4, 0.14, "norm"), space={"click", "swipe", "type", "system_button", "terminate"}, buttons={"Back", "Home", "Enter"}),
    "gui-odyssey": dict(geo=Geometry("given", 1.0, 0.14, "norm"), space={"click", "long_press", "swipe", "type", "system_button", "terminate"}, buttons={"Back", "Home", "Menu"}),
}


def in_space(step, spec):
    g = step.gold
    if g["action"] not in spec["space"]:
        return False
    return g["action"] != "system_button" or g["button"] in spec["buttons"]


def probes_for(name, spec):
    rng = random.Random(f"probes-{name}")
    geo = spec["geo"]
    steps = click_probes(geo, rng) + click_probes(geo, rng, "long_press")[::4] + swipe_probes()
    steps += text_probes(("type", "open")) + type_probes() + malformed_probes()
    if name.startswith("qwen-ac"):
        steps += open_click_probes(geo)
    steps += threshold_probes(name, geo.threshold) + reading_probes()
    return [s for s in steps if in_space(s, spec)]


def verdicts(name, steps, refs):
    if name == "qwen-ac-infigui":
        return verdicts_infigui(steps, refs)
    if name == "qwen-ac-uis1":
        return verdicts_uis1(steps, refs)
    if name == "androidcontrol":
        return verdicts_cpm(steps, refs, android_control=False, exact=True)
    if name == "androidcontrol-strict":
        return verdicts_cpm(steps, refs, android_control=True, exact=True)
    if name == "androidcontrol-agentcpm":
        return verdicts_cpm(steps, refs, android_control=True, exact=False)
    if name == "cagui":
        return verdicts_cpm(steps, refs, android_control=False, exact=False)
    if name == "aitw":
        return verdicts_aitw(steps, refs)
    if name == "gui-odyssey":
        return verdicts_odyssey(steps, refs)
    raise ValueError(name)


def num(x):
    return int(x) if float(x).is_integer() and abs(x) < 1e15 else x


def write(out_dir, name, steps, verdict):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "data.jsonl"), "w", encoding="utf-8") as data, \
         open(os.path.join(d, "predictions.jsonl"), "w", encoding="utf-8") as preds, \
         open(os.path.join(d, "verdicts.jsonl"), "w", encoding="utf-8") as ver:
        for i, (s, v) in enumerate(zip(steps, verdict)):
            sid = f"{i:04d}"
            traj = {"id": sid, "app_name": s.cat, "instruction": "probe", "image_width": s.screen[0], "image_height": s.screen[1],
                    "trajectory_length": 1, "trajectory": [{"image": "probe.png", "action": s.gold, **({"bbox": s.boxes} if s.boxes else {})}]}
            data.write(json.dumps(traj, ensure_ascii=False) + "\n")
            line = {"trajectory": sid, "step": 0, "response": s.response}
            if s.image:
                line["image_size"] = list(s.image)
            preds.write(json.dumps(line, ensure_ascii=False) + "\n")
            ver.write(json.dumps({"trajectory": sid, "correct": v}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refs", required=True, help="folder holding the reference repositories")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--only", nargs="*", help="preset names (default: all)")
    args = ap.parse_args()
    refs = Refs(os.path.abspath(args.refs))
    for name, spec in PRESETS.items():
        if args.only and name not in args.only:
            continue
        steps = probes_for(name, spec)
        v = verdicts(name, steps, refs)
        write(args.out, name, steps, v)
        print(f"{name}: {len(steps)} steps, {sum(v)} correct by the reference")


if __name__ == "__main__":
    main()
