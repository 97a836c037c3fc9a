#!/usr/bin/env python3
"""Constrained decoding on a running `tessera serve` (random weights at real size): a json_schema
answer and a tool_choice "required" call must parse and match their schemas, and the cost per
token of a constrained answer is printed next to an unconstrained one. Usage: constrained_check.py PORT"""
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

# Cost per token: 120 booleans (about 240 tokens) against 240 unconstrained tokens.
bools = {"type": "array", "items": {"type": "boolean"}, "minItems": 120, "maxItems": 120}
post({"messages": msgs, "max_tokens": 8})  # warm
free, t_free = post({"messages": msgs, "max_tokens": 240, "ignore_eos": True, "temperature": 1, "seed": 4})
con, t_con = post({"messages": msgs, "max_tokens": 400, "temperature": 1, "seed": 4,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": bools}}})
n_free, n_con = free["usage"]["completion_tokens"], con["usage"]["completion_tokens"]
print(f"decode, batch 1: unconstrained {n_free} tokens in {t_free:.2f} s = {1000 * t_free / n_free:.2f} ms/token; "
      f"json_schema (120 booleans) {n_con} tokens in {t_con:.2f} s = {1000 * t_con / n_con:.2f} ms/token")
try:
    failed |= len(json.loads(con["choices"][0]["message"]["content"])) != 120
except Exception:
    failed = True
sys.exit(1 if failed else 0)
