"""The official `openai` Python client against `mobile-r1-eval serve` (run by tests/it/openai_client.rs).

Usage: client_check.py BASE_URL MODEL PICTURE.png
Prints one JSON object with what each call returned; an assertion that fails exits non-zero with its message.
"""

import base64
import json
import sys
import threading

import openai


def main() -> None:
    base, model, picture = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base, api_key="not-needed", max_retries=0, timeout=120)
    out = {"client_version": openai.__version__}
    create = client.chat.completions.create

    # Plain text.
    r = create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=6)
    assert r.object == "chat.completion", r
    assert r.choices[0].message.role == "assistant", r
    assert r.choices[0].finish_reason in ("stop", "length"), r
    assert 1 <= r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 0, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage
    out["plain"] = r.choices[0].message.content

    # A picture, greedy (the image first, then the text: `generate`'s prompt).
    url = "data:image/png;base64," + base64.b64encode(open(picture, "rb").read()).decode()
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Describe the screen."},
    ]}]
    r = create(model=model, messages=messages, max_tokens=8, temperature=0)
    image = r.choices[0].message.content
    out["image"] = {"content": image, "finish_reason": r.choices[0].finish_reason,
                    "prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens}

    # Streaming: the same text in pieces, then the usage chunk.
    chunks = list(create(model=model, messages=messages, max_tokens=8, temperature=0, stream=True,
                         stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert len({c.id for c in chunks}) == 1, "every chunk has the answer's id"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, chunks[-1]
    out["stream"] = {"content": text, "chunks": len(chunks), "finish_reasons": finishes,
                     "completion_tokens": chunks[-1].usage.completion_tokens}

    # Log-probabilities: greedy picks the most likely token.
    r = create(model=model, messages=messages, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1, r
    for t in content:
        assert len(t.top_logprobs) == 3, t
        assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6, t
        assert t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob, t
    out["logprobs"] = {"tokens": [t.token for t in content], "content": r.choices[0].message.content}

    # Seeded sampling repeats itself.
    sampled = [create(model=model, messages=messages, max_tokens=8, temperature=1.0, top_p=0.9, seed=7)
               .choices[0].message.content for _ in range(2)]
    assert sampled[0] == sampled[1], sampled
    out["sampled"] = sampled[0]

    # A bad request: the client raises BadRequestError with the server's message.
    try:
        create(model=model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}])
        raise AssertionError("a bad data URL was accepted")
    except openai.BadRequestError as e:
        out["bad_request"] = {"status": e.status_code, "message": e.message, "param": e.body.get("param")}
    try:
        create(model="some-other-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        out["unknown_model"] = e.status_code

    # Many at once: every one answered.
    n = 12
    answers = [None] * n
    barrier = threading.Barrier(n)

    def ask(i: int) -> None:
        barrier.wait()
        r = create(model=model, max_tokens=24, extra_body={"ignore_eos": True},
                   messages=[{"role": "user", "content": f"Count to {i}."}])
        answers[i] = (r.choices[0].finish_reason, r.usage.completion_tokens)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["concurrent"] = answers
    print(json.dumps(out))


if __name__ == "__main__":
    main()
