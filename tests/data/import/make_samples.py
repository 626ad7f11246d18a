#!/usr/bin/env python3
"""Write the small importer samples under tests/data/import/, each in its source's published layout.

Standard library only; byte-reproducible (fixed gzip mtime, no randomness). Run from anywhere:

    python3 tests/data/import/make_samples.py [--standins ../shared/data/standins]

* androidcontrol/: GZIP TFRecord files of tf.train.Example episodes, written by hand to the schema of
  google-research/google-research android_control/README.md (screenshots, accessibility forests as
  android_env AndroidAccessibilityForest protos, actions as JSON), plus splits.json; the second file ends with a
  record whose data CRC is wrong; androidcontrol-damaged/ holds one record with a screenshot that is not an image
  and a click off the screen.
* androidcontrol-mobile-use/: four lines of X-PLUG/MobileAgent UI-S1/datasets/android_control_evaluation_std.jsonl
  and one of android_control_train_example.jsonl (MIT), unchanged, taken from the stand-ins; the screenshots they
  name are drawn here (1080x2400 grey PNGs), one left out on purpose.
* aitz/test/: the CoAT data-example episode (IMNearth/CoAT, Apache-2.0) copied from the stand-ins, plus one
  hand-written episode ([y, x] order, a swipe right, an unused action id, a missing screenshot).
* gui-odyssey/: two hand-written episodes in the layout of OpenGVLab/GUI-Odyssey introduction.md.
* cagui/: one hand-written episode in the CAGUI_agent layout (no CAGUI content: the dataset is CC BY-NC).
"""

import argparse
import gzip
import json
import shutil
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------- images


def png(width, height, grey):
    """A solid grey 8-bit PNG."""

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + bytes([grey]) * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def jpeg(width, height, grey):
    """A solid grey baseline JPEG: every 8x8 block has only its DC coefficient (quantiser 1), coded with two
    two-symbol Huffman tables."""
    dc = 8 * (grey - 128)
    cat = abs(dc).bit_length()
    out = bytearray(b"\xff\xd8")
    out += b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + b"\x01" * 64
    out += b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    for table, symbols in ((0x00, [0, cat]), (0x10, [0x00, 0x01])):
        counts = [0, 2] + [0] * 14  # two codes of length 2: '00', '01'
        body = bytes([table]) + bytes(counts) + bytes(symbols)
        out += b"\xff\xc4" + struct.pack(">H", 2 + len(body)) + body
    out += b"\xff\xda" + struct.pack(">H", 8) + b"\x01\x01\x00\x00\x3f\x00"
    bits = []
    blocks = ((width + 7) // 8) * ((height + 7) // 8)
    for i in range(blocks):
        if i == 0 and cat:
            value = dc if dc > 0 else dc + (1 << cat) - 1
            bits += "01" + format(value, f"0{cat}b")
        else:
            bits += "00"  # DC difference 0
        bits += "00"  # end of block
    bits += "1" * (-len(bits) % 8)
    scan = bytearray()
    for i in range(0, len(bits), 8):
        byte = int("".join(bits[i : i + 8]), 2)
        scan.append(byte)
        if byte == 0xFF:
            scan.append(0x00)
    return bytes(out + scan + b"\xff\xd9")


# ---------------------------------------------------------------- protobuf and TFRecord


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def rect(l, t, r, b):
    return field(1, 0, l) + field(2, 0, t) + field(3, 0, r) + field(4, 0, b)


def node(uid, bounds, clickable=False, long_clickable=False, text="", depth=0, children=()):
    out = field(1, 0, uid) + field(2, 2, rect(*bounds))
    if text:
        out += field(7, 2, text.encode())
    if clickable:
        out += field(14, 0, 1)
    if long_clickable:
        out += field(19, 0, 1)
    out += field(23, 0, 1)  # is_visible_to_user
    if children:
        out += field(25, 2, b"".join(varint(c) for c in children))
    return out + field(27, 0, depth)


def window(layer, window_type, nodes):
    tree = b"".join(field(1, 2, n) for n in nodes)
    return field(4, 0, layer) + field(6, 0, window_type) + field(11, 2, tree)


def forest(*windows):
    return b"".join(field(1, 2, w) for w in windows)


def example(features):
    """tf.train.Example from {name: ("bytes", [bytes]) | ("int64", [int])}."""
    entries = b""
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature = field(1, 2, b"".join(field(1, 2, v) for v in values))
        else:
            feature = field(3, 2, field(1, 2, b"".join(varint(v) for v in values)))
        entries += field(1, 2, field(1, 2, name.encode()) + field(2, 2, feature))
    return field(1, 2, entries)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


# ---------------------------------------------------------------- AndroidControl

W, H = 108, 240  # the drawn screenshots' size, which the records state


def ac_episode(episode_id, goal, actions, instructions, trees):
    shots = [png(W, H, 40 + 20 * i) for i in range(len(actions) + 1)]
    trees = trees + [forest()] * (len(shots) - len(trees))
    return example(
        {
            "episode_id": ("int64", [episode_id]),
            "goal": ("bytes", [goal.encode()]),
            "screenshots": ("bytes", shots),
            "screenshot_widths": ("int64", [W] * len(shots)),
            "screenshot_heights": ("int64", [H] * len(shots)),
            "accessibility_trees": ("bytes", trees),
            "actions": ("bytes", [json.dumps(a, separators=(",", ":")).encode() for a in actions]),
            "step_instructions": ("bytes", [s.encode() for s in instructions]),
        }
    )


def androidcontrol(out):
    root = window(1, 1, [node(0, (0, 0, W, H), children=(1,)), node(1, (40, 190, 70, 210), clickable=True, depth=1, children=(2,)), node(2, (45, 195, 65, 205), text="Add", depth=2)])
    press = window(1, 1, [node(0, (0, 0, W, H)), node(1, (10, 40, 100, 60), long_clickable=True, depth=1)])
    ime = window(2, 2, [node(0, (0, 160, W, H), clickable=True)])
    e101 = ac_episode(
        101,
        "Open the clock and add an alarm for seven",
        [
            {"action_type": "open_app", "app_name": "Clock"},
            {"action_type": "click", "x": 54, "y": 200},
            {"action_type": "scroll", "direction": "down"},
            {"action_type": "input_text", "text": "7:00"},
        ],
        ["open the clock app", "tap the add button", "scroll down", "type 7:00"],
        [forest(), forest(root)],
    )
    e102 = ac_episode(
        102,
        "Pin the first note",
        [
            {"action_type": "long_press", "x": 20, "y": 50},
            {"action_type": "navigate_back"},
            {"action_type": "scroll", "direction": "right"},
            {"action_type": "wait"},
            {"action_type": "double_tap", "x": 30, "y": 30},
        ],
        ["press the first note", "go back", "scroll right", "wait", "double tap the note"],
        [forest(press, ime)],
    )
    e103 = ac_episode(
        103,
        "Go home and open settings",
        [{"action_type": "navigate_home"}, {"action_type": "click", "x": 10, "y": 10}],
        ["go home", "tap settings"],
        [],
    )
    e104 = ac_episode(
        104,
        "Search for weather",
        [{"action_type": "click", "x": 50, "y": 100}, {"action_type": "type", "x": 50, "y": 20, "text": "weather"}],
        ["tap the search box", "type weather"],
        [forest()],
    )
    e105 = ac_episode(105, "A record that arrives damaged", [{"action_type": "wait"}], ["wait"], [])
    d = out / "androidcontrol"
    d.mkdir(parents=True)
    write_gz(d / "android_control-00000-of-00002", b"".join(frame(e) for e in (e101, e102, e103)))
    bad = bytearray(frame(e105))
    bad[len(bad) // 2] ^= 0xFF  # a byte inside the data: its CRC no longer matches
    write_gz(d / "android_control-00001-of-00002", frame(e104) + bytes(bad))
    splits = {"train": [103], "validation": [], "test": [101, 102, 104, 105]}
    (d / "splits.json").write_text(json.dumps(splits) + "\n")


def androidcontrol_damaged(out):
    """One record that data validate would refuse two steps of: a screenshot that is an error page's bytes, not an
    image (its size stated all the same), and a click off the 108x240 screen."""
    shots = [b"<html>503 Service Unavailable</html>", png(W, H, 60), png(W, H, 80), png(W, H, 100)]
    actions = [
        {"action_type": "click", "x": 54, "y": 200},
        {"action_type": "click", "x": 500, "y": 100},
        {"action_type": "navigate_back"},
    ]
    e201 = example(
        {
            "episode_id": ("int64", [201]),
            "goal": ("bytes", [b"Open the menu"]),
            "screenshots": ("bytes", shots),
            "screenshot_widths": ("int64", [W] * len(shots)),
            "screenshot_heights": ("int64", [H] * len(shots)),
            "accessibility_trees": ("bytes", [forest()] * len(shots)),
            "actions": ("bytes", [json.dumps(a, separators=(",", ":")).encode() for a in actions]),
            "step_instructions": ("bytes", [b"tap add", b"tap the menu", b"go back"]),
        }
    )
    d = out / "androidcontrol-damaged"
    d.mkdir(parents=True)
    write_gz(d / "android_control-00000-of-00001", frame(e201))


def write_gz(path, data):
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))


# ---------------------------------------------------------------- AndroidControl as mobile_use JSONL


def mobile_use(out, standins):
    src = standins / "standin_androidcontrol_mobile_use_format"
    d = out / "androidcontrol-mobile-use"
    (d / "images").mkdir(parents=True)
    evaluation = (src / "android_control_evaluation_std.first30.jsonl").read_text().splitlines()
    train = (src / "android_control_train_example.jsonl").read_text().splitlines()
    picked = [evaluation[i] for i in (2, 6, 7, 19)]  # open/click/type; a swipe down; Back; two swipes right
    (d / "android_control_evaluation_std.sample.jsonl").write_text("\n".join(picked) + "\n")
    (d / "android_control_train_example.sample.jsonl").write_text(train[0] + "\n")
    for line in picked + train[:1]:
        for s in json.loads(line)["steps"]:
            name = Path(s["screenshot"]).name
            if name == "45_3.png":
                continue  # a missing screenshot
            (d / "images" / name).write_bytes(png(1080, 2400, 128))


# ---------------------------------------------------------------- AITZ


def aitz(out, standins):
    src = standins / "standin_aitz_coat_example"
    ep = "GOOGLE_APPS-523638528775825151"
    d = out / "aitz" / "test" / "google_apps" / ep
    d.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        shutil.copyfile(f, d / f.name)
    hand = "GENERAL-9000000000000000001"
    g = out / "aitz" / "test" / "general" / hand
    g.mkdir(parents=True)

    def step(i, action_type, touch="[-1.0, -1.0]", lift="[-1.0, -1.0]", text="", positions="[]", desc=""):
        return {
            "episode_id": hand[len("GENERAL-"):],
            "episode_length": 6,
            "step_id": i,
            "instruction": "set an alarm named wake",
            "ui_positions": positions,
            "ui_text": "[]",
            "ui_types": "[]",
            "result_action_type": action_type,
            "result_action_text": text,
            "result_touch_yx": touch,
            "result_lift_yx": lift,
            "image_path": f"general/{hand}/{hand}_{i}.png",
            "image_full_path": f"general/{hand}/{hand}_{i}.png",
            "coat_screen_desc": "",
            "coat_action_think": "",
            "coat_action_desc": desc,
            "coat_action_result": "",
        }

    steps = [
        # A tap at y=0.8, x=0.25: pixel (67.5, 480) on 270x600; the box [y 470, x 50, h 20, w 40] holds it.
        step(0, 4, "[0.8, 0.25]", "[0.8, 0.25]", positions="[[470, 50, 20, 40], [100, 100, 20, 20]]", desc="click on the alarm tab"),
        step(1, 4, "[0.5, 0.2]", "[0.5, 0.8]", desc="scroll right"),  # the finger moves right
        step(2, 8),  # unused in AITW
        step(3, 3, text="wake", desc='input text "wake"'),
        step(4, 7, desc="press enter"),  # its screenshot is missing
        step(5, 11, desc="stop and set the query as impossible"),
    ]
    (g / f"{hand}.json").write_text(json.dumps(steps, indent=2) + "\n")
    for i in (0, 1, 2, 3, 5):
        (g / f"{hand}_{i}.png").write_bytes(png(270, 600, 90 + 10 * i))


# ---------------------------------------------------------------- GUI-Odyssey


def gui_odyssey(out):
    d = out / "gui-odyssey"
    for sub in ("annotations", "screenshots", "splits"):
        (d / sub).mkdir(parents=True)

    def episode(eid, instruction, steps):
        return {
            "episode_id": eid,
            "device_info": {"product": "sdk_gphone64_x86_64", "release_version": "14", "sdk_version": "34", "h": 2400, "w": 1080, "device_name": "Pixel 7 Pro"},
            "task_info": {"category": "Multi_Apps", "app": ["Chrome", "Keep Notes"], "meta_task": "Search for {} and note it.", "task": instruction, "instruction": instruction},
            "step_length": len(steps),
            "steps": [
                {"step": i, "screenshot": f"{eid}_{i}.png", "action": a, "info": info, "ps": "", "low_level_instruction": low, "sam2_bbox": box}
                for i, (a, info, low, box) in enumerate(steps)
            ],
        }

    e1 = episode(
        "odyssey-ep-1",
        "Search for the tallest tree and write its name in a note",
        [
            ("CLICK", [[250, 500]], "tap the search bar", [200, 450, 300, 550]),
            ("SCROLL", [[500, 800], [500, 200]], "swipe up to see more results", []),
            ("TEXT", "tallest tree", "type the query", []),
            ("CLICK", "KEY_APPSELECT", "open the recent apps", []),
            ("LONG_PRESS", [[100, 900]], "press and hold the note", [50, 850, 150, 950]),
            ("CLICK", "KEY_BACK", "go back", []),
            ("COMPLETE", "", "finish", []),
        ],
    )
    e2 = episode("odyssey-ep-2", "Go to the home screen", [("CLICK", "KEY_HOME", "press home", []), ("INCOMPLETE", "", "give up", [])])
    for e in (e1, e2):
        (d / "annotations" / f"{e['episode_id']}.json").write_text(json.dumps(e, indent=2) + "\n")
        for s in e["steps"]:
            (d / "screenshots" / s["screenshot"]).write_bytes(png(54, 120, 150))
    split = {"train": ["odyssey-ep-2.json"], "test": ["odyssey-ep-1.json"]}
    (d / "splits" / "random_split.json").write_text(json.dumps(split) + "\n")


# ---------------------------------------------------------------- CAGUI


def cagui(out):
    eid = "cagui-sample-0001"
    d = out / "cagui" / "domestic" / eid
    d.mkdir(parents=True)

    def step(i, action_type, touch="[-1.0, -1.0]", lift="[-1.0, -1.0]", text="", duration=None):
        return {
            "episode_id": eid,
            "episode_length": 7,
            "step_id": i,
            "instruction": "在天气应用里查看北京明天的天气",
            "image_path": f"domestic/{eid}/{eid}_{i}.jpeg",
            "image_width": 1264,
            "image_height": 2800,
            "ui_positions": "[[0.08, 0.4, 0.05, 0.2], [0.5, 0.5, 0.1, 0.1]]",
            "result_action_type": action_type,
            "result_action_text": text,
            "result_touch_yx": touch,
            "result_lift_yx": lift,
            "duration": duration,
        }

    steps = [
        step(0, 4, "[0.1, 0.5]", "[0.1, 0.5]"),  # a tap inside the first box
        step(1, 3, text="北京"),
        step(2, 0, "[0.5, 0.5]", "[0.5, 0.5]", duration=1500),  # a long press on the second box's corner
        step(3, 1, duration=2000),  # wait
        step(4, 4, "[0.7, 0.5]", "[0.3, 0.5]"),  # the finger moves up
        step(5, 2),  # unused
        step(6, 10),
    ]
    (d / f"{eid}.json").write_text(json.dumps(steps, ensure_ascii=False, indent=2) + "\n")
    for i in range(len(steps)):
        (d / f"{eid}_{i}.jpeg").write_bytes(jpeg(63, 140, 100 + 10 * i))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--standins", type=Path, default=HERE.parents[3] / "shared" / "data" / "standins")
    args = ap.parse_args()
    for sub in ("androidcontrol", "androidcontrol-damaged", "androidcontrol-mobile-use", "aitz", "gui-odyssey", "cagui"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    androidcontrol(HERE)
    androidcontrol_damaged(HERE)
    mobile_use(HERE, args.standins)
    aitz(HERE, args.standins)
    gui_odyssey(HERE)
    cagui(HERE)


if __name__ == "__main__":
    main()
