"""compare.py's log-prob parity: each step's greedy tokens and their top-5 log-probs from mobile-r1-eval (its
`serve` command, sent the very messages transformers rendered) against transformers', and transformers' own run
in the other dtype against its run in the compared one.

Tokens are compared as the bytes they stand for (the server reports bytes, transformers ids; both are turned into
the same byte strings), so a top-5 list matches entry by entry. At each position whose earlier tokens agree (the
two engines saw the same context) the log-probs of the tokens in both top-5 lists are compared; the first
position where the chosen tokens differ is still compared (its context agrees), the later ones are not.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

STOP_TEXTS = (b"<|im_end|>", b"<|endoftext|>")


def compare_scored(ref, other):
    """`ref` and `other`: {"tokens": [bytes hex], "top5": [[[bytes hex, logprob] x5] per position]}. Returns the
    step's record: tokens identical, the first differing position, the positions compared and the largest
    |Δ log-prob| over the tokens in both top-5 lists there."""
    rt, ot = ref["tokens"], other["tokens"]
    worst, compared, first_diff = 0.0, 0, None
    for i in range(min(len(rt), len(ot), len(ref["top5"]), len(other["top5"]))):
        theirs = dict((tok, lp) for tok, lp in other["top5"][i])
        for tok, lp in ref["top5"][i]:
            if tok in theirs:
                worst = max(worst, abs(theirs[tok] - lp))
        compared += 1
        if rt[i] != ot[i]:
            first_diff = i
            break
    if first_diff is None and len(rt) != len(ot):
        first_diff = min(len(rt), len(ot))
    return {"tokens_identical": rt == ot, "first_difference": first_diff, "positions_compared": compared,
            "max_abs_top5_logprob_delta": worst}


def summary(per_step):
    """The totals of `compare_scored` records."""
    same = sum(s["tokens_identical"] for s in per_step)
    return {"tokens_identical_steps": f"{same}/{len(per_step)}",
            "max_abs_top5_logprob_delta": max((s["max_abs_top5_logprob_delta"] for s in per_step), default=0.0),
            "positions_compared": sum(s["positions_compared"] for s in per_step)}


def ours_scored(choice):
    """The server's answer as {"tokens", "top5"} in compare_scored's form (a reported stop token left out)."""
    def hexed(entry):
        raw = entry.get("bytes")
        return (bytes(raw) if raw is not None else entry["token"].encode("utf-8")).hex()
    content = (choice.get("logprobs") or {}).get("content") or []
    tokens, tops = [], []
    for entry in content:
        if bytes.fromhex(hexed(entry)) in STOP_TEXTS:
            break
        tokens.append(hexed(entry))
        tops.append([[hexed(t), float(t["logprob"])] for t in entry.get("top_logprobs", [])])
    return {"tokens": tokens, "top5": tops}


def data_url(path):
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")


def with_image(messages, image):
    """transformers' messages with the `{"type": "image"}` part as an OpenAI `image_url` part holding `image`."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [{"type": "image_url", "image_url": {"url": data_url(image)}} if p.get("type") == "image"
                       else p for p in content]
        out.append({"role": m["role"], "content": content})
    return out


class Server:
    """`mobile-r1-eval serve` on a free loopback port, one sequence at a time, stopped on exit."""

    def __init__(self, binary, ckpt, device, dtype, max_new, log_path):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", ckpt, "--host", "127.0.0.1", "--port", "0", "--batch-size", "1",
             "--max-new-tokens", str(max_new), "--device", device, "--dtype", dtype],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if "listening on " not in line:
            self.close()
            raise RuntimeError(f"mobile-r1-eval serve did not start (see {log_path}): {line!r}")
        self.base = line.split("listening on ")[1].split()[0]
        self.model = line.split("`")[1] if "`" in line else "model"

    def chat(self, messages, max_new, timeout=3600):
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": max_new, "temperature": 0,
                           "logprobs": True, "top_logprobs": 5}).encode("utf-8")
        req = urllib.request.Request(self.base + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"serve answered {e.code}: {e.read()[:2000]!r}") from e

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_ours(args, ckpt, data, jobs, log_path):
    """Our top-5 log-probs per step: each step's messages (as transformers rendered them, the screenshot attached)
    sent to `serve` one at a time. Returns {(trajectory, step): scored}, the texts and the prompt lengths."""
    scored, texts, lengths = {}, {}, {}
    with Server(args.binary, ckpt, args.device, args.dtype, args.max_new_tokens, log_path) as server:
        for (traj, step), (messages, image) in sorted(jobs.items()):
            t0 = time.time()
            answer = server.chat(with_image(messages, os.path.join(data, image)), args.max_new_tokens)
            choice = answer["choices"][0]
            scored[(traj, step)] = ours_scored(choice)
            texts[(traj, step)] = choice["message"]["content"]
            lengths[(traj, step)] = answer["usage"]["prompt_tokens"]
            print(f"log-probs of step {traj}/{step} through serve: {time.time() - t0:.1f} s", flush=True,
                  file=sys.stderr)
    return scored, texts, lengths


def parity(keys, hf, ours, texts, lengths, other=None):
    """The result's `logprob_parity` object: per step ours against transformers (and, with `other`, transformers
    in the other dtype against transformers), with their totals. `texts`: (serve's answers, eval's answers);
    `lengths`: (serve's prompt token counts, transformers')."""
    (ours_texts, eval_texts), (ours_lengths, hf_lengths) = texts, lengths
    per_step, other_steps = [], []
    for k in keys:
        row = {"trajectory": k[0], "step": k[1], **compare_scored(hf[k], ours[k]),
               "ours_serve_text_equals_eval": ours_texts.get(k) == eval_texts.get(k),
               "prompt_tokens_equal": ours_lengths.get(k) == hf_lengths.get(k)}
        if other is not None:
            o = compare_scored(hf[k], other[k])
            row["transformers_dtypes_agree"] = o["tokens_identical"]
            other_steps.append({"trajectory": k[0], "step": k[1], **o})
        per_step.append(row)
    out = {"ours_from": "serve, one request at a time, top_logprobs 5, the messages transformers rendered",
           **summary(per_step),
           "ours_serve_text_equals_eval_steps": f"{sum(r['ours_serve_text_equals_eval'] for r in per_step)}/"
                                                f"{len(per_step)}",
           "per_step": per_step}
    if other is not None:
        agree = [r for r in per_step if r["transformers_dtypes_agree"]]
        out["transformers_other_dtype"] = {**summary(other_steps), "per_step": other_steps}
        out["ours_identical_where_transformers_dtypes_agree"] = \
            f"{sum(r['tokens_identical'] for r in agree)}/{len(agree)}"
    return out
