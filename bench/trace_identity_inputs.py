#!/usr/bin/env python3
"""Writes traces that exercise every field a trace row can carry, for bench/trace-identity.sh
(two builds must read them to the same rows): Mooncake rows with string and integer
session ids, `delay`, `extra`, `text_input`, `messages`, `u64::MAX` and scattered hash ids,
timestamps out of file order (and the same without prompts, which synthesis refuses); Bailian chains under raw 64-bit chat ids, out of time order;
BurstGPT rows with sessions, out of time order, and failed rows. Pseudo-random with a fixed
seed: the same files every time. Usage: trace_identity_inputs.py OUT_DIR"""
import json
import os
import random
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(21)
U64 = 2**64 - 1

with open(os.path.join(out, "mooncake_rich.jsonl"), "w") as f, \
        open(os.path.join(out, "mooncake_rich_no_prompts.jsonl"), "w") as g:
    for i in range(3000):
        n = rng.randint(0, 40)
        prompt = rng.randrange(30)  # 0: text_input, 1: messages (rows without ids)
        if prompt < 2:
            n = 0
        kind = rng.randrange(4)
        if kind == 0:
            ids = list(range(i * 7, i * 7 + n))
        elif kind == 1:
            ids = [rng.randrange(U64 + 1) for _ in range(n)]
        elif kind == 2:
            ids = [U64] * min(n, 3) + [0, U64 - 1]
        else:
            ids = [0] + [rng.randrange(10**9) * 1000 for _ in range(n)]
        row = {"input_length": max(1, len(ids) * 512 - rng.randrange(512)) if ids else rng.randint(1, 9000),
               "output_length": rng.randint(1, 900)}
        if ids:
            row["hash_ids"] = ids
        session = rng.randrange(6)
        if session == 0:
            row["session_id"] = f"s{rng.randrange(300)}"
            row["timestamp"] = 10_000 + i * 50
            if rng.random() < 0.5:
                row["delay"] = rng.randint(0, 5000)
        elif session == 1:
            row["session_id"] = rng.randrange(300)
            row["timestamp"] = 10_000 + i * 50
        else:
            row["timestamp"] = rng.randrange(200_000)  # out of file order
        if rng.random() < 0.05:
            row["extra"] = {"k": i, "nested": {"v": [1, 2, str(i)]}}
        if prompt == 0:
            row["text_input"] = f"prompt {i} " * rng.randint(1, 5)
        elif prompt == 1:
            row["messages"] = [{"role": "user", "content": f"hello {i}"}]
        f.write(json.dumps(row) + "\n")
        if "text_input" not in row and "messages" not in row:  # synthesize refuses those
            g.write(json.dumps(row) + "\n")

with open(os.path.join(out, "bailian_chains.jsonl"), "w") as f:
    chats = []
    for i in range(2000):
        chat = 2**63 + rng.randrange(2**62)
        parent = rng.choice(chats) if chats and rng.random() < 0.6 else None
        depth = 1 if parent is None else parent[1] + 1
        chats.append((chat, depth))
        n = rng.randint(0, 30)
        ids = [rng.randrange(2**40) for _ in range(n)]
        row = {"chat_id": chat, "parent_chat_id": -1 if parent is None else parent[0],
               "timestamp": round(rng.uniform(0, 3600), 3),
               "input_length": max(1, n * 16 - rng.randrange(16)) if n else rng.randint(1, 999),
               "output_length": rng.randint(1, 500),
               "type": rng.choice(["text", "search", "image", "file", "thinking", "other"]),
               "turn": depth, "hash_ids": ids}
        f.write(json.dumps(row) + "\n")

with open(os.path.join(out, "burstgpt_sessions.csv"), "w") as f:
    f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID\n")
    for i in range(2000):
        req, resp = rng.randint(1, 4000), rng.choice([0] + list(range(1, 800)))
        f.write(f"{rng.randrange(100000)},{rng.choice(['ChatGPT', 'GPT-4'])},{req},{resp},{req + resp},"
                f"Conversation log,{rng.choice(['', 'a', 'b', 'c', str(rng.randrange(50))])}\n")
