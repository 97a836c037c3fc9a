#!/usr/bin/env python3
"""Constrained decoding on a running `tessera serve` (random weights at real size): a json_schema
answer and a tool_choice "required" call must parse and match their schemas, and the cost per
token of a constrained answer is printed next to an unconstrained one. Usage: constrained_check.py PORT"""
import concurrent.futures
import json
import sys
import time
import urllib.request

port = sys.argv[1]


def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out, time.time() - t0


msgs = [{"role": "user", "content": "Weather in Paris as JSON"}]
schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["unit", "ok", "n"], "additionalProperties": False}
failed = False
for seed in (1, 2):
    r, _ = post({"messages": msgs, "max_tokens": 200, "temperature": 1, "seed": seed,
                 "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}})
    content = r["choices"][0]["message"]["content"]
    try:
        j = json.loads(content)
        ok = j["unit"] in ("celsius", "fahrenheit") and isinstance(j["ok"], bool) and 0 <= j["n"] <= 100 and len(j) == 3
    except Exception:
        ok = False
    failed |= not ok
    print(f"json_schema seed {seed}: {'ok' if ok else 'FAIL'} {content!r}")

tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}]
r, _ = post({"messages": msgs, "max_tokens": 200, "temperature": 1, "seed": 3, "tools": tools, "tool_choice": "required"})
calls = r["choices"][0]["message"].get("tool_calls") or []
ok = len(calls) >= 1 and all(json.loads(c["function"]["arguments"])["city"] in ("Paris", "Oslo") for c in calls)
failed |= not ok
print(f"tool_choice required: {'ok' if ok else 'FAIL'} {[c['function'] for c in calls]}")

# Cost per token: an array of 400 booleans (never complete within 200 tokens, so both runs decode
# exactly 200 tokens) against unconstrained tokens, one request alone and 16 at once.
bools = {"type": "json_schema", "json_schema": {"name": "b", "schema": {
    "type": "array", "items": {"type": "boolean"}, "minItems": 400, "maxItems": 400}}}
post({"messages": msgs, "max_tokens": 8})  # warm


def batch(n, constrained):
    bodies = [{"messages": msgs, "max_tokens": 200, "ignore_eos": True, "temperature": 1, "seed": 10 + i}
              for i in range(n)]
    if constrained:
        for b in bodies:
            b["response_format"] = bools
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        outs = list(ex.map(lambda b: post(b)[0], bodies))
    dt = time.time() - t0
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    return tokens, dt


for n in (1, 16):
    tf, df = batch(n, False)
    tc, dc = batch(n, True)
    print(f"decode, {n} concurrent: unconstrained {tf} tokens in {df:.2f} s = {tf / df:.0f} tok/s; "
          f"json_schema {tc} tokens in {dc:.2f} s = {tc / dc:.0f} tok/s ({100 * (tc / dc) / (tf / df):.0f}%)")
sys.exit(1 if failed else 0)
