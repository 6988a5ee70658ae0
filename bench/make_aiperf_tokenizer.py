#!/usr/bin/env python3
"""Builds o200k_base as a Hugging Face tokenizer.json inside an HF_HOME cache, offline.

Usage: make_aiperf_tokenizer.py O200K_TIKTOKEN_FILE HF_HOME [REPO_ID]

aiperf needs a tokenizer it can load without network: `--tokenizer builtin` downloads o200k,
and a local directory is refused in offline mode, but a repo id found in HF_HOME's hub cache
loads. The o200k ranks come from the copy tiktoken-rs ships in its crate (canaryd's own
built-in tokenizer), so both tools tokenize alike and nothing is downloaded.
"""
import json
import sys
from pathlib import Path


def main():
    ranks_path, hf_home = sys.argv[1], Path(sys.argv[2])
    repo_id = sys.argv[3] if len(sys.argv) > 3 else "local/tokenizer"
    owner, name = repo_id.split("/")
    revision = "0" * 40
    repo = hf_home / "hub" / f"models--{owner}--{name}"
    snapshot = repo / "snapshots" / revision
    if (snapshot / "tokenizer.json").exists():
        print(f"tokenizer {repo_id} already in {hf_home}")
        return

    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import openai_public
    from transformers.convert_slow_tokenizer import TikTokenConverter

    # o200k_base's definition (pattern, special tokens) with the ranks read from the local file.
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: load_tiktoken_bpe(ranks_path)
    enc = tiktoken.Encoding(**openai_public.o200k_base())
    snapshot.mkdir(parents=True, exist_ok=True)
    TikTokenConverter(
        vocab_file=ranks_path, pattern=enc._pat_str, extra_special_tokens=enc._special_tokens
    ).converted().save(str(snapshot / "tokenizer.json"))
    (snapshot / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 1 << 20,
                "eos_token": "<|endoftext|>",
            }
        )
    )
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    print(f"tokenizer {repo_id} written to {snapshot}")


if __name__ == "__main__":
    main()
