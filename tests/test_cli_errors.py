"""Bad input ends in a one-line error naming the record and field; nothing is written."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_malformed_request_file(tmp_path, tiny_llama_dir):
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"prompt\": ")
    out = tmp_path / "out"
    r = _run("edit", "--model", str(tiny_llama_dir), "--requests", str(bad), "--method", "rome", "--layer", "0",
             "--out", str(out))
    assert r.returncode == 2, r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("mobiedit: error")]
    assert len(err) == 1 and "bad.json" in err[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_subject_missing_from_prompt(tmp_path, tiny_llama_dir):
    recs = [{"case_id": 7, "prompt": "Paris is the capital of", "subject": "Berlin", "target_new": "Italy",
             "ground_truth": "France", "rephrase_prompt": "Berlin is in", "locality_prompt": "Rome is in",
             "locality_ground_truth": "Italy"}]
    f = tmp_path / "reqs.json"
    f.write_text(json.dumps(recs))
    out = tmp_path / "out"
    r = _run("edit", "--model", str(tiny_llama_dir), "--requests", str(f), "--method", "rome", "--layer", "0",
             "--out", str(out))
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "record 0" in line and "case_id 7" in line and "subject" in line and "Traceback" not in r.stderr
    assert not out.exists()


def test_missing_model_folder(tmp_path):
    r = _run("eval", "--model", str(tmp_path / "nope"), "--subject", "A", "--prompt", "{} is", "--target", "b")
    assert r.returncode == 2 and "model folder does not exist" in r.stderr and "Traceback" not in r.stderr


def test_pickled_checkpoint_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really a pickle")
    r = _run("eval", "--model", str(tmp_path), "--subject", "A", "--prompt", "{} is", "--target", "b")
    assert r.returncode == 2 and "safetensors" in r.stderr and "pytorch_model.bin" in r.stderr


def test_a_closed_stdout_pipe_ends_quietly(monkeypatch, capsys):
    """`mobiedit ... | head`: the reader closing the pipe is not the command's error (exit 141, nothing on stderr)."""
    import os
    import sys

    from mobiedit.cli import main

    r, w = os.pipe()
    os.close(r)
    out = os.fdopen(w, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", out)
    rc = main(["model", "--list"])
    assert rc == 141 and capsys.readouterr().err == ""
    out.close()


def test_every_verb_says_what_it_does_and_every_option_has_help():
    """`mobiedit VERB --help` opens with what the verb does, and no option is a bare name (session
    35: 47 options of 21 verbs had no help, and no verb had a description)."""
    import argparse

    from mobiedit.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = {name: [a.option_strings[0] if a.option_strings else a.dest for a in sp._actions
                   if not a.help and not isinstance(a, argparse._HelpAction)]
            for name, sp in sub.choices.items()}
    assert {k: v for k, v in bare.items() if v} == {}
    assert [name for name, sp in sub.choices.items() if not sp.description] == []
    assert "edit" in sub.choices and "bench-bundle-sequential" in sub.choices  # the export verbs are in


@pytest.mark.parametrize("given,where,words", [
    (dict(prompt="{} is in", target="Rome"), "command line, --subject", "is missing"),
    (dict(subject="Paris", prompt="{} is in", target=""), "command line, --target", "non-empty"),
    (dict(subject="Paris", prompt="{} is in", target="Rome", limit=-3), "--limit", "-3"),
    (dict(subject="Paris", prompt="{} is in", target="Rome", offset=-1), "--offset", "-1"),
    (dict(subject="Paris", prompt="{} is in", target="Rome", offset=1), "--offset", "past the last of the 1"),
    (dict(requests="r.json", subject="Paris"), "--requests", "both --requests and --subject"),
    (dict(), "--requests", "no edit requests"),
])
def test_command_line_requests_name_what_is_wrong(given, where, words):
    """Session 35, tried by hand: a prompt and target without --subject, an empty --target and a
    negative --limit all said "no edit requests given"; --offset -1 was taken silently; a file
    and --subject together dropped the --subject. Each is now named, before any model work."""
    import argparse

    from mobiedit.errors import MobiEditError
    from mobiedit.resolve import load_cli_requests

    args = argparse.Namespace(**{**dict(requests=None, subject=None, prompt=None, target=None, limit=0, offset=0),
                                 **given})
    with pytest.raises(MobiEditError) as e:
        load_cli_requests(args)
    assert e.value.where == where and words in str(e.value)


@pytest.mark.parametrize("argv,where", [
    (["bench", "--layers", "a,b"], "--layers"),  # was a ValueError traceback
    (["bench", "--n", "0"], "--n"),  # was "request count for row 'rome'" under --rows
    (["bench", "--offset", "-1"], "--offset"),
    (["tune", "--layers", "1,-2"], "--layers"),
    (["sequential", "--n", "2", "--checkpoints", "-1"], "--checkpoints"),  # was dropped silently
    (["sequential", "--n", "0"], "--n"),
])
def test_bench_tune_and_sequential_arguments_are_named_before_any_output(argv, where, tmp_path, capsys):
    from mobiedit.cli import main

    out = tmp_path / "out"
    assert main([*argv, "--preset", "small", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mobiedit: error: {where}:") and "Traceback" not in err
    assert not out.exists()
