"""Issue 19 cases 7, 8 and 11: hostile manifests (huge integers, deep nesting, missing program
inputs, wrong types, unbounded sizes) get a named BundleError; write failures are named errors
with the path and the fix, found before any long work; duplicate JSON keys are refused in every
user file; terminal output escapes control and right-to-left characters; `run` refuses a
negative --max-new-tokens, never creates a bundle's journal/, and silences the runtime's C++
start-up lines."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mobiedit.errors import BundleError, FileSystemError, JournalError, ModelLoadError, RequestError
from mobiedit.export.bundle import read_manifest
from tools.reliability.fuzz_hostile import DEEP, HUGE_INT, valid_manifest


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", *args], capture_output=True, text=True,
                          timeout=timeout)


def _one_error(r) -> str:
    """The CLI's single error line (exit 2, no traceback)."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mobiedit: error: "), r.stderr[-2000:]
    return lines[0]


# ----------------------------------------------------------------------------- case 7: manifest.json

def _write(folder, m: dict | str) -> None:
    (folder / "manifest.json").write_text(m if isinstance(m, str) else json.dumps(m), encoding="utf-8")


def _set(m: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    cur = m
    for k in parents:
        cur = cur[k]
    if value is KeyError:
        del cur[last]
    else:
        cur[last] = value
    return m


def test_the_valid_manifest_is_accepted(tmp_path):
    m = valid_manifest(tmp_path)
    _write(tmp_path, m)
    assert read_manifest(tmp_path)["dims"] == m["dims"]


@pytest.mark.parametrize("raw,what", [
    ('{"format_version": ' + HUGE_INT + "}", "Exceeds the limit"),
    ('{"a": ' + "[" * DEEP + "]" * DEEP + "}", "nested too deeply"),
    ('{"slots": 1, "slots": 2}', "duplicate key 'slots'"),
    ('{"name": "\\udc80"}', "lone surrogate"),  # an edit's rewrite of the manifest could not encode it
])
def test_hostile_manifest_text_is_a_named_error(tmp_path, raw, what):
    _write(tmp_path, raw)
    with pytest.raises(BundleError) as err:
        read_manifest(tmp_path)
    assert what in str(err.value) and str(tmp_path / "manifest.json") in str(err.value)


@pytest.mark.parametrize("path,value,field", [
    ("programs.prefill.inputs", KeyError, "programs.prefill.inputs"),
    ("programs.edit.outputs", "logits", "programs.edit.outputs"),
    ("dims.d_out", "abc", "dims.d_out"),
    ("dims.hidden_size", 10**12, "dims.hidden_size"),
    ("dims.num_layers", int(HUGE_INT[:4000]), "dims.num_layers"),
    ("slots", 10**12, "slots"),
    ("shapes.max_seq_len", 2**31, "shapes.max_seq_len"),
    ("shapes.edit_K", "4", "shapes.edit_K"),
    ("special_tokens.eos", 10**6, "special_tokens.eos"),
    ("edit.templates", ["no slot"], "edit.templates[0]"),
    ("edit.objective.kl_factor", "x", "edit.objective.kl_factor"),
    ("edit.ridge", -1, "edit.ridge"),
    ("edit.mom2", "yes", "edit.mom2"),
    ("files.model.pte.sha256", "ABC", "files.model.pte.sha256"),
    ("recipe", [], "recipe"),
    ("recipe", None, "recipe"),
    ("recipe.zo", KeyError, "recipe.zo"),
    ("recipe.zo.lr", -0.5, "recipe.zo.lr"),
    ("recipe.zo.lr", 10**400, "recipe.zo.lr"),
    ("recipe.zo.h", KeyError, "recipe.zo.h"),
    ("recipe.zo.n_dirs", "8", "recipe.zo.n_dirs"),
    ("recipe.zo.n_dirs", 8.0, "recipe.zo.n_dirs"),
    ("recipe.zo.estimator", "adam", "recipe.zo.estimator"),
    ("recipe.zo.max_evals", 2, "recipe.zo.max_evals"),
    ("recipe.zo.seed", 2**64, "recipe.zo.seed"),
    ("recipe.zo.max_norm", 1.0, "recipe.zo.max_norm"),
    ("recipe.success.fraction", 1.5, "recipe.success.fraction"),
    ("recipe.success.nll", 0, "recipe.success.nll"),
    ("recipe.success.nll", True, "recipe.success.nll"),
    ("recipe.zo.directions", "sobol", "recipe.zo.directions"),
    ("recipe.zo.directions", 1, "recipe.zo.directions"),
    ("recipe.zo.normalise", "sigma", "recipe.zo.normalise"),
    ("recipe.zo.normalise", "gradient", "recipe.zo.normalise"),  # needs fzoo on coordinates
    ("recipe.success.stop_on", "never", "recipe.success.stop_on"),
    ("recipe.success.stop_on", 1, "recipe.success.stop_on"),
    ("recipe.success.stop_after", "loop", "recipe.success.stop_after"),
    ("recipe.ladder", [0.5, 1.0], "recipe.ladder"),
    ("recipe.ladder.rungs", 3, "recipe.ladder.rungs"),
    ("recipe.ladder.from_edits", KeyError, "recipe.ladder.from_edits"),
    ("recipe.ladder.fractions", [], "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", 0.5, "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", [0.1 * i for i in range(1, 10)], "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", [1.0, 0.5], "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", [0.5, 0.5], "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", [0.0, 1.0], "recipe.ladder.fractions"),
    ("recipe.ladder.fractions", [0.5, "1"], "recipe.ladder.fractions[1]"),
    ("recipe.ladder.fractions", [0.5, 10**400], "recipe.ladder.fractions[1]"),
    ("recipe.ladder.from_edits", 0, "recipe.ladder.from_edits"),
    ("recipe.ladder.from_edits", 2.0, "recipe.ladder.from_edits"),
    ("recipe.settle", [3, 0.8, 20], "recipe.settle"),
    ("recipe.settle.rounds", -1, "recipe.settle.rounds"),
    ("recipe.settle.rounds", 101, "recipe.settle.rounds"),
    ("recipe.settle.rounds", 2.0, "recipe.settle.rounds"),
    ("recipe.settle.rounds", True, "recipe.settle.rounds"),
    ("recipe.settle.rounds", KeyError, "recipe.settle.rounds"),
    ("recipe.settle.shrink", 1.0, "recipe.settle.shrink"),
    ("recipe.settle.shrink", 0, "recipe.settle.shrink"),
    ("recipe.settle.shrink", "0.8", "recipe.settle.shrink"),
    ("recipe.settle.steps", 0.5, "recipe.settle.steps"),
    ("recipe.settle.grow", 2, "recipe.settle.grow"),
])
def test_every_manifest_section_is_validated(tmp_path, path, value, field):
    m = valid_manifest(tmp_path)
    if path.startswith("files.model.pte."):
        m["files"]["model.pte"]["sha256"] = value
    else:
        _set(m, path, value)
    _write(tmp_path, m)
    with pytest.raises(BundleError) as err:
        read_manifest(tmp_path)
    assert f"field '{field}'" in str(err.value) and "fix:" in str(err.value), str(err.value)


def test_the_recipe_comes_from_the_manifest_else_the_shipped_one(tmp_path):
    """A manifest's recipe is what hosts edit with; a bundle exported before the recipe was
    written (no ``recipe``) gets the shipped one, n_dirs fitted to its edit_K."""
    from mobiedit.export.recipe import recipe_of, shipped_recipe
    from mobiedit.methods.mobiedit import MobiEditConfig

    m = valid_manifest(tmp_path)
    m["recipe"]["zo"].update(lr=0.3, n_dirs=8, seed=5)
    m["recipe"]["success"]["fraction"] = 0.5
    _write(tmp_path, m)
    r = recipe_of(read_manifest(tmp_path))
    assert (r.zo.lr, r.zo.n_dirs, r.zo.seed, r.success_fraction, r.success_nll, r.from_manifest) == \
        (0.3, 8, 5, 0.5, 0.5, True)
    m["recipe"]["ladder"] = {"fractions": [0.25, 0.5, 1], "from_edits": 3}
    _write(tmp_path, m)
    r = recipe_of(read_manifest(tmp_path))
    assert (r.ladder, r.ladder_from_edits) == ((0.25, 0.5, 1.0), 3)
    assert r.as_manifest()["ladder"] == {"fractions": [0.25, 0.5, 1.0], "from_edits": 3}
    del m["recipe"]["ladder"]  # a bundle exported before the ladder was written: mobiedit.ladder's
    _write(tmp_path, m)
    from mobiedit.ladder import LADDER_FROM_EDITS, SEQUENTIAL_LADDER

    r = recipe_of(read_manifest(tmp_path))
    assert (r.ladder, r.ladder_from_edits) == (SEQUENTIAL_LADDER, LADDER_FROM_EDITS)
    assert r.stop_on == ("written" if m["recipe"]["success"].get("stop_on") == "written" else "loop")
    for stop in ("loop", "written"):  # what stops the search: the loop's rule, or the written edit's verdict too
        m["recipe"]["success"]["stop_on"] = stop
        _write(tmp_path, m)
        assert recipe_of(read_manifest(tmp_path)).stop_on == stop
        assert recipe_of(read_manifest(tmp_path)).as_manifest()["success"]["stop_on"] == stop
    del m["recipe"]["success"]["stop_on"]  # exported before session 16: the loop's rule, as then
    _write(tmp_path, m)
    assert recipe_of(read_manifest(tmp_path)).stop_on == "loop"
    m["recipe"]["zo"]["directions"] = "coordinates"  # how directions are drawn round-trips
    _write(tmp_path, m)
    r = recipe_of(read_manifest(tmp_path))
    assert r.zo.directions == "coordinates" and r.as_manifest()["zo"]["directions"] == "coordinates"
    m["recipe"]["zo"].update(estimator="fzoo", normalise="gradient")  # whole-gradient steps round-trip
    _write(tmp_path, m)
    r = recipe_of(read_manifest(tmp_path))
    assert r.zo.normalise == "gradient" and r.as_manifest()["zo"]["normalise"] == "gradient"
    del m["recipe"]["zo"]["normalise"]  # exported before session 26: FZOO's spread rule, as then
    del m["recipe"]["zo"]["directions"]  # exported before session 24: i.i.d., as then
    _write(tmp_path, m)
    assert recipe_of(read_manifest(tmp_path)).zo.directions == "iid"
    assert recipe_of(read_manifest(tmp_path)).zo.normalise == "spread"
    del m["recipe"]
    _write(tmp_path, m)
    old = recipe_of(read_manifest(tmp_path))
    shipped = MobiEditConfig()
    assert not old.from_manifest and old.zo == shipped_recipe(4).zo and old.stop_on == "written"
    assert old.zo.n_dirs == 3 and old.zo.K == 4  # FZOO: edit_K − 1 directions, one program call per step
    assert (old.zo.lr, old.zo.h, old.zo.max_steps, old.zo.max_evals) == \
        (shipped.zo.lr, shipped.zo.h, shipped.zo.max_steps, shipped.zo.max_evals)
    assert (old.success_fraction, old.success_nll) == (shipped.success_fraction, shipped.success_nll)


def test_the_recipes_search_buffer_is_bounded(tmp_path):
    m = valid_manifest(tmp_path)
    m["dims"].update(hidden_size=1 << 17, d_out=1 << 17)
    m["recipe"]["zo"].update(n_dirs=1 << 20, max_evals=1 << 21)
    _write(tmp_path, m)
    with pytest.raises(BundleError, match=r"field 'recipe.zo.n_dirs'.*buffer"):
        read_manifest(tmp_path)


def test_manifest_sizes_are_bounded_in_total_elements(tmp_path):
    """Each size in range, but the KV cache they imply is 2 * 1024 * 1024 * 65536 * 128 elements."""
    m = valid_manifest(tmp_path)
    m["dims"].update(num_layers=1024, num_kv_heads=1024, head_dim=128)
    m["shapes"]["max_seq_len"] = 65536
    _write(tmp_path, m)
    with pytest.raises(BundleError, match=r"field 'shapes.max_seq_len'.*implies a buffer"):
        read_manifest(tmp_path)


# ----------------------------------------------------------------------------- case 8: write failures

def test_eval_json_at_a_folder_is_refused_before_loading(tmp_path):
    line = _one_error(_cli("eval", "--model", str(tmp_path / "absent"), "--subject", "A", "--prompt", "{} is",
                           "--target", "b", "--json", str(tmp_path)))
    assert f"--json {tmp_path}: is a folder" in line and "fix: pass a file path" in line


def test_a_read_only_or_full_destination_is_found_up_front(tmp_path, monkeypatch):
    from mobiedit import outputs

    def erofs(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".probe"))

    monkeypatch.setattr(tempfile, "mkstemp", erofs)
    with pytest.raises(FileSystemError) as err:
        outputs.check_output_dir(tmp_path / "out", "edit", need_bytes=1)
    assert "cannot write here (Read-only file system)" in str(err.value) and str(tmp_path) in str(err.value)
    assert "mounted read-only" in str(err.value)
    monkeypatch.undo()

    class Full:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(os, "statvfs", lambda p: Full)
    with pytest.raises(FileSystemError, match=r"needs about 1000.0 MB, only 0.0 MB are free.*free space"):
        outputs.check_output_dir(tmp_path / "out", "quantize", need_bytes=10**9)
    assert not (tmp_path / "out").exists()


def test_an_os_error_reaching_the_cli_is_named_with_path_and_fix(tmp_path, tiny_llama_dir, monkeypatch, capsys):
    """A full disk during the final write (after the up-front checks passed): one line, no traceback."""
    from mobiedit import cli

    target = tmp_path / "scores.json"
    real_replace = os.replace

    def enospc_at_target(src, dst, *a, **k):
        # os.replace is looked up at call time everywhere, so the fault cannot outlive this test
        # (patching a function that a lazily imported module binds by name would leak into others)
        if Path(dst) == target:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", enospc_at_target)
    rc = cli.main(["--quiet", "eval", "--model", str(tiny_llama_dir), "--subject", "Paris", "--prompt",
                   "{} is the capital of", "--target", "France", "--json", str(target)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"{target}: No space left on device" in err and "fix: free space on that disk" in err
    assert not target.exists()


@pytest.mark.parametrize("code,reason,fix", [
    (errno.EACCES, "Permission denied", "make the folder writable"),
    (errno.EROFS, "Read-only file system", "mounted read-only"),
    (errno.ENOSPC, "No space left on device", "free space on that disk"),
    (errno.EISDIR, "Is a directory", "pass a file path"),
])
def test_os_errors_become_named_errors_with_the_path(tmp_path, code, reason, fix):
    from mobiedit.outputs import named_os_error

    e = named_os_error(OSError(code, reason, str(tmp_path / "f")))
    assert isinstance(e, FileSystemError) and str(e).startswith(f"{tmp_path / 'f'}: {reason}") and fix in str(e)


# ----------------------------------------------------------------------------- case 11: duplicate keys

def test_duplicate_keys_are_refused_in_requests_config_and_journal(tmp_path, tiny_llama_dir):
    import shutil

    from mobiedit.journal import Journal
    from mobiedit.models import read_config
    from tools.reliability.fuzz import template_journal
    from mobiedit.requests import load_requests

    req = tmp_path / "r.json"
    req.write_text('[{"case_id": 1, "subject": "Paris", "prompt": "{} is in", "target_new": "Italy", '
                   '"target_new": "Spain"}]')
    with pytest.raises(RequestError, match="duplicate key 'target_new'"):
        load_requests(req)

    model = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, model)
    text = (model / "config.json").read_text()
    (model / "config.json").write_text(text.replace("{", '{"num_hidden_layers": 99999, ', 1))
    with pytest.raises(ModelLoadError, match="duplicate key 'num_hidden_layers'") as err:
        read_config(model)
    assert str(model / "config.json") in str(err.value)

    jdir = tmp_path / "j"
    shutil.copytree(template_journal(), jdir)
    path = jdir / "journal.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace("{", '{"id": 77, ', 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JournalError, match="duplicate key 'id'"):
        Journal.open(jdir, readonly=True)


def test_lone_surrogate_escapes_are_refused_and_valid_pairs_kept(tmp_path):
    from mobiedit.jsonio import JSONProblem, loads_strict
    from mobiedit.requests import load_requests

    assert loads_strict('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001F600", "\\ud800"]  # a pair; a backslash
    for text in ('"\\ud800"', '["ok", {"k": "a\\udfffb"}]', '"\\ude00\\ud83d"'):  # lone, nested, reversed pair
        with pytest.raises(JSONProblem, match="lone surrogate"):
            loads_strict(text)
    req = tmp_path / "r.json"
    req.write_text('[{"case_id": 1, "subject": "Paris", "prompt": "Paris is in", "target_new": "It\\ud800aly"}, '
                   '{"case_id": 3, "subject": "Rome", "prompt": "Rome is in", "target_new": "Spain"}]')
    with pytest.raises(RequestError, match="lone surrogate") as err:  # the record's field is named
        load_requests(req)
    assert "field 'target_new'" in str(err.value)
    assert [r.case_id for r in load_requests(req, skip_invalid=True)] == ["3"]  # that record skipped, not the file
    with pytest.raises(RequestError, match=r"field 'rephrase_prompt\[0\]': holds a lone surrogate"):
        load_requests([{"case_id": 2, "subject": "Paris", "prompt": "Paris is in", "target_new": "Italy",
                        "rephrase_prompt": ["x\udc00 Paris is in"]}])


# ----------------------------------------------------------------------------- case 11: the terminal

def test_terminal_output_escapes_control_and_bidi_characters():
    from mobiedit.termsafe import term_safe

    assert term_safe("evil\u202etxt.exe\x00\x1b[2J") == "evil\\u202etxt.exe\\x00\\x1b[2J"
    assert term_safe("a\nb\tc", keep_newlines=True) == "a\nb\tc" and term_safe("a\nb") == "a\\x0ab"
    assert term_safe("Zürich 東京 القاهرة") == "Zürich 東京 القاهرة"  # scripts pass; only controls are escaped


def test_cli_prints_a_hostile_case_id_escaped(tmp_path, tiny_llama_dir):
    req = tmp_path / "r.json"
    req.write_text(json.dumps([{"case_id": "x\u202eexe.txt\x1b[31m", "subject": "Paris", "prompt": "Paris is in",
                                "target_new": "Italy"}]))
    r = _cli("edit", "--model", str(tiny_llama_dir), "--requests", str(req), "--method", "rome", "--layer", "0",
             "--force", "--out", str(tmp_path / "out"))
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert "\u202e" not in r.stdout and "\x1b" not in r.stdout
    assert "x\\u202eexe.txt\\x1b[31m: " in r.stdout


# ----------------------------------------------------------------------------- case 11: `run`

def test_run_refuses_a_negative_token_count_and_never_creates_the_journal(tmp_path):
    line = _one_error(_cli("run", str(tmp_path / "absent"), "--prompt", "hi", "--max-new-tokens", "-5"))
    assert "--max-new-tokens" in line and "-5" in line


def test_run_refuses_an_empty_or_blank_prompt_by_name(kill_bundle_base):
    """An empty prompt would generate from the start token alone: refused, naming the field."""
    for prompt, what in (("", "empty"), (" \n\t", "whitespace")):
        line = _one_error(_cli("run", str(kill_bundle_base), "--prompt", prompt, "--max-new-tokens", "2"))
        assert "prompt" in line and what in line and "fix" in line, line


def test_run_is_a_reader_it_never_creates_a_missing_journal(tmp_path, kill_bundle_base):
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(kill_bundle_base, bundle)
    shutil.rmtree(bundle / "journal")
    r = _cli("run", str(bundle), "--prompt", "The capital of France is", "--max-new-tokens", "2")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (bundle / "journal").exists()


def test_the_runtime_start_up_lines_are_silenced():
    """The C++ runtime's lines (ExecuTorch's cpuinfo "Failed to open midr file", written to file
    descriptors 1 and 2 while a program loads) do not reach the terminal; Python's output does."""
    code = ("import os, sys\nfrom mobiedit.export.runtime import quiet_native_output\nprint('before', flush=True)\n"
            "with quiet_native_output():\n    os.write(1, b'[cpuinfo_utils.cpp:71] out\\n')\n"
            "    os.write(2, b'[cpuinfo_utils.cpp:87] err\\n')\n"
            "print('after', flush=True)\nprint('stderr after', file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cpuinfo" not in r.stdout + r.stderr
    assert r.stdout.split() == ["before", "after"] and "stderr after" in r.stderr


def test_a_damaged_program_file_is_a_named_error(tmp_path):
    from mobiedit.export.runtime import load_pte

    pte = tmp_path / "model.pte"
    pte.write_bytes(b"not a program" * 5)
    with pytest.raises(BundleError) as err:
        load_pte(pte)
    assert "not a loadable ExecuTorch program" in str(err.value) and str(pte) in str(err.value)

