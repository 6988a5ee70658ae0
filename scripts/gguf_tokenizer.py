#!/usr/bin/env python3
"""Write a Hugging Face tokenizer.json for a GGUF model's byte-level BPE vocabulary.

canaryd sizes prompts with the target's tokenizer (`--tokenizer tokenizer.json`); the
real-server tier's model ships only as GGUF, whose metadata holds the same vocabulary and
merges. Usage: gguf_tokenizer.py MODEL.gguf OUT.json. Standard library only.
"""
import json
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
CONTROL, USER_DEFINED = 3, 4


def read_metadata(path):
    with open(path, "rb") as f:
        def unpack(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(unpack("<Q")).decode("utf-8", errors="replace")

        def value(kind):
            if kind == STRING:
                return string()
            if kind == ARRAY:
                item, count = unpack("<I"), unpack("<Q")
                return [value(item) for _ in range(count)]
            if kind not in SCALARS:
                raise ValueError(f"{path}: unknown GGUF value type {kind}")
            return unpack(SCALARS[kind])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, _tensors, kvs = unpack("<I"), unpack("<Q"), unpack("<Q")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old")
        meta = {}
        for _ in range(kvs):
            key = string()
            meta[key] = value(unpack("<I"))
        return meta


def tokenizer_json(meta):
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is supported")
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, kind) in enumerate(zip(tokens, types)) if kind in (CONTROL, USER_DEFINED)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # SmolLM2's own tokenizer.json splits digits one by one before the GPT-2 regex.
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": meta["tokenizer.ggml.merges"]},
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_tokenizer.py MODEL.gguf OUT.json")
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(tokenizer_json(read_metadata(sys.argv[1])), out, ensure_ascii=False)
